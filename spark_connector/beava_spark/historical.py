"""Point-in-time feature values over history, computed in Spark with the server's engine.

``historical_features(spine, events, registry)`` gives, for each row of ``spine``, what a
GET at the row's time would return had every event of ``events`` been pushed at its own
time. No aggregation is written twice: every Spark task runs a ``beava.offline.Replay``
(the server's feature store, with a clock the task sets) on the events of its entities in
time order, and reads each spine row as the server's GET at the spine row's time.

Per requested table:
1. the events that reach it are repartitioned by the table's entity key (the canonical key
   string a pushed event lands on, after the table's chain), the spine rows by the same
   key read from their key columns;
2. each partition is sorted by time, the events of one millisecond in the documented order
   (``order_col``, then event name, then input order), spine rows after the events of
   their millisecond (``inclusive=True``) or before them (``inclusive=False``);
3. one task replays its partition: each event pushed at its time; at a spine row, a GET of
   its key at its time (query time = the spine row's time).

Events with a ``dedupe_key`` first go through one pass over the whole event (partitioned by
the dedupe value), so replays are recognised across entities as the server does.
A global table (no key) has one entity: its table runs in one task.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from .conversion import quoted
from .driver import plan_for
from .errors import BeavaSparkError
from .event_schema import EventSchema

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from beava.offline import EventSpec, FeatureInfo, Pipeline, Replay, TableInfo

__all__ = ["HistoricalReplayError", "historical_features"]

# Internal columns of the replay streams (a spine may not use the prefix).
PREFIX = "__bv_"
_T = PREFIX + "t"  # time, epoch ms
_P = PREFIX + "p"  # phase within one millisecond: 0 first, 1 after
_O = PREFIX + "o"  # order_col value (null without order_col, and for spine rows)
_E = PREFIX + "e"  # event name (null for spine rows)
_S = PREFIX + "s"  # input position of the event (null for spine rows)
_B = PREFIX + "b"  # JSON body of the event (null for spine rows)
_K = PREFIX + "k"  # partition key: the entity's canonical key string
_D = PREFIX + "d"  # dedupe value, partitioning the dedupe pass
_R = PREFIX + "r"  # the spine row's columns, as one struct (null for events)

_encode_json = msgspec.json.Encoder(order="sorted").encode  # GET's JSON encoder
_decode_json = msgspec.json.Decoder().decode

# feature value kind (beava.offline.FeatureInfo) -> Spark SQL type name
_SPARK_TYPES = {"long": "long", "double": "double", "boolean": "boolean",
                "string": "string", "json": "string"}


class HistoricalReplayError(BeavaSparkError, ValueError):
    """An event row that the server would refuse (its error code and the row), or a row
    without a time. Raised inside the Spark task; Spark's exception carries the text."""


