"""The feature store: one registry version, accepted pushes, dedupe, reset, recovery.

The single writer of all state; the server calls it from the event loop only. It knows
nothing of sockets: requests arrive decoded and answers leave as Python values or
:class:`BeavaError`. When a push becomes visible is the business of the durability log
(``beava.durability.group_commit``): at once, or after the fsync that covers it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgspec

from beava._fast.push_counts import PushCounts
from beava._fast.push_pass import apply_records
from beava._fast.wal_record import append_record
from beava.catalogue.errors import BeavaError
from beava.durability.crash_points import CrashPoints
from beava.durability.group_commit import GroupCommit, MemoryLog, PeriodicLog
from beava.durability.recovery import Unapplicable
from beava.durability.snapshots import LoadedSnapshot, SnapshotInvalid, encode_snapshot_body
from beava.durability.wal import WalFatal, WalUnavailable, WalWriter
from beava.durability.wal_format import (
    BODY_JSON,
    BODY_MSGPACK,
    RECORD_EVENT,
    RECORD_REGISTRY,
    RECORD_TABLE_STATE,
    Record,
    encode_record,
    encode_reset_record,
)
from beava.engine.backfill import replay_record as replay_table_state
from beava.engine.registry import Registry, empty_registry, register, registry_from_record
from beava.engine.state.engine_state import EngineState
from beava.engine.state.keys import dedupe_keystr
from beava.engine.state.push_validation import CheckerEntry, build_checkers, validate_push

# the body of an EVENT record: the accepted row as MessagePack (the push pass encodes it
# straight onto the pending batch with this encoder's encode_into, or copies the pushed
# bytes, which it decodes with decode_wal_body: the live row is what replay decodes)
WAL_BODY_ENCODER = msgspec.msgpack.Encoder()
encode_wal_body = WAL_BODY_ENCODER.encode
decode_wal_body = msgspec.msgpack.Decoder().decode
_encode_json = msgspec.json.Encoder(order="sorted").encode
_decode_json = msgspec.json.Decoder().decode
# Longest reason quoted from a snapshot that does not load (it may echo the file's data).
_MAX_REASON = 300


DurabilityLog = MemoryLog | GroupCommit | PeriodicLog
# The event label of pushes refused for an event that is not registered.
UNREGISTERED = "<unregistered>"


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


# Outcome of an accepted push, a new record or a dedupe replay:
# ``(lsn, registry_version, replay, pending)``. ``pending`` is True when the push is not
# applied yet (strict mode): its acknowledgement must wait until
# ``FeatureStore.applied_lsn`` reaches ``FeatureStore.hold_lsn`` as it was when the push
# returned, and the ``on_durable`` callback given to :meth:`FeatureStore.push` runs once it
# does.
PushAck = tuple[int, int, bool, bool]


class FeatureStore:
    def __init__(self, *, memory_governance_enforce: bool = True,
                 clock: Callable[[], int] = wall_clock_ms, log: DurabilityLog | None = None,
                 wal: WalWriter | None = None, crash: CrashPoints | None = None) -> None:
        self.memory_governance_enforce = memory_governance_enforce
        self.clock = clock
        self.log: DurabilityLog = log if log is not None else MemoryLog()
        self.wal = wal
        self.crash = crash if crash is not None else CrashPoints(None)
        self.before_reset: Callable[[], None] | None = None
        self.on_fatal: Callable[[BaseException], None] = _raise
        self.registry: Registry = empty_registry()
        self.engine = EngineState(self.registry)
        # event -> (spec, compiled checker, index) of the current registry, and the accepted
        # pushes per event index (the push pass reads both; see _install_checkers)
        self.checkers = build_checkers(self.registry.events)
        self.push_counts = PushCounts(self.checkers)
        # accepted pushes per event name under earlier registry versions
        self._earlier_push_counts: dict[str, int] = {}
        self.last_lsn = 0        # last LSN handed out
        self.applied_lsn = 0     # last LSN reflected in state
        # the LSN the latest deferred acknowledgement waits for (raised by push only)
        self.hold_lsn = 0
        self.watermark_ms = 0
        self.pushes_total = 0
        self.replays_total = 0
        # (event, error code) -> refused pushes; counted on the failure path only
        self.rejections: dict[tuple[str, str], int] = {}
        # (event, dedupe key text) -> (lsn, now_ms, registry_version at the original push)
        self._dedupe: dict[tuple[str, str], tuple[int, int, int]] = {}

    @property
    def sealed_lsn(self) -> int:
        """The last LSN handed to the WAL worker; later records share the pending batch."""
        return self.log.sealed_lsn

    @property
    def registry_version(self) -> int:
        return self.registry.version

    @property
    def node_count(self) -> int:
        return self.registry.node_count

    # registry -------------------------------------------------------------------------

    def register(self, body: bytes) -> tuple[int, dict[str, Any]]:
        """POST /register semantics; returns ``(status, response body)``."""
        outcome = register(self.registry, body,
                           memory_governance_enforce=self.memory_governance_enforce)
        if outcome.registry is None or outcome.record is None:
            return outcome.status, outcome.body
        self._check_writable()
        self.log.barrier()
        lsn = self.last_lsn + 1
        if self.wal is not None:
            record = encode_record(lsn, RECORD_REGISTRY, BODY_JSON, self.clock(),
                                   outcome.registry.version, b"", _encode_json(outcome.record))
            try:
                self.wal.write_registry_record(record)
            except WalUnavailable:
                raise BeavaError("wal_unavailable",
                                 reason="WAL append for registry bump failed; registry not "
                                        "mutated",
                                 top={"registry_version": self.registry.version}) from None
            except WalFatal as exc:
                self.on_fatal(exc)
                raise
            self.crash.hit("registry_after_fsync")
        self.last_lsn = self.applied_lsn = lsn
        self.install_registry(outcome.registry, outcome.record)
        return outcome.status, outcome.body

    def install_registry(self, registry: Registry, record: dict[str, Any]) -> None:
        """Swap in a registry version and carry state across as the REGISTRY record's
        plan says (spec/registry.md §9, durability.md §5)."""
        plan = record["plan"]
        self.engine.transition(registry, plan)
        self.registry = registry
        self._install_checkers(build_checkers(registry.events))
        cleared = set(plan["clear_dedupe"])
        if cleared:
            self._dedupe = {k: v for k, v in self._dedupe.items() if k[0] not in cleared}

    # pushes ---------------------------------------------------------------------------

    def _check_writable(self) -> None:
        """Write-refusing mode (a full disk, spec/durability.md §6.6): refuse at once."""
        if not self.log.writable:
            raise BeavaError("wal_unavailable",
                             reason="the WAL disk is full; writes are refused until space "
                                    "returns (retryable)",
                             top={"registry_version": self.registry.version})

    def push(self, event: str, fields: Any,
             on_durable: Callable[[], None] | None = None) -> PushAck:
        """Validate, dedupe and accept one push (spec/wire.md §6.2)."""
        if not self.log.writable:
            self.count_rejection(event, "wal_unavailable")
            self._check_writable()
        try:
            spec, row = validate_push(event, fields, self.checkers)
        except BeavaError as err:
            self.count_rejection(event, err.code)
            raise
        now = self.clock()
        version = self.registry.version
        dedupe_field = spec.dedupe_key
        if dedupe_field is not None:
            value = row.get(dedupe_field)
            if value is not None:
                key = (event, dedupe_keystr(value))
                hit = self._dedupe.get(key)
                if hit is not None and now - hit[1] < spec.dedupe_window_ms:
                    self.replays_total += 1
                    pending = hit[0] > self.applied_lsn and not self.log.after_pending(
                        on_durable or _nothing)
                    if pending:  # the original is not durable yet: wait for all accepted
                        self.hold_lsn = self.last_lsn
                    return hit[0], hit[2], True, pending
                self._dedupe[key] = (self.last_lsn + 1, now, version)
        self.last_lsn = lsn = self.last_lsn + 1
        self.pushes_total += 1
        self.push_counts.add(self.checkers[event][2])
        log = self.log
        if isinstance(log, MemoryLog):
            self._apply(lsn, event, row, now)
            return lsn, version, False, False
        append_record(log.buf, lsn, RECORD_EVENT, BODY_MSGPACK, now, version, event.encode(),
                      encode_wal_body(row), sealed=False)  # sealed when the batch is written
        if log.submit(lsn, event, on_durable):  # periodic: applied at once
            self._apply(lsn, event, row, now)
            return lsn, version, False, False
        self.hold_lsn = lsn
        return lsn, version, False, True

    def unwritten(self, first_lsn: int, events: list[str]) -> None:
        """Strict mode, a full disk: the pushes from ``first_lsn`` on (of ``events``) were
        accepted but never written, nor applied. Forget them (their dedupe entries and
        their counts included) and give their LSNs out again."""
        dropped = self.last_lsn - first_lsn + 1
        if dropped <= 0:
            return
        self.pushes_total -= dropped
        for event in events:
            self.push_counts.add(self.checkers[event][2], -1)
        self.last_lsn = self.hold_lsn = first_lsn - 1
        self._dedupe = {key: entry for key, entry in self._dedupe.items()
                        if entry[0] < first_lsn}

    def count_rejection(self, event: str, code: str) -> None:
        """Count a refused push (metrics). An unregistered name is counted under
        ``UNREGISTERED``: labels must not grow with whatever names clients send."""
        name = event if event in self.checkers else UNREGISTERED
        key = (name, code)
        self.rejections[key] = self.rejections.get(key, 0) + 1

    def _install_checkers(self, checkers: dict[str, CheckerEntry]) -> None:
        """Use ``checkers`` (a new registry's) from now on. The per-event push counts are
        indexed by the registry's events: fold the current ones into the per-name totals,
        then count from zero for the new index. A count belongs to the event's name: it
        survives any re-register and a reset (a counter never goes down)."""
        earlier = self._earlier_push_counts
        for name, count in self.push_counts.totals().items():
            if count:
                earlier[name] = earlier.get(name, 0) + count
        self.checkers = checkers
        self.push_counts = PushCounts(checkers)

    def pushes_by_event(self) -> dict[str, int]:
        """Accepted pushes (excluding replays) per event name since the process started,
        for every event ever pushed or registered now (metrics, read at scrape time)."""
        totals = dict(self._earlier_push_counts)
        for name, count in self.push_counts.totals().items():
            totals[name] = totals.get(name, 0) + count
        return totals

    def apply_batch(self, first_lsn: int, events: list[str], data: bytearray, offset: int,
                    start: int, stop: int, deadline: float) -> tuple[int, int]:
        """Apply pushes ``start`` to ``stop - 1`` of a durable batch, in LSN order, from
        their event records in ``data`` (push ``start``'s at byte ``offset``), as recovery
        replays them (called by the durability log, a part of a batch at a time), stopping
        early once ``deadline`` (perf_counter; 0.0: none) has passed: push ``i`` has LSN
        ``first_lsn + i``. Returns the offset of the next push's record and its index."""
        newest, offset, done = apply_records(self.engine.routes, self.checkers, events, data,
                                             offset, start, stop, deadline, decode_wal_body,
                                             _decode_json)
        self.applied_lsn = first_lsn + done - 1
        if newest > self.watermark_ms:
            self.watermark_ms = newest
        return offset, done

    def _apply(self, lsn: int, event: str, row: dict[str, Any], now: int) -> None:
        self.engine.apply(event, row, now)
        self.applied_lsn = lsn
        if now > self.watermark_ms:
            self.watermark_ms = now

    def sweep_dedupe(self) -> int:
        """Drop dedupe entries whose window has passed; returns how many were removed."""
        now = self.clock()
        events = self.registry.events
        expired = []
        for key, (_lsn, at, _version) in self._dedupe.items():
            spec = events.get(key[0])
            if spec is None or now - at >= spec.dedupe_window_ms:
                expired.append(key)
        for key in expired:
            del self._dedupe[key]
        return len(expired)

    # reads ----------------------------------------------------------------------------

    def table(self, name: str) -> Any:
        """The state of table ``name``, or None if it is not a table derivation."""
        return self.engine.table(name)

    def query_time(self) -> int:
        """T = max(watermark, wall clock) (spec/operators.md §4)."""
        now = self.clock()
        return now if now > self.watermark_ms else self.watermark_ms

    # test mode ------------------------------------------------------------------------

    def reset(self) -> int:
        """Drop every descriptor and all state; returns the new registry version."""
        self._check_writable()
        self.log.barrier()
        if self.before_reset is not None:
            self.before_reset()
        lsn = self.last_lsn + 1
        version = self.registry.version + 1
        if self.wal is not None:
            try:
                self.wal.reset(lsn, encode_reset_record(lsn, self.clock(), version))
            except WalFatal as exc:
                self.on_fatal(exc)
                raise
        self.last_lsn = self.applied_lsn = lsn
        self._clear(version)
        return version

    def _clear(self, version: int) -> None:
        self.registry = empty_registry(version)
        self.engine = EngineState(self.registry)
        self._install_checkers(build_checkers(self.registry.events))
        self._dedupe.clear()
        self.watermark_ms = 0

    # recovery and snapshots -----------------------------------------------------------

    def replay(self, record: Record) -> None:
        """Apply one WAL record during recovery (spec/durability.md §9.2)."""
        if record.lsn <= self.applied_lsn:
            raise Unapplicable(f"non-increasing LSN {record.lsn}")
        if record.type == RECORD_EVENT:
            self._replay_event(record)
        elif record.type == RECORD_REGISTRY:
            try:
                body = _decode_json(record.body)
                registry = registry_from_record(body, body["new_version"])
            except (msgspec.DecodeError, KeyError, TypeError, ValueError) as exc:
                raise Unapplicable(f"undecodable registry record: {exc}") from None
            self.install_registry(registry, body)
        elif record.type == RECORD_TABLE_STATE:  # a backfill's install (engine/backfill.py)
            replay_table_state(self, record)
        else:
            try:
                version = _decode_json(record.body)["new_version"]
            except (msgspec.DecodeError, KeyError, TypeError) as exc:
                raise Unapplicable(f"undecodable reset record: {exc}") from None
            self._clear(version)
        self.last_lsn = self.applied_lsn = record.lsn

    def _replay_event(self, record: Record) -> None:
        if record.registry_version != self.registry.version:
            raise Unapplicable(f"registry version {record.registry_version} != "
                               f"{self.registry.version}")
        spec = self.registry.events.get(record.name)
        if spec is None:
            raise Unapplicable(f"unknown event {record.name!r}")
        try:
            row = (decode_wal_body(record.body) if record.body_format == BODY_MSGPACK
                   else _decode_json(record.body))
        except msgspec.DecodeError as exc:
            raise Unapplicable(f"undecodable body: {exc}") from None
        if type(row) is not dict:
            raise Unapplicable("body is not a map")
        if spec.dedupe_key is not None and row.get(spec.dedupe_key) is not None:
            key = (record.name, dedupe_keystr(row[spec.dedupe_key]))
            self._dedupe[key] = (record.lsn, record.timestamp_ms, record.registry_version)
        self.engine.apply(record.name, row, record.timestamp_ms)
        self.watermark_ms = record.timestamp_ms

    def snapshot_body(self) -> bytes:
        """The §8.3 snapshot body of the applied state (runs in the snapshot child); the
        engine state is nested in the MessagePack body as plain data (state_format 2)."""
        dedupe = [[event, key, lsn, at, version]
                  for (event, key), (lsn, at, version) in self._dedupe.items()]
        return encode_snapshot_body(self.applied_lsn, self.registry.version,
                                    list(self.registry.nodes), self.engine.dump(), dedupe)

    def load_snapshot(self, snapshot: LoadedSnapshot) -> None:
        """Install a snapshot read by recovery (its header, CRCs and state_format were
        checked there). The body is data from a file: whatever of it does not load raises
        SnapshotInvalid, and the store is then left as it was."""
        body = snapshot.body
        try:
            registry = registry_from_record(body["registry"], body["registry"]["version"])
            engine = EngineState(registry)
            engine.load(body["state"])
            dedupe = _snapshot_dedupe(body["dedupe"])
            checkers = build_checkers(registry.events)
        except Exception as exc:  # a damaged or crafted body: any failure rejects it
            reason = f"{type(exc).__name__}: {exc}"
            if len(reason) > _MAX_REASON:
                reason = reason[:_MAX_REASON] + "..."
            raise SnapshotInvalid(f"state does not load: {reason}") from None
        self.registry = registry
        self.engine = engine
        self._install_checkers(checkers)
        self._dedupe = dedupe
        self.last_lsn = self.applied_lsn = body["next_lsn"] - 1
        self.watermark_ms = snapshot.header.watermark_ms


def _snapshot_dedupe(entries: Any) -> dict[tuple[str, str], tuple[int, int, int]]:
    """The dedupe cache of a snapshot body's ``dedupe`` list (ValueError on a bad entry)."""
    if type(entries) is not list:
        raise ValueError("dedupe is not a list")
    out = {}
    for entry in entries:
        if (type(entry) is not list or len(entry) != 5
                or [type(v) for v in entry] != [str, str, int, int, int]):
            raise ValueError(f"dedupe entry {entry!r} is not [event, key, lsn, at, version]")
        event, key, lsn, at, version = entry
        out[(event, key)] = (lsn, at, version)
    return out


def _nothing() -> None:
    pass


def _raise(exc: BaseException) -> None:
    raise exc

