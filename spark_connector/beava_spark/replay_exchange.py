"""The one exchange of an offline replay: every table's events in one stream, partitioned
once by key bucket and sorted once into push order.

A **key group** is the set of requested tables whose rows an event reaches under the same
entity key: tables with the same key fields and no chain (whatever event feeds them), or
chained tables that follow the same derivation with the same keys. One store replays a
group's tables together (``KeyGroup.payload``). Each group has a bit in a mask word
(``KeyGroup.word``, ``KeyGroup.bit``: group id = ``WORD_BITS`` * word + bit). For each
group an event feeds, its canonical key (computed in Spark SQL; by the engine's own key
function, in a Python task, for a chain or a key Spark cannot spell) gives its bucket,
``pmod(xxhash64(key), buckets)``. The event becomes **one row per distinct (bucket, word)**
among its Spark-keyed groups, whose mask ``M`` has the bit of each of them whose key falls
in that bucket (no groupBy: a group makes the row when no earlier group of its word has
its bucket, the mask summing the bits of those that do); a Python-keyed group's rows carry
its bit alone. All events of one entity of a group meet in one bucket, so a bucket's
parts are key-disjoint per group.

``replay_stream`` unions the event rows (and any read rows, such as a spine's), then
``repartition(buckets, BK)``: ``BK`` is the bucket as the int Spark's hash partitioning
sends to the partition of the bucket's number (``partition_keys``), so buckets never
share a task; and ``sortWithinPartitions(time, phase, order, event, seq)``: a task meets
its rows, every group of its bucket interleaved, in push order, the events of one
millisecond in the documented order (``order_col``, then event name, then input order).
The number of stages does not grow with the number of tables. A task reads the stream as
Arrow batches and hands each, once per group present in it (``group_masks``), to
``beava.offline.Replay.replay_batch`` with the mask and the group's bit
(:mod:`beava_spark.replay_task`).

Stream columns (the ``__bv_`` prefix is reserved): ``M`` group mask (long), ``W`` its word
(int), ``BK`` bucket's partition key, ``T`` time (epoch ms), ``P`` phase within a
millisecond, ``O`` order_col value, ``E`` event code (index in ``event_codes``; ``READ`` /
``NO_READ`` for read rows), ``S`` input position of the event (a read's row id), then the
value columns ``V0``, ``V1``, ... (:class:`ValueColumns`): typed slots, as many of each
Spark type as the event with the most fields of that type needs; each event's fields take
the slots of their type in declaration order and hold their values as Spark converted them
(``conversion``), null where the value is null or none of the row's groups takes the field.
A row shared by several groups carries every field any of the event's
Spark-keyed groups takes; each group's store reads only the fields it takes
(``group_fields``), so it sees the body it would see on a row of its own.
A read row of ``historical_features`` holds its canonical keys in the value columns, one
string column per distinct key tuple of the groups (``ValueColumns.key_slot``; an event's
key is computed again by its tables), and it adds the spine's columns. The task is handed
every column of the stream as the sort leaves it: a projection that dropped one would copy
every row. No event is turned into a JSON text: the task reads the typed columns straight
into rows. Read rows are masked as events are (``masked_rows``): one per distinct bucket of
their groups' keys.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from .conversion import quoted
from .driver import plan_for
from .event_schema import EventSchema

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    from beava.offline import FeatureInfo, Pipeline, Replay, TableInfo

__all__ = ["KeyGroup", "ValueColumns", "bucket_count", "bucket_of", "check_event_names",
           "compile_pipeline", "event_codes", "event_rows", "event_stream", "group_fields",
           "group_masks", "key_groups", "new_replay", "partition_keys",
           "refusal", "replay_part", "replay_stream", "row_key", "spark_key", "table_names",
           "time_ms"]

PREFIX = "__bv_"
M = PREFIX + "m"
W = PREFIX + "w"
BK = PREFIX + "bk"
K = PREFIX + "k"  # an event's key (computed in a task); a spine row's, + key tuple index
T = PREFIX + "t"
P = PREFIX + "p"
O = PREFIX + "o"  # noqa: E741 - the order column
E = PREFIX + "e"
S = PREFIX + "s"
V = PREFIX + "v"  # value columns: V + index (ValueColumns)
_D = PREFIX + "d"  # dedupe value, partitioning the dedupe pass
# groups per mask word: bit 63 (the sign of a long) is left out, so that a mask is a sum
# of positive bits in Spark SQL
WORD_BITS = 63
FIELD = PREFIX + "f_"  # converted values of key and dedupe fields, for keys computed in Spark


# bytes of input per bucket when Spark knows the input's size; at least one bucket per
# core (spark.default.parallelism), at most 16 per core
_BUCKET_BYTES = 128 << 20
_BUCKETS_PER_CORE = 16

_encode_json = msgspec.json.Encoder().encode

# wire type (conversion) -> the Spark type of its value column
_VALUE_TYPES = {"i64": "long", "f64": "double", "bool": "boolean", "str": "string",
                "datetime": "string"}

# the caller's exception for a row it cannot replay, from its message
Refused = Callable[[str], Exception]


@dataclass(frozen=True)
class KeyGroup:
    """Tables replayed together: same key, same chain (module docstring)."""

    id: int
    word: int  # its mask word (W) and bit in it (M)
    bit: int
    keys: tuple[str, ...]
    tables: tuple[TableInfo, ...]
    events: tuple[str, ...]  # every event whose pushes reach one of its tables
    chained: bool
    # event -> the fields its bodies carry in this group (None: all of them)
    bodies: Mapping[str, tuple[str, ...] | None]
    payload: bytes  # register payload of every event source and these tables


def key_groups(pipeline: Pipeline, plans: Sequence[TableInfo]) -> list[KeyGroup]:
    """The key groups of ``plans`` (in the order their first table is asked).

    An event's whole body goes to the first group it feeds, where it is checked as a live
    push; a later group without a chain gets only the fields its tables may read
    (``Pipeline.fields_read``), its store declaring the event with just those: the
    exchange carries each event's full body once, not once per group."""
    found: dict[tuple[Any, ...], list[TableInfo]] = {}
    for plan in plans:
        chain = pipeline.upstreams(plan.name) if plan.chained else ()
        found.setdefault((plan.keys, plan.chained, chain), []).append(plan)
    groups = []
    checked: set[str] = set()  # events whose whole body a group already has
    for number, ((keys, chained, _), tables) in enumerate(found.items()):
        names = [t.name for t in tables]
        events = tuple(e for e in pipeline.events if any(e in t.events for t in tables))
        bodies: dict[str, tuple[str, ...] | None] = {}
        for event in events:
            # a group whose tables read no field (a count) takes the whole body: an
            # event declares at least one field
            fields = None if chained or event not in checked else (
                pipeline.fields_read(names, event) or None)
            bodies[event] = fields
            checked.add(event)
        narrowed = {e: fields for e, fields in bodies.items() if fields is not None}
        groups.append(KeyGroup(number, *divmod(number, WORD_BITS), keys, tuple(tables),
                               events, chained, bodies, pipeline.payload(names, narrowed)))
    return groups


