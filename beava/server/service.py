"""Requests in, answers out: the seam between the transports and the feature store.

The command table (``beava.protocol.commands``) names the commands; this module supplies
what serves each (:meth:`Service.frame_handlers`, :meth:`Service.http_handlers`); the
failures raised become error envelopes in ``beava.protocol.dispatch``.

A simple command (describe, mget, get_multi, legacy_get, reset, test_clock, health,
ready) is one call (:meth:`Service.calls`) that the dispatch module's adapters serve on
both transports. The others have a handler per transport here, for their shapes do not fit
"decode, call, encode" (spec/wire.md §2.5, §3.3, §5):

- ping answers a different body on each transport;
- register answers the registry's own status code (OP_ERROR on framed TCP for any but
  200), and over HTTP refuses a body that is not ``application/json``;
- push, push_event and push_many go through the push pass and defer their acks until the
  push is durable; framed-TCP push errors carry the registry version;
- get: a MessagePack read is written straight from the table's columns (the read fast
  path) and cannot carry the legacy request shapes;
- batch_get and backfill are served in slices across loop iterations (a reply slot
  filled later); backfill and scan answer an undecodable body with their own error;
- scan's rows are written from the table's columns into one buffer, as MessagePack or
  its JSON text, and the reply is made around them with one copy;
- auth belongs to the per-connection gate (``beava.protocol.auth``).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable
from time import perf_counter
from typing import Any

from beava import __version__
from beava._fast.intake.intake import STRICT
from beava._fast.intake.push_pass import PushPass
from beava._fast.wire.frame_splitter import encode_frame, frame_header
from beava._fast.wire.json_items import JsonItems
from beava._fast.wire.msgpack_out import RowPage
from beava.catalogue.errors import BeavaError
from beava.catalogue.expression_grammar import I64_MAX
from beava.engine.registry.describe import describe_registry
from beava.engine.sharding import ShardOwnership
from beava.engine.state import reads, scan
from beava.engine.state.push_validation import (
    event_not_found_error,
    has_control_character,
    not_a_map_error,
)
from beava.engine.store import FeatureStore, decode_wal_body, wall_clock_ms
from beava.protocol import messages
from beava.protocol.auth import open_auth
from beava.protocol.commands import FRAMED
from beava.protocol.dispatch import (
    TOO_DEEP_TO_DECODE,
    Call,
    FrameDispatch,
    FrameHandler,
    HttpHandler,
    as_error,
    decode_body,
    error_frame,
    json_response,
    simple_frame_handlers,
    simple_http_handlers,
)
from beava.protocol.http import HttpRequest
from beava.protocol.reply_slots import PendingReply
from beava.server.backfill_uploads import BackfillUploads, Commit
from beava_client.opcodes import CT_JSON, CT_MSGPACK, OP_ERROR

_encode = messages.encode_json
_UNSUPPORTED = encode_frame(OP_ERROR, CT_JSON, b'{"code":"unsupported"}')
RESET_FORBIDDEN_REASON = ("OP_RESET requires server test_mode (set BEAVA_TEST_MODE=1 or pass "
                          "--test-mode).")
TEST_CLOCK_FORBIDDEN_REASON = ("the test clock requires server test_mode (set BEAVA_TEST_MODE=1 "
                               "or pass --test-mode).")
PUSH_MANY_LIMIT = 10_000
# A BATCH_GET works at most this long per loop iteration (docs/limits.md).
BATCH_SLICE_SECONDS = 0.002
# A body nested deeper than the decoder's recursion allows: far past MAX_VALUE_DEPTH.
TOO_DEEP = "value nested too deep (at most 64 containers, docs/limits.md)"
# Push acks are the hottest reply: keys already in sorted order (spec/wire.md §1, §6.7).
_ACK = b'{"ack_lsn":%d,"idempotent_replay":false,"registry_version":%d}'
_REPLAY_ACK = b'{"ack_lsn":%d,"idempotent_replay":true,"registry_version":%d}'


# Success reply opcode of each framed command, from the command table.
_REPLY_OP: dict[str, int] = {c.name: c.reply_op for c in FRAMED if c.reply_op is not None}
_PUSH_OP = PUSH_ACK_OP = _REPLY_OP["push"]


def _decode_scan(ct: int, payload: bytes, version: int) -> Any:
    """A scan request body; undecodable is ``invalid_scan``."""
    try:
        return messages.json_any(payload) if ct == CT_JSON else messages.msgpack_any(payload)
    except (*messages.DECODE_ERRORS, RecursionError) as exc:
        raise BeavaError("invalid_scan", path="", message=f"undecodable body: {exc}",
                         top={"registry_version": version}) from None


def _msgpack_count(small: int, count: int) -> bytes:
    """MessagePack header of a map (``small`` 0x80) or array (0x90) of ``count`` items."""
    if count < 16:
        return bytes((small | count,))
    big = 0xDE if small == 0x80 else 0xDC
    if count < 0x10000:
        return bytes((big,)) + count.to_bytes(2, "big")
    return bytes((big + 1,)) + count.to_bytes(4, "big")


def _around_rows(head: dict[str, Any], count: int, msgpack: bool) -> tuple[bytes, bytes]:
    """The bytes of the object ``head`` plus ``"rows"`` (``count`` rows, keys sorted) that
    come before the rows' and after them."""
    names = sorted([*head, "rows"])
    at = names.index("rows")
    if msgpack:
        def entry(name: str) -> bytes:
            return messages.encode_msgpack(name) + messages.encode_msgpack(head[name])
        before = [_msgpack_count(0x80, len(names)), *map(entry, names[:at]),
                  messages.encode_msgpack("rows"), _msgpack_count(0x90, count)]
        return b"".join(before), b"".join(map(entry, names[at + 1:]))
    items = [_encode(name) + b":" + _encode(head[name]) for name in names if name != "rows"]
    return (b"{" + b"".join(item + b"," for item in items[:at]) + b'"rows":[',
            b"]" + b"".join(b"," + item for item in items[at:]) + b"}")


