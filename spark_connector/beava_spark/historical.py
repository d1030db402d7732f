"""Point-in-time feature values over history, computed in Spark with the server's engine.

``historical_features(spine, events, registry)`` gives, for each row of ``spine``, what a
GET at the row's time would return had every event of ``events`` been pushed at its own
time. No aggregation is written twice: every Spark task runs ``beava.offline.Replay``
stores (the server's feature store, its tables fed at each event's time) on the events of
its entities in time order, and reads each spine row as the server's GET at its time.

One job for all requested tables (:mod:`beava_spark.replay_exchange`):
1. the tables form key groups (same key, same chain), each with a mask bit; each event
   becomes one row per distinct key bucket of the groups it feeds, its mask holding the
   bits of the groups whose key falls there; each spine row (given a row id once) is
   masked the same way, by the buckets of its key for each key tuple (read from its key
   columns), each of its rows holding all those keys and the first its columns (packed in
   one struct);
2. one exchange partitions the stream by key bucket and sorts each partition by time, the
   events of one millisecond in the documented order (``order_col``, then event name,
   then input order), spine rows after the events of their millisecond
   (``inclusive=True``) or before them (``inclusive=False``);
3. each task replays its partition from Arrow batches (:mod:`beava_spark.replay_task`):
   per group, one store applies the rows of its bit in one C loop (events applied, spine
   rows read), a spine row's features of every group of its mask coming out as one row;
4. the feature rows of one spine row (one per bucket of its keys) are joined back by row
   id.

Events with a ``dedupe_key`` first go through one pass over the whole event (partitioned by
the dedupe value), so replays are recognised across entities as the server does.
A global table (no key) has one entity: its group runs in one task.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .conversion import quoted
from .errors import BeavaSparkError
from .replay_exchange import (
    BK,
    PREFIX,
    E,
    K,
    KeyGroup,
    M,
    O,
    P,
    S,
    T,
    ValueColumns,
    W,
    bucket_count,
    bucket_of,
    check_event_names,
    compile_pipeline,
    event_codes,
    event_rows,
    event_stream,
    group_fields,
    key_groups,
    masked_rows,
    replay_stream,
    row_key,
    table_names,
    time_ms,
)
from .replay_task import ReplayGroup, ReplayOutput, read_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from beava.offline import TableInfo

__all__ = ["HistoricalReplayError", "historical_features"]

_R = PREFIX + "r"  # the spine row's columns, as one struct (on its first group's copy)



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
    from pyspark.sql import types as t

    pipeline = compile_pipeline(registry)
    plans = [pipeline.table(name) for name in table_names(pipeline, tables)]
    _check_spine(spine, plans, time_col)
    check_event_names(pipeline, events)
    groups = key_groups(pipeline, plans)
    event_phase, spine_phase = (0, 1) if inclusive else (1, 0)
    streams: dict[str, tuple[DataFrame, dict[str, str]]] = {}
    for event in dict.fromkeys(e for g in groups for e in g.events):
        if event not in events:
            users = [p.name for p in plans if event in p.events]
            raise ValueError(f"table {users[0]} is fed by event {event}, which events does "
                             f"not give (events: {', '.join(events) or 'none'})")
        streams[event] = event_stream(events[event], pipeline, event, time_col, order_col,
                                      HistoricalReplayError)
    values = ValueColumns.of({event: wire for event, (_, wire) in streams.items()},
                             keys=len(key_tuples(groups)))
    buckets = bucket_count([spine, *[events[e] for e in streams]])
    rows = []
    for event, (stream, wire) in streams.items():
        rows += event_rows(stream, wire, [g for g in groups if event in g.events], event,
                           pipeline, event_phase, HistoricalReplayError, values, buckets)
    # the spine's columns null, of no type: the union gives them the spine's
    event_part = [r.selectExpr("*", f"NULL AS {_R}") for r in rows]
    spine_part = _spine_rows(spine, groups, time_col, spine_phase, values, buckets)
    stream = replay_stream([*event_part, spine_part], buckets)
    # the task's rows: the row id, the spine's columns (on one group's row only) and one
    # struct of features per group (null on the other groups' rows): joined back by row
    # id, each row of the shuffle holds the values of its own group alone
    schema = spine_part.select(S, _R).schema
    for group in groups:
        schema = schema.add(_features_of(group), t.StructType(
            [t.StructField(ft.name, _spark_type(ft.kind)) for plan in group.tables
             for ft in plan.features]))
    codes = event_codes(pipeline)
    task = functools.partial(
        read_rows, groups=[_task_group(g, key_tuples(groups), values, codes) for g in groups],
        events=codes, values=values,
        output=ReplayOutput(S, _R, tuple(_features_of(g) for g in groups)),
        refused=HistoricalReplayError)
    out = stream.mapInArrow(task, schema)
    if len(groups) > 1:
        # one row per bucket of the spine row's keys: the row that carries its columns
        # takes the other rows' groups' features over a window of its row id (one
        # exchange and one sort, where a groupBy's first() of structs sorts twice, its
        # partial aggregation before the exchange finding no two rows of one id to merge)
        out = out.selectExpr(_R, *[f"first({_features_of(g)}, true) OVER (PARTITION BY {S})"
                                   f" AS {_features_of(g)}" for g in groups]
                             ).where(f"{_R} IS NOT NULL")
    where = {ft.name: _features_of(g) for g in groups for p in g.tables for ft in p.features}
    return out.selectExpr(*[f"{_R}.{quoted(c)} AS {quoted(c)}" for c in spine.columns],
                          *[f"{where[ft.name]}.{quoted(ft.name)} AS {quoted(ft.name)}"
                            for plan in plans for ft in plan.features])


def _spark_type(kind: str) -> Any:
    """The Spark type of a feature value kind (beava.offline.FeatureInfo)."""
    from pyspark.sql import types as t

    return {"long": t.LongType(), "double": t.DoubleType(),
            "boolean": t.BooleanType()}.get(kind, t.StringType())


def _features_of(group: KeyGroup) -> str:
    """The column of the task's rows holding ``group``'s features."""
    return f"{PREFIX}x{group.id}"


# -- driver side: registry, checks, streams -------------------------------------------------


def _check_spine(spine: DataFrame, plans: Sequence[TableInfo], time_col: str) -> None:
    from pyspark.sql import types as t

    time_ms(spine, time_col, "the spine")  # checks the column
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


def _spine_rows(spine: DataFrame, groups: Sequence[KeyGroup], time_col: str, phase: int,
                values: ValueColumns, buckets: int) -> DataFrame:
    """The spine in the stream (``(M, W, BK, T, P, O, E, S, V0, ..., _R)``): read once,
    its row id, time and key per key tuple (``key_tuples``) computed once, then one row per
    distinct bucket of its groups' keys (masked as events are), each with every key (in
    the value columns, ``ValueColumns.read_columns``), its columns on its first group's
    row only."""
    from pyspark.sql import functions as f
    from pyspark.sql import types as t

    from beava.offline import NO_READ, READ, float_key

    tuples = key_tuples(groups)
    # a float key's keystr is the engine's (a Python UDF), in a column of its own
    float_keys = [k for k in dict.fromkeys(k for keys in tuples for k in keys)
                  if isinstance(spine.schema[k].dataType, (t.FloatType, t.DoubleType))]
    floats = {k: f"{PREFIX}fk{i}" for i, k in enumerate(float_keys)}
    keyed = spine.select("*", *[f.udf(float_key, t.StringType())(f.col(quoted(k)))
                                .alias(floats[k]) for k in float_keys]) if floats else spine
    once = keyed.selectExpr(
        f"monotonically_increasing_id() AS {S}",
        f"struct({', '.join(quoted(c) for c in spine.columns)}) AS {_R}",
        f"{time_ms(spine, time_col, 'the spine')} AS {T}",
        *[f"{row_key(spine.schema, keys, floats)} AS {K}{i}"
          for i, keys in enumerate(tuples)])
    keys = [f"{K}{i}" for i in range(len(tuples))]
    bucketed = once.selectExpr(S, _R, T, *keys, *[f"{bucket_of(key, buckets)} AS {BK}{i}"
                                                  for i, key in enumerate(keys)])
    masked = masked_rows([(g, f"{BK}{tuples.index(g.keys)}") for g in groups])
    exploded = bucketed.selectExpr(S, _R, T, *keys, f"posexplode({masked}) AS (pos, x)")
    # the order column null, of no type: the union gives it the events' order_col type
    return exploded.where("x IS NOT NULL").selectExpr(
        f"x.m AS {M}", f"x.w AS {W}", f"x.bk AS {BK}", T, f"{phase} AS {P}", f"NULL AS {O}",
        f"CASE WHEN {T} IS NULL THEN {NO_READ} ELSE {READ} END AS {E}", S,
        *values.read_columns(keys), f"CASE WHEN pos = 0 THEN {_R} END AS {_R}")


def key_tuples(groups: Sequence[KeyGroup]) -> list[tuple[str, ...]]:
    """The distinct key tuples of ``groups``: a read row holds a key for each (in
    ``ValueColumns.key_slot`` of its index)."""
    return list(dict.fromkeys(g.keys for g in groups))


def _task_group(group: KeyGroup, tuples: Sequence[tuple[str, ...]], values: ValueColumns,
                codes: Sequence[str]) -> ReplayGroup:
    return ReplayGroup(group.word, group.bit, values.key_slot(tuples.index(group.keys)),
                       group.payload,
                       tuple(t.name for t in group.tables),
                       tuple(t.features for t in group.tables),
                       group_fields(group, values, codes))
