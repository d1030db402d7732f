"""``format("beava")``: a PySpark Python data source (pyspark >= 4.1) writing DataFrames,
batch or streaming, to beava servers, and reading the current rows of a table back.

    import beava_spark
    beava_spark.register(spark)
    df.write.format("beava").option("url", "tcp://127.0.0.1:8081") \\
        .option("event", "Txn").mode("append").save()
    beava_spark.last_write().totals            # PushTotals of that write
    spark.read.format("beava").option("url", "tcp://127.0.0.1:8081") \\
        .option("table", "UserSpend").load()   # one row per entity (beava_spark.reader)

Each write task converts its Arrow record batches to JSON bodies
(``beava_spark.arrow_bodies``) and pushes them like ``push_dataframe``'s tasks do
(``beava_spark.writer``); with several URLs it routes each row by ``key`` and keeps one
connection per server. Spark calls ``commit`` on the driver with every task's totals: it
writes one summary line to stderr and records the totals for ``last_write()``.

Streaming (``df.writeStream.format("beava")``) commits per micro-batch. A micro-batch that
Spark runs again after a restart is pushed again: with a ``dedupe_key`` on the event those
rows are answered as replays and not applied twice (an exactly-once effect within the
dedupe window); without one, delivery is at-least-once.
"""

from __future__ import annotations

import atexit
import contextlib
import difflib
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)

from .access import Access
from .arrow_bodies import BodyEncoder
from .conversion import ConversionPlan
from .driver import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_TIMEOUT,
    check_before_sending,
    check_options,
    ensure_worker_python,
    raise_for_rejections,
    resolve_event,
    urls_of,
    write_targets,
)
from .reader import (
    Column,
    ReadOptions,
    ScanRange,
    plan_read,
    read_range,
    spark_schema,
    table_columns,
)
from .shards import ShardRouting
from .totals import PushTotals
from .writer import DEFAULT_SCHEMA_CHECK_ROWS, PartitionWriter, WriterConfig, task_attempt

try:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter
except ImportError:  # pyspark 4.0: no Arrow stream writer
    DataSourceStreamArrowWriter = None  # type: ignore[assignment,misc]

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

FORMAT = "beava"
OPTIONS = ("url", "shard_map", "event", "key", "on_error", "batch_size", "max_in_flight", "timeout",
           "schema", "event_schema", "schema_check_rows", "token", "ca")

_results_dir: Path | None = None


@dataclass(frozen=True)
class WriteResult:
    """One committed (or aborted) write: ``batch_id`` is the micro-batch of a streaming
    write (None for a batch write); ``failed``: the job failed and ``totals`` are those
    of the tasks that finished; ``line``: the summary line written to stderr."""

    event: str
    urls: tuple[str, ...]
    totals: PushTotals
    batch_id: int | None = None
    failed: bool = False
    line: str = ""


def register(spark: SparkSession) -> None:
    """Make ``format("beava")`` available in ``spark`` (batch and streaming writes).
    With a local master the Python workers run this interpreter (unless
    ``PYSPARK_PYTHON`` is set). ``last_write()`` then returns the latest commit's totals
    in this process."""
    if DataSourceStreamArrowWriter is None:
        raise RuntimeError("format('beava') needs pyspark >= 4.1 (Python data source with "
                           "Arrow writers); use beava_spark.push_dataframe instead")
    global _results_dir
    if _results_dir is None:
        _results_dir = Path(tempfile.mkdtemp(prefix="beava-spark-writes-"))
        # the tasks' results are read in this process only: gone with it
        atexit.register(shutil.rmtree, _results_dir, True)
    ensure_worker_python(spark.sparkContext)
    # A class made here is pickled by value, so the data source on the driver's Python
    # workers knows where to leave its results for this process.
    source = type("BeavaDataSource", (BeavaDataSource,),
                  {"results_dir": str(_results_dir), "__qualname__": "BeavaDataSource_"
                   + uuid.uuid4().hex, "__module__": __name__})
    spark.dataSource.register(source)


def last_write() -> WriteResult | None:
    """The latest write committed (or aborted) since ``register`` in this process."""
    results = writes()
    return results[-1] if results else None


def writes() -> list[WriteResult]:
    """Every write (and streaming micro-batch) committed or aborted since ``register``,
    oldest first."""
    if _results_dir is None:
        return []
    results = []
    for path in sorted(_results_dir.glob("*.json")):
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(path.read_text())
            results.append(WriteResult(data["event"], tuple(data["urls"]),
                                       PushTotals.from_dict(data["totals"]),
                                       data.get("batch_id"), data.get("failed", False),
                                       data.get("line", "")))
    return results


@dataclass
class BeavaCommit(WriterCommitMessage):
    """What one write task did, and when it started and ended (epoch seconds)."""

    totals: PushTotals
    started: float
    finished: float