def compile_pipeline(registry: Any) -> Pipeline:
    """The registry compiled as the server compiles it (ValueError with the server's error
    when it would not register)."""
    from beava.offline import Pipeline

    return Pipeline(registry)


def table_names(pipeline: Pipeline, tables: Sequence[Any] | None) -> list[str]:
    """The names of ``tables`` (names or @bv.table descriptors; None: every table), each
    once, in the order given (ValueError naming an unknown one)."""
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


def check_event_names(pipeline: Pipeline, events: Mapping[str, Any]) -> None:
    """ValueError when ``events`` names an event the registry does not declare."""
    unknown = sorted(set(events) - set(pipeline.events))
    if unknown:
        raise ValueError(f"events names {', '.join(map(repr, unknown))}, which the registry "
                         f"does not declare (events: {', '.join(pipeline.events)})")


def event_codes(pipeline: Pipeline) -> tuple[str, ...]:
    """Event names by code: sorted, so that ordering by code is ordering by name."""
    return tuple(sorted(pipeline.events))


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


def time_ms(df: DataFrame, column: str, what: str) -> str:
    """``column`` of ``df`` as epoch milliseconds, in SQL text (ValueError naming ``what``
    when it is missing or neither integral nor a timestamp)."""
    if _time_family(df, column, what) == "ms":
        return f"CAST({quoted(column)} AS BIGINT)"
    return f"unix_millis({quoted(column)})"