class _PinnedClock:
    """The store's clock while a test pins it: always ``now_ms``."""

    __slots__ = ("now_ms",)

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

def _batch_frame(body: bytes) -> bytes:
    return encode_frame(_REPLY_OP["batch_get"], CT_JSON, body)  # always JSON


def _batch_requests(ct: int, payload: bytes) -> list[Any] | reads.EncodedEntries:
    """The entries of a BATCH_GET body, left encoded when it is an object with a
    `requests` array (a body of 100,000 entries is then decoded in slices too); any other
    body is decoded whole here: its error, or BatchGet's, is the spec's."""
    try:
        if ct == CT_JSON:
            return _JsonEntries(payload, bytes(messages.batch_get_json(payload).requests))
        return _MsgpackEntries(payload, messages.batch_get_msgpack(payload).requests)
    except (*messages.DECODE_ERRORS, RecursionError, ValueError):
        return reads.batch_requests(decode_body(ct, payload))


def _undecodable(ct: int, payload: bytes, exc: BaseException) -> BeavaError:
    """What a part of a body that does not decode answers: the error decoding the whole
    body reports (raised here), else ``exc``'s."""
    decode_body(ct, payload)
    return BeavaError("internal_error", reason=str(exc))


class _JsonEntries:
    """The items of a JSON `requests` array, decoded a few at a time."""

    __slots__ = ("_payload", "_array", "_items")

    def __init__(self, payload: bytes, array: bytes) -> None:
        self._payload = payload
        self._array = array
        self._items = JsonItems(array)  # ValueError when it is not an array

    def take(self, count: int) -> list[Any] | None:
        text = self._items.take(count)
        if text is None:
            return None
        try:
            entries: list[Any] = messages.json_any(text)
        except (*messages.DECODE_ERRORS, RecursionError) as exc:
            raise _undecodable(CT_JSON, self._payload, exc) from None
        return entries

    def restarted(self) -> _JsonEntries:
        return _JsonEntries(self._payload, self._array)


