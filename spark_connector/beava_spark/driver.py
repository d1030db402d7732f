"""The driver API: ``push_dataframe`` converts a DataFrame to event bodies, checks the
servers, routes rows to the owners of their tables' keys (a shard map) or by one key
(several servers), runs the partition writers with ``foreachPartition`` and returns the
totals gathered by an accumulator."""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from beava_client import ServerError, TcpClient, TransportError, parse_url
from beava_client.messages import PUSH_MANY_MAX_BODIES, PUSH_MANY_UNSUPPORTED_CODES
from beava_client.opcodes import OP_PUSH_MANY

from .access import Access
from .conversion import ConversionPlan, plan_conversion
from .errors import (
    ConversionError,
    PushFailedError,
    RowsRejectedError,
    SchemaMismatchError,
    ServerCheckError,
    spark_failure_reason,
)
from .event_schema import EventSchema, schema_hint
from .progress import Progress, ProgressListener
from .routing import LineRouter
from .shards import ShardRouting, routed_lines, warn_single_key
from .totals import PushTotals, TotalsAccumulatorParam
from .writer import DEFAULT_SCHEMA_CHECK_ROWS, WriterConfig, write_partition

if TYPE_CHECKING:
    from pyspark import RDD, SparkContext
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

DEFAULT_BATCH_SIZE = 1000
DEFAULT_MAX_IN_FLIGHT = 16_000
DEFAULT_TIMEOUT = 60.0
ON_ERROR = ("raise", "collect")


