"""Backfill: a running server's tables brought to what history says, computed in Spark.

``backfill(events, registry, url)`` computes, in Spark, each requested table's entity state
as of ``until_ms`` by replaying the history through the server's own engine
(``beava.offline.Replay``, each event at its time), and installs it into the server at
``url`` with the backfill admin operation (docs/wire.md), atomically per table and durably
(a WAL record); the server applies on top the pushes it received after ``until_ms`` (read
back from its WAL, in order).

One Spark job for all requested tables, on the exchange of ``historical_features``
(:mod:`beava_spark.replay_exchange`):

1. the driver opens one upload per table, of K key-disjoint parts (K the exchange's
   buckets, from the size of the events and ``spark.default.parallelism``; a table
   without keys has one part);
2. each event up to ``until_ms`` becomes one row per distinct key bucket of the key groups
   it feeds (a mask of the groups whose key falls there), repartitioned once by bucket
   into K partitions (bucket p into partition p) and sorted once into push order;
3. the task of partition p replays the rows of each group of its bucket in that group's
   store (Arrow batches into ``Replay.replay_batch`` with the mask and the group's bit,
   the garbage collector paused) and, at the end of the partition, sends for each table
   its state as part p of the table's upload, over its own connection: the keys of a
   group's bucket meet in one partition, so the parts are key-disjoint. A task holds the
   state of its bucket's keys (every group's) until it ends and returns only counts;
4. the driver opens the parts no task sent as empty (no history reached their keys) and
   commits the tables one after another: the server joins each table's parts.

No event and no state passes through the driver.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from .errors import BeavaSparkError
from .historical import HistoricalReplayError
from .replay_exchange import (
    E,
    KeyGroup,
    ValueColumns,
    bucket_count,
    check_event_names,
    compile_pipeline,
    event_codes,
    event_rows,
    event_stream,
    group_fields,
    group_masks,
    key_groups,
    new_replay,
    replay_part,
    replay_stream,
    table_names,
    time_ms,
)

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql import DataFrame

    from beava.offline import Pipeline, TableInfo

__all__ = ["BackfillError", "BackfillTotals", "TableBackfill", "backfill"]

CHUNK_BYTES = 2 * 1024 * 1024  # state bytes per upload request (at most begin's chunk_bytes)
MAX_PARTS = 1024  # the server's bound on the parts of one upload
KEEP_OPEN_SECONDS = 60.0  # between two status requests keeping the uploads open
_decode_json = msgspec.json.Decoder().decode
_PARTS_SCHEMA = "table string, part int, events long, state_bytes long"


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
    server applied from its WAL), ``lsn`` of the install's WAL record (0 for a dry run),
    ``parts`` the Spark tasks computed and sent (each the state of the keys of one
    partition; keys no history reaches make no part).

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
    parts: int = 0


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

    Tables are installed one after another, each atomically, once the one Spark job has
    replayed and uploaded every part. Raises ValueError for bad arguments before any job
    runs, BackfillError when the server refuses a step.
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
    buckets = min(MAX_PARTS, bucket_count([events[e] for e in needed]))
    totals = BackfillTotals(until_ms, dry_run=dry_run)
    from beava_client import client_for_url

    client = client_for_url(url, timeout=timeout)
    uploads: dict[str, str] = {}  # table -> its upload, until committed
    try:
        chunk = CHUNK_BYTES
        for plan in plans:
            begun = _request(client, plan.name, {
                "action": "begin", "table": plan.name, "until_ms": until_ms,
                "parts": buckets if plan.keys else 1,
                "nodes": _decode_json(plan.payload)["nodes"]})
            uploads[plan.name] = begun["upload"]
            chunk = min(chunk, int(begun.get("chunk_bytes", CHUNK_BYTES)))
        with _KeptOpen(url, timeout, uploads):
            sent = _send_parts(events, pipeline, plans, time_col, until_ms, order_col,
                               buckets, _Sender(url, timeout, chunk, uploads))
        for plan in plans:
            _commit(client, plan, buckets if plan.keys else 1, uploads.pop(plan.name), sent,
                    {"dry_run": dry_run, "drop_missing": drop_missing}, totals)
    finally:
        for name, upload in uploads.items():  # else each is dropped once idle
            with contextlib.suppress(Exception):
                _request(client, name, {"action": "abort", "upload": upload})
        client.close()
    totals.seconds = time.monotonic() - started
    return totals


# -- driver side --------------------------------------------------------------------------------


def _newest(events: Mapping[str, DataFrame], needed: Sequence[str], time_col: str) -> int:
    """The newest event time of ``needed``, in one Spark job over the union of their
    times (a job per event costs its own planning and scheduling each)."""
    from pyspark.sql import functions as f

    times = [events[e].selectExpr(f"{time_ms(events[e], time_col, f'events[{e!r}]')} AS t")
             for e in needed]
    union = functools.reduce(lambda a, b: a.unionAll(b), times)
    value = union.select(f.max("t")).first()
    if value is None or value[0] is None:
        raise ValueError("the events hold no time to backfill until; give until_ms")
    return int(value[0])


class _KeptOpen:
    """While the job runs, a thread asks the server for the status of every upload once
    a minute: the server drops an upload idle for 10 minutes, and a long job may send a
    table's parts far apart."""

    def __init__(self, url: str, timeout: float, uploads: Mapping[str, str]) -> None:
        self.url, self.timeout, self.uploads = url, timeout, dict(uploads)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="beava-backfill-keepalive",
                                       daemon=True)

    def __enter__(self) -> _KeptOpen:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()

    def _run(self) -> None:
        from beava_client import client_for_url

        with contextlib.closing(client_for_url(self.url, timeout=self.timeout)) as client:
            while not self.done.wait(KEEP_OPEN_SECONDS):
                for table, upload in self.uploads.items():
                    with contextlib.suppress(Exception):  # the commit reports a lost one
                        _request(client, table, {"action": "status", "upload": upload})


