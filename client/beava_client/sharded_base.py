"""What the synchronous and the asyncio sharded clients share (docs/sharding.md): the shard
map and its source, the registry's routes, and every request written once as a *flow*.

A flow is a generator that yields what it needs done and receives the outcome: ``Send``
(one call per shard, run in parallel; the answer maps each shard id to its reply or the
exception it raised), ``REFRESH_MAP``, ``REFRESH_ROUTES`` or ``Sleep``. ``sharded.py``
runs flows with threads, ``sharded_aio.py`` with asyncio; neither decides anything.
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

from .errors import BeavaError, ServerError, TransportError
from .messages import register_body
from .opcodes import CT_JSON, OP_CLUSTER_FENCE, OP_CLUSTER_MAP
from .shard_routes import Routes
from .slots import Shard, ShardMap, slot
from .urls import parse_url

WRONG_SHARD = "wrong_shard"
SHARD_FENCED = "shard_fenced"
_RETRIED = frozenset((WRONG_SHARD, SHARD_FENCED))

# A fenced shard is retried after FENCE_FIRST_DELAY s, the delay doubling to FENCE_MAX_DELAY.
FENCE_FIRST_DELAY = 0.01
FENCE_MAX_DELAY = 0.5

_SCHEMES = ("tcp", "tcps", "http", "https")
OWNER_CACHE = 1 << 16

T = TypeVar("T")


class Call(NamedTuple):
    """A client method call: ``getattr(client, method)(*args, **kwargs)``."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = {}


class Send(NamedTuple):
    """Run one call per shard id, in parallel."""

    calls: Mapping[str, Call]


class Sleep(NamedTuple):
    seconds: float


REFRESH_MAP = "refresh_map"
REFRESH_ROUTES = "refresh_routes"

Step = Send | Sleep | str
Flow = Generator[Step, Any, T]
Outcomes = dict[str, Any]  # shard id -> reply, or the exception the call raised


def error_code(err: object) -> str | None:
    return err.code if isinstance(err, BeavaError) else None


def first_failure(outcomes: Mapping[str, Any]) -> BaseException | None:
    """The error to raise from per-shard outcomes: the first one the client does not
    retry itself, else the first; None when every shard answered."""
    errors = [o for o in outcomes.values() if isinstance(o, BaseException)]
    for err in errors:
        if error_code(err) not in _RETRIED:
            return err
    return errors[0] if errors else None


def map_source(shard_map: str | os.PathLike[str] | ShardMap) -> tuple[ShardMap | None, str]:
    """``(map, source)``: a ShardMap as given, a file read now, or a URL fetched later."""
    if isinstance(shard_map, ShardMap):
        return shard_map, ""
    text = os.fspath(shard_map)
    if "://" in text:
        parse_url(text)  # a bad scheme or port is refused here, before any I/O
        return None, text
    return ShardMap.load(text), text


def _map_transport(shard_map: ShardMap | None) -> str:
    """The framed-TCP transport a map's shards are reached at: TLS when each has a
    ``tcps`` address."""
    if shard_map is not None and all(shard.tcps for shard in shard_map.shards):
        return "tcps"
    return "tcp"


def read_entry(entry: Any) -> tuple[Any, Any]:
    """``(table, key)`` of a batch_get request: a tuple, or a mapping as the wire clients
    take it."""
    if isinstance(entry, Mapping):
        return entry.get("table"), entry.get("key")
    if isinstance(entry, (tuple, list)) and len(entry) in (2, 3):
        return entry[0], entry[1]
    raise TypeError(f"batch_get entries must be (table, key[, features]) tuples or mappings, "
                    f"got {entry!r}")


def _payload_nodes(payload: Mapping[str, Any] | Sequence[Any]) -> list[Any]:
    return list(register_body(payload).get("nodes") or ())


class _Backoff:
    """The waits before retrying a fenced shard, until ``fence_wait`` seconds are spent."""

    def __init__(self, wait: float) -> None:
        self._deadline = time.monotonic() + wait
        self._delay = FENCE_FIRST_DELAY

    def next(self) -> float | None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            return None
        delay = min(self._delay, left)
        self._delay = min(self._delay * 2, FENCE_MAX_DELAY)
        return delay