def historical_features(
    spine: DataFrame,
    events: Mapping[str, DataFrame],
    registry: Any,
    *,
    time_col: str = "ts",
    tables: Sequence[Any] | None = None,
    inclusive: bool = True,
    order_col: str | None = None,
) -> DataFrame:
    """Point-in-time feature values for the rows of ``spine``.

    - ``spine``: rows to label: ``time_col`` plus the group-by key columns of the requested
      tables (named as the keys); other columns pass through.
    - ``events``: ``{"Txn": txn_df, ...}``: each DataFrame holds the event's fields (columns
      that are not fields are not pushed) plus ``time_col``. Only the events that reach a
      requested table are read.
    - ``registry``: a register payload (``{"nodes": [...]}``) or what ``App.register``
      takes: SDK classes, a list of them, or node dicts.
    - ``time_col``: epoch milliseconds (an integral column) or a Spark timestamp (floored to
      the millisecond), in the spine and in every events DataFrame.
    - ``tables``: table names (or @bv.table descriptors); default: every table.
    - ``inclusive``: whether a spine row sees the events at exactly its time (False leaves
      them out: labels computed from the same event do not leak into its features).
    - ``order_col``: a column of every events DataFrame; events of one millisecond are
      applied in its ascending order. Ties (and without it) are broken by event name, then
      by input order (``monotonically_increasing_id`` of the events DataFrame: partition,
      then row).

    Returns the spine's columns plus one column per feature of the requested tables
    (tables in the order asked, features by name): what a GET of the row's key at the
    row's time returns. Scalars are typed columns (long, double, boolean, string); a list
    or map feature is a string column holding GET's JSON. A key without a row gives nulls
    (GET answers ``{}``), as does a non-finite float (GET's JSON has ``null``). Row order
    is not kept. Raises ValueError (``ConversionError`` for event columns) before any job
    runs; an event row the server would refuse fails the job with HistoricalReplayError.
    """
    pipeline = _pipeline(registry)
    plans = [pipeline.table(name) for name in _table_names(pipeline, tables)]
    _check_spine(spine, plans, time_col)
    needed = [e for plan in plans for e in plan.events]
    _check_event_names(pipeline, events)
    streams: dict[str, tuple[DataFrame, dict[str, str]]] = {}
    for event in dict.fromkeys(needed):
        if event not in events:
            users = [p.name for p in plans if event in p.events]
            raise ValueError(f"table {users[0]} is fed by event {event}, which events does "
                             f"not give (events: {', '.join(events) or 'none'})")
        key_fields = {k for p in plans if p.source == event for k in p.keys}
        streams[event] = _event_stream(events[event], pipeline, event, time_col, order_col,
                                       key_fields)
    out = spine
    for plan in plans:
        stream = _union([_keyed(*streams[e], plan, pipeline) for e in plan.events])
        out = _replay_table(out, stream, plan, time_col, inclusive)
    return out


# -- driver side: registry, checks, streams -------------------------------------------------


def _pipeline(registry: Any) -> Pipeline:
    """The registry compiled as the server compiles it (ValueError with the server's error
    when it would not register)."""
    from beava.offline import Pipeline

    return Pipeline(registry)


def _table_names(pipeline: Pipeline, tables: Sequence[Any] | None) -> list[str]:
    known = pipeline.table_names
    if tables is None:
        if not known:
            raise ValueError("the registry has no table")
        return known
    if isinstance(tables, str):
        tables = [tables]
    names = []
    for table in tables:
        name = table if isinstance(table, str) else getattr(table, "_name", None)
        if not isinstance(name, str) or name not in known:
            raise ValueError(f"unknown table {name if isinstance(name, str) else table!r}; "
                             f"tables: {', '.join(known) or 'none'}")
        if name not in names:
            names.append(name)
    return names


def _check_event_names(pipeline: Pipeline, events: Mapping[str, Any]) -> None:
    unknown = sorted(set(events) - set(pipeline.events))
    if unknown:
        raise ValueError(f"events names {', '.join(map(repr, unknown))}, which the registry "
                         f"does not declare (events: {', '.join(pipeline.events)})")


def _time_family(df: DataFrame, column: str, what: str) -> str:
    from pyspark.sql import types as t

    if column not in df.columns:
        raise ValueError(f"{what} has no time column {column!r} (columns: "
                         f"{', '.join(df.columns)}); name it with time_col=")
    data_type = df.schema[column].dataType
    if isinstance(data_type, t.IntegralType):
        return "ms"
    if isinstance(data_type, (t.TimestampType, t.TimestampNTZType)):
        return "timestamp"
    raise ValueError(f"{what}: time column {column!r} is {data_type.simpleString()}; it "
                     f"must hold epoch milliseconds (an integral type) or a timestamp")


def _time_ms(df: DataFrame, column: str, what: str) -> Column:
    from pyspark.sql import functions as f

    col = f.col(quoted(column))
    if _time_family(df, column, what) == "ms":
        return col.cast("long")
    return f.unix_millis(col)


