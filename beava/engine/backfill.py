"""Install a table's entity state computed from history (backfill, docs/wire.md).

A backfill brings one table to what it would be had the server received the history and
its own live pushes in time order: the entity state as of ``until_ms`` is computed
elsewhere (the Spark connector replays the history through this engine) and handed over
as ``TableState.dump()`` of one or more key-disjoint parts (each the state of the entities
of its keys, computed alone), joined by :func:`join_part` into one new table state;
:class:`Install` then:

1. makes every accepted push durable and applied (the durability log's barrier), reads
   from the WAL the pushes the server received after ``until_ms`` whose event feeds the
   table, a slice of records per event-loop iteration (refusing when reclaimed segments
   may have held some), and applies them to the new state in LSN order, each at its
   recorded time, through the table's current definition;
2. compares the new state with the live table, entity by entity, a slice per event-loop
   iteration: kept, changed, created; then looks for the live entities the new state does
   not hold (dropped), a slice at a time too (a dry run ends in step 3 with these counts);
3. in one step: applies the pushes accepted during step 2 likewise (the WAL segments read
   before are skipped), compares the entities they added, rechecks the drops (refused
   unless the caller allows them), writes the result as one TABLE_STATE WAL record and
   fsyncs it (durable from here; through the store's one writer of synchronous records,
   ``FeatureStore.write_record``) and swaps the table in: reads and pushes see the old
   state up to this step, the new one after it.

Recovery replays a TABLE_STATE record with :func:`replay_record`: the record holds the
final state (tail included), so it replaces the table exactly as the live install did.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Generator, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from beava.catalogue.errors import BeavaError
from beava.durability.recovery import Unapplicable
from beava.durability.wal_format import (
    BODY_MSGPACK,
    RECORD_MAX_LEN,
    RECORD_TABLE_STATE,
    FormatError,
    Record,
)
from beava.durability.wal_tail import WalTailLost, events_after
from beava.engine.registry import Registry, TableSpec, empty_registry, register
from beava.engine.state.scan import decode_key
from beava.engine.state.tables import TableState

if TYPE_CHECKING:
    from beava.engine.store import FeatureStore

__all__ = ["Install", "feeding_events", "join_part", "load_table", "replay_record",
           "table_spec"]

FIRST_DROPPED_KEYS = 5  # the dropped entities a refusal names
_ROWS_PER_STEP = 1024  # entities compared between two looks at the deadline

_encode_msgpack = msgspec.msgpack.Encoder().encode
_decode_msgpack = msgspec.msgpack.Decoder().decode
_decode_json = msgspec.json.Decoder().decode
_encode_json = msgspec.json.Encoder(order="sorted").encode


def table_spec(nodes: Any, table: str, current: Registry) -> TableSpec:
    """The TableSpec of ``table`` in the register payload ``{"nodes": nodes}``, checked
    equal to the server's current one (the state was computed under that definition)."""
    if type(nodes) is not list:
        raise BeavaError("invalid_backfill", path="nodes",
                         message="nodes must be the register payload's node list")
    try:
        payload = _encode_json({"nodes": nodes})
    except (TypeError, ValueError, OverflowError) as exc:
        raise BeavaError("invalid_backfill", path="nodes", message=str(exc)) from None
    outcome = register(empty_registry(), payload, memory_governance_enforce=False)
    if outcome.registry is None:
        raise BeavaError("invalid_backfill", path="nodes",
                         message=f"the nodes do not register: {outcome.body.get('error')}")
    spec = outcome.registry.tables.get(table)
    if spec is None:
        raise BeavaError("invalid_backfill", path="table",
                         message=f"{table!r} is not a table of the nodes")
    check_current(spec, current)
    return spec


