"""Install a table's entity state computed from history (backfill, docs/wire.md).

A backfill brings one table to what it would be had the server received the history and
its own live pushes in time order: the entity state as of ``until_ms`` is computed
elsewhere (the Spark connector replays the history through this engine) and handed over
as a ``TableState.dump()``; :func:`install` then, in one step on the event loop:

1. makes every accepted push durable and applied (the durability log's barrier);
2. reads from the WAL the pushes the server received after ``until_ms`` whose event feeds
   the table (refusing when reclaimed segments may have held some), and applies them to
   the new state in LSN order, each at its recorded time, through the table's current
   definition;
3. writes the result as one TABLE_STATE WAL record and fsyncs it (durable from here);
4. swaps the table in: reads and pushes see the old state up to this step, the new one
   after it.

Recovery replays a TABLE_STATE record with :func:`replay_record`: the record holds the
final state (tail included), so it replaces the table exactly as the live install did.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from beava.catalogue.errors import BeavaError
from beava.durability.recovery import Unapplicable
from beava.durability.wal import WalFatal, WalUnavailable
from beava.durability.wal_format import (
    BODY_MSGPACK,
    RECORD_MAX_LEN,
    RECORD_TABLE_STATE,
    FormatError,
    Record,
    encode_record,
)
from beava.durability.wal_tail import WalTailLost, events_after
from beava.engine.registry import Registry, TableSpec, empty_registry, register
from beava.engine.state.tables import TableState

if TYPE_CHECKING:
    from beava.engine.store import FeatureStore

__all__ = ["feeding_events", "install", "load_table", "replay_record", "table_spec"]

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


def install(store: FeatureStore, table: TableState, until_ms: int) -> dict[str, Any]:
    """Apply the WAL tail after ``until_ms`` to ``table``, log it durably and swap it in
    (module docstring). Returns the reply body; BeavaError leaves the server unchanged."""
    name = table.spec.name
    store.log.barrier()
    check_current(table.spec, store.registry)
    wal = store.wal
    version = store.registry.version
    if wal is None:
        raise BeavaError("backfill_wal_required", table=name,
                         message="a backfill applies the pushes received after until_ms from "
                                 "the WAL; this server runs memory-only")
    try:
        tail = events_after(wal.wal_dir, wal.snapshot_dir,
                            frozenset(feeding_events(store.registry, name)), until_ms,
                            store.last_lsn)
    except WalTailLost as lost:
        raise BeavaError(
            "backfill_wal_reclaimed", table=name, until_ms=until_ms,
            earliest_until_ms=lost.earliest_until_ms,
            message=f"the WAL no longer holds every push after {until_ms} ms (segments before "
                    f"LSN {lost.first_lsn} were reclaimed after a snapshot); backfill with "
                    f"until_ms >= {lost.earliest_until_ms}",
            top={"registry_version": version}) from None
    except (OSError, FormatError) as exc:
        raise BeavaError("wal_unavailable", reason=f"reading the WAL: {exc}",
                         top={"registry_version": version}) from None
    for record in tail:
        try:
            row = (_decode_msgpack(record.body) if record.body_format == BODY_MSGPACK
                   else _decode_json(record.body))
            if type(row) is not dict:
                raise ValueError("body is not a map")
            table.push(row, record.timestamp_ms)
        except Exception as exc:  # a record the current definition cannot apply
            raise BeavaError("backfill_tail_unapplicable", table=name, lsn=record.lsn,
                             message=f"push at LSN {record.lsn} ({record.name}) does not "
                                     f"apply to table {name}: {type(exc).__name__}: "
                                     f"{str(exc)[:200]}",
                             top={"registry_version": version}) from None
    body = _encode_msgpack({"table": name, "until_ms": until_ms, "state": table.dump()})
    lsn = store.last_lsn + 1
    data = encode_record(lsn, RECORD_TABLE_STATE, BODY_MSGPACK, store.clock(), version,
                         name.encode(), body)
    if len(data) - 4 > RECORD_MAX_LEN:
        raise BeavaError("backfill_too_large", table=name,
                         message=f"the table state is {len(body)} bytes; a WAL record holds "
                                 f"at most {RECORD_MAX_LEN}",
                         top={"registry_version": version})
    try:
        wal.write_registry_record(data)
    except WalUnavailable:
        raise BeavaError("wal_unavailable", reason="WAL append for the backfill failed; the "
                                                   "table is unchanged",
                         top={"registry_version": version}) from None
    except WalFatal as exc:
        store.on_fatal(exc)
        raise
    store.last_lsn = store.applied_lsn = lsn
    store.engine.replace_table(name, table)
    return {"entities": table.entity_count, "lsn": lsn, "registry_version": version,
            "table": name, "tail_events": len(tail), "until_ms": until_ms}


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