def push_dataframe(
    df: DataFrame,
    event: str | Any,
    url: str | Sequence[str] | None = None,
    *,
    shard_map: str | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    key: str | Sequence[str] | None = None,
    on_error: str = "raise",
    schema: Mapping[str, str] | None = None,
    event_schema: Mapping[str, str] | str | None = None,
    schema_check_rows: int = DEFAULT_SCHEMA_CHECK_ROWS,
    partitions_per_server: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    progress: Callable[[Progress], None] | None = None,
    progress_interval: float = 1.0,
    token: str | None = None,
    ca: str | None = None,
) -> PushTotals:
    """Push every row of ``df`` as one ``event`` to the beava server(s) at ``url``.

    - ``event``: the event name, or its SDK class (``@bv.event class Txn``). The columns
      are checked against the event's fields before any row is sent: the class's, else
      ``event_schema``'s, else those the server has registered (its describe request;
      skipped when the token may not read).
    - ``event_schema``: the event's fields when ``event`` is a name:
      ``{"user_id": "str", "amount": "f64", "coupon": "str?"}`` (``?``: optional) or the
      same as text ``"user_id:str, amount:f64, coupon:str?"``.
    - ``url``: ``"tcp://host:port"`` (``tcps://``: over TLS) or a list of them. With
      several, ``key`` is required: rows are routed by jump consistent hash of the key
      (``beava_spark.routing``) and repartitioned so that each partition task talks to one server
      (``partitions_per_server`` tasks each; default: the DataFrame's partition count
      divided by the number of servers, at least 1). Exact only when every table the
      event feeds is keyed by ``key`` (a warning says when not).
    - ``shard_map`` instead of ``url``: a sharded deployment's map file or any shard's URL
      (docs/sharding.md): each row goes to the owners of every table's key it feeds,
      computed in Spark SQL, and is repartitioned so that each task talks to one shard.
    - ``key``: the column (or columns, for a composite key) holding the entity key.
    - ``schema``: ``{column: beava type}`` overriding the default conversion of a column
      (``beava_spark.conversion``); every column of ``df`` is pushed.
    - ``batch_size``: rows per OP_PUSH_MANY request (1..10000); with a server lacking
      OP_PUSH_MANY, single pushes written per socket write.
    - ``max_in_flight``: rows sent and not yet acknowledged, per connection
      (>= ``batch_size``).
    - ``on_error``: ``"raise"``: a partition stops sending at its first rejected row and
      RowsRejectedError is raised after the job; ``"collect"``: every row is sent and the
      rejections are counted in the totals.
    - ``schema_check_rows``: a partition whose first that many rows are all rejected for
      a schema reason stops, and SchemaMismatchError is raised after the job (0: never).
    - ``timeout``: seconds for connecting and for each reply.
    - ``token``: the servers' access token (default ``$BEAVA_TOKEN``; needs ``write``);
      ``ca``: PEM file of the CA that signed the servers' TLS certificates (default
      ``$BEAVA_CA``, else the system's trust store). Both are resolved here and travel
      with the tasks.
    - ``progress``: called on the driver every ``progress_interval`` seconds with a
      Progress snapshot while the job runs.

    Returns PushTotals. Raises ConversionError (unsupported columns, bad ``schema``,
    columns that do not fit the event) or ServerCheckError (server unreachable, event not
    registered) before anything is sent; PushFailedError (with the totals so far) when the
    Spark job fails.
    """
    name, known = resolve_event(event, event_schema)
    access = Access.resolve(token, ca)
    urls, routing = write_targets(shard_map, url, key, name, access, timeout)
    key_fields = _key_fields(key, df.columns)
    check_options(name, urls, key_fields, batch_size, max_in_flight, on_error,
                  partitions_per_server, timeout, schema_check_rows, routing is not None)
    plan, push_many = check_before_sending(df.schema, schema, name, known, urls, timeout,
                                           access, key_fields)
    sc = df.sparkSession.sparkContext
    ensure_worker_python(sc)
    bodies = plan.bodies(df)
    if routing is not None:
        per_server = partitions_per_server or max(
            1, bodies.rdd.getNumPartitions() // len(urls))
        lines = routed_lines(bodies, routing, per_server)
    else:
        lines = json_lines(bodies)
    if len(urls) > 1 and routing is None:
        assert key_fields is not None
        per_server = partitions_per_server or max(1, lines.getNumPartitions() // len(urls))
        router = LineRouter(key_fields, len(urls), per_server)
        lines = lines.map(router).partitionBy(router.partitions, _partition_index).values()
    # pyspark annotates the param as its AccumulatorParam class; ours is duck-typed (zero,
    # addInPlace) so that workers unpickle it without importing pyspark.
    accumulator = sc.accumulator(PushTotals(), TotalsAccumulatorParam())  # type: ignore[arg-type]
    # The listener always runs: its counts are the totals so far if the job fails.
    bind, advertise = _progress_host(sc)
    listener = ProgressListener(progress, host=bind, interval=progress_interval)
    config = WriterConfig(
        event=name, urls=tuple(urls), push_many=push_many, batch_size=batch_size,
        max_in_flight=max_in_flight, stop_on_rejection=on_error == "raise",
        timeout=timeout, progress_address=(advertise, listener.address[1]),
        schema_check_rows=schema_check_rows, access=access,
    )
    started = time.perf_counter()
    listener.start()
    try:
        lines.foreachPartition(partial(write_partition, config, accumulator))
    except Exception as exc:
        listener.close()
        totals = totals_of_progress(listener.snapshot())
        totals.seconds = time.perf_counter() - started
        raise PushFailedError(spark_failure_reason(exc), totals) from exc
    listener.close()
    totals = accumulator.value
    totals.seconds = time.perf_counter() - started
    for u in urls:
        totals.server(u)
    raise_for_rejections(totals, on_error, list(df.columns), name)
    return totals


def resolve_event(event: str | Any, event_schema: Mapping[str, str] | str | None
                  ) -> tuple[str, EventSchema | None]:
    """The event's name and, when known, its schema: from an SDK event class, or from
    ``event_schema``."""
    if isinstance(event, str):
        if event_schema is None:
            return event, None
        return event, EventSchema.parse(event, event_schema)
    if hasattr(event, "_bv_fields") and hasattr(event, "_name"):
        if event_schema is not None:
            raise ValueError("event_schema: not with an event class (it has the schema)")
        known = EventSchema.of_class(event)
        return known.name, known
    raise ValueError(f"event: give the event name or its @bv.event class, got {event!r}")


def write_targets(shard_map: str | None, url: str | Sequence[str] | None,
                  key: str | Sequence[str] | None, event: str, access: Access,
                  timeout: float) -> tuple[list[str], ShardRouting | None]:
    """The servers a write goes to, and its routing with ``shard_map`` (None without
    one); ValueError when ``url`` or ``key`` is given with it, or neither ``url`` nor
    ``shard_map``."""
    if shard_map is None:
        if url is None:
            raise ValueError("url: give the server's tcp:// URL (or shard_map for a sharded "
                             "deployment)")
        return _urls(url), None
    if url is not None:
        raise ValueError("give url (servers) or shard_map (a sharded deployment), not both")
    if key is not None:
        raise ValueError("key: not with shard_map (each row goes to the owners of its "
                         "tables' own keys)")
    routing = ShardRouting.load(shard_map, event, access, timeout)
    return list(routing.urls), routing


def check_before_sending(schema: StructType, overrides: Mapping[str, str] | None, event: str,
                         known: EventSchema | None, urls: Sequence[str], timeout: float,
                         access: Access, key_fields: Sequence[str] | None = None
                         ) -> tuple[ConversionPlan, tuple[bool, ...]]:
    """The conversion plan and, per server, whether it has OP_PUSH_MANY: the columns are
    checked (ConversionError), then the servers (ServerCheckError); with no schema given,
    the columns are checked again against the event the first server has registered.
    Routing by ``key_fields`` over several servers warns when the event feeds a table
    keyed otherwise (``warn_single_key``)."""
    plan = plan_for(schema, overrides, known)
    single_key = key_fields is not None and len(urls) > 1
    first, doc = _probe(urls[0], event, timeout, access, known is None or single_key)
    push_many = (first, *(check_server(u, event, timeout, access) for u in urls[1:]))
    if doc is not None and single_key:
        assert key_fields is not None
        warn_single_key(doc, event, key_fields)
    registered = EventSchema.of_describe(doc, event) if doc is not None and known is None \
        else None
    if registered is not None:
        plan = plan_for(schema, overrides, registered,
                        source=f" (as registered on {urls[0]})")
    return plan, push_many


def plan_for(schema: StructType, overrides: Mapping[str, str] | None,
             known: EventSchema | None, source: str = "") -> ConversionPlan:
    """The conversion of the DataFrame's columns; with the event's schema known, a column
    is sent as its field's type when it can be, and columns that cannot fit the event
    raise ConversionError (nothing is sent); ``source`` says where the schema is from."""
    plan = plan_conversion(schema, overrides)
    if known is None:
        return plan
    targets = known.conversion_targets(plan.allowed_targets())
    chosen = {**targets, **dict(overrides or {})}
    if chosen != dict(overrides or {}):
        plan = plan_conversion(schema, chosen)
    problems = known.problems(plan)
    if problems:
        raise ConversionError(problems,
                              what=f"the DataFrame does not fit event {known.name}{source}")
    return plan


def raise_for_rejections(totals: PushTotals, on_error: str, columns: list[str],
                         event: str) -> None:
    """SchemaMismatchError when partitions stopped on schema rejections; with
    ``on_error="raise"``, RowsRejectedError when rows were rejected."""
    if totals.schema_stopped_partitions:
        codes = ", ".join(f"{c} x{n:,}" for c, n in sorted(totals.rejected_by_code.items()))
        hint = schema_hint(totals, columns, event)
        raise SchemaMismatchError(
            f"the rows do not fit event {event}: the first rows of "
            f"{totals.schema_stopped_partitions} partition(s) were all rejected ({codes}), "
            f"so they stopped early ({totals.sent:,} row(s) sent, "
            f"{totals.acknowledged + totals.replays:,} acknowledged)"
            + (f". {hint}" if hint else ""), totals)
    if on_error == "raise" and totals.rejected:
        raise RowsRejectedError(totals, schema_hint(totals, columns, event))


def totals_of_progress(progress: Progress) -> PushTotals:
    """Totals holding the counts of a progress snapshot."""
    return PushTotals(rows=progress.sent, sent=progress.sent,
                      acknowledged=progress.acknowledged, rejected=progress.rejected,
                      replays=progress.replays, replays_reported=progress.replays_reported)


def ensure_worker_python(sc: SparkContext) -> None:
    """With a local master, run the Python workers on this interpreter (it has
    beava_spark and beava_client) unless ``PYSPARK_PYTHON`` says otherwise: pyspark's
    default, ``python3`` from ``PATH``, often lacks them."""
    if (sc.master or "").startswith("local") and "PYSPARK_PYTHON" not in os.environ:
        sc.pythonExec = sys.executable


def json_lines(df: DataFrame) -> RDD[bytes]:
    """The rows of ``df`` as JSON objects (UTF-8 bytes), one per row. Made in the JVM:
    the Python workers receive finished bodies. Null fields are left out."""
    with warnings.catch_warnings():
        # pyspark 4 announces that toJSON will return a DataFrame; handled below.
        warnings.filterwarnings("ignore", message=".*toJSON.*")
        lines = df.toJSON(use_unicode=False)
    from pyspark import RDD

    if isinstance(lines, RDD):
        return lines  # type: ignore[return-value]  # use_unicode=False: bytes
    return lines.rdd.map(_first_as_bytes)  # a DataFrame of one string column


def _first_as_bytes(row: Any) -> bytes:
    value = row[0]
    return value if isinstance(value, bytes) else value.encode()


def _partition_index(index: int) -> int:
    return index


def urls_of(url: str | Sequence[str]) -> list[str]:
    """The list of server URLs; raises ValueError."""
    return _urls(url)


def _urls(url: str | Sequence[str]) -> list[str]:
    urls = [url] if isinstance(url, str) else list(url)
    if not urls:
        raise ValueError("url: give at least one tcp:// URL")
    for u in urls:
        if not isinstance(u, str) or not parse_url(u).is_tcp:
            raise ValueError(f"url: {u!r} is not a tcp://host:port URL")
    if len(set(urls)) != len(urls):
        raise ValueError("url: the same server is listed twice")
    return urls


def _key_fields(key: str | Sequence[str] | None, columns: Sequence[str]
                ) -> tuple[str, ...] | None:
    if key is None:
        return None
    fields = (key,) if isinstance(key, str) else tuple(key)
    if not fields:
        raise ValueError("key: name at least one column")
    missing = [k for k in fields if k not in columns]
    if missing:
        raise ValueError(f"key: no column {', '.join(map(repr, missing))} in the DataFrame "
                         f"(columns: {', '.join(columns)})")
    return fields


def check_options(event: str, urls: list[str], key_fields: tuple[str, ...] | None,
                  batch_size: int, max_in_flight: int, on_error: str,
                  partitions_per_server: int | None, timeout: float,
                  schema_check_rows: int = DEFAULT_SCHEMA_CHECK_ROWS,
                  sharded: bool = False) -> None:
    """Raise ValueError for a bad option."""
    if not isinstance(event, str) or not event:
        raise ValueError("event: give the event name")
    if len(urls) > 1 and key_fields is None and not sharded:
        raise ValueError("key: required with several servers (rows are routed by key)")
    if not 1 <= batch_size <= PUSH_MANY_MAX_BODIES:
        raise ValueError(f"batch_size must be in [1, {PUSH_MANY_MAX_BODIES}], got {batch_size}")
    if max_in_flight < batch_size:
        raise ValueError(f"max_in_flight ({max_in_flight}) must be >= batch_size ({batch_size})")
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be 'raise' or 'collect', got {on_error!r}")
    if partitions_per_server is not None and partitions_per_server < 1:
        raise ValueError("partitions_per_server must be >= 1")
    if timeout <= 0:
        raise ValueError("timeout must be a positive number of seconds")
    if schema_check_rows < 0:
        raise ValueError("schema_check_rows must be >= 0 (0: never stop early)")


def check_server(url: str, event: str, timeout: float, access: Access | None = None) -> bool:
    """Whether ``url`` has OP_PUSH_MANY, found with an empty batch (which also checks that
    the event is registered there and that the token may push). Raises ServerCheckError."""
    return _probe(url, event, timeout, access, False)[0]


def _probe(url: str, event: str, timeout: float, access: Access | None, describe: bool
           ) -> tuple[bool, dict[str, Any] | None]:
    """``check_server``'s answer and, with ``describe``, the server's registry (its
    describe request, scope ``read``, on the same connection; None when the server does
    not answer it: a token without ``read``, an older server)."""
    endpoint = parse_url(url)
    kwargs = (access or Access()).client_kwargs(url)
    push_many = True
    try:
        with TcpClient(endpoint.host, endpoint.port, timeout=timeout, **kwargs) as client:
            try:
                client.request(OP_PUSH_MANY, {"event": event, "bodies": []})
            except ServerError as exc:
                if exc.code not in PUSH_MANY_UNSUPPORTED_CODES:
                    raise
                push_many = False
            if not describe:
                return push_many, None
            try:
                doc = client.describe()
            except ServerError as exc:
                if exc.code == "forbidden" or exc.code in PUSH_MANY_UNSUPPORTED_CODES:
                    return push_many, None
                raise
    except ServerError as exc:
        if exc.code == "event_not_found":
            raise ServerCheckError(
                f"event {event!r} is not registered on {url}; register it first "
                f"(nothing was sent)") from exc
        raise ServerCheckError(f"{url} refused the check request: {exc}") from exc
    except TransportError as exc:
        raise ServerCheckError(f"cannot reach {url}: {exc}") from exc
    return push_many, doc


def _progress_host(sc: Any) -> tuple[str, str]:
    """(address to bind, address tasks send to) for the progress listener."""
    if sc.master.startswith("local"):
        return "127.0.0.1", "127.0.0.1"
    return "0.0.0.0", sc.getConf().get("spark.driver.host", "127.0.0.1")