def event_stream(df: DataFrame, pipeline: Pipeline, event: str, time_col: str,
                 order_col: str | None, refused: Refused) -> tuple[DataFrame, dict[str, str]]:
    """The rows of ``event`` as ``(T, O, E, S)`` plus each field's converted value
    (``FIELD`` + name, as its value column's Spark type), dedupe replays removed (one pass
    over the whole event, partitioned by the dedupe value, as the server recognises
    replays across entities); and the wire type of each field."""
    spec = pipeline.events[event]
    what = f"events[{spec.name!r}]"
    time = time_ms(df, time_col, what)
    if order_col is not None and order_col not in df.columns:
        raise ValueError(f"{what} has no order column {order_col!r}")
    declared = set(spec.fields) | set(spec.optional)
    field_cols = [c for c in df.columns if c in declared]
    known = EventSchema(spec.name, dict(spec.fields), spec.optional,
                        frozenset(spec.defaults), spec.dedupe_key)
    plan = plan_for(df.select(*[quoted(c) for c in field_cols]).schema, None, known)
    wire = plan.wire_types()
    stream = df.selectExpr(
        f"{time} AS {T}",
        f"{quoted(order_col) if order_col is not None else 'CAST(NULL AS BIGINT)'} AS {O}",
        f"{event_codes(pipeline).index(event)} AS {E}",
        f"monotonically_increasing_id() AS {S}",
        *[f"CAST({conv.sql()} AS {_VALUE_TYPES[conv.wire_type]}) AS "
          f"{quoted(FIELD + conv.name)}" for conv in plan.fields])
    dedupe = FIELD + (spec.dedupe_key or "")
    if spec.dedupe_key is None or dedupe not in stream.columns:
        return stream, wire  # no dedupe key, or no row has a value to dedupe by
    keyed = stream.selectExpr("*", f"CAST({quoted(dedupe)} AS STRING) AS {_D}")
    ordered = keyed.repartition(_D).sortWithinPartitions(T, O, S).drop(_D)
    task = functools.partial(_dedupe_task, payload=pipeline.events_payload(), event=event,
                             at=(ordered.columns.index(T), _field_positions(ordered, wire)),
                             refused=refused)
    return _frame(ordered.rdd.mapPartitions(task), ordered.schema), wire


@dataclass(frozen=True)
class ValueColumns:
    """The exchange's value columns (module docstring): ``types[i]``, the Spark type of
    column ``V`` + ``i``; ``slots[event][field]``, the column of an event's field."""

    types: tuple[str, ...]
    slots: Mapping[str, Mapping[str, int]]

    @classmethod
    def of(cls, wires: Mapping[str, Mapping[str, str]], keys: int = 0) -> ValueColumns:
        """The columns of events whose fields have the wire types ``wires[event]``: the
        widest event sets the number of slots of each type; at least ``keys`` string
        columns, where a read row holds its keys (``read_columns``)."""
        width: Counter[str] = Counter()
        for wire in wires.values():
            width |= Counter(_VALUE_TYPES[w] for w in wire.values())
        width["string"] = max(width["string"], keys)
        types = tuple(t for t in sorted(width) for _ in range(width[t]))
        slots: dict[str, dict[str, int]] = {}
        for event, wire in wires.items():
            used: Counter[str] = Counter()
            slots[event] = {}
            for name, w in wire.items():
                spark_type = _VALUE_TYPES[w]
                slots[event][name] = types.index(spark_type) + used[spark_type]
                used[spark_type] += 1
        return cls(types, slots)

    @property
    def names(self) -> list[str]:
        return [f"{V}{i}" for i in range(len(self.types))]

    def fields(self, event: str, taken: Collection[str]) -> tuple[tuple[int, str], ...]:
        """``(value column index, field name)`` of the fields ``taken`` of ``event``
        (``Replay.replay_batch``'s fields)."""
        return tuple((at, name) for name, at in self.slots[event].items() if name in taken)

    def columns(self, event: str, taken: Collection[str]) -> list[str]:
        """The value columns of an ``event_stream``'s rows of ``event`` (SQL text): its
        fields ``taken`` in their slots, every other column null."""
        return self._filled({at: quoted(FIELD + name) for at, name in self.fields(event, taken)})

    def key_slot(self, index: int) -> int:
        """The value column of a read row's key for key tuple ``index``: the index-th
        string column."""
        return self.types.index("string") + index

    def read_columns(self, keys: Sequence[str]) -> list[str]:
        """The value columns of a read row (SQL text): the key of key tuple i, from the
        column ``keys[i]``, in ``key_slot(i)``, every other column null (a read takes no
        field)."""
        return self._filled({self.key_slot(i): quoted(key) for i, key in enumerate(keys)})

    def _filled(self, values: Mapping[int, str]) -> list[str]:
        """Every value column: ``values[i]`` (SQL text) in column i, null in the others."""
        return [f"{values.get(i, f'CAST(NULL AS {spark_type})')} AS {name}"
                for i, (spark_type, name) in enumerate(zip(self.types, self.names,
                                                           strict=True))]