class _PushMany:
    """The progress of a sharded push_many: the shards that acked each row, each row's
    error, each shard's last ack LSN, and the rows to send again (their owner moved, or
    their shard was fenced) with the code that said so."""

    def __init__(self, count: int) -> None:
        self.acked: list[set[str]] = [set() for _ in range(count)]
        self.errors: dict[int, dict[str, Any]] = {}
        self.again: dict[int, dict[str, Any]] = {}
        self.ack_lsn: dict[str, Any] = {}
        self.versions: list[Any] = []

    def pending(self) -> list[int]:
        return [i for i in range(len(self.acked)) if i not in self.errors]

    def take(self, shard_id: str, rows: Sequence[int], result: Mapping[str, Any]) -> None:
        failed = {rows[item["index"]]: item["error"] for item in result.get("errors") or ()}
        for i in rows:
            error = failed.get(i)
            if error is None:
                self.acked[i].add(shard_id)
            elif error.get("code") in _RETRIED:
                self.again[i] = error
            else:
                self.errors.setdefault(i, error)
        if result.get("ack_lsn") is not None:
            self.ack_lsn[shard_id] = result["ack_lsn"]
        self.versions.append(result.get("registry_version"))

    def take_error(self, shard_id: str, rows: Sequence[int], err: BaseException,
                   retry: bool = False) -> bool:
        """A shard's push_many raised: the rows of the chunks acked before the failing one
        count; False when the error is not one to retry (``retry``: this one is)."""
        before = getattr(err, "acked_before", None) or 0
        for i in rows[:before]:
            self.acked[i].add(shard_id)
        if not retry and error_code(err) not in _RETRIED:
            return False
        for i in rows[before:]:
            self.again[i] = getattr(err, "error", None) or {"code": error_code(err)}
        return True

    def give_up(self) -> None:
        """The rows still to send again fail with the error that last refused them."""
        for i, error in self.again.items():
            self.errors.setdefault(i, error)
        self.again.clear()

    def result(self) -> dict[str, Any]:
        errors = [{"index": i, "error": e} for i, e in sorted(self.errors.items())]
        versions = [v for v in self.versions if isinstance(v, int)]
        return {"acks": len(self.acked) - len(errors),
                "ack_lsn": dict(sorted(self.ack_lsn.items())) or None, "errors": errors,
                "registry_version": max(versions, default=None)}