class _MsgpackEntries:
    """The items of a MessagePack `requests` array (each still encoded), decoded a few at a
    time."""

    __slots__ = ("_payload", "_raws", "_next")

    def __init__(self, payload: bytes, raws: list[Any]) -> None:
        self._payload = payload
        self._raws = raws
        self._next = 0

    def take(self, count: int) -> list[Any] | None:
        start = self._next
        if start >= len(self._raws):
            return None
        self._next = start + count
        try:
            return [messages.msgpack_any(raw) for raw in self._raws[start:start + count]]
        except (*messages.DECODE_ERRORS, RecursionError) as exc:
            raise _undecodable(CT_MSGPACK, self._payload, exc) from None

    def restarted(self) -> _MsgpackEntries:
        return _MsgpackEntries(self._payload, self._raws)


class _Sliced(ABC):
    """A request that did not finish in its first slice: one slice per loop iteration
    until its reply slot is filled (docs/limits.md). ``_slice`` runs one and returns the
    reply once the work is done, None while work is left."""

    __slots__ = ("service", "slot", "failed", "done")

    def __init__(self, service: Service, slot: PendingReply,
                 failed: Callable[[Exception], bytes]) -> None:
        self.service = service
        self.slot = slot
        self.failed = failed
        self.done = False

    @abstractmethod
    def _slice(self, deadline: float | None) -> bytes | None: ...

    def step(self, finish: bool = False) -> None:
        if self.done:
            return
        try:
            reply = self._slice(None if finish else perf_counter() + BATCH_SLICE_SECONDS)
            if reply is None:
                asyncio.get_running_loop().call_soon(self.step)
                return
        except Exception as exc:  # answered like an unsliced failure
            reply = self.failed(exc)
        self.done = True
        self.service.sliced.discard(self)
        slot = self.slot
        slot.resolve(reply)
        if slot.conn is not None:
            slot.conn.state.flush_dirty()


class _SlicedBatch(_Sliced):
    """A BATCH_GET served in slices. A registry change between slices starts it over (the
    answer reflects one registry version; pushes applied between slices may show)."""

    __slots__ = ("job", "version", "answer")

    def __init__(self, service: Service, job: reads.BatchGet, slot: PendingReply,
                 answer: Callable[[bytes], bytes],
                 failed: Callable[[Exception], bytes]) -> None:
        super().__init__(service, slot, failed)
        self.job = job
        self.version = service.store.registry_version
        self.answer = answer

    def _slice(self, deadline: float | None) -> bytes | None:
        store = self.service.store
        if store.registry_version != self.version:
            self.version = store.registry_version
            self.job = self.job.restarted(store.query_time(), store.registry)
        if not self.job.run(deadline):
            return None
        self.service._log_aliases(self.job.aliases)
        return self.answer(self.job.reply)


class _SlicedCommit(_Sliced):
    """A backfill commit served in slices."""

    __slots__ = ("commit", "answer")

    def __init__(self, service: Service, commit: Commit, slot: PendingReply,
                 answer: Callable[[dict[str, Any]], bytes],
                 failed: Callable[[Exception], bytes]) -> None:
        super().__init__(service, slot, failed)
        self.commit = commit
        self.answer = answer

    def _slice(self, deadline: float | None) -> bytes | None:
        body = self.commit.run(deadline)
        return None if body is None else self.answer(body)