@dataclass(frozen=True)
class WriteOptions:
    """The data source options, checked."""

    event: str
    urls: tuple[str, ...]
    key_fields: tuple[str, ...] | None
    on_error: str
    plan: ConversionPlan
    config: WriterConfig
    routing: ShardRouting | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], schema: StructType) -> WriteOptions:
        opts = {_normal(k): v for k, v in options.items()}
        ours = {_normal(o): o for o in OPTIONS}
        for name in set(opts) - set(ours):
            # Spark passes its own options (checkpointLocation, path ...): only a near miss
            # of one of ours is an error.
            close = difflib.get_close_matches(name, list(ours), n=1, cutoff=0.8)
            if close:
                raise ValueError(f"format('beava'): unknown option {name!r}; did you mean "
                                 f"{ours[close[0]]!r}? (options: {', '.join(OPTIONS)})")
        if not (opts.get("url") or opts.get(_normal("shard_map"))) or not opts.get("event"):
            raise ValueError("format('beava') needs the options url (tcp://host:port, "
                             "comma-separated for several) or shard_map, and event")
        key = opts.get("key")
        timeout = float(opts.get("timeout", DEFAULT_TIMEOUT))
        access = Access.resolve(opts.get("token"), opts.get("ca"))
        name, known = resolve_event(opts["event"], opts.get(_normal("event_schema")))
        url_list = [u.strip() for u in opts["url"].split(",") if u.strip()] \
            if opts.get("url") else None
        targets, routing = write_targets(opts.get(_normal("shard_map")), url_list, key, name,
                                         access, timeout)
        urls = urls_of(targets)
        key_fields = tuple(k.strip() for k in key.split(",")) if key else None
        columns = [f.name for f in schema.fields]
        if key_fields:
            missing = [k for k in key_fields if k not in columns]
            if missing:
                raise ValueError(f"key: no column {', '.join(map(repr, missing))} "
                                 f"(columns: {', '.join(columns)})")
        batch_size = _int(opts, "batch_size", DEFAULT_BATCH_SIZE)
        max_in_flight = _int(opts, "max_in_flight", DEFAULT_MAX_IN_FLIGHT)
        on_error = opts.get(_normal("on_error"), "raise")
        check_rows = _int(opts, "schema_check_rows", DEFAULT_SCHEMA_CHECK_ROWS)
        check_options(name, list(urls), key_fields, batch_size, max_in_flight, on_error,
                      None, timeout, check_rows, routing is not None)
        overrides = _pairs(opts.get("schema", ""))
        plan, push_many = check_before_sending(schema, overrides, name, known, urls, timeout,
                                               access, key_fields)
        config = WriterConfig(event=name, urls=tuple(urls), push_many=push_many,
                              batch_size=batch_size, max_in_flight=max_in_flight,
                              stop_on_rejection=on_error == "raise", timeout=timeout,
                              schema_check_rows=check_rows, access=access)
        return cls(name, tuple(urls), key_fields, on_error, plan, config, routing)


class BeavaDataSource(DataSource):
    """The ``beava`` data source: batch and streaming writes, batch reads of a table."""

    results_dir: str | None = None

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return spark_schema(table_columns(ReadOptions.parse(self.options)))

    def reader(self, schema: StructType) -> BeavaReader:
        options = ReadOptions.parse(self.options)
        columns, ranges = plan_read(options)
        return BeavaReader(options, _read_columns(columns, schema), ranges)

    def writer(self, schema: StructType, overwrite: bool) -> BeavaBatchWriter:
        _refuse_overwrite(overwrite)
        return BeavaBatchWriter(WriteOptions.parse(self.options, schema), self.results_dir)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:  # noqa: N802
        _refuse_overwrite(overwrite)
        return BeavaStreamWriter(WriteOptions.parse(self.options, schema), self.results_dir)


