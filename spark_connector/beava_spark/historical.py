"""Point-in-time feature values over history, computed in Spark with the server's engine.

``historical_features(spine, events, registry)`` gives, for each row of ``spine``, what a
GET at the row's time would return had every event of ``events`` been pushed at its own
time. No aggregation is written twice: every Spark task runs a ``FeatureStore`` (the
server's feature store, with a clock the task sets) on the events of its entities in time
order, and reads each spine row through the server's GET code at the spine row's time.

Per requested table:
1. the events that reach it are repartitioned by the table's entity key (the canonical key
   string a pushed event lands on, after the table's chain), the spine rows by the same
   key read from their key columns;
2. each partition is sorted by time, the events of one millisecond in the documented order
   (``order_col``, then event name, then input order), spine rows after the events of
   their millisecond (``inclusive=True``) or before them (``inclusive=False``);
3. one task replays its partition: clock at the event's time, ``FeatureStore.push``; at a
   spine row, clock at its time and GET of its key (query time = the spine row's time).

Events with a ``dedupe_key`` first go through one pass over the whole event (partitioned by
the dedupe value), so replays are recognised across entities as the server does.
A global table (no key) has one entity: its table runs in one task.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from .conversion import quoted
from .driver import plan_for
from .errors import BeavaSparkError
from .event_schema import EventSchema

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from beava.engine.registry import EventSpec, Registry

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

# feature value kind -> Spark SQL type name
_SPARK_TYPES = {"long": "long", "double": "double", "boolean": "boolean",
                "string": "string", "json": "string"}
# catalogue output -> kind; "inherits" takes the kind of the feature's field
_OUTPUT_KINDS = {"i64": "long", "epoch_ms": "long", "f64": "double", "bool": "boolean",
                 "list": "json", "map": "json", "top_k": "json", "i64_list": "json"}
_FIELD_KINDS = {"i64": "long", "f64": "double", "bool": "boolean", "str": "string",
                "datetime": "string"}


class HistoricalReplayError(BeavaSparkError, ValueError):
    """An event row that the server would refuse (its error code and the row), or a row
    without a time. Raised inside the Spark task; Spark's exception carries the text."""


@dataclass(frozen=True)
class _Feature:
    name: str
    kind: str  # long, double, boolean, string, json


@dataclass(frozen=True)
class _TablePlan:
    name: str
    keys: tuple[str, ...]
    events: tuple[str, ...]  # the pushed events that reach the table
    features: tuple[_Feature, ...]  # sorted by name, as GET orders a row
    payload: bytes  # register payload of the table and what it needs


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
    compiled, payload = _compile_registry(registry)
    wanted = _table_names(compiled, tables)
    plans = [_table_plan(compiled, payload, name) for name in wanted]
    _check_spine(spine, plans, time_col)
    needed = [e for plan in plans for e in plan.events]
    unknown = sorted(set(events) - set(compiled.events))
    if unknown:
        raise ValueError(f"events names {', '.join(map(repr, unknown))}, which the registry "
                         f"does not declare (events: {', '.join(compiled.events)})")
    streams: dict[str, tuple[DataFrame, dict[str, str]]] = {}
    for event in dict.fromkeys(needed):
        if event not in events:
            users = [p.name for p in plans if event in p.events]
            raise ValueError(f"table {users[0]} is fed by event {event}, which events does "
                             f"not give (events: {', '.join(events) or 'none'})")
        key_fields = {k for p in plans if compiled.tables[p.name].source == event
                      for k in p.keys}
        streams[event] = _event_stream(events[event], compiled.events[event], time_col,
                                       order_col, payload, key_fields)
    out = spine
    for plan in plans:
        stream = _union([_keyed(*streams[e], plan, compiled) for e in plan.events])
        out = _replay_table(out, stream, plan, time_col, inclusive)
    return out


# -- driver side: registry, checks, streams -------------------------------------------------


def _compile_registry(registry: Any) -> tuple[Registry, dict[str, Any]]:
    """The compiled registry and its payload (a register outcome other than 200 raises
    ValueError with the server's error)."""
    from beava.dsl.compiler import compile_register_payload
    from beava.engine.registry import empty_registry, register

    if isinstance(registry, Mapping) and "nodes" in registry:
        payload = {"nodes": list(registry["nodes"])}
    elif isinstance(registry, (list, tuple)):
        payload = {"nodes": compile_register_payload(*registry)["nodes"]}
    else:
        payload = {"nodes": compile_register_payload(registry)["nodes"]}
    outcome = register(empty_registry(), _encode_json(payload),
                       memory_governance_enforce=False)
    if outcome.registry is None:
        error = outcome.body.get("error", outcome.body)
        raise ValueError(f"the registry does not register: {error}")
    return outcome.registry, payload