@dataclass(frozen=True)
class _Sender:
    """Where a task sends its parts: the server, and each table's upload."""

    url: str
    timeout: float
    chunk: int
    uploads: Mapping[str, str]


@dataclass(frozen=True)
class _PartGroup:
    """What a task needs of a key group: its mask word and bit, its store's payload, its
    tables, for each table the codes of the events that feed it and whether it has keys,
    and the fields it takes of each event (by event code, ``Replay.replay_batch``'s
    fields)."""

    word: int
    bit: int
    payload: bytes
    tables: tuple[str, ...]
    feeding: tuple[frozenset[int], ...]
    keyed: tuple[bool, ...]
    fields: tuple[tuple[tuple[int, str], ...], ...]


def _send_parts(events: Mapping[str, DataFrame], pipeline: Pipeline,
                plans: Sequence[TableInfo], time_col: str, until_ms: int,
                order_col: str | None, buckets: int, sender: _Sender
                ) -> dict[tuple[str, int], tuple[int, int]]:
    """Run the job (module docstring): ``(table, part) -> (events, state bytes)`` of every
    part a task sent."""

    groups = key_groups(pipeline, plans)
    streams = {}
    for event in dict.fromkeys(e for g in groups for e in g.events):
        df = events[event]
        at = time_ms(df, time_col, f"events[{event!r}]")
        # null times stay: the replay refuses them, as historical_features does
        kept = df.where(f"{at} IS NULL OR {at} <= {until_ms}")
        streams[event] = event_stream(kept, pipeline, event, time_col, order_col,
                                      HistoricalReplayError)
    values = ValueColumns.of({event: wire for event, (_, wire) in streams.items()})
    rows = []
    for event, (stream, wire) in streams.items():
        rows += event_rows(stream, wire, [g for g in groups if event in g.events], event,
                           pipeline, 0, HistoricalReplayError, values, buckets)
    codes = event_codes(pipeline)
    task = functools.partial(
        _part_task, groups=[_part_group(g, codes, values) for g in groups],
        events=codes, values=values, sender=sender)
    out = replay_stream(rows, buckets).mapInArrow(task, _PARTS_SCHEMA)
    return {(row["table"], row["part"]): (row["events"], row["state_bytes"])
            for row in out.collect()}


def _part_group(group: KeyGroup, codes: tuple[str, ...], values: ValueColumns
                ) -> _PartGroup:
    return _PartGroup(group.word, group.bit, group.payload,
                      tuple(t.name for t in group.tables),
                      tuple(frozenset(codes.index(e) for e in t.events) for t in group.tables),
                      tuple(bool(t.keys) for t in group.tables),
                      group_fields(group, values, codes))


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