def _taken(group: KeyGroup, event: str, values: ValueColumns) -> Collection[str]:
    """The fields of ``event`` that ``group``'s store takes."""
    fields = group.bodies[event]
    return values.slots[event].keys() if fields is None else fields


def group_fields(group: KeyGroup, values: ValueColumns, codes: Sequence[str]
                 ) -> tuple[tuple[tuple[int, str], ...], ...]:
    """``Replay.replay_batch``'s fields of ``group`` by event code (none for an event the
    group does not take)."""
    return tuple(values.fields(event, _taken(group, event, values))
                 if event in group.events else () for event in codes)


def _field_positions(df: DataFrame, wire: Mapping[str, str]) -> tuple[tuple[int, str], ...]:
    """Where the fields' values are among the columns of an ``event_stream``."""
    return tuple((df.columns.index(FIELD + name), name) for name in wire)


def event_rows(stream: DataFrame, wire: Mapping[str, str], groups: Sequence[KeyGroup],
               event: str, pipeline: Pipeline, phase: int, refused: Refused,
               values: ValueColumns, buckets: int) -> list[DataFrame]:
    """``stream`` (of ``event_stream``) as rows of the exchange, ``(M, W, BK, T, P, O, E,
    S, V0, ...)``, for ``groups`` (those ``event`` feeds).

    The groups whose key Spark computes share one projection: each group's bucket from
    its key, then one row per distinct (bucket, word) among them, its mask holding the bit
    of each of them in it, its values every field any of them takes (each group's store
    reads only its own: ``group_fields``). A group whose key is the engine's to compute
    gets a Python pass of its own (rows with its bit alone), which keeps only the events
    that reach a row of it (a chain filter or a null key skips them)."""
    from pyspark.sql import types as t

    source = pipeline.events[event]
    base = [T, O, E, S]
    frames = []
    spelled: list[tuple[KeyGroup, str]] = []  # groups keyed in Spark, with their key
    for group in groups:
        if (not group.chained and all(k not in source.defaults for k in group.keys)
                and all(wire.get(k) in ("str", "i64", "bool") for k in group.keys)):
            # a null key reaches no row; such events still go to the replay, whose checks
            # refuse them when the server would
            parts = [spark_key(quoted(FIELD + k), wire[k]) for k in group.keys]
            spelled.append((group, _join_key(parts)))
            continue
        table = next(t.name for t in group.tables if event in t.events)
        task = functools.partial(_key_task, payload=group.payload, table=table,
                                 event=event, fields=_field_positions(stream, wire),
                                 refused=refused)
        keyed = _frame(stream.rdd.mapPartitions(task), stream.schema.add(K, t.StringType()))
        frames.append(keyed.selectExpr(
            f"CAST({1 << group.bit} AS BIGINT) AS {M}", f"{group.word} AS {W}",
            f"{bucket_of(K, buckets)} AS {BK}", T, f"{phase} AS {P}", O, E, S,
            *values.columns(event, _taken(group, event, values))))
    if spelled:
        # each group's bucket computed once (Spark does not inline a hash used twice)
        bucketed = stream.selectExpr(*base, *values.columns(event, {
            name for group, _ in spelled for name in _taken(group, event, values)}),
            *[f"{bucket_of(key, buckets)} AS {BK}{i}" for i, (_, key) in enumerate(spelled)])
        masked = masked_rows([(group, f"{BK}{i}") for i, (group, _) in enumerate(spelled)])
        exploded = bucketed.selectExpr(*base, *values.names, f"explode({masked}) AS x")
        frames.append(exploded.where("x IS NOT NULL").selectExpr(
            f"x.m AS {M}", f"x.w AS {W}", f"x.bk AS {BK}", T, f"{phase} AS {P}", O, E, S,
            *values.names))
    return frames