class _Writing:
    """What batch and stream writers share: the task side and the commit bookkeeping."""

    def __init__(self, options: WriteOptions, results_dir: str | None) -> None:
        self.options = options
        self.results_dir = results_dir

    def write(self, iterator: Iterator[Any]) -> BeavaCommit:
        options = self.options
        _, attempt = task_attempt()
        encoder = BodyEncoder(options.plan.fields, options.config.batch_size,
                              len(options.urls), options.key_fields, options.routing)
        writer = PartitionWriter(options.config, attempt)
        started = time.time()
        totals = writer.run_chunks(encoder.chunks(iterator))
        return BeavaCommit(totals, started, time.time())

    def _finish(self, messages: list[Any], batch_id: int | None, failed: bool) -> PushTotals:
        totals = PushTotals()
        commits = [m for m in messages if isinstance(m, BeavaCommit)]
        for message in commits:
            totals.merge(message.totals)
        # The span of the write tasks (the job's planning and scheduling not included).
        totals.seconds = (max(m.finished for m in commits) - min(m.started for m in commits)
                          if commits else 0.0)
        for url in self.options.urls:
            totals.server(url)
        what = "write" if batch_id is None else f"micro-batch {batch_id}"
        state = "FAILED (finished tasks only): " if failed else ""
        line = (f"beava-spark: {what} of event {self.options.event} to "
                f"{', '.join(self.options.urls)}: {state}rows {totals.rows:,}  "
                f"{totals.counts_line()}  {totals.seconds:.2f} s  "
                f"{totals.rows_per_second:,.0f} rows/s")
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
        self._record(totals, batch_id, failed, line)
        return totals

    def _record(self, totals: PushTotals, batch_id: int | None, failed: bool,
                line: str) -> None:
        if self.results_dir is None:
            return
        data = {"event": self.options.event, "urls": list(self.options.urls),
                "totals": totals.as_dict(), "batch_id": batch_id, "failed": failed,
                "line": line}
        name = f"{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        with contextlib.suppress(OSError):
            tmp = Path(self.results_dir, name + ".tmp")
            tmp.write_text(json.dumps(data))
            tmp.rename(tmp.with_suffix(".json"))


class BeavaBatchWriter(_Writing, DataSourceArrowWriter):
    """``df.write.format("beava")``."""

    def write(self, iterator: Iterator[Any]) -> BeavaCommit:
        return _Writing.write(self, iterator)

    def commit(self, messages: list[Any]) -> None:
        totals = self._finish(messages, None, failed=False)
        raise_for_rejections(totals, self.options.on_error, list(self.options.plan.names),
                             self.options.event)

    def abort(self, messages: list[Any]) -> None:
        self._finish(messages, None, failed=True)


_StreamBase: Any = (DataSourceStreamArrowWriter if DataSourceStreamArrowWriter is not None
                   else object)


class BeavaStreamWriter(_Writing, _StreamBase):  # type: ignore[misc]
    """``df.writeStream.format("beava")``: one commit per micro-batch."""

    def write(self, iterator: Iterator[Any]) -> BeavaCommit:
        return _Writing.write(self, iterator)

    def commit(self, messages: list[Any], batchId: int) -> None:  # noqa: N803
        totals = self._finish(messages, batchId, failed=False)
        raise_for_rejections(totals, self.options.on_error, list(self.options.plan.names),
                             self.options.event)

    def abort(self, messages: list[Any], batchId: int) -> None:  # noqa: N803
        self._finish(messages, batchId, failed=True)


class ScanPartition(InputPartition):
    """A Spark partition of a read: one slot range of one server."""

    def __init__(self, scan_range: ScanRange) -> None:
        super().__init__(scan_range)
        self.scan_range = scan_range


class BeavaReader(DataSourceReader):
    """``spark.read.format("beava")``: a task per slot range, a record batch per page."""

    def __init__(self, options: ReadOptions, columns: list[Column],
                 ranges: list[ScanRange]) -> None:
        self.options = options
        self.columns = columns
        self.ranges = ranges  # planned with the columns: one request per server

    def partitions(self) -> list[ScanPartition]:
        return [ScanPartition(r) for r in self.ranges]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, ScanPartition)
        options = self.options
        return read_range(self.columns, options.table, partition.scan_range,
                          options.page_size, options.timeout, options.access)


def _read_columns(columns: list[Column], schema: StructType) -> list[Column]:
    """The table's columns that ``schema`` (the server's, or one the caller gave with
    ``.schema(...)``) names, in its order; a name or type the table lacks is an error."""
    by_name = {c.name: c for c in columns}
    ours = {f.name: f.dataType for f in spark_schema(columns).fields}
    picked = []
    for field in schema.fields:
        column = by_name.get(field.name)
        if column is None:
            raise ValueError(f"format('beava') read: the table has no column {field.name!r} "
                             f"(columns: {', '.join(by_name)})")
        if field.dataType != ours[field.name]:
            raise ValueError(f"format('beava') read: column {field.name!r} is "
                             f"{ours[field.name].simpleString()}, not "
                             f"{field.dataType.simpleString()}")
        picked.append(column)
    return picked


def _refuse_overwrite(overwrite: bool) -> None:
    if overwrite:
        raise ValueError("format('beava') only appends events: use mode('append') "
                         "(or outputMode('append') when streaming)")


def _normal(name: str) -> str:
    return name.replace("_", "").lower()


def _int(opts: Mapping[str, str], name: str, default: int) -> int:
    text = opts.get(_normal(name))
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"option {name}: expected an integer, got {text!r}") from None


def _pairs(text: str) -> dict[str, str]:
    pairs = {}
    for item in text.split(","):
        if item.strip():
            column, sep, wire = item.partition("=")
            if not sep:
                raise ValueError(f"option schema: expected column=type, got {item.strip()!r}")
            pairs[column.strip()] = wire.strip()
    return pairs