def _commit(client: Any, plan: TableInfo, nparts: int, upload: str,
            sent: Mapping[tuple[str, int], tuple[int, int]], commit: dict[str, bool],
            totals: BackfillTotals) -> None:
    """Open the parts no task sent as empty, commit, and count the install."""
    for part in range(nparts):
        if (plan.name, part) not in sent:  # no history reaches its keys
            _request(client, plan.name, {"action": "part", "upload": upload, "part": part,
                                         "size": 0})
    done = _request(client, plan.name, {"action": "commit", "upload": upload, **commit})
    mine = [sent[(plan.name, part)] for part in range(nparts) if (plan.name, part) in sent]
    count = sum(events for events, _ in mine)
    totals.tables[plan.name] = TableBackfill(
        events=count, entities=int(done.get("entities", 0)),
        state_bytes=sum(size for _, size in mine),
        tail_events=int(done.get("tail_events", 0)), lsn=int(done.get("lsn", 0)),
        kept=int(done.get("kept", 0)), changed=int(done.get("changed", 0)),
        created=int(done.get("created", 0)), dropped=int(done.get("dropped", 0)),
        parts=len(mine))
    totals.events += count


# -- task side --------------------------------------------------------------------------------


def _part_task(batches: Iterator[pa.RecordBatch], *, groups: Sequence[_PartGroup],
               events: tuple[str, ...], values: ValueColumns, sender: _Sender
               ) -> Iterator[pa.RecordBatch]:
    """Replay a partition of the stream (push order, the groups of its bucket interleaved),
    one store per group, and send each table's state as this partition's part once the
    partition is done (``mapInArrow``'s function); yields one row per part sent."""
    import numpy as np
    from pyspark import TaskContext

    from beava.offline import gc_paused

    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    numbers = {(g.word, g.bit): number for number, g in enumerate(groups)}
    replays: dict[int, Any] = {}
    counts: dict[int, Any] = {}  # events of each group, by event code
    with _Uploader(sender, partition) as uploader, gc_paused():
        for batch in batches:
            if batch.num_rows == 0:
                continue
            codes = batch.column(E).to_numpy(zero_copy_only=False)
            for number, mask, bit in group_masks(batch, numbers):
                if number not in replays:
                    replays[number] = new_replay(groups[number].payload,
                                                 HistoricalReplayError)
                    counts[number] = np.zeros(len(events), np.int64)
                mine = (mask.to_numpy(zero_copy_only=False) >> bit) & 1 == 1
                counts[number] += np.bincount(codes[mine], minlength=len(events))
                replay_part(replays[number], batch, events, groups[number].fields, values,
                            HistoricalReplayError, mask=(mask, bit))
        for number, replay in replays.items():
            yield uploader.send(groups[number], replay, counts[number].tolist())


class _Uploader:
    """A task's connection to the server, sending the parts of its partition."""

    def __init__(self, sender: _Sender, partition: int) -> None:
        from beava_client import client_for_url

        self.sender = sender
        self.partition = partition
        self.client = client_for_url(sender.url, timeout=sender.timeout)

    def __enter__(self) -> _Uploader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def send(self, group: _PartGroup, replay: Any, counts: Sequence[int]) -> pa.RecordBatch:
        """Send each table's state of ``group`` as its part; the rows that say so."""
        import pyarrow as pa

        rows: dict[str, list[Any]] = {"table": [], "part": [], "events": [],
                                      "state_bytes": []}
        for table, feeding, keyed in zip(group.tables, group.feeding, group.keyed,
                                         strict=True):
            data = replay.state(table)
            part = self.partition if keyed else 0  # a table without keys is one part
            upload = self.sender.uploads[table]
            _request(self.client, table, {"action": "part", "upload": upload, "part": part,
                                          "size": len(data)})
            for offset in range(0, len(data), self.sender.chunk):
                _request(self.client, table, {
                    "action": "chunk", "upload": upload, "part": part, "offset": offset,
                    "data": data[offset:offset + self.sender.chunk]})
            rows["table"].append(table)
            rows["part"].append(part)
            rows["events"].append(sum(counts[code] for code in feeding))
            rows["state_bytes"].append(len(data))
        return pa.RecordBatch.from_pydict(rows, schema=pa.schema([
            ("table", pa.string()), ("part", pa.int32()), ("events", pa.int64()),
            ("state_bytes", pa.int64())]))