def _check_spine(spine: DataFrame, plans: Sequence[TableInfo], time_col: str) -> None:
    from pyspark.sql import types as t

    _time_family(spine, time_col, "the spine")
    taken = [c for c in spine.columns if c.startswith(PREFIX)]
    if taken:
        raise ValueError(f"spine columns may not start with {PREFIX!r}: {', '.join(taken)}")
    seen: dict[str, str] = {}
    for plan in plans:
        missing = [k for k in plan.keys if k not in spine.columns]
        if missing:
            raise ValueError(f"the spine has no key column {', '.join(map(repr, missing))} "
                             f"of table {plan.name} (keys: {', '.join(plan.keys)}; spine "
                             f"columns: {', '.join(spine.columns)})")
        for key in plan.keys:
            data_type = spine.schema[key].dataType
            if not isinstance(data_type, (t.StringType, t.IntegralType, t.BooleanType,
                                          t.FloatType, t.DoubleType)):
                raise ValueError(f"spine key column {key!r} of table {plan.name} is "
                                 f"{data_type.simpleString()}; keys are strings, integers, "
                                 f"booleans or floats")
        for feature in plan.features:
            if feature.name in spine.columns:
                raise ValueError(f"the spine has a column {feature.name!r}, the name of a "
                                 f"feature of table {plan.name}; rename it")
            if feature.name in seen:
                raise ValueError(f"feature {feature.name!r} is in tables {seen[feature.name]} "
                                 f"and {plan.name}")
            seen[feature.name] = plan.name


def _event_stream(df: DataFrame, pipeline: Pipeline, event: str, time_col: str,
                  order_col: str | None, key_fields: set[str]
                  ) -> tuple[DataFrame, dict[str, str]]:
    """The rows of ``event`` as ``(_T, _O, _E, _S, _B)`` plus the converted values of
    ``key_fields`` (for keys computed in Spark), dedupe replays removed; and the wire
    type of each field column."""
    from pyspark.sql import functions as f

    spec: EventSpec = pipeline.events[event]
    what = f"events[{spec.name!r}]"
    time = _time_ms(df, time_col, what)
    if order_col is not None and order_col not in df.columns:
        raise ValueError(f"{what} has no order column {order_col!r}")
    declared = set(spec.fields) | set(spec.optional)
    field_cols = [c for c in df.columns if c in declared]
    known = EventSchema(spec.name, dict(spec.fields), spec.optional,
                        frozenset(spec.defaults), spec.dedupe_key)
    plan = plan_for(df.select(*[quoted(c) for c in field_cols]).schema, None, known)
    converted = plan.columns()
    body = (f.to_json(f.struct(*converted)) if converted else f.lit("{}"))
    columns = [time.alias(_T),
               (f.col(quoted(order_col)) if order_col is not None
                else f.lit(None).cast("long")).alias(_O),
               f.lit(spec.name).alias(_E),
               f.monotonically_increasing_id().alias(_S),
               body.alias(_B)]
    wire = plan.wire_types()
    for conv in plan.fields:  # converted values, for keys computed in Spark
        if conv.name in key_fields or conv.name == spec.dedupe_key:
            columns.append(conv.column().alias(PREFIX + "f_" + conv.name))
    stream = df.select(*columns)
    if spec.dedupe_key is None:
        return stream, wire
    dedupe = PREFIX + "f_" + spec.dedupe_key
    if dedupe not in stream.columns:
        return stream, wire  # no column for the field: no row has a value to dedupe by
    keyed = stream.withColumn(_D, f.col(quoted(dedupe)).cast("string"))
    ordered = keyed.repartition(_D).sortWithinPartitions(_T, _O, _E, _S).drop(_D)
    task = functools.partial(_dedupe_task, payload=pipeline.events_payload(),
                             at=_at(ordered))
    return _frame(ordered.rdd.mapPartitions(task), ordered.schema), wire


def _keyed(stream: DataFrame, wire: Mapping[str, str], plan: TableInfo,
           pipeline: Pipeline) -> DataFrame:
    """``stream`` with ``_K``, the canonical key the event lands on in ``plan``'s table,
    and only the events that reach a row of it (a chain filter or a null key skips it)."""
    from pyspark.sql import functions as f

    source = pipeline.events[plan.source]
    base = [_T, _O, _E, _S, _B]
    fast = (not plan.chained and all(k not in source.defaults for k in plan.keys)
            and all(wire.get(k) in ("str", "i64", "bool") for k in plan.keys))
    if fast:
        parts = [_spark_keystr(f.col(quoted(PREFIX + "f_" + k)), wire[k]) for k in plan.keys]
        key = _join_key(parts)
        # a null key reaches no row; such events still go to the replay (in one partition),
        # whose push refuses them when the server would
        return stream.select(*base, key.alias(_K))
    from pyspark.sql import types as t

    rows = stream.select(*base)
    task = functools.partial(_key_task, payload=plan.payload, table=plan.name)
    return _frame(rows.rdd.mapPartitions(task), rows.schema.add(_K, t.StringType()))