def masked_rows(bucketed: Sequence[tuple[KeyGroup, str]]) -> str:
    """One row per distinct (bucket, word) among ``bucketed`` (each group with the column
    of its bucket, ``BK`` of ``bucket_of``), as an array of ``struct(m, w, bk)`` to explode
    (SQL text), its mask ``m`` the bits of the groups of word ``w`` whose bucket is ``bk``:
    the entry of a group is null when an earlier group of its word has its bucket (no
    groupBy). The first group's entry is never null."""
    entries = []
    for i, (group, mine) in enumerate(bucketed):
        same = [(j, other, theirs) for j, (other, theirs) in enumerate(bucketed)
                if other.word == group.word]
        earlier = [f"{theirs} = {mine}" for j, _, theirs in same if j < i]
        mask = " + ".join(
            f"{1 << other.bit}" if j == i else
            f"CASE WHEN {theirs} = {mine} THEN {1 << other.bit} ELSE 0 END"
            for j, other, theirs in same if j >= i)
        row = f"named_struct('m', CAST({mask} AS BIGINT), 'w', {group.word}, 'bk', {mine})"
        entries.append(f"CASE WHEN NOT ({' OR '.join(earlier)}) THEN {row} END"
                       if earlier else row)
    return f"array({', '.join(entries)})"


def spark_key(col: str, wire_type: str) -> str:
    """keystr of a str, i64 or bool value (SQL text of it) in SQL text (null stays
    null)."""
    if wire_type == "str":
        return col
    if wire_type == "i64":
        return f"CAST(CAST({col} AS BIGINT) AS STRING)"
    return f"CASE WHEN {col} THEN 'true' WHEN NOT {col} THEN 'false' END"


def _join_key(parts: Sequence[str]) -> str:
    """The canonical key of several keystr parts (each ``|`` escaped), null if any is, in
    SQL text."""
    if not parts:
        return "''"
    if len(parts) == 1:
        return parts[0]
    escaped = [f"replace({part}, '|', '%7C')" for part in parts]
    return "concat(" + ", '|', ".join(escaped) + ")"


def row_key(schema: StructType, keys: Sequence[str], floats: Mapping[str, str]) -> str:
    """The canonical key of the key columns ``keys`` of a spine of ``schema`` (SQL text),
    null when a part is null (or a non-finite float: no row has it); a float key's part is
    read from the column ``floats[key]`` holds its keystr in (``float_key``)."""
    from pyspark.sql import types as t

    parts = []
    for key in keys:
        data_type = schema[key].dataType
        if isinstance(data_type, t.StringType):
            parts.append(quoted(key))
        elif isinstance(data_type, t.IntegralType):
            parts.append(spark_key(quoted(key), "i64"))
        elif isinstance(data_type, t.BooleanType):
            parts.append(spark_key(quoted(key), "bool"))
        else:
            parts.append(quoted(floats[key]))
    return _join_key(parts)