class Service:
    """Handles one request at a time on behalf of any transport."""

    def __init__(self, store: FeatureStore, *, test_mode: bool,
                 on_reset: Callable[[int], None] | None = None,
                 on_alias: Callable[[str], None] | None = None) -> None:
        self.store = store
        self.test_mode = test_mode
        # BATCH_GETs and backfill commits being served in slices
        self.sliced: set[_Sliced] = set()
        self.on_reset = on_reset
        self.on_alias = on_alias
        # framed-TCP runs of pushes and PUSH_MANY bodies in C; what it does not take goes
        # to _tcp_push (a frame) or store.push (a body)
        self.push_pass = PushPass(store, self._tcp_push, FrameDispatch.failed,
                                  messages.tcp_push_msgpack, decode_wal_body,
                                  messages.tcp_push_json,
                                  messages.json_any, wall_clock_ms, _PUSH_OP)
        self.backfills = BackfillUploads(store)  # admin: staged table states (docs/wire.md)

    def frame_handlers(self) -> dict[str, FrameHandler]:
        """Framed TCP: command name -> handler(ct, payload)."""
        return {
            "ping": self._tcp_ping,
            "auth": open_auth,  # without tokens; a gate per connection takes it otherwise
            "register": self._tcp_register,
            "push": self._tcp_push,
            "push_many": self._tcp_push_many,
            "get": self._tcp_get,
            "batch_get": self._tcp_batch_get,
            "scan": self._tcp_scan,
            "backfill": self._tcp_backfill,
            **simple_frame_handlers(self.calls()),
        }

    def http_handlers(self) -> dict[str, HttpHandler]:
        """HTTP data plane: command name -> handler(request, route params)."""
        return {
            "ping": self._http_ping,
            "register": self._http_register,
            "push": self._http_push,
            "push_event": self._http_push_event,
            "push_many": self._http_push_many,
            "get": self._http_get,
            "batch_get": self._http_batch_get,
            "scan": self._http_scan,
            "backfill": self._http_backfill,
            **simple_http_handlers(self.calls()),
        }

    def calls(self) -> dict[str, Call]:
        """The simple commands: command name -> the call serving it on every transport,
        given what the command table's ``takes`` names; its value is the reply."""
        store = self.store
        return {
            "describe": self.describe,
            "mget": lambda body: reads.mget(store.table, store.registry, body,
                                            store.query_time()),
            "get_multi": lambda body: reads.get_multi(store.table, store.registry, body,
                                                      store.query_time()),
            "legacy_get": lambda feature, key: reads.legacy_get(
                store.table, store.registry, feature, key, store.query_time()),
            "reset": self.reset,
            "test_clock": self.test_clock,
            "cluster_map": self.cluster_map,
            "cluster_fence": self.cluster_fence,
            "health": lambda: {"status": "ok"},
            "ready": lambda: {"status": "ready"},
        }

    def wait_applied(self) -> None:
        """Apply every accepted push now (a read waits behind its connection's pushes)."""
        self.store.log.barrier()

    # shared ---------------------------------------------------------------------------

    def reset(self) -> dict[str, Any]:
        if not self.test_mode:
            raise BeavaError("reset_disabled_in_production", reason=RESET_FORBIDDEN_REASON)
        version = self.store.reset()
        self.store.clock = wall_clock_ms  # a reset also ends a pinned test clock
        if self.on_reset is not None:
            self.on_reset(version)
        return {"registry_version": version, "reset": True}

    def test_clock(self, payload: bytes) -> dict[str, Any]:
        """Pin the clock at ``{"now_ms": N}`` (pushes apply at N, reads use T = N) or return
        to the wall clock with ``{"now_ms": null}``; test mode only (docs/wire.md)."""
        if not self.test_mode:
            raise BeavaError("test_mode_required", reason=TEST_CLOCK_FORBIDDEN_REASON)
        try:
            body = messages.json_any(payload)
        except (*messages.DECODE_ERRORS, RecursionError):
            body = None
        if not isinstance(body, dict) or "now_ms" not in body:
            raise BeavaError("invalid_test_clock",
                             message='expected a JSON object {"now_ms": <epoch ms> | null}')
        now = body["now_ms"]
        if now is None:
            self.store.clock = wall_clock_ms
        elif type(now) is int and 0 <= now <= I64_MAX:
            self.store.clock = _PinnedClock(now)
        else:
            raise BeavaError("invalid_test_clock", path="now_ms",
                             message="now_ms must be an integer of epoch milliseconds "
                                     "(0 to 2^63-1) or null")
        return {"now_ms": now}

    def _sharded(self) -> ShardOwnership:
        shard = self.store.shard
        if shard is None:
            raise BeavaError("not_sharded",
                             message="this server is not a shard (it was started without "
                                     "--shard-map and --shard-id)")
        return shard

    def cluster_map(self) -> dict[str, Any]:
        """The shard map this shard serves by (docs/sharding.md)."""
        return self._sharded().map.to_dict()

    def cluster_fence(self, payload: bytes) -> dict[str, Any]:
        """Fence (``{"fenced": true, "epoch": E}``) or unfence this shard's writes; ``E``
        must be the epoch of the map it serves by (docs/sharding.md)."""
        shard = self._sharded()
        try:
            body = messages.json_any(payload)
        except (*messages.DECODE_ERRORS, RecursionError):
            body = None
        if not isinstance(body, dict) or type(body.get("fenced")) is not bool:
            raise BeavaError("invalid_fence", path="fenced",
                             message='expected a JSON object {"fenced": true|false, '
                                     '"epoch": <the shard map\'s epoch>}')
        epoch = body.get("epoch")
        if type(epoch) is not int or epoch != shard.map.epoch:
            raise BeavaError("invalid_fence", path="epoch", expected=shard.map.epoch,
                             got=epoch,
                             message=f"epoch must be this shard's map epoch "
                                     f"{shard.map.epoch}, got {epoch!r} (refresh the map)")
        self.store.fenced = body["fenced"]
        return {"fenced": self.store.fenced, "epoch": shard.map.epoch,
                "shard": shard.shard.id, "registry_version": self.store.registry_version}

    def backfill(self, ct: int, payload: bytes) -> dict[str, Any] | Commit:
        """The backfill admin operation (docs/wire.md, beava.server.backfill_uploads); a
        commit is returned to be run (:meth:`_serve_backfill`)."""
        try:
            body = (messages.json_any(payload) if ct == CT_JSON
                    else messages.msgpack_any(payload))
        except (*messages.DECODE_ERRORS, RecursionError) as exc:
            raise BeavaError("invalid_backfill", path="", message=f"undecodable body: {exc}",
                             top={"registry_version": self.store.registry_version}) from None
        return self.backfills.handle(body)

    def describe(self) -> dict[str, Any]:
        """What the registry holds, as the admin sidecar's ``/registry`` lists it."""
        return describe_registry(self.store.registry)

    def entity(self, table: str, key: str) -> dict[str, Any]:
        """One entity's row, read as POST /get reads it (the admin sidecar's ``/entity``):
        ``key`` is a key string (``K1|K2`` for several key columns, ``""`` for a global
        table); ``{}`` when the entity has no row."""
        store = self.store
        return reads.get(store.table, {"table": table, "key": key}, store.query_time(),
                         registry=store.registry)

    def scan(self, body: Any, msgpack: bool) -> tuple[bytes, RowPage, bytes]:
        """One page of a table scan (docs/wire.md), a JSON or MessagePack reply body: the
        bytes before its rows, the rows, the bytes after them."""
        store = self.store
        version = store.registry_version
        request, table = scan.parse_scan(body, store.table, version)
        page = scan.scan_page(table, request, version, store.query_time(), not msgpack)
        head: dict[str, Any] = {"cursor": page.cursor, "entities": page.entities,
                                "registry_version": version}
        if request.first:
            head["columns"] = scan.scan_columns(table.spec)
        if page.splits is not None:
            head["splits"] = page.splits
        before, after = _around_rows(head, len(page.rows), msgpack)
        return before, page.rows, after

    def _push(self, event: str, fields: Any, request: HttpRequest) -> bytes | PendingReply:
        """One HTTP push (spec/wire.md §6): the response to ``request``, deferred until the
        push is applied if need be."""
        store = self.store
        slot = PendingReply() if store.intake.mode == STRICT else None
        lsn, version, replay, pending = store.push(event, fields, slot)
        # a replay is the original ack, byte for byte, plus a header (§6.6)
        reply = json_response(200, _ACK % (lsn, version), request.keep_alive, replay=replay)
        if not pending:
            return reply
        assert slot is not None
        slot.payload = reply
        slot.failure = json_response(503, unwritten_error().body(), request.keep_alive)
        return slot

    def _tcp_push_ack(self, event: str, fields: Any) -> bytes:
        """One framed-TCP push (spec/wire.md §6): its ack frame. When the push is not applied
        yet, the store's ``hold_lsn`` says what the frame waits for, and the connection
        holds it back until then (beava.protocol.reply_slots)."""
        store = self.store
        try:
            lsn, version, replay, _pending = store.push(event, fields)
        except BeavaError as err:  # TCP push errors carry the version (spec/wire.md §5.1)
            err.top["registry_version"] = store.registry_version
            raise
        if replay:
            return encode_frame(_PUSH_OP, CT_JSON, _REPLAY_ACK % (lsn, store.registry_version))
        return encode_frame(_PUSH_OP, CT_JSON, _ACK % (lsn, version))

    def _push_many(self, payload: bytes, ct: int, *, tcp: bool) -> dict[str, Any]:
        """PUSH_MANY and /push_many (spec/wire.md §10)."""
        store = self.store
        top = {"registry_version": store.registry_version} if tcp else None
        try:
            request = (messages.push_many_json_wide(payload) if ct == CT_JSON
                       else messages.push_many_msgpack(payload))
        except messages.DECODE_ERRORS as exc:
            raise BeavaError("invalid_push_many", top=top, message=str(exc)) from None
        except RecursionError:
            raise BeavaError("invalid_push_many", top=top, message=TOO_DEEP_TO_DECODE) from None
        if not store.log.writable:  # the whole request: nothing of it can be written
            raise unwritten_error(store.registry_version if tcp else None)
        count = len(request.bodies)
        if count > PUSH_MANY_LIMIT:
            raise BeavaError("batch_too_large", top=top, count=count, limit=PUSH_MANY_LIMIT,
                             message=f"{count} bodies exceed the limit of {PUSH_MANY_LIMIT}")
        event = request.event
        if has_control_character(event):
            store.count_rejection(event, "control_character_in_string")
            raise BeavaError("control_character_in_string", top=top)
        if event not in store.registry.events:
            store.count_rejection(event, "event_not_found")
            err = event_not_found_error(event, store.registry.events)
            err.top.update(top or {})
            raise err
        version = store.registry_version
        errors: list[dict[str, Any]] = []
        # acks, newest LSN and dedupe replays of the bodies the push pass left to the store
        by_store = [0, 0, 0]

        def fallback(index: int, fields: Any) -> None:
            try:
                lsn, _version, replay, _pending = store.push(event, fields)
            except BeavaError as err:
                errors.append({"error": {"code": err.code, **err.fields}, "index": index})
                return
            by_store[0] += 1
            by_store[1] = max(by_store[1], lsn)
            by_store[2] += replay

        acks, newest = self.push_pass.push_bodies(event, request.bodies, fallback)
        acks += by_store[0]
        ack_lsn = max(newest, by_store[1]) if acks else None
        # "replays" (those of the acks that were dedupe replays) is an extension (docs/wire.md)
        return {"ack_lsn": ack_lsn, "acks": acks, "errors": errors,
                "registry_version": version, "replays": by_store[2]}

    def _after_durable(self, reply: bytes, failure: bytes) -> bytes | PendingReply:
        """``reply`` now if every accepted record is applied, else once it is; ``failure``
        if they are never written (a full disk)."""
        slot = PendingReply()
        slot.payload = reply
        slot.failure = failure
        return reply if self.store.log.after_pending(slot) else slot

    def _batch_get(self, ct: int, payload: bytes, answer: Callable[[bytes], bytes],
                   failed: Callable[[Exception], bytes]) -> bytes | PendingReply:
        """A BATCH_GET answered now when its first slice finishes it, else a reply slot
        that later slices, one per loop iteration, fill (other connections are read and
        answered in between; docs/limits.md). ``answer`` frames the encoded answer."""
        store = self.store
        job = reads.BatchGet(store.table, _batch_requests(ct, payload), store.query_time(),
                             store.registry, _encode)
        if job.run(perf_counter() + BATCH_SLICE_SECONDS):
            self._log_aliases(job.aliases)
            return answer(job.reply)
        slot = PendingReply(holds_all=True)
        sliced = _SlicedBatch(self, job, slot, answer, failed)
        self.sliced.add(sliced)
        asyncio.get_running_loop().call_soon(sliced.step)
        return slot

    def _serve_backfill(self, ct: int, payload: bytes,
                        answer: Callable[[dict[str, Any]], bytes],
                        failed: Callable[[Exception], bytes]) -> bytes | PendingReply:
        """A backfill action's reply; a commit answered now when its first slice finishes
        it, else a reply slot that later slices fill, as a BATCH_GET's."""
        result = self.backfill(ct, payload)
        if not isinstance(result, Commit):
            return answer(result)
        body = result.run(perf_counter() + BATCH_SLICE_SECONDS)
        if body is not None:
            return answer(body)
        slot = PendingReply(holds_all=True)
        sliced = _SlicedCommit(self, result, slot, answer, failed)
        self.sliced.add(sliced)
        asyncio.get_running_loop().call_soon(sliced.step)
        return slot

    def finish_slices(self) -> None:
        """Shutdown: finish every BATCH_GET and backfill commit still being served in
        slices now."""
        for sliced in list(self.sliced):
            sliced.step(finish=True)

    def _log_aliases(self, tables: list[str]) -> None:
        if self.on_alias is not None:
            for table in tables:
                self.on_alias(table)

    # framed TCP (spec/wire.md §2.5) ---------------------------------------------------

    def _tcp_ping(self, ct: int, payload: bytes) -> bytes:
        body = {"registry_version": self.store.registry_version, "server_version": __version__}
        return encode_frame(_REPLY_OP["ping"], CT_JSON, _encode(body))

    def _tcp_register(self, ct: int, payload: bytes) -> bytes:
        status, body = self.store.register(payload)
        op = _REPLY_OP["register"] if status == 200 else OP_ERROR  # same bodies as HTTP
        return encode_frame(op, CT_JSON, _encode(body))

    def _tcp_push(self, ct: int, payload: bytes) -> bytes:
        envelope: messages.TcpPushJson | messages.TcpPushMsgpack
        try:
            if ct == CT_JSON:
                envelope = messages.tcp_push_json(payload)
                fields = messages.json_any_wide(envelope.body)
            else:
                envelope = messages.tcp_push_msgpack(payload)
                fields = envelope.body
        except messages.DECODE_ERRORS:
            return _UNSUPPORTED
        except RecursionError:
            raise BeavaError("invalid_event", reason=TOO_DEEP,
                             top={"registry_version": self.store.registry_version}) from None
        return self._tcp_push_ack(envelope.event, fields)

    def _tcp_push_many(self, ct: int, payload: bytes) -> bytes | PendingReply:
        body = self._push_many(payload, ct, tcp=True)
        reply = encode_frame(_REPLY_OP["push_many"], CT_JSON, _encode(body))
        return self._after_durable(reply, error_frame(unwritten_error(self.store.registry_version)))

    def _tcp_get(self, ct: int, payload: bytes) -> bytes:
        """Answered in the request's content type (spec/wire.md §2.3)."""
        store = self.store
        body = decode_body(ct, payload)
        if ct == CT_MSGPACK:
            return encode_frame(_REPLY_OP["get"], CT_MSGPACK, reads.get_msgpack(
                store.table, body, store.query_time(), registry=store.registry))
        return encode_frame(_REPLY_OP["get"], CT_JSON, _encode(reads.get(
            store.table, body, store.query_time(), registry=store.registry)))

    def _tcp_batch_get(self, ct: int, payload: bytes) -> bytes | PendingReply:
        return self._batch_get(ct, payload, _batch_frame, FrameDispatch.failed)

    def _tcp_scan(self, ct: int, payload: bytes) -> bytes:
        before, rows, after = self.scan(_decode_scan(ct, payload, self.store.registry_version),
                                        ct == CT_MSGPACK)
        # the frame made around the page's rows: one copy of them
        size = len(before) + rows.nbytes + len(after)
        return rows.joined(frame_header(_REPLY_OP["scan"], ct, size) + before, after)

    def _tcp_backfill(self, ct: int, payload: bytes) -> bytes | PendingReply:
        return self._serve_backfill(
            ct, payload, lambda body: encode_frame(_REPLY_OP["backfill"], CT_JSON, _encode(body)),
            FrameDispatch.failed)

    # HTTP data plane (spec/wire.md §3.3) ----------------------------------------------

    def _http_ping(self, request: HttpRequest, params: tuple[str, ...]) -> bytes:
        body = {"pong": True, "registry_version": self.store.registry_version}
        return json_response(200, body, request.keep_alive)

    def _http_register(self, request: HttpRequest, params: tuple[str, ...]) -> bytes:
        store = self.store
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            raise BeavaError("unsupported_media_type", path="/register",
                             reason="expected application/json",
                             top={"registry_version": store.registry_version})
        status, body = store.register(request.body)
        return json_response(status, body, request.keep_alive)

    def _http_push(self, request: HttpRequest, params: tuple[str, ...]) -> bytes | PendingReply:
        try:
            envelope = messages.json_any_wide(request.body)
        except messages.DECODE_ERRORS as err:
            raise BeavaError("invalid_json_body",
                             message=messages.json_failure(request.body, err)) from None
        except RecursionError:  # nested past what any accepted value may be
            raise BeavaError("invalid_event", reason=TOO_DEEP) from None
        if not isinstance(envelope, dict) or not isinstance(envelope.get("event"), str):
            raise BeavaError("missing_event_name_in_body")
        return self._push(envelope["event"], envelope.get("data", {}), request)

    def _http_push_event(self, request: HttpRequest, params: tuple[str, ...]
                         ) -> bytes | PendingReply:
        (event,) = params
        try:
            fields = messages.json_any_wide(request.body)
        except messages.DECODE_ERRORS as err:
            raise BeavaError("invalid_event",
                             message=messages.json_failure(request.body, err)) from None
        except RecursionError:
            raise BeavaError("invalid_event", reason=TOO_DEEP) from None
        if not isinstance(fields, dict):
            raise not_a_map_error(fields)
        return self._push(event, fields, request)

    def _http_push_many(self, request: HttpRequest, params: tuple[str, ...]
                        ) -> bytes | PendingReply:
        body = self._push_many(request.body, CT_JSON, tcp=False)
        return self._after_durable(json_response(200, body, request.keep_alive),
                                   json_response(503, unwritten_error().body(), request.keep_alive))

    def _http_get(self, request: HttpRequest, params: tuple[str, ...]) -> bytes:
        store = self.store
        row = reads.get(store.table, decode_body(CT_JSON, request.body), store.query_time(),
                        registry=store.registry)
        return json_response(200, row, request.keep_alive)

    def _http_batch_get(self, request: HttpRequest, params: tuple[str, ...]
                        ) -> bytes | PendingReply:
        return self._batch_get(CT_JSON, request.body, *_http_endings(request.keep_alive))

    def _http_scan(self, request: HttpRequest, params: tuple[str, ...]) -> bytes:
        before, rows, after = self.scan(
            _decode_scan(CT_JSON, request.body, self.store.registry_version), False)
        return json_response(200, rows.joined(before, after), request.keep_alive)

    def _http_backfill(self, request: HttpRequest, params: tuple[str, ...]
                       ) -> bytes | PendingReply:
        return self._serve_backfill(CT_JSON, request.body, *_http_endings(request.keep_alive))


def _http_endings(keep_alive: bool) -> tuple[Callable[[Any], bytes],
                                             Callable[[Exception], bytes]]:
    """How an HTTP request served in slices ends: 200 with its answer, or its failure's
    error response."""

    def failed(exc: Exception) -> bytes:
        err = as_error(exc)
        return json_response(err.status, err.body(), keep_alive)

    return lambda body: json_response(200, body, keep_alive), failed


def unwritten_error(registry_version: int | None = None) -> BeavaError:
    """``wal_unavailable`` for pushes the WAL did not take: the disk is full
    (spec/durability.md §6.6). TCP errors carry the registry version (spec/wire.md §5.1)."""
    top = {} if registry_version is None else {"registry_version": registry_version}
    return BeavaError("wal_unavailable", top=top,
                      reason="the WAL disk is full; writes are refused until space returns "
                             "(retryable)")
