"""Backfill: a running server's tables brought to what history says, computed in Spark.

``backfill(events, registry, url)`` computes, in Spark, each requested table's entity state
as of ``until_ms`` by replaying the history through the server's own engine (the
``beava.offline.Replay`` of ``historical_features``, each event at its time), and installs it
into the server at ``url`` with the backfill admin operation (docs/wire.md): the state is
uploaded in chunks, then committed; the server applies on top the pushes it received after
``until_ms`` (read back from its WAL, in order) and swaps the table in, atomically per
table and durably (a WAL record).

A table's replay runs in one Spark task: the server holds a table as one state, and a state
is not split by entity and merged again (tables run in parallel, one task and partition
each). The events are read, converted, deduplicated and sorted by Spark in parallel.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import time
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from .errors import BeavaSparkError
from .historical import HistoricalReplayError
from .replay_exchange import (
    PREFIX,
    B,
    E,
    O,
    S,
    T,
    check_event_names,
    compile_pipeline,
    event_codes,
    event_stream,
    new_replay,
    refusal,
    table_names,
    time_ms,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from beava.offline import Pipeline, Replay, TableInfo

__all__ = ["BackfillError", "BackfillTotals", "TableBackfill", "backfill"]

_TB = PREFIX + "tb"  # index of the table a replay row is for
_PT = PREFIX + "pt"  # the tag that places the table's rows in their own partition
CHUNK_BYTES = 2 * 1024 * 1024  # state bytes per upload request (at most begin's chunk_bytes)
_decode_json = msgspec.json.Decoder().decode


class BackfillError(BeavaSparkError, RuntimeError):
    """The server refused a backfill step: ``code`` and ``error`` are its error (for
    ``backfill_wal_reclaimed``, ``error["earliest_until_ms"]`` is the earliest ``until_ms``
    it can serve; for ``backfill_would_drop``, ``error["dropped"]`` the number of entities
    the install would drop and ``error["keys"]`` the first few); ``table`` the table
    concerned. Tables installed before it stay so."""

    def __init__(self, table: str, code: str, error: Mapping[str, Any], message: str) -> None:
        super().__init__(message)
        self.table = table
        self.code = code
        self.error = dict(error)


@dataclass
class TableBackfill:
    """One table's backfill: ``events`` replayed from history, ``entities`` after the
    install, ``state_bytes`` uploaded, ``tail_events`` (pushes after ``until_ms`` the
    server applied from its WAL), ``lsn`` of the install's WAL record (0 for a dry run).

    What the install replaced (or, for a dry run, would replace), entity by entity:
    ``kept`` (same row), ``changed``, ``created`` (held by the history or the pushes
    after ``until_ms`` only) and ``dropped`` (held state before, none after)."""

    events: int = 0
    entities: int = 0
    state_bytes: int = 0
    tail_events: int = 0
    lsn: int = 0
    kept: int = 0
    changed: int = 0
    created: int = 0
    dropped: int = 0


@dataclass
class BackfillTotals:
    """What a backfill did (``dry_run``: would do): ``until_ms``, per table
    ``tables[name]`` (in install order), ``events`` replayed in all, ``seconds`` of wall
    time."""

    until_ms: int
    dry_run: bool = False
    tables: dict[str, TableBackfill] = field(default_factory=dict)
    events: int = 0
    seconds: float = 0.0


def backfill(
    events: Mapping[str, DataFrame],
    registry: Any,
    url: str | None = None,
    *,
    time_col: str = "ts",
    until_ms: int | None = None,
    tables: Sequence[Any] | None = None,
    order_col: str | None = None,
    timeout: float = 300.0,
    dry_run: bool = False,
    drop_missing: bool = False,
    shard_map: str | None = None,
) -> BackfillTotals:
    """Install the state of ``tables`` as of ``until_ms``, computed from ``events``, into
    the server at ``url`` (``tcp://host:port`` or ``http://host:port``).

    - ``events``, ``registry``, ``time_col``, ``tables`` and ``order_col`` are as in
      ``historical_features``; the server must have registered the requested tables with
      the same definitions (else ``backfill_registry_mismatch``).
    - ``until_ms``: events after it are ignored; default the newest event time. The
      server's own pushes after it are applied on top of the backfilled state.
    - ``timeout``: seconds per server request (the commit reads the WAL and writes the
      state).
    - ``dry_run``: compute and upload every state, and have the server count what each
      install would replace (``TableBackfill.kept`` / ``changed`` / ``created`` /
      ``dropped``) without installing anything.
    - ``drop_missing``: an entity that holds state on the server now and would hold none
      after the install (the history does not hold it, nor a push after ``until_ms``) is
      dropped. Without it such an install is refused (BackfillError
      ``backfill_would_drop``, with the count and the first keys): the history should
      hold every event up to ``until_ms``.
    - ``shard_map`` instead of ``url``: a sharded deployment's map file or any shard's URL
      (docs/sharding.md): each shard gets the state of the keys it owns, computed from the
      events carrying them (``beava_spark.shards.backfill_shards``).

    Tables are installed one after another, each atomically. Raises ValueError for bad
    arguments before any job runs, BackfillError when the server refuses a step.
    """
    if (url is None) == (shard_map is None):
        raise ValueError("give url (one server) or shard_map (a sharded deployment)")
    started = time.monotonic()
    pipeline = compile_pipeline(registry)
    plans = [pipeline.table(name) for name in table_names(pipeline, tables)]
    check_event_names(pipeline, events)
    for plan in plans:
        for event in plan.events:
            if event not in events:
                raise ValueError(f"table {plan.name} is fed by event {event}, which events "
                                 f"does not give (events: {', '.join(events) or 'none'})")
    for name, flag in (("dry_run", dry_run), ("drop_missing", drop_missing)):
        if type(flag) is not bool:
            raise ValueError(f"{name} must be True or False, not {flag!r}")
    if until_ms is not None and (type(until_ms) is not int or until_ms < 0):
        raise ValueError(f"until_ms must be a non-negative integer of epoch ms, not "
                         f"{until_ms!r}")
    needed = list(dict.fromkeys(e for plan in plans for e in plan.events))
    if until_ms is None:
        until_ms = _newest(events, needed, time_col)
    if shard_map is not None:
        from .shards import backfill_shards

        return backfill_shards(events, registry, shard_map, {
            "time_col": time_col, "until_ms": until_ms, "tables": tables,
            "order_col": order_col, "timeout": timeout, "dry_run": dry_run,
            "drop_missing": drop_missing})
    assert url is not None
    totals = BackfillTotals(until_ms, dry_run=dry_run)
    commit = {"dry_run": dry_run, "drop_missing": drop_missing}
    from beava_client import client_for_url

    client = client_for_url(url, timeout=timeout)
    try:
        with contextlib.closing(_table_states(events, pipeline, plans, needed, time_col,
                                              until_ms, order_col)) as states:
            seen: set[int] = set()
            for index, count, data in states:
                seen.add(index)
                _install(client, plans[index], count, data, until_ms, commit, totals)
        for index, plan in enumerate(plans):
            if index not in seen:  # no history reaches the table: it starts empty
                _install(client, plan, 0, _empty_state(plan), until_ms, commit, totals)
    finally:
        client.close()
    totals.tables = {plan.name: totals.tables[plan.name] for plan in plans
                     if plan.name in totals.tables}
    totals.seconds = time.monotonic() - started
    return totals


# -- driver side --------------------------------------------------------------------------------


def _newest(events: Mapping[str, DataFrame], needed: Sequence[str], time_col: str) -> int:
    from pyspark.sql import functions as f

    newest: int | None = None
    for event in needed:
        df = events[event]
        value = df.select(f.max(time_ms(df, time_col, f"events[{event!r}]"))).first()
        if value is not None and value[0] is not None:
            newest = value[0] if newest is None else max(newest, value[0])
    if newest is None:
        raise ValueError("the events hold no time to backfill until; give until_ms")
    return int(newest)


def _table_states(events: Mapping[str, DataFrame], pipeline: Pipeline,
                  plans: Sequence[TableInfo], needed: Sequence[str], time_col: str,
                  until_ms: int, order_col: str | None
                  ) -> Generator[tuple[int, int, bytes], None, None]:
    """``(table index, events replayed, state bytes)`` per table that history reaches, as
    the Spark tasks finish them."""
    from pyspark.sql import functions as f

    streams = {}
    for event in needed:
        df = events[event]
        at = time_ms(df, time_col, f"events[{event!r}]")
        # null times stay: the replay refuses them, as historical_features does
        kept = df.where(at.isNull() | (at <= f.lit(until_ms)))
        streams[event] = event_stream(kept, pipeline, event, time_col, order_col, set(),
                                      HistoricalReplayError)[0]
    base = [T, O, E, S, B]
    tags = _partition_tags(len(plans))
    parts = [streams[e].select(*base).withColumn(_TB, f.lit(i)).withColumn(_PT, f.lit(tags[i]))
             for i, plan in enumerate(plans) for e in plan.events]
    rows = functools.reduce(lambda a, b: a.unionByName(b), parts)
    # one partition per table: table i's rows carry a tag that hashes to partition i
    ordered = (rows.repartition(len(plans), _PT).drop(_PT)
               .sortWithinPartitions(_TB, T, O, E, S))
    task = functools.partial(_state_task, payloads=tuple(p.payload for p in plans),
                             names=tuple(p.name for p in plans),
                             events=event_codes(pipeline),
                             at=(ordered.columns.index(T), ordered.columns.index(E),
                                 ordered.columns.index(B)),
                             table_at=ordered.columns.index(_TB))
    from pyspark import StorageLevel

    states = ordered.rdd.mapPartitions(task).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        states.count()  # every table's task at once, then the states one by one
        pending: dict[int, list[Any]] = {}
        for index, seq, count, chunk in states.toLocalIterator():
            if seq >= 0:
                pending.setdefault(index, []).append(chunk)
                continue
            yield index, count, b"".join(pending.pop(index, []))
    finally:
        states.unpersist()


def _partition_tags(n: int) -> list[int]:
    """For each i < n, a long whose Spark hash (Murmur3, as ``repartition(n, col)`` places
    rows) falls in partition i."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as f

    spark = SparkSession.getActiveSession()
    assert spark is not None
    found: dict[int, int] = {}
    for row in spark.range(0, 64 * n + 64).select(
            "id", f.pmod(f.hash("id"), f.lit(n)).alias("p")).collect():
        found.setdefault(int(row["p"]), int(row["id"]))
    if len(found) < n:  # not expected: 64 candidates per partition
        raise RuntimeError(f"no partition tag for {n - len(found)} of {n} tables")
    return [found[i] for i in range(n)]


def _empty_state(plan: TableInfo) -> bytes:
    return new_replay(plan.payload, HistoricalReplayError).state(plan.name)


def _request(client: Any, table: str, body: dict[str, Any]) -> dict[str, Any]:
    from beava_client.errors import ServerError
    from beava_client.opcodes import CT_MSGPACK, OP_BACKFILL

    try:
        if hasattr(client, "encode_request"):  # framed TCP: MessagePack, data as bytes
            reply: dict[str, Any] = client.request(OP_BACKFILL, body, ct=CT_MSGPACK)
        else:  # HTTP: JSON, data as base64 text
            if isinstance(body.get("data"), bytes):
                body = {**body, "data": base64.b64encode(body["data"]).decode()}
            reply = client.request("POST", "/admin/backfill", body, safe=False)
    except ServerError as err:
        error = err.error or {}
        detail = error.get("message") or err.message or err.reason or ""
        raise BackfillError(table, err.code, error,
                            f"backfill of table {table}: the server refused "
                            f"{body.get('action')} ({err.code}): {detail}") from None
    return reply


def _install(client: Any, plan: TableInfo, count: int, data: bytes, until_ms: int,
             commit: dict[str, bool], totals: BackfillTotals) -> None:
    nodes = _decode_json(plan.payload)["nodes"]
    begun = _request(client, plan.name, {"action": "begin", "table": plan.name,
                                         "until_ms": until_ms, "size": len(data),
                                         "nodes": nodes})
    upload = begun["upload"]
    step = min(CHUNK_BYTES, int(begun.get("chunk_bytes", CHUNK_BYTES)))
    try:
        for offset in range(0, len(data), step):
            _request(client, plan.name, {"action": "chunk", "upload": upload,
                                         "offset": offset, "data": data[offset:offset + step]})
        done = _request(client, plan.name, {"action": "commit", "upload": upload, **commit})
    except BaseException:
        with contextlib.suppress(Exception):  # else it is dropped once idle
            _request(client, plan.name, {"action": "abort", "upload": upload})
        raise
    totals.tables[plan.name] = TableBackfill(
        events=count, entities=int(done.get("entities", 0)), state_bytes=len(data),
        tail_events=int(done.get("tail_events", 0)), lsn=int(done.get("lsn", 0)),
        kept=int(done.get("kept", 0)), changed=int(done.get("changed", 0)),
        created=int(done.get("created", 0)), dropped=int(done.get("dropped", 0)))
    totals.events += count


# -- task side --------------------------------------------------------------------------------


def _state_task(rows: Iterable[Any], *, payloads: tuple[bytes, ...], names: tuple[str, ...],
                events: tuple[str, ...], at: tuple[int, int, int], table_at: int
                ) -> Iterator[tuple[int, int, int, bytes | None]]:
    """Replay each table's events (rows sorted by table, then time) into a fresh replay and
    yield its state: ``(table, seq, 0, chunk)`` rows, then ``(table, -1, events, None)``."""
    t, e, b = at
    current = -1
    replay: Replay | None = None
    count = 0
    for row in rows:
        index = row[table_at]
        if index != current:
            if replay is not None:
                yield from _state_rows(replay, names[current], current, count)
            replay = new_replay(payloads[index], HistoricalReplayError)
            current, count = index, 0
        assert replay is not None
        _push(replay, events[row[e]], row[t], row[b])
        count += 1
    if replay is not None:
        yield from _state_rows(replay, names[current], current, count)


def _push(replay: Replay, event: str, time: int | None, body: str) -> None:
    """Push one event row at its time (HistoricalReplayError for a row the server would
    refuse, or one without a time)."""
    from beava.offline import ReplayRefused

    if time is None:
        raise HistoricalReplayError(refusal(event, None, body, "null_time"))
    try:
        replay.push(event, time, _decode_json(body))
    except ReplayRefused as err:
        raise HistoricalReplayError(refusal(event, time, body, err.code)) from None


def _state_rows(replay: Replay, name: str, index: int, count: int
                ) -> Iterator[tuple[int, int, int, bytes | None]]:
    data = replay.state(name)
    for seq, offset in enumerate(range(0, len(data), CHUNK_BYTES)):
        yield index, seq, 0, data[offset:offset + CHUNK_BYTES]
    yield index, -1, count, None