def check_current(spec: TableSpec, current: Registry) -> None:
    """BeavaError unless ``spec`` is the current definition of its table."""
    if current.tables.get(spec.name) != spec:
        raise BeavaError("backfill_registry_mismatch", table=spec.name,
                         message=f"table {spec.name} is not defined on the server as in the "
                                 f"backfill's registry (register it first)",
                         top={"registry_version": current.version})


def feeding_events(registry: Registry, table: str) -> list[str]:
    """The pushed events whose pushes reach ``table``."""
    return [event for event in registry.events
            if any(t.name == table for t in registry.feeds(event))]


def load_table(spec: TableSpec, state: Any) -> TableState:
    """A new TableState of ``spec`` holding the dumped ``state`` (decoded MessagePack data,
    checked by the kernel: anything that does not fit is ``invalid_backfill``)."""
    table = TableState(spec)
    try:
        table.load(state)
    except (ValueError, TypeError, OverflowError) as exc:
        reason = str(exc)
        raise BeavaError("invalid_backfill", path="state",
                         message=f"the table state does not load: {reason[:300]}") from None
    return table


def join_part(table: TableState, part: TableState, starts: list[int]) -> None:
    """Append ``part``, the next of a table's key-disjoint parts, to ``table`` (the parts
    before it joined); ``starts`` holds the first slot of each part joined so far and gets
    ``part``'s. BeavaError ``backfill_parts_overlap`` (the table unchanged) when a key of
    ``part`` is in an earlier one: it names the key and the two parts."""
    start = table.entity_count
    try:
        table.absorb(part)
    except KeyError as exc:
        key = exc.args[0]
        slot = table.slot(key)
        assert slot is not None
        earlier = bisect.bisect_right(starts, slot) - 1
        spec = table.spec
        shown = decode_key(spec)(key)
        text = " ".join(f"{k}={_short(v)}" for k, v in shown.items()) or "its row"
        raise BeavaError(
            "backfill_parts_overlap", table=spec.name, key=shown, parts=[earlier, len(starts)],
            message=f"parts {earlier} and {len(starts)} of table {spec.name} both hold the "
                    f"entity {text}: the parts of a table must hold disjoint keys (split the "
                    f"history by the table's key)") from None
    starts.append(start)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class Install:
    """The install of one loaded table state (module docstring), run in steps
    (:meth:`run`): the WAL tail, then the comparison with the live table a slice of
    entities per step, then, in one step, the pushes accepted meanwhile, the last counts,
    the refusal or the write and the swap.

    The counts (:attr:`counts`) say what the install replaces, read at one query time:
    ``kept`` (an entity of both tables whose row is unchanged), ``changed``, ``created``
    (only in the new state) and ``dropped`` (holds state now and none after; an entity the
    tail creates is in the new state, so it is never dropped). ``dry_run`` stops before
    the write; a drop is refused unless ``drop_missing``."""

    __slots__ = ("store", "table", "until_ms", "dry_run", "drop_missing", "counts",
                 "tail_events", "reply", "_applied", "_steps")

    def __init__(self, store: FeatureStore, table: TableState, until_ms: int, *,
                 dry_run: bool = False, drop_missing: bool = False) -> None:
        self.store = store
        self.table = table
        self.until_ms = until_ms
        self.dry_run = dry_run
        self.drop_missing = drop_missing
        self.counts = {"kept": 0, "changed": 0, "created": 0, "dropped": 0}
        self.tail_events = 0
        self.reply: dict[str, Any] | None = None
        self._applied = 0  # the newest LSN the tail applied has been read up to
        self._steps = self._install()

    def run(self, deadline: float | None, clock: Callable[[], float]) -> dict[str, Any] | None:
        """Work until done (the reply body) or ``clock()`` passes ``deadline`` (None: call
        again). BeavaError leaves the server unchanged."""
        if all(deadline is None or clock() < deadline for _ in self._steps):
            return self.reply
        return None

    def _live(self) -> TableState:
        check_current(self.table.spec, self.store.registry)
        live: TableState = self.store.table(self.table.spec.name)
        return live

    def _install(self) -> Generator[None, None, None]:
        store, table = self.store, self.table
        yield from self._apply_tail(pause=True)
        yield
        at = store.query_time()
        live_start = self._live().entity_count  # live slots only grow: later ones are new
        created: set[str] = set()
        compared = 0
        while compared < table.entity_count:
            live = self._live()
            stop = compared + _ROWS_PER_STEP
            for slot, key in enumerate(table.slot_keys(compared, stop), compared):
                self._compare(live, key, slot, at, created)
            compared = min(stop, table.entity_count)
            yield
        dropped: list[str] = []
        scanned = 0
        while scanned < live_start:
            live = self._live()
            stop = min(scanned + _ROWS_PER_STEP, live_start)
            dropped += [key for key in live.slot_keys(scanned, stop) if table.slot(key) is None]
            scanned = stop
            yield
        # one step from here, its work bound by what was pushed meanwhile: those pushes
        # reach the new state too, their new entities are compared, the drops rechecked
        for _ in self._apply_tail(pause=False):
            pass  # never pauses
        live = self._live()
        for key in live.slot_keys(live_start, live.entity_count):
            if key in created:  # compared before it was pushed live
                self.counts["created"] -= 1
                self._compare(live, key, table.slot(key), at, None)
            elif table.slot(key) is None:
                dropped.append(key)
        for slot, key in enumerate(table.slot_keys(compared, table.entity_count), compared):
            self._compare(live, key, slot, at, None)
        dropped = [key for key in dropped
                   if table.slot(key) is None and live.slot(key) is not None]
        self.counts["dropped"] = len(dropped)
        if dropped and not self.drop_missing and not self.dry_run:
            raise self._refuse_drop(dropped)
        self.reply = self._write()

    def _compare(self, live: TableState, key: str, slot: int | None, at: int,
                 created: set[str] | None) -> None:
        assert slot is not None
        old = live.row(key, at)
        if old is None:
            self.counts["created"] += 1
            if created is not None:
                created.add(key)
        elif old == self.table.read_slot(slot, at):
            self.counts["kept"] += 1
        else:
            self.counts["changed"] += 1

    def _apply_tail(self, pause: bool) -> Generator[None, None, None]:
        """Apply the pushes after ``until_ms`` whose event feeds the table and that were
        not applied yet, up to every push accepted when called; ``pause``: a step per
        1,024 records read (later pushes are left to the next call)."""
        store, table, until_ms = self.store, self.table, self.until_ms
        name = table.spec.name
        store.log.barrier()
        check_current(table.spec, store.registry)
        wal = store.wal
        version = store.registry.version
        if wal is None:
            raise BeavaError("backfill_wal_required", table=name,
                             message="a backfill applies the pushes received after until_ms "
                                     "from the WAL; this server runs memory-only")
        last = store.last_lsn
        if self._applied and last == self._applied:
            return
        tail = events_after(wal.wal_dir, wal.snapshot_dir,
                            frozenset(feeding_events(store.registry, name)), until_ms, last,
                            after_lsn=self._applied)
        try:
            for record in tail:
                if record is not None:
                    self._apply(record, version)
                elif pause:
                    yield
        except WalTailLost as lost:
            raise BeavaError(
                "backfill_wal_reclaimed", table=name, until_ms=until_ms,
                earliest_until_ms=lost.earliest_until_ms,
                message=f"the WAL no longer holds every push after {until_ms} ms (segments "
                        f"before LSN {lost.first_lsn} were reclaimed after a snapshot); "
                        f"backfill with until_ms >= {lost.earliest_until_ms}",
                top={"registry_version": version}) from None
        except (OSError, FormatError) as exc:
            raise BeavaError("wal_unavailable", reason=f"reading the WAL: {exc}",
                             top={"registry_version": version}) from None
        self._applied = last

    def _apply(self, record: Record, version: int) -> None:
        name = self.table.spec.name
        try:
            row = (_decode_msgpack(record.body) if record.body_format == BODY_MSGPACK
                   else _decode_json(record.body))
            if type(row) is not dict:
                raise ValueError("body is not a map")
            self.table.push(row, record.timestamp_ms)
        except Exception as exc:  # a record the current definition cannot apply
            raise BeavaError("backfill_tail_unapplicable", table=name, lsn=record.lsn,
                             message=f"push at LSN {record.lsn} ({record.name}) does not "
                                     f"apply to table {name}: {type(exc).__name__}: "
                                     f"{str(exc)[:200]}",
                             top={"registry_version": version}) from None
        self.tail_events += 1

    def _refuse_drop(self, dropped: list[str]) -> BeavaError:
        spec = self.table.spec
        decode = decode_key(spec)
        first = [decode(key) for key in dropped[:FIRST_DROPPED_KEYS]]
        shown = ", ".join(" ".join(f"{k}={_short(v)}" for k, v in key.items()) or "its row"
                          for key in first)  # a table without keys has one row
        more = f" and {len(dropped) - len(first)} more" if len(dropped) > len(first) else ""
        return BeavaError(
            "backfill_would_drop", table=spec.name, dropped=len(dropped), keys=first,
            until_ms=self.until_ms,
            message=f"the backfill would drop {len(dropped)} entities of table {spec.name} "
                    f"that hold state now and would hold none after it ({shown}{more}): the "
                    f"history up to {self.until_ms} ms does not hold them and no push after "
                    f"it does; commit with drop_missing to drop them, or give the history "
                    f"every event up to until_ms",
            top={"registry_version": self.store.registry.version})

    def _write(self) -> dict[str, Any]:
        """The reply; unless a dry run, the state logged durably and swapped in first."""
        store, table = self.store, self.table
        name = table.spec.name
        version = store.registry.version
        reply: dict[str, Any] = {"entities": table.entity_count, "registry_version": version,
                                 "table": name, "tail_events": self.tail_events,
                                 "until_ms": self.until_ms, "dry_run": self.dry_run,
                                 **self.counts}
        if self.dry_run:
            return reply
        assert store.wal is not None
        body = _encode_msgpack({"table": name, "until_ms": self.until_ms,
                                "state": table.dump()})
        try:
            lsn = store.write_record(RECORD_TABLE_STATE, BODY_MSGPACK, version, name.encode(),
                                     body, "WAL append for the backfill failed; the table is "
                                           "unchanged")
        except ValueError:  # over the WAL's record limit: refused before anything is written
            raise BeavaError("backfill_too_large", table=name,
                             message=f"the table state is {len(body)} bytes; a WAL record "
                                     f"holds at most {RECORD_MAX_LEN}",
                             top={"registry_version": version}) from None
        store.engine.replace_table(name, table)
        return {**reply, "lsn": lsn}


def replay_record(store: FeatureStore, record: Record) -> None:
    """Recovery: install the table state of a TABLE_STATE record (Unapplicable when it
    does not fit the registry of its place in the WAL)."""
    registry = store.registry
    if record.registry_version != registry.version:
        raise Unapplicable(f"registry version {record.registry_version} != {registry.version}")
    spec = registry.tables.get(record.name)
    if spec is None:
        raise Unapplicable(f"unknown table {record.name!r}")
    try:
        body = _decode_msgpack(record.body)
    except msgspec.DecodeError as exc:
        raise Unapplicable(f"undecodable table state: {exc}") from None
    if not isinstance(body, Mapping) or body.get("table") != record.name:
        raise Unapplicable("table state body is not a map naming its table")
    table = TableState(spec)
    try:
        table.load(body.get("state"))
    except (ValueError, TypeError, OverflowError) as exc:
        raise Unapplicable(f"table state does not load: {str(exc)[:300]}") from None
    store.engine.replace_table(record.name, table)