def _spark_keystr(col: Column, wire_type: str) -> Column:
    """keystr of a str, i64 or bool value in Spark SQL (null stays null)."""
    from pyspark.sql import functions as f

    if wire_type == "str":
        return col
    if wire_type == "i64":
        return col.cast("long").cast("string")
    return f.when(col, f.lit("true")).when(~col, f.lit("false"))


def _join_key(parts: Sequence[Column]) -> Column:
    """The canonical key of several keystr parts (each ``|`` escaped), null if any is."""
    from pyspark.sql import functions as f

    if not parts:
        return f.lit("")
    if len(parts) == 1:
        return parts[0]
    pieces: list[Column] = []
    for i, part in enumerate(parts):
        if i:
            pieces.append(f.lit("|"))
        pieces.append(f.replace(part, f.lit("|"), f.lit("%7C")))
    return f.concat(*pieces)


def _spine_key(spine: DataFrame, keys: Sequence[str]) -> Column:
    from pyspark.sql import functions as f
    from pyspark.sql import types as t

    parts = []
    for key in keys:
        data_type = spine.schema[key].dataType
        col = f.col(quoted(key))
        if isinstance(data_type, t.StringType):
            parts.append(col)
        elif isinstance(data_type, t.IntegralType):
            parts.append(_spark_keystr(col, "i64"))
        elif isinstance(data_type, t.BooleanType):
            parts.append(_spark_keystr(col, "bool"))
        else:
            from beava.offline import float_key

            parts.append(f.udf(float_key, t.StringType())(col))
    return _join_key(parts)


def _union(frames: Sequence[DataFrame]) -> DataFrame:
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def _replay_table(spine: DataFrame, stream: DataFrame, plan: TableInfo, time_col: str,
                  inclusive: bool) -> DataFrame:
    from pyspark.sql import functions as f
    from pyspark.sql import types as t

    spine_cols = list(spine.columns)
    event_phase, spine_phase = (0, 1) if inclusive else (1, 0)
    order_type = stream.schema[_O].dataType
    # the spine's columns travel packed in one struct: events carry one null, not many
    packed = t.StructType([spine.schema[c] for c in spine_cols])
    spine_rows = spine.select(
        f.struct(*[f.col(quoted(c)) for c in spine_cols]).alias(_R),
        _time_ms(spine, time_col, "the spine").alias(_T),
        f.lit(spine_phase).alias(_P),
        f.lit(None).cast(order_type).alias(_O),
        f.lit(None).cast("string").alias(_E),
        f.monotonically_increasing_id().alias(_S),
        f.lit(None).cast("string").alias(_B),
        _spine_key(spine, plan.keys).alias(_K))
    event_rows = stream.select(
        f.lit(None).cast(packed).alias(_R),
        _T, f.lit(event_phase).alias(_P), _O, _E, _S, _B, _K)
    merged = spine_rows.unionByName(event_rows)
    schema = t.StructType([t.StructField(_R, packed, True)])
    for feature in plan.features:
        schema = schema.add(feature.name, _SPARK_TYPES[feature.kind], True)
    ordered = merged.repartition(_K).sortWithinPartitions(_T, _P, _O, _E, _S)
    task = functools.partial(
        _replay_task, payload=plan.payload, table=plan.name,
        keys=tuple(spine_cols.index(k) for k in plan.keys), packed=ordered.columns.index(_R),
        at=_at(ordered), features=plan.features)
    out = _frame(ordered.rdd.mapPartitions(task), schema)
    return out.select(*[f.col(_R).getField(c).alias(c) for c in spine_cols],
                      *[quoted(feature.name) for feature in plan.features])


def _at(df: DataFrame) -> tuple[int, int, int]:
    """Positions of the time, the event name and the body in ``df``'s rows."""
    return df.columns.index(_T), df.columns.index(_E), df.columns.index(_B)


