"""Requests in, answers out: the seam between the transports and the feature store.

Frames and HTTP requests arrive decoded to (op, ct, payload) / :class:`HttpRequest`; this
module decodes their bodies, calls the :class:`FeatureStore` and encodes its answers with
the envelope each transport prescribes (spec/wire.md §2.5, §3.3, §5).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import msgspec

from beava import __version__
from beava._fast.frame_splitter import encode_frame
from beava.catalogue.errors import BeavaError
from beava.engine.state import reads
from beava.engine.state.push_validation import has_control_character
from beava.engine.store import FeatureStore
from beava.protocol import messages
from beava.protocol.http import HttpRequest, render_response
from beava.protocol.http_routes import resolve
from beava.protocol.opcodes import (
    CONTENT_TYPES,
    CT_JSON,
    CT_MSGPACK,
    OP_BATCH_GET,
    OP_ERROR,
    OP_GET,
    OP_GET_MULTI,
    OP_GET_RESPONSE,
    OP_MGET,
    OP_PING,
    OP_PUSH,
    OP_PUSH_MANY,
    OP_PUSH_SYNC,
    OP_REGISTER,
    OP_RESET,
)
from beava.protocol.reply_slots import PendingReply

_encode = messages.encode_json
_UNSUPPORTED = encode_frame(OP_ERROR, CT_JSON, b'{"code":"unsupported"}')
_HTTP_HEADERS = (("Content-Type", "application/json"), ("X-Runtime", "hand-rolled"))
_REPLAY_HEADERS = _HTTP_HEADERS + (("X-Beava-Idempotent-Replay", "1"),)
_STATE_READ_ROUTES = frozenset(("get", "batch_get", "legacy_get"))
RESET_FORBIDDEN_REASON = ("OP_RESET requires server test_mode (set BEAVA_TEST_MODE=1 or pass "
                          "--test-mode).")
PUSH_MANY_LIMIT = 10_000
# Push acks are the hottest reply: keys already in sorted order (spec/wire.md §1, §6.7).
_ACK = b'{"ack_lsn":%d,"idempotent_replay":false,"registry_version":%d}'
_REPLAY_ACK = b'{"ack_lsn":%d,"idempotent_replay":true,"registry_version":%d}'


def _deferred(slot: PendingReply | None, reply: bytes) -> PendingReply:
    assert slot is not None
    slot.payload = reply
    return slot


def _error_frame(err: BeavaError) -> bytes:
    return encode_frame(OP_ERROR, CT_JSON, _encode(err.body()))


def _internal_error(exc: Exception) -> BeavaError:
    return BeavaError("internal_error", reason=f"{type(exc).__name__}: {exc}")


def _unknown_op(op: int) -> BeavaError:
    return BeavaError("unknown_op", op=op,
                      message=f"opcode 0x{op:04x} is not recognised by this server")


class Service:
    """Handles one request at a time on behalf of any transport."""

    def __init__(self, store: FeatureStore, *, test_mode: bool,
                 on_reset: Callable[[int], None] | None = None,
                 on_alias: Callable[[str], None] | None = None) -> None:
        self.store = store
        self.test_mode = test_mode
        self.on_reset = on_reset
        self.on_alias = on_alias
        self._tcp_ops: dict[int, Callable[[int, bytes], bytes]] = {
            OP_REGISTER: self._tcp_register,
            OP_PUSH: self._tcp_push,
            OP_PUSH_MANY: self._tcp_push_many,
            OP_GET: partial(self._tcp_read, OP_GET),
            OP_MGET: partial(self._tcp_read, OP_MGET),
            OP_GET_MULTI: partial(self._tcp_read, OP_GET_MULTI),
            OP_BATCH_GET: partial(self._tcp_read, OP_BATCH_GET),
            OP_RESET: self._tcp_reset,
        }

    # shared ---------------------------------------------------------------------------

    def ping_body(self) -> dict[str, Any]:
        return {"registry_version": self.store.registry_version, "server_version": __version__}

    def reset(self) -> dict[str, Any]:
        if not self.test_mode:
            raise BeavaError("reset_disabled_in_production", reason=RESET_FORBIDDEN_REASON)
        version = self.store.reset()
        if self.on_reset is not None:
            self.on_reset(version)
        return {"registry_version": version, "reset": True}

    # framed TCP -----------------------------------------------------------------------

    def handle_frame(self, op: int, ct: int, payload: bytes) -> bytes:
        """One request frame to one reply frame (spec/wire.md §2.4-§2.5)."""
        if op == OP_PING:
            return encode_frame(OP_PING, CT_JSON, _encode(self.ping_body()))
        handler = self._tcp_ops.get(op)
        try:
            if handler is None:
                if op == OP_PUSH_SYNC:
                    raise BeavaError("op_not_implemented", op=op,
                                     message="opcode 0x0011 (push_sync) is not yet implemented")
                raise _unknown_op(op)
            if ct not in CONTENT_TYPES:
                raise BeavaError("unsupported_content_type",
                                 message=f"unsupported content_type: 0x{ct:02x}")
            return handler(ct, payload)
        except BeavaError as err:
            return _error_frame(err)
        except Exception as exc:  # a bug must cost one request, never the connection
            return _error_frame(_internal_error(exc))

    def _tcp_register(self, ct: int, payload: bytes) -> bytes:
        if ct != CT_JSON:
            raise BeavaError("unsupported_content_type",
                             message=f"unsupported content_type for register: 0x{ct:02x}")
        status, body = self.store.register(payload)
        return encode_frame(OP_REGISTER if status == 200 else OP_ERROR, CT_JSON, _encode(body))

    def _tcp_push(self, ct: int, payload: bytes) -> bytes | PendingReply:
        try:
            if ct == CT_JSON:
                envelope = messages.tcp_push_json(payload)
                fields = messages.json_any(envelope.body)
            else:
                envelope = messages.tcp_push_msgpack(payload)
                fields = envelope.body
        except msgspec.DecodeError:
            return _UNSUPPORTED
        store = self.store
        slot = None if store.log.acks_immediately else PendingReply()
        try:
            ack = store.push(envelope.event, fields, slot.fire if slot is not None else None)
        except BeavaError as err:
            err.top["registry_version"] = store.registry_version
            raise
        if ack.replay:
            body = _REPLAY_ACK % (ack.lsn, store.registry_version)
        else:
            body = _ACK % (ack.lsn, ack.registry_version)
        reply = encode_frame(OP_PUSH, CT_JSON, body)
        return _deferred(slot, reply) if ack.pending else reply

    def _tcp_push_many(self, ct: int, payload: bytes) -> bytes | PendingReply:
        body = self._push_many(payload, ct, tcp=True)
        return self._after_durable(encode_frame(OP_PUSH_MANY, CT_JSON, _encode(body)))

    def _after_durable(self, reply: bytes) -> bytes | PendingReply:
        """``reply`` now if every accepted record is applied, else once it is."""
        slot = PendingReply()
        slot.payload = reply
        return reply if self.store.log.after_pending(slot.fire) else slot

    def _tcp_read(self, op: int, ct: int, payload: bytes) -> bytes:
        try:
            body = messages.json_any(payload) if ct == CT_JSON else messages.msgpack_any(payload)
        except msgspec.DecodeError as exc:
            raise BeavaError("internal_error", reason=str(exc)) from None
        store = self.store
        now = store.query_time()
        if op == OP_BATCH_GET:
            results, aliases = reads.batch_get(store.table, body, now)
            self._log_aliases(aliases)
            return encode_frame(OP_GET_RESPONSE, CT_JSON, _encode({"results": results}))
        if op == OP_GET:
            # A MessagePack body cannot carry the legacy shapes: it fails on `table` instead.
            value = reads.get(store.table, body, now, legacy_shape_check=ct == CT_JSON)
        elif op == OP_MGET:
            value = reads.mget(store.table, store.registry, body, now)
        else:
            value = reads.get_multi(store.table, store.registry, body, now)
        if ct == CT_MSGPACK:
            return encode_frame(OP_GET_RESPONSE, CT_MSGPACK,
                                messages.encode_msgpack(reads.finite_or_none(value)))
        return encode_frame(OP_GET_RESPONSE, CT_JSON, _encode(value))

    def _log_aliases(self, tables: list[str]) -> None:
        if self.on_alias is not None:
            for table in tables:
                self.on_alias(table)

    def _tcp_reset(self, ct: int, payload: bytes) -> bytes:
        return encode_frame(OP_GET_RESPONSE, CT_JSON, _encode(self.reset()))

    # push_many (extension, spec/wire.md §10) -----------------------------------------

    def _push_many(self, payload: bytes, ct: int, *, tcp: bool) -> dict[str, Any]:
        store = self.store
        top = {"registry_version": store.registry_version} if tcp else None
        try:
            request = (messages.push_many_json(payload) if ct == CT_JSON
                       else messages.push_many_msgpack(payload))
        except msgspec.DecodeError as exc:
            raise BeavaError("invalid_push_many", top=top, message=str(exc)) from None
        count = len(request.bodies)
        if count > PUSH_MANY_LIMIT:
            raise BeavaError("batch_too_large", top=top, count=count, limit=PUSH_MANY_LIMIT,
                             message=f"{count} bodies exceed the limit of {PUSH_MANY_LIMIT}")
        event = request.event
        if has_control_character(event):
            raise BeavaError("control_character_in_string", top=top)
        if event not in store.registry.events:
            raise BeavaError("event_not_found", top=top)
        version = store.registry_version
        acks = 0
        ack_lsn = None
        errors = []
        for index, fields in enumerate(request.bodies):
            try:
                ack = store.push(event, fields)
            except BeavaError as err:
                errors.append({"error": {"code": err.code, **err.fields}, "index": index})
                continue
            acks += 1
            if ack_lsn is None or ack.lsn > ack_lsn:
                ack_lsn = ack.lsn
        return {"ack_lsn": ack_lsn, "acks": acks, "errors": errors, "registry_version": version}

    # HTTP data plane ------------------------------------------------------------------

    def handle_http(self, request: HttpRequest) -> bytes | PendingReply:
        headers = _HTTP_HEADERS
        pending = False
        try:
            route, param = resolve(request.method, request.target)
            if route in _STATE_READ_ROUTES and request.after_pending:
                # a read behind this connection's unapplied push waits until it is applied
                self.store.log.barrier()
            status, body, replay, pending = self._http_route(route, param, request)
            if replay:
                headers = _REPLAY_HEADERS
            payload = body if isinstance(body, bytes) else _encode(body)
        except BeavaError as err:
            status, payload = err.status, _encode(err.body())
        except Exception as exc:  # a bug must cost one request, never the connection
            err = _internal_error(exc)
            status, payload = err.status, _encode(err.body())
        response = render_response(status, payload, headers, request.keep_alive)
        return self._after_durable(response) if pending else response

    def http_protocol_error(self) -> bytes:
        return render_response(400, b'{"error":{"code":"http_protocol_error"}}', _HTTP_HEADERS,
                               keep_alive=False)

    def _http_route(self, route: str, param: Any, request: HttpRequest
                    ) -> tuple[int, dict | bytes, bool, bool]:
        """``(status, body, is a replay, wait for durability)``."""
        if route in ("push", "push_event", "push_many"):
            return self._http_write_route(route, param, request)
        status, body = self._http_read_route(route, param, request)
        return status, body, False, False

    def _http_write_route(self, route: str, param: Any, request: HttpRequest
                          ) -> tuple[int, dict | bytes, bool, bool]:
        if route == "push_many":
            return 200, self._push_many(request.body, CT_JSON, tcp=False), False, True
        if route == "push":
            try:
                envelope = messages.json_any(request.body)
            except msgspec.DecodeError:
                raise BeavaError("invalid_json_body") from None
            if not isinstance(envelope, dict) or not isinstance(envelope.get("event"), str):
                raise BeavaError("missing_event_name_in_body")
            event, fields = envelope["event"], envelope.get("data", {})
        else:
            try:
                fields = messages.json_any(request.body)
            except msgspec.DecodeError:
                raise BeavaError("invalid_event") from None
            if not isinstance(fields, dict):
                raise BeavaError("invalid_event")
            event = param
        ack = self.store.push(event, fields)
        body = {"ack_lsn": ack.lsn, "idempotent_replay": False,
                "registry_version": ack.registry_version}
        return 200, body, ack.replay, ack.pending

    def _http_read_route(self, route: str, param: Any, request: HttpRequest
                         ) -> tuple[int, dict | bytes]:
        store = self.store
        if route == "ping":
            return 200, {"pong": True, "registry_version": store.registry_version}
        if route == "register":
            media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if media != "application/json":
                raise BeavaError("unsupported_media_type", path="/register",
                                 reason="expected application/json",
                                 top={"registry_version": store.registry_version})
            return store.register(request.body)
        if route == "reset":
            return 200, self.reset()
        if route == "health":
            return 200, {"status": "ok"}
        if route == "ready":
            return 200, {"status": "ready"}
        if route == "legacy_get":
            feature, key = param
            return 200, reads.legacy_get(store.table, store.registry, feature, key,
                                         store.query_time())
        try:
            body = messages.json_any(request.body)
        except msgspec.DecodeError as exc:
            raise BeavaError("internal_error", reason=str(exc)) from None
        if route == "get":
            return 200, reads.get(store.table, body, store.query_time())
        results, aliases = reads.batch_get(store.table, body, store.query_time())
        self._log_aliases(aliases)
        return 200, {"results": results}