def _table_names(compiled: Registry, tables: Sequence[Any] | None) -> list[str]:
    if tables is None:
        names = list(compiled.tables)
        if not names:
            raise ValueError("the registry has no table")
        return names
    if isinstance(tables, str):
        tables = [tables]
    names = []
    for table in tables:
        name = table if isinstance(table, str) else getattr(table, "_name", None)
        if not isinstance(name, str) or name not in compiled.tables:
            raise ValueError(f"unknown table {name if isinstance(name, str) else table!r}; "
                             f"tables: {', '.join(compiled.tables) or 'none'}")
        if name not in names:
            names.append(name)
    return names


def _table_plan(compiled: Registry, payload: Mapping[str, Any], name: str) -> _TablePlan:
    from beava.catalogue.operators import lookup
    from beava.engine.state.chain_ops import chain_output_schema

    spec = compiled.tables[name]
    schema = chain_output_schema(spec.chain, spec.input_schema)
    features = []
    for fname, feature in spec.features.items():
        op = lookup(feature.op)
        output = op.output if op is not None else ""
        if output == "inherits":
            field = feature.params.get("field")
            kind = _FIELD_KINDS.get(schema.get(field, "") if isinstance(field, str) else "",
                                    "json")
        else:
            kind = _OUTPUT_KINDS.get(output, "json")
        features.append(_Feature(fname, kind))
    feeding = tuple(e for e in compiled.events if any(t.name == name
                                                      for t in compiled.feeds(e)))
    return _TablePlan(name, spec.keys, feeding, tuple(features),
                      _encode_json({"nodes": _nodes_for(payload["nodes"], name)}))


def _nodes_for(nodes: Sequence[Mapping[str, Any]], table: str) -> list[Mapping[str, Any]]:
    """Every event source, and the table with the derivations it reads from: a task's
    store then computes that table only."""
    by_name = {node["name"]: node for node in nodes}
    needed = set()
    todo = [table]
    while todo:
        name = todo.pop()
        if name in needed or name not in by_name:
            continue
        needed.add(name)
        todo.extend(by_name[name].get("upstreams") or ())
    return [node for node in nodes if node.get("kind") == "event" or node["name"] in needed]


def _events_only(payload: Mapping[str, Any]) -> bytes:
    return _encode_json({"nodes": [n for n in payload["nodes"] if n.get("kind") == "event"]})


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


def _check_spine(spine: DataFrame, plans: Sequence[_TablePlan], time_col: str) -> None:
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


def _event_stream(df: DataFrame, spec: EventSpec, time_col: str, order_col: str | None,
                  payload: Mapping[str, Any], key_fields: set[str]
                  ) -> tuple[DataFrame, dict[str, str]]:
    """The rows of one event as ``(_T, _O, _E, _S, _B)`` plus the converted values of
    ``key_fields`` (for keys computed in Spark), dedupe replays removed; and the wire
    type of each field column."""
    from pyspark.sql import functions as f

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
    task = functools.partial(_dedupe_task, payload=_events_only(payload),
                             at=_at(ordered))
    return _frame(ordered.rdd.mapPartitions(task), ordered.schema), wire


def _keyed(stream: DataFrame, wire: Mapping[str, str], plan: _TablePlan,
           compiled: Registry) -> DataFrame:
    """``stream`` with ``_K``, the canonical key the event lands on in ``plan``'s table,
    and only the events that reach a row of it (a chain filter or a null key skips it)."""
    from pyspark.sql import functions as f

    spec = compiled.tables[plan.name]
    source = compiled.events[spec.source]
    base = [_T, _O, _E, _S, _B]
    fast = (not spec.chain and all(k not in source.defaults for k in spec.keys)
            and all(wire.get(k) in ("str", "i64", "bool") for k in spec.keys))
    if fast:
        parts = [_spark_keystr(f.col(quoted(PREFIX + "f_" + k)), wire[k]) for k in spec.keys]
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
            parts.append(f.udf(_float_keystr, t.StringType())(col))
    return _join_key(parts)


