"""The feature store: one registry version, accepted pushes, dedupe, reset, recovery.

The single writer of all state; the server calls it from the event loop only. It knows
nothing of sockets: requests arrive decoded and answers leave as Python values or
:class:`BeavaError`. A push is validated, deduped, then accepted by the store's intake
(``beava._fast.intake.intake``), which the compiled push pass accepts through too: the intake
alone hands out LSNs (also to the records of register, reset and backfill, written by
:meth:`FeatureStore.write_record`), counts pushes and appends their WAL records. When a
push becomes visible is the business of the durability log
(``beava.durability.group_commit``): at once, or after the fsync that covers it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgspec

from beava._fast.intake.intake import Intake
from beava._fast.intake.push_pass import apply_records
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
    RECORD_RESET,
    RECORD_TABLE_STATE,
    Record,
    reset_body,
)
from beava.engine.backfill import replay_record as replay_table_state
from beava.engine.registry import Registry, empty_registry, register, registry_from_record
from beava.engine.sharding import ShardOwnership
from beava.engine.state.engine_state import EngineState
from beava.engine.state.keys import dedupe_keystr
from beava.engine.state.push_validation import CheckerEntry, build_checkers, validate_push

# the body of an EVENT record: the accepted row as MessagePack (the push pass encodes it
# straight onto the pending batch with this encoder's encode_into, or copies the pushed
# bytes, which it decodes with decode_wal_body: the live row is what replay decodes)
WAL_BODY_ENCODER = msgspec.msgpack.Encoder()
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
                 wal: WalWriter | None = None, crash: CrashPoints | None = None,
                 shard: ShardOwnership | None = None) -> None:
        self.memory_governance_enforce = memory_governance_enforce
        # sharded serving: the slots this server owns (None: it owns every key)
        self.shard = shard
        # a fenced shard refuses pushes (a registry change across shards is under way);
        # not durable: a restart clears it
        self.fenced = False
        self.clock = clock
        # the one owner of LSNs, push counts and WAL appends (module docstring)
        self.intake = Intake(WAL_BODY_ENCODER.encode_into,
                             log if log is not None else MemoryLog())
        self.intake.wal = wal
        self.crash = crash if crash is not None else CrashPoints(None)
        self.before_reset: Callable[[], None] | None = None
        self.on_fatal: Callable[[BaseException], None] = _raise
        self.registry: Registry = empty_registry()
        self.engine = EngineState(self.registry, self.shard)
        # event -> its CheckerEntry in the current registry (the push pass reads it too)
        self.checkers = build_checkers(self.registry.events)
        # (event, error code) -> refused pushes; counted on the failure path only
        self.rejections: dict[tuple[str, str], int] = {}
        # (event, dedupe key text) -> (lsn, now_ms, registry_version at the original push)
        self._dedupe: dict[tuple[str, str], tuple[int, int, int]] = {}

    # the intake's, read here by what reports on the store (metrics, snapshots, tests)

    @property
    def log(self) -> DurabilityLog:
        log: DurabilityLog = self.intake.log
        return log

    @log.setter
    def log(self, log: DurabilityLog) -> None:
        self.intake.attach(log)

    @property
    def wal(self) -> WalWriter | None:
        wal: WalWriter | None = self.intake.wal
        return wal

    @wal.setter
    def wal(self, wal: WalWriter | None) -> None:
        self.intake.wal = wal

    @property
    def last_lsn(self) -> int:
        """The last LSN handed out."""
        return self.intake.last_lsn

    @property
    def applied_lsn(self) -> int:
        """The last LSN reflected in state."""
        return self.intake.applied_lsn

    @property
    def hold_lsn(self) -> int:
        """The LSN the latest deferred acknowledgement waits for."""
        return self.intake.hold_lsn

    @property
    def watermark_ms(self) -> int:
        return self.intake.watermark_ms

    @property
    def pushes_total(self) -> int:
        return self.intake.pushes_total

    @property
    def replays_total(self) -> int:
        return self.intake.replays_total

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
        self.write_record(RECORD_REGISTRY, BODY_JSON, outcome.registry.version, b"",
                          _encode_json(outcome.record),
                          "WAL append for registry bump failed; registry not mutated")
        if self.wal is not None:
            self.crash.hit("registry_after_fsync")
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

    def write_record(self, record_type: int, body_format: int, version: int, name: bytes,
                     body: bytes, refused: str) -> int:
        """Write the record of a register, reset or backfill durably before the change is
        made (spec/durability.md §10, §11): the intake gives it the next LSN and writes it
        (with no push pending: call after the log's barrier). Returns its LSN; a refused
        write is ``wal_unavailable`` with the reason ``refused`` (nothing changed), a WAL
        failure is fatal."""
        try:
            return self.intake.write_sync(record_type, body_format, self.clock, version, name,
                                          body, record_type == RECORD_RESET)
        except WalUnavailable:
            raise BeavaError("wal_unavailable",
                             reason=refused,
                             top={"registry_version": self.registry.version}) from None
        except WalFatal as exc:
            self.on_fatal(exc)
            raise

    def push(self, event: str, fields: Any,
             on_durable: Callable[[], None] | None = None) -> PushAck:
        """Validate, dedupe and accept one push (spec/wire.md §6.2)."""
        if not self.log.writable:
            self.count_rejection(event, "wal_unavailable")
            self._check_writable()
        if self.fenced:
            self.count_rejection(event, "shard_fenced")
            raise BeavaError("shard_fenced", retryable=True,
                             message="this shard is fenced while a registry change is applied "
                                     "across shards; retry shortly",
                             top={"registry_version": self.registry.version})
        try:
            spec, row = validate_push(event, fields, self.checkers)
        except BeavaError as err:
            self.count_rejection(event, err.code)
            raise
        if self.shard is not None:
            keyed = self.engine.misrouted(event, row)
            if keyed:
                self.count_rejection(event, "wrong_shard")
                raise self.shard.refuse_push(event, keyed, self.registry.version)
        now = self.clock()
        version = self.registry.version
        dedupe_field = spec.dedupe_key
        intake = self.intake
        if dedupe_field is not None:
            value = row.get(dedupe_field)
            if value is not None:
                key = (event, dedupe_keystr(value))
                hit = self._dedupe.get(key)
                if hit is not None and now - hit[1] < spec.dedupe_window_ms:
                    return hit[0], hit[2], True, intake.replayed(hit[0], on_durable)
                self._dedupe[key] = (intake.next_lsn, now, version)
        lsn, pending = intake.push(event, self.checkers[event], row, now, version,
                                   self.engine.routes, on_durable)
        return lsn, version, False, pending

    def unwritten(self, first_lsn: int, events: list[str]) -> None:
        """Strict mode, a full disk: the pushes from ``first_lsn`` on (of ``events``) were
        accepted but never written, nor applied. Forget them (their dedupe entries and
        their counts included) and give their LSNs out again."""
        if self.last_lsn < first_lsn:
            return
        self.intake.unwritten(first_lsn, [self.checkers[event].index for event in events])
        self._dedupe = {key: entry for key, entry in self._dedupe.items()
                        if entry[0] < first_lsn}

    def count_rejection(self, event: str, code: str) -> None:
        """Count a refused push (metrics). An unregistered name is counted under
        ``UNREGISTERED``: labels must not grow with whatever names clients send."""
        name = event if event in self.checkers else UNREGISTERED
        key = (name, code)
        self.rejections[key] = self.rejections.get(key, 0) + 1

    def _install_checkers(self, checkers: dict[str, CheckerEntry]) -> None:
        """Use ``checkers`` (a new registry's) from now on; the intake counts pushes by
        their indexes."""
        self.checkers = checkers
        self.intake.count_events(checkers)

    def pushes_by_event(self) -> dict[str, int]:
        """Accepted pushes (excluding replays) per event name since the process started,
        for every event ever pushed or registered now (metrics, read at scrape time)."""
        totals: dict[str, int] = self.intake.pushes_by_event()
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
        self.intake.applied(first_lsn + done - 1, newest)
        return offset, done

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
        version = self.registry.version + 1
        lsn = self.write_record(RECORD_RESET, BODY_JSON, version, b"",
                                reset_body(version),
                                "WAL append for the reset failed; nothing was reset")
        self._clear(version, lsn)
        return version

    def _clear(self, version: int, lsn: int) -> None:
        self.registry = empty_registry(version)
        self.engine = EngineState(self.registry, self.shard)
        self._install_checkers(build_checkers(self.registry.events))
        self._dedupe.clear()
        self.intake.restore(lsn, 0)

    # recovery and snapshots -----------------------------------------------------------

    def replay(self, record: Record) -> None:
        """Apply one WAL record during recovery (spec/durability.md §9.2)."""
        if record.lsn <= self.applied_lsn:
            raise Unapplicable(f"non-increasing LSN {record.lsn}")
        if record.type == RECORD_EVENT:
            self._replay_event(record)
            return
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
            self._clear(version, record.lsn)
            return
        self.intake.advance(record.lsn)

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
        self.intake.restore(record.lsn, record.timestamp_ms)

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
            engine = EngineState(registry, self.shard)
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
        self.intake.restore(body["next_lsn"] - 1, snapshot.header.watermark_ms)


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


def _raise(exc: BaseException) -> None:
    raise exc