class ShardedBase:
    """The map, the routes and the request flows of a sharded client.

    ``shard_map``: a ShardMap, a map file, or any shard's URL (``tcp://``, ``tcps://``,
    ``http(s)://``), from which the map is fetched (op 0x0043, ``GET /cluster/map``).
    ``transport``: ``"tcp"``, ``"tcps"``, ``"http"`` or ``"https"``, the shard address
    each shard is reached at (default: the URL's scheme; for a map, ``"tcps"`` when every
    shard has a ``tcps`` address, as ``beava cluster up`` with TLS writes, else
    ``"tcp"``). ``fence_wait``: seconds a request waits on a fenced shard (a registry
    change under way) before raising ``shard_fenced``. Other keyword arguments go to
    each shard's client.
    """

    def __init__(self, shard_map: str | os.PathLike[str] | ShardMap, *,
                 transport: str | None = None, fence_wait: float = 30.0,
                 **client_options: Any) -> None:
        self._owners: dict[str, str] = {}  # slot text -> owning shard id, for self.map
        self._current: ShardMap | None = None
        self.map, self._source = map_source(shard_map)
        if transport is None:
            transport = parse_url(self._source).scheme if "://" in self._source \
                else _map_transport(self._current)
        if transport not in _SCHEMES:
            raise ValueError(f"transport must be one of {', '.join(_SCHEMES)}, got "
                             f"{transport!r}")
        if isinstance(fence_wait, bool) or not isinstance(fence_wait, (int, float)) \
                or not fence_wait >= 0:
            raise ValueError(f"fence_wait must be a number of seconds >= 0, got "
                             f"{fence_wait!r}")
        self.transport = transport
        self.fence_wait = float(fence_wait)
        self._options = client_options
        self.routes: Routes | None = None

    # -- the map ---------------------------------------------------------------------------

    @property
    def map(self) -> ShardMap | None:
        """The shard map in use (None until fetched from a URL)."""
        return self._current

    @map.setter
    def map(self, value: ShardMap | None) -> None:
        if value is not self._current:
            self._owners.clear()
        self._current = value

    def shard_url(self, shard: Shard) -> str:
        """The URL of ``shard`` in this client's transport."""
        address = getattr(shard, self.transport)
        if address is None:
            raise ValueError(f"shard {shard.id!r} has no {self.transport!r} address in the "
                             "shard map")
        return f"{self.transport}://{address}" if self.transport.startswith("tcp") \
            else str(address)

    @property
    def _http(self) -> bool:
        return self.transport.startswith("http")

    def map_call(self, url: str | None = None) -> Call:
        """The request answering the shard map (to ``url``, else to a shard)."""
        if parse_url(url).is_http if url is not None else self._http:
            return Call("request", ("GET", "/cluster/map"))
        return Call("request", (OP_CLUSTER_MAP,), {"expect_op": OP_CLUSTER_MAP})

    def fence_call(self, fenced: bool) -> Call:
        body = {"fenced": fenced, "epoch": self._map().epoch}
        if self._http:
            return Call("request", ("POST", "/cluster/fence", body), {"safe": False})
        return Call("request", (OP_CLUSTER_FENCE, body), {"ct": CT_JSON,
                                                        "expect_op": OP_CLUSTER_FENCE})

    def newer_map(self, reply: Any) -> ShardMap:
        """The map a shard answered, unless it is older than the one held."""
        fresh = ShardMap.from_dict(reply)
        if self.map is not None and fresh.epoch < self.map.epoch:
            return self.map
        return fresh

    def _map(self) -> ShardMap:
        current = self.map
        if current is None:
            raise RuntimeError("the shard map has not been fetched yet")
        return current

    def shard_ids(self) -> list[str]:
        return [shard.id for shard in self._map().shards]

    # -- planning --------------------------------------------------------------------------

    def push_owners(self, routes: Routes, event: str, body: Mapping[str, Any]) -> set[str]:
        """The shards a push of ``body`` goes to: the owners of each fed table's key (each
        global table's name); an event feeding no table (or none with a key in this body)
        goes to the owner of the event's name, which validates and counts it."""
        owner = self._owner_id
        return {owner(text) for text in routes.push_texts(event, body) or (event,)}

    def read_owner(self, routes: Routes, table: Any, key: Any) -> str:
        return self._owner_id(routes.read_text(table, key) if isinstance(table, str) else "")

    def _owner_id(self, text: str) -> str:
        """The shard owning a slot text. The slot is hashed in Python (about 5 µs), so the
        owners of the last OWNER_CACHE texts are kept (keys recur: a user pushes often)."""
        owners = self._owners
        found = owners.get(text)
        if found is None:
            if len(owners) >= OWNER_CACHE:
                owners.clear()
            found = owners[text] = self._map().owner(slot(text)).id
        return found

    # -- flows -----------------------------------------------------------------------------

    def _routes_knowing(self, event: str | None = None,
                        tables: Iterable[Any] = ()) -> Flow[Routes]:
        """The routes, described again once when they are missing or do not know the
        event or a table (registered since by another client)."""
        routes = self.routes
        if routes is None or (event is not None and not routes.knows_event(event)) \
                or any(isinstance(t, str) and t not in routes.tables for t in tables):
            yield REFRESH_ROUTES
            routes = self.routes
        assert routes is not None
        return routes

    def _stale(self, versions: Iterable[Any]) -> bool:
        """Whether a reply names a registry newer than the routes were built from."""
        known = self.routes.version if self.routes is not None else None
        return any(isinstance(v, int) and (known is None or v > known) for v in versions)

    def describe_flow(self) -> Flow[dict[str, Any]]:
        """``describe`` of the first shard that answers (every shard holds the registry)."""
        error: BaseException | None = None
        for shard_id in self.shard_ids():
            outcome = (yield Send({shard_id: Call("describe")}))[shard_id]
            if not isinstance(outcome, BaseException):
                return dict(outcome)
            error = outcome
        assert error is not None
        raise error

    def on_all_flow(self, call: Call) -> Flow[Outcomes]:
        """``call`` on every shard; the first failure is raised once all have answered."""
        outcomes: Outcomes = yield Send(dict.fromkeys(self.shard_ids(), call))
        failure = first_failure(outcomes)
        if failure is not None:
            raise failure
        return outcomes

    def push_flow(self, event: str, body: Mapping[str, Any]) -> Flow[dict[str, Any]]:
        """One push, sent to every owner in parallel; acked when all have acked. Only the
        shards that failed are sent it again: after a map refresh for ``wrong_shard``
        (once), after a wait for ``shard_fenced``, on a new connection after a transport
        failure (once per shard: if the lost request had reached the shard, only the
        event's dedupe_key keeps it from counting twice); a reply naming a newer registry
        than the routes knew has the routes described again and any new owner sent it
        too."""
        done: dict[str, Mapping[str, Any]] = {}
        lost: set[str] = set()  # shards sent the push again after a transport failure
        refreshed = described = False
        backoff = _Backoff(self.fence_wait)
        call = Call("push", (event, body))
        while True:
            routes = yield from self._routes_knowing(event)
            want = self.push_owners(routes, event, body) - done.keys()
            if not want:
                if not described and self._stale(r.get("registry_version")
                                                  for r in done.values()):
                    described = True
                    yield REFRESH_ROUTES
                    continue
                return _merged_push(done)
            outcomes: Outcomes = yield Send(dict.fromkeys(want, call))
            done.update((k, v) for k, v in outcomes.items()
                        if not isinstance(v, BaseException))
            dropped = {k for k, v in outcomes.items() if isinstance(v, TransportError)}
            if dropped and not dropped & lost:
                lost |= dropped  # sent again on a new connection, with the others
                outcomes = {k: v for k, v in outcomes.items() if k not in dropped}
            failure = first_failure(outcomes)
            if failure is None:
                continue
            code = error_code(failure)
            if code == WRONG_SHARD and not refreshed:
                refreshed = True
                yield REFRESH_MAP
            elif code == SHARD_FENCED and (delay := backoff.next()) is not None:
                yield Sleep(delay)
            else:
                raise failure

    def push_many_flow(self, event: str, rows: Sequence[Mapping[str, Any]],
                       chunk_size: int) -> Flow[dict[str, Any]]:
        """Rows grouped by owner, one push_many per shard, the shards in parallel; the
        result as a single server's (``index`` in ``rows``). Rows refused with
        ``wrong_shard`` or ``shard_fenced``, and the rows a shard had not acked when its
        connection failed, go again as ``push_flow`` sends a push."""
        state = _PushMany(len(rows))
        lost: set[str] = set()
        refreshed = described = False
        backoff = _Backoff(self.fence_wait)
        while True:
            routes = yield from self._routes_knowing(event)
            plan: dict[str, list[int]] = {}
            for i in state.pending():
                for shard_id in self.push_owners(routes, event, rows[i]) - state.acked[i]:
                    plan.setdefault(shard_id, []).append(i)
            if not plan:
                if not described and self._stale(state.versions):
                    described = True
                    yield REFRESH_ROUTES
                    continue
                return state.result()
            state.again.clear()
            outcomes: Outcomes = yield Send({
                sid: Call("push_many", (event, [rows[i] for i in idx]),
                          {"chunk_size": chunk_size})
                for sid, idx in plan.items()})
            for sid, outcome in outcomes.items():
                if not isinstance(outcome, BaseException):
                    state.take(sid, plan[sid], outcome)
                    continue
                retry = isinstance(outcome, TransportError) and sid not in lost
                if retry:
                    lost.add(sid)
                if not state.take_error(sid, plan[sid], outcome, retry):
                    raise outcome
            codes = {e.get("code") for e in state.again.values()}
            if WRONG_SHARD in codes and not refreshed:
                refreshed = True
                yield REFRESH_MAP
            elif SHARD_FENCED in codes and (delay := backoff.next()) is not None:
                yield Sleep(delay)
            elif not codes <= _RETRIED:
                continue  # rows of a lost connection: sent again at once
            else:
                state.give_up()

    def get_flow(self, table: str, key: Any, features: Sequence[str] | None) -> Flow[Any]:
        """A read from the key's owner; ``wrong_shard`` refreshes the map and reads once
        more."""
        routes = yield from self._routes_knowing(tables=(table,))
        for attempt in range(2):
            owner = self.read_owner(routes, table, key)
            outcome = (yield Send({owner: Call("get", (table, key, features))}))[owner]
            if not isinstance(outcome, BaseException):
                return outcome
            if error_code(outcome) != WRONG_SHARD or attempt:
                raise outcome
            yield REFRESH_MAP
        raise AssertionError("unreachable")

    def batch_get_flow(self, requests: Sequence[Any]) -> Flow[list[Any]]:
        """Reads grouped by owner, one batch_get per shard, the shards in parallel; the
        rows in request order. Entries answered ``wrong_shard`` are read once more after a
        map refresh."""
        entries = [read_entry(r) for r in requests]
        routes = yield from self._routes_knowing(tables=(t for t, _ in entries))
        results: list[Any] = [None] * len(entries)
        todo = list(range(len(entries)))
        for attempt in range(2):
            plan: dict[str, list[int]] = {}
            for i in todo:
                plan.setdefault(self.read_owner(routes, *entries[i]), []).append(i)
            outcomes: Outcomes = yield Send({
                sid: Call("batch_get", ([requests[i] for i in idx],))
                for sid, idx in plan.items()})
            failure = first_failure(outcomes)
            if failure is not None:
                raise failure
            todo = []
            for sid, idx in plan.items():
                for i, row in zip(idx, outcomes[sid], strict=True):
                    moved = isinstance(row, Mapping) and isinstance(row.get("error"), Mapping) \
                        and row["error"].get("code") == WRONG_SHARD
                    if moved and not attempt:
                        todo.append(i)
                    else:
                        results[i] = row
            if not todo:
                break
            yield REFRESH_MAP
        return results

    def register_flow(self, payload: Mapping[str, Any] | Sequence[Any], force: bool,
                      dry_run: bool) -> Flow[dict[str, Any]]:
        """Register on every shard so that no push is ever applied under two registries:

        1. the registry's tables must be placeable by a client (``RoutingError``);
        2. a dry run on every shard: a refusal is raised and nothing has changed;
        3. every shard is fenced (pushes answer ``shard_fenced``, retried by clients);
           a shard that cannot be fenced has the others unfenced and its error raised;
        4. the register on every shard, then every shard's registry version, which must
           agree; only then every shard is unfenced.

        After step 2 every shard accepts the register; should one still fail in step 4
        (it died, say), the shards stay fenced and the error is raised: no push is applied
        until a register run again (one already applied is a no-op) levels them."""
        body = register_body(payload, force, dry_run)
        Routes(_payload_nodes(body)).check_routable()
        checks = yield from self.on_all_flow(Call("register", (body,), {"dry_run": True}))
        ids = self.shard_ids()
        if body.get("dry_run"):
            return dict(checks[ids[0]])
        fenced: Outcomes = yield Send(dict.fromkeys(ids, self.fence_call(True)))
        failure = first_failure(fenced)
        if failure is not None:
            ok = [sid for sid, o in fenced.items() if not isinstance(o, BaseException)]
            yield Send(dict.fromkeys(ok, self.fence_call(False)))
            raise failure
        applied: Outcomes = yield Send(dict.fromkeys(ids, Call("register", (body,))))
        failure = first_failure(applied)
        if failure is not None:
            if all(isinstance(o, BaseException) for o in applied.values()):
                yield Send(dict.fromkeys(ids, self.fence_call(False)))
                raise failure
            done = sorted(k for k, v in applied.items() if not isinstance(v, BaseException))
            raise ServerError(
                "register_incomplete",
                f"registered on {done} but not on the others ({failure}); every shard stays "
                "fenced until register is run again") from failure
        pings = yield from self.on_all_flow(Call("ping"))
        _same_version(pings)
        yield from self.on_all_flow(self.fence_call(False))
        yield REFRESH_ROUTES
        return dict(applied[ids[0]])


def _merged_push(replies: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """One push's answer: ``ack_lsn`` per shard id, ``idempotent_replay`` when every shard
    had it already, the highest ``registry_version``."""
    versions = [r.get("registry_version") for r in replies.values()]
    return {
        "ack_lsn": {sid: r.get("ack_lsn") for sid, r in sorted(replies.items())},
        "idempotent_replay": all(r.get("idempotent_replay") for r in replies.values()),
        "registry_version": max((v for v in versions if isinstance(v, int)), default=None),
    }


def _same_version(pings: Mapping[str, Mapping[str, Any]]) -> None:
    """ServerError ``registry_diverged`` naming each shard's registry version, unless
    they agree."""
    versions = {sid: r.get("registry_version") for sid, r in pings.items()}
    if len(set(versions.values())) != 1:
        raise ServerError("registry_diverged",
                          f"the shards report different registry versions {versions}; they "
                          "stay fenced until register is run again")