def _float_keystr(value: float | None) -> str | None:
    from beava.engine.state.keys import keystr

    if value is None or not math.isfinite(value):
        return None
    return keystr(float(value))


def _union(frames: Sequence[DataFrame]) -> DataFrame:
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def _replay_table(spine: DataFrame, stream: DataFrame, plan: _TablePlan, time_col: str,
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


class _Clock:
    """A settable clock for a task's FeatureStore."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def _store(payload: bytes) -> tuple[Any, _Clock]:
    from beava.engine.store import FeatureStore

    clock = _Clock()
    store = FeatureStore(clock=clock, memory_governance_enforce=False)
    status, body = store.register(payload)
    if status != 200:
        raise HistoricalReplayError(f"the registry does not register in the task: {body}")
    return store, clock


def _rejected(event: str, time: int, body: str, code: str) -> HistoricalReplayError:
    shown = body if len(body) <= 500 else body[:500] + "..."
    return HistoricalReplayError(
        f"event {event} at {time} ms is refused as the server would refuse its push "
        f"({code}): {shown}")


def _push(store: Any, clock: _Clock, event: str, time: Any, body: str) -> Any:
    from beava.catalogue.errors import BeavaError

    if time is None:
        raise HistoricalReplayError(f"an event {event} has a null time: {body[:500]}")
    clock.now = time
    try:
        return store.push(event, _decode_json(body))
    except BeavaError as err:
        raise _rejected(event, time, body, err.code) from None


def _dedupe_task(rows: Iterable[Any], *, payload: bytes, at: tuple[int, int, int]
                 ) -> Iterator[Any]:
    """Drop the events the server answers as dedupe replays (rows in push order)."""
    store, clock = _store(payload)
    t, e, b = at
    seen = 0
    for row in rows:
        replay = _push(store, clock, row[e], row[t], row[b])[2]
        if not replay:
            yield row
        seen += 1
        if seen >= 100_000:  # forget the entries whose window has passed
            store.sweep_dedupe()
            seen = 0


def _key_task(rows: Iterable[Any], *, payload: bytes, table: str) -> Iterator[Any]:
    """Append ``_K`` to each ``(_T, _O, _E, _S, _B)``: the table's chain and key function
    applied to the event (the engine's own); drop the events the table skips."""
    from beava._fast.table_kernel import group_key
    from beava.catalogue.errors import BeavaError
    from beava.engine.state.chain_ops import compile_chain
    from beava.engine.state.push_validation import build_checkers, validate_push

    store, _ = _store(payload)
    spec = store.registry.tables[table]
    chain: Callable[[dict[str, Any]], dict[str, Any] | None] | None = (
        compile_chain(spec.chain, spec.input_schema) if spec.chain else None)
    checkers = build_checkers(store.registry.events)
    key_fields = tuple(spec.keys)
    for row in rows:
        time, _, event, _, body = row
        try:
            _, fields = validate_push(event, _decode_json(body), checkers)
        except BeavaError as err:
            raise _rejected(event, time, body, err.code) from None
        out = chain(dict(fields)) if chain is not None else fields
        key = group_key(out, key_fields) if out is not None else None
        if key is not None:
            yield (*row, key)


def _replay_task(rows: Iterable[Any], *, payload: bytes, table: str,
                 keys: tuple[int, ...], packed: int, at: tuple[int, int, int],
                 features: tuple[_Feature, ...]) -> Iterator[tuple[Any, ...]]:
    """Replay one partition in order: push each event at its time; for each spine row,
    GET its key at its time. Yields ``(spine row, *feature values)``."""
    from beava.catalogue.errors import BeavaError
    from beava.engine.state.reads import get

    store, clock = _store(payload)
    lookup = store.table
    convert = {"long": _as_long, "double": _as_double, "boolean": _as_bool,
               "string": _as_string, "json": _as_json}
    named = [(f.name, convert[f.kind]) for f in features]
    t, e, b = at
    for row in rows:
        time, body = row[t], row[b]
        if body is not None:
            _push(store, clock, row[e], time, body)
            continue
        spine_row = row[packed]
        found: dict[str, Any] = {}
        if time is not None:
            clock.now = time
            request = {"table": table, "key": [spine_row[i] for i in keys] if keys else ""}
            try:
                found = get(lookup, request, store.query_time())
            except BeavaError:
                found = {}  # a null or non-finite key: GET refuses it, no row
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