def bucket_count(frames: Sequence[DataFrame]) -> int:
    """Buckets (and partitions) of the exchange: one per ``_BUCKET_BYTES`` of input when
    Spark's plan knows its size, at least ``spark.default.parallelism``, at most
    ``_BUCKETS_PER_CORE`` times that."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    assert spark is not None
    cores = max(1, spark.sparkContext.defaultParallelism)
    size = 0
    for frame in frames:
        try:
            size += int(frame._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()
                        .toString())
        except Exception:  # no JVM plan (Spark Connect): go by the cores alone
            return cores
    return min(cores * _BUCKETS_PER_CORE, max(cores, math.ceil(size / _BUCKET_BYTES)))


def bucket_of(key: str, buckets: int) -> str:
    """``BK`` of a canonical key (SQL text of it), in SQL text: its bucket,
    ``pmod(xxhash64(key), buckets)``, as the int that Spark's hash partitioning sends to
    the partition of that number (``partition_keys``): one bucket per partition, none
    sharing one."""
    keys = ", ".join(map(str, partition_keys(buckets)))
    return f"element_at(array({keys}), CAST(pmod(xxhash64({key}), {buckets}) + 1 AS INT))"


@functools.cache
def partition_keys(partitions: int) -> tuple[int, ...]:
    """For each partition p, an int that ``repartition(partitions, column)`` sends to p:
    Spark's hash partitioning takes ``pmod(murmur3(value, seed 42), partitions)``, which
    sends the ints 0..n-1 themselves to fewer than n partitions (two buckets would often
    share one of two tasks)."""
    found: dict[int, int] = {}
    value = 0
    while len(found) < partitions:
        found.setdefault(_murmur3_int(value) % partitions, value)
        value += 1
    return tuple(found[p] for p in range(partitions))


def _murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's ``Murmur3Hash`` of an int (Murmur3_x86_32 of 4 bytes), as a signed int."""
    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF

    k = rotl((value * 0xCC9E2D51) & 0xFFFFFFFF, 15) * 0x1B873593 & 0xFFFFFFFF
    h = (rotl(seed ^ k, 13) * 5 + 0xE6546B64) & 0xFFFFFFFF
    h ^= 4
    h = ((h ^ (h >> 16)) * 0x85EBCA6B) & 0xFFFFFFFF
    h = ((h ^ (h >> 13)) * 0xC2B2AE35) & 0xFFFFFFFF
    h ^= h >> 16
    return h - (1 << 32) if h >= 1 << 31 else h


def replay_stream(rows: Sequence[DataFrame], buckets: int) -> DataFrame:
    """``rows`` (each ``(M, W, BK, T, P, O, E, S, V0, ...)``, same columns) in one
    stream, repartitioned once by bucket into ``buckets`` partitions (bucket b into
    partition b), each sorted by (time, phase, order, event, seq): time leads, so Spark's
    sort compares the 64-bit prefix of the time alone and whole rows only where times tie."""
    out = rows[0]
    for frame in rows[1:]:
        out = out.unionByName(frame)
    return out.repartition(buckets, BK).sortWithinPartitions(T, P, O, E, S)


def _frame(rdd: Any, schema: Any) -> DataFrame:
    """A DataFrame of the tuples a task yields (Spark's classic API: no pandas needed)."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    assert spark is not None
    return spark.createDataFrame(rdd, schema, verifySchema=False)


# -- task side --------------------------------------------------------------------------------


def refusal(event: str, time: int | None, body: str, code: str) -> str:
    """The message of an event row that cannot be replayed: the server's error code and
    the row (its body cut at 500 characters)."""
    if time is None:
        return f"an event {event} has a null time: {body[:500]}"
    shown = body if len(body) <= 500 else body[:500] + "..."
    return (f"event {event} at {time} ms is refused as the server would refuse its push "
            f"({code}): {shown}")


def _body(row: Sequence[Any], fields: Sequence[tuple[int, str]]) -> dict[str, Any]:
    """The body of an event from its row's field values (a null value is left out)."""
    return {name: row[at] for at, name in fields if row[at] is not None}


def new_replay(payload: bytes, refused: Refused) -> Replay:
    """A ``beava.offline.Replay`` of ``payload`` in a task."""
    from beava.offline import Replay

    try:
        return Replay(payload)
    except ValueError as err:
        raise refused(f"in the task: {err}") from None