def _frame(rdd: Any, schema: Any) -> DataFrame:
    """A DataFrame of the tuples a task yields (Spark's classic API: no pandas needed)."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    assert spark is not None
    return spark.createDataFrame(rdd, schema, verifySchema=False)


# -- task side --------------------------------------------------------------------------------


def _replay(payload: bytes) -> Replay:
    from beava.offline import Replay

    try:
        return Replay(payload)
    except ValueError as err:
        raise HistoricalReplayError(f"in the task: {err}") from None


def _rejected(event: str, time: int, body: str, code: str) -> HistoricalReplayError:
    shown = body if len(body) <= 500 else body[:500] + "..."
    return HistoricalReplayError(
        f"event {event} at {time} ms is refused as the server would refuse its push "
        f"({code}): {shown}")


def _push(replay: Replay, event: str, time: Any, body: str) -> bool:
    """Push one event row at its time; True when it is a dedupe replay."""
    from beava.offline import ReplayRefused

    if time is None:
        raise HistoricalReplayError(f"an event {event} has a null time: {body[:500]}")
    try:
        return replay.push(event, time, _decode_json(body))
    except ReplayRefused as err:
        raise _rejected(event, time, body, err.code) from None


def _dedupe_task(rows: Iterable[Any], *, payload: bytes, at: tuple[int, int, int]
                 ) -> Iterator[Any]:
    """Drop the events the server answers as dedupe replays (rows in push order)."""
    replay = _replay(payload)
    t, e, b = at
    seen = 0
    for row in rows:
        if not _push(replay, row[e], row[t], row[b]):
            yield row
        seen += 1
        if seen >= 100_000:  # forget the entries whose window has passed
            replay.sweep_dedupe()
            seen = 0


def _key_task(rows: Iterable[Any], *, payload: bytes, table: str) -> Iterator[Any]:
    """Append ``_K`` to each ``(_T, _O, _E, _S, _B)``: the table's chain and key function
    applied to the event (the engine's own); drop the events the table skips."""
    from beava.offline import ReplayRefused

    replay = _replay(payload)
    for row in rows:
        time, _, event, _, body = row
        try:
            key = replay.key_of(table, event, time, _decode_json(body))
        except ReplayRefused as err:
            raise _rejected(event, time, body, err.code) from None
        if key is not None:
            yield (*row, key)


def _replay_task(rows: Iterable[Any], *, payload: bytes, table: str,
                 keys: tuple[int, ...], packed: int, at: tuple[int, int, int],
                 features: tuple[FeatureInfo, ...]) -> Iterator[tuple[Any, ...]]:
    """Replay one partition in order: push each event at its time; for each spine row,
    GET its key at its time. Yields ``(spine row, *feature values)``."""
    replay = _replay(payload)
    convert = {"long": _as_long, "double": _as_double, "boolean": _as_bool,
               "string": _as_string, "json": _as_json}
    named = [(f.name, convert[f.kind]) for f in features]
    t, e, b = at
    for row in rows:
        time, body = row[t], row[b]
        if body is not None:
            _push(replay, row[e], time, body)
            continue
        spine_row = row[packed]
        found: dict[str, Any] = {}
        if time is not None:
            found = replay.get(table, [spine_row[i] for i in keys] if keys else "", time)
        yield (spine_row, *[fn(name, found.get(name)) for name, fn in named])


def _as_long(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if type(value) is int:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise HistoricalReplayError(f"feature {name}: value {value!r} is not an integer")


def _as_double(name: str, value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None if value is None else float(value)
    if isinstance(value, (int, float)):
        value = float(value)
        return value if math.isfinite(value) else None
    raise HistoricalReplayError(f"feature {name}: value {value!r} is not a number")


def _as_bool(name: str, value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise HistoricalReplayError(f"feature {name}: value {value!r} is not a boolean")


def _as_string(name: str, value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise HistoricalReplayError(f"feature {name}: value {value!r} is not a string")


def _as_json(name: str, value: Any) -> str | None:
    if value is None:
        return None
    return _encode_json(value).decode()