def group_masks(batch: pa.RecordBatch, groups: Mapping[tuple[int, int], int]
                ) -> Iterator[tuple[int, pa.Array, int]]:
    """``(group, mask, bit)`` for each group with rows in a batch of the stream: its
    number (``groups[(word, bit)]``), the mask column its rows have ``bit`` set in (rows
    of another word zeroed) and the bit: ``replay_part``'s mask."""
    import numpy as np
    import pyarrow as pa

    masks = batch.column(M)
    words = batch.column(W).to_numpy(zero_copy_only=False)
    values = masks.to_numpy(zero_copy_only=False)
    for word in np.unique(words).tolist():
        mine = words == word
        mask = masks if mine.all() else pa.array(np.where(mine, values, 0), pa.int64())
        present = int(np.bitwise_or.reduce(values[mine]))
        for bit in range(WORD_BITS):
            if present >> bit & 1:
                yield groups[(word, bit)], mask, bit


def replay_part(replay: Replay, part: pa.RecordBatch, events: tuple[str, ...],
                fields: tuple[tuple[tuple[int, str], ...], ...], values: ValueColumns,
                refused: Refused, reads: Sequence[tuple[str, Sequence[FeatureInfo]]] = (),
                mask: tuple[pa.Array, int] | None = None, key: int | None = None
                ) -> tuple[list[int], list[Any]]:
    """``Replay.replay_batch`` of one group's rows of a batch of the stream (``fields``:
    its fields by event code; ``mask``: its mask column and bit, of ``group_masks``;
    ``key``: the value column holding a read row's key, ``ValueColumns.key_slot``; None
    when nothing is read); a refused event raises ``refused`` naming it and its body."""
    import pyarrow as pa

    from beava.offline import ReplayRefused

    keys = (pa.nulls(part.num_rows, pa.string()) if key is None else
            part.column(values.names[key]))
    columns = [part.column(E), part.column(T), keys,
               *[part.column(name) for name in values.names]]
    batch = pa.RecordBatch.from_arrays(columns, names=["code", "time", "key", *values.names])
    try:
        return replay.replay_batch(batch, events, fields, reads, *(mask or ()))
    except ReplayRefused as err:
        assert err.row is not None
        row = [column[err.row].as_py() for column in columns]
        body = _body(row, [(3 + at, name) for at, name in fields[row[0]]])
        raise refused(refusal(err.event, err.time_ms, _encode_json(body).decode(),
                              err.code)) from None


def _dedupe_task(rows: Iterable[Any], *, payload: bytes, event: str,
                 at: tuple[int, tuple[tuple[int, str], ...]], refused: Refused
                 ) -> Iterator[Any]:
    """Drop the events the server answers as dedupe replays (rows in push order)."""
    from beava.offline import ReplayRefused

    replay = new_replay(payload, refused)
    t, fields = at
    seen = 0
    for row in rows:
        time, body = row[t], _body(row, fields)
        if time is None:
            raise refused(refusal(event, None, _encode_json(body).decode(), "null_time"))
        try:
            replayed = replay.push(event, time, body)
        except ReplayRefused as err:
            raise refused(refusal(event, time, _encode_json(body).decode(),
                                  err.code)) from None
        if not replayed:
            yield row
        seen += 1
        if seen >= 100_000:  # forget the entries whose window has passed
            replay.sweep_dedupe()
            seen = 0


def _key_task(rows: Iterable[Any], *, payload: bytes, table: str, event: str,
              fields: tuple[tuple[int, str], ...], refused: Refused) -> Iterator[Any]:
    """Append its key (``K``) to each row of an ``event_stream`` of ``event`` (its fields at
    ``fields``): the table's chain and key function applied to the event (the engine's
    own); drop the events the table skips."""
    from beava.offline import ReplayRefused

    replay = new_replay(payload, refused)
    for row in rows:
        time, body = row[0], _body(row, fields)
        try:
            key = replay.key_of(table, event, time, body)
        except ReplayRefused as err:
            raise refused(refusal(event, time, _encode_json(body).decode(),
                                  err.code)) from None
        if key is not None:
            yield (*row, key)
