"""The offline door into the engine: replay events through the server's own feature store
at times the caller chooses, and read rows as a GET at a chosen time would.

Tools that compute features away from a running server (the Spark connector's
``historical_features`` and ``backfill``) use this module and nothing else of the engine,
so what they compute is what the server computes, and the engine may change behind it.

- :class:`Pipeline` compiles a registry (a register payload, or what ``App.register``
  takes) as the server would, and describes its events and tables (keys, feeding events,
  feature value kinds, the payload that computes one table alone).
- :class:`Replay` is one feature store with a settable clock: ``push`` an event at its time
  (validated, deduplicated and applied as a live push), ``get`` a row at a time, ``state``
  of a table as the backfill operation uploads it, ``key_of`` the entity key an event lands
  on in a table, and ``replay_batch``: the events and reads of one Arrow batch applied in
  one C loop (``beava._fast.intake.replay_batch``), the fast path of a long history, its
  reads' features written into Arrow arrays' buffers.
- :func:`gc_paused` keeps the garbage collector away from the long-lived state a replay
  builds (a collection would walk all of it, again and again, for nothing).
- :func:`page_columns` reads a whole MessagePack scan page into Arrow column buffers (a
  map or list feature as its JSON text, as ``spark.read.format("beava")`` hands it on),
  with no Python object per value.
"""

from __future__ import annotations

import gc
import math
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import msgspec

from beava._fast.intake.replay_batch import KINDS, NO_READ, READ, replay_rows
from beava._fast.ops.table_kernel import group_key
from beava._fast.wire.msgpack_json import page_columns
from beava.catalogue.errors import BeavaError
from beava.catalogue.operators import lookup
from beava.engine.expressions.chain_ops import chain_output_schema, compile_chain
from beava.engine.registry import EventSpec, Registry, empty_registry, register
from beava.engine.state.keys import keystr
from beava.engine.state.push_validation import validate_push
from beava.engine.state.reads import get
from beava.engine.store import FeatureStore

__all__ = ["ARROW_TYPES", "NO_READ", "READ", "EventSpec", "FeatureInfo", "Pipeline", "Replay",
           "ReplayRefused", "TableInfo", "float_key", "gc_paused", "page_columns"]

_encode_json = msgspec.json.Encoder(order="sorted").encode  # GET's JSON encoder
_encode_msgpack = msgspec.msgpack.Encoder().encode
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# What a feature's value is in a GET row: long, double, boolean, string, or json (a list
# or map, or a value whose type depends on the data). Catalogue output -> kind;
# "inherits" takes the kind of the feature's field.
_OUTPUT_KINDS = {"i64": "long", "epoch_ms": "long", "f64": "double", "bool": "boolean",
                 "list": "json", "map": "json", "top_k": "json", "i64_list": "json"}
_FIELD_KINDS = {"i64": "long", "f64": "double", "bool": "boolean", "str": "string",
                "datetime": "string"}
# The pyarrow type (its factory's name) of a value of each kind: a json value is its text.
ARROW_TYPES = {"long": "int64", "double": "float64", "boolean": "bool_", "string": "string",
               "json": "string"}


class ReplayRefused(ValueError):
    """A push the server would refuse: ``code`` is its error code (spec/wire.md §5.2)."""

    def __init__(self, event: str, time_ms: int | None, code: str, row: int | None = None
                 ) -> None:
        super().__init__(f"a push of {event} at {time_ms} ms is refused ({code})")
        self.event = event
        self.time_ms = time_ms
        self.code = code
        self.row = row  # its index in the batch (Replay.replay_batch), else None


@dataclass(frozen=True)
class FeatureInfo:
    name: str
    kind: str  # long, double, boolean, string, json


@dataclass(frozen=True)
class TableInfo:
    """One table of a :class:`Pipeline`."""

    name: str
    source: str  # the root event source its rows come from
    keys: tuple[str, ...]  # group-by key fields (empty: a global table)
    chained: bool  # filter / select / with_columns steps between the source and the table
    events: tuple[str, ...]  # every event whose pushes reach the table
    features: tuple[FeatureInfo, ...]  # by name
    payload: bytes  # register payload of every event source and this table alone


class Pipeline:
    """A registry compiled as the server compiles it (``ValueError`` with the server's
    error when it would not register)."""

    def __init__(self, registry: Any) -> None:
        from beava.dsl.compiler import compile_register_payload

        if isinstance(registry, Mapping) and "nodes" in registry:
            nodes = list(registry["nodes"])
        elif isinstance(registry, (list, tuple)):
            nodes = compile_register_payload(*registry)["nodes"]
        else:
            nodes = compile_register_payload(registry)["nodes"]
        outcome = register(empty_registry(), _encode_json({"nodes": nodes}),
                           memory_governance_enforce=False)
        if outcome.registry is None:
            error = outcome.body.get("error", outcome.body)
            raise ValueError(f"the registry does not register: {error}")
        self._compiled: Registry = outcome.registry
        self.nodes: list[Mapping[str, Any]] = nodes

    @property
    def events(self) -> Mapping[str, EventSpec]:
        """Every event source, by name."""
        return self._compiled.events

    @property
    def table_names(self) -> list[str]:
        return list(self._compiled.tables)

    def table(self, name: str) -> TableInfo:
        spec = self._compiled.tables[name]
        schema = chain_output_schema(spec.chain, spec.input_schema)
        features = []
        for fname, feature in spec.features.items():
            op = lookup(feature.op)
            output = op.output if op is not None else ""
            if output == "inherits":
                field = feature.params.get("field")
                kind = _FIELD_KINDS.get(schema.get(field, "") if isinstance(field, str)
                                        else "", "json")
            else:
                kind = _OUTPUT_KINDS.get(output, "json")
            features.append(FeatureInfo(fname, kind))
        feeding = tuple(e for e in self._compiled.events
                        if any(t.name == name for t in self._compiled.feeds(e)))
        return TableInfo(name, spec.source, spec.keys, bool(spec.chain), feeding,
                         tuple(features), _encode_json({"nodes": self._nodes_for(name)}))

    def payload(self, tables: Sequence[str],
                narrowed: Mapping[str, Collection[str]] | None = None) -> bytes:
        """Register payload of every event source and ``tables`` (with the derivations
        they read from): one store that computes them together. An event of ``narrowed``
        is declared with only the fields given (see :meth:`fields_read`): bodies holding
        just those fields pass its checks."""
        needed: set[str] = set()
        for table in tables:
            needed.update(node["name"] for node in self._nodes_for(table))
        nodes = []
        for node in self.nodes:
            if node["name"] not in needed:
                continue
            if narrowed is not None and node["name"] in narrowed:
                node = _narrowed(node, narrowed[node["name"]])
            nodes.append(node)
        return _encode_json({"nodes": nodes})

    def fields_read(self, tables: Sequence[str], event: str) -> tuple[str, ...]:
        """The fields of ``event`` that ``tables`` may read, for tables without a chain: a
        superset (every field named anywhere in their nodes: keys, features' fields, where
        expressions) and the dedupe key; in declaration order."""
        spec = self.events[event]
        named = {spec.dedupe_key} if spec.dedupe_key else set()
        by_name = {node["name"]: node for node in self.nodes}
        for table in tables:
            named.update(_IDENTIFIER.findall(_encode_json(by_name[table]).decode()))
        declared = [*spec.fields, *(f for f in spec.optional if f not in spec.fields)]
        return tuple(f for f in declared if f in named)

    def upstreams(self, table: str) -> tuple[str, ...]:
        """The nodes ``table`` reads from (an event source, or the derivation whose chain
        it follows)."""
        node = next(n for n in self.nodes if n["name"] == table)
        return tuple(node.get("upstreams") or ())

    def events_payload(self) -> bytes:
        """Register payload of the event sources alone (dedupe needs no table)."""
        return _encode_json({"nodes": [n for n in self.nodes if n.get("kind") == "event"]})

    def _nodes_for(self, table: str) -> list[Mapping[str, Any]]:
        """Every event source, and the table with the derivations it reads from."""
        by_name = {node["name"]: node for node in self.nodes}
        needed = set()
        todo = [table]
        while todo:
            name = todo.pop()
            if name in needed or name not in by_name:
                continue
            needed.add(name)
            todo.extend(by_name[name].get("upstreams") or ())
        return [node for node in self.nodes
                if node.get("kind") == "event" or node["name"] in needed]


def _narrowed(node: Mapping[str, Any], fields: Collection[str]) -> dict[str, Any]:
    """An event node declaring only ``fields`` of its schema."""
    schema = node["schema"]
    kept = {**schema, "fields": {k: v for k, v in schema["fields"].items() if k in fields}}
    if "optional_fields" in schema:
        kept["optional_fields"] = [f for f in schema["optional_fields"] if f in fields]
    if "defaults" in schema:
        kept["defaults"] = {k: v for k, v in schema["defaults"].items() if k in fields}
    return {**node, "schema": kept}


class _Clock:
    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class Replay:
    """One memory-only feature store on a register payload (``payload`` of a
    :class:`TableInfo`, or :meth:`Pipeline.events_payload`), with a clock set by each call."""

    def __init__(self, payload: bytes) -> None:
        self._clock = _Clock()
        self._store = FeatureStore(clock=self._clock, memory_governance_enforce=False)
        status, body = self._store.register(payload)
        if status != 200:
            raise ValueError(f"the registry does not register: {body}")
        self._chains: dict[str, Any] = {}

    def push(self, event: str, time_ms: int, fields: Any) -> bool:
        """Push ``fields`` to ``event`` at ``time_ms`` as a live push; True when the server
        answers it as a dedupe replay (nothing applied). Raises :class:`ReplayRefused`."""
        self._clock.now = time_ms
        try:
            return self._store.push(event, fields)[2]
        except BeavaError as err:
            raise ReplayRefused(event, time_ms, err.code) from None

    def get(self, table: str, key: Sequence[Any] | str, time_ms: int) -> dict[str, Any]:
        """The row a GET of ``key`` at ``time_ms`` answers (``{}``: no row, or a key GET
        refuses, such as a null part)."""
        self._clock.now = time_ms
        try:
            return get(self._store.table, {"table": table, "key": key},
                       self._store.query_time())
        except BeavaError:
            return {}

    def replay_batch(self, batch: Any, events: tuple[str, ...],
                     fields: Sequence[Sequence[tuple[int, str]]],
                     reads: Sequence[tuple[str, Sequence[FeatureInfo]]] = (),
                     mask: Any = None, bit: int = 0) -> tuple[list[int], list[Any]]:
        """Apply the rows of an Arrow batch in order, in one C loop (no :meth:`push` per
        row). ``batch``: any object with ``__arrow_c_array__`` (a ``pyarrow.RecordBatch``)
        holding ``code`` (int32: an index into ``events``, or :data:`READ`, or
        :data:`NO_READ` for a row that reads nothing), ``time`` (int64 epoch ms), ``key``
        (text: a read's canonical key), then value columns (int64, float64, bool, text or
        null). ``fields[code]``: the ``(value column, field name)`` pairs of that event's
        fields (value column 0 is the batch's fourth column; a null value is an absent
        field). Rows must be in time order. Each event is checked exactly as a live push
        of those fields and applied to the store's tables at its own time; dedupe is not
        applied (remove replays first, over the whole history). A read row gets the GET
        row of its key at its time in each table of ``reads`` (``(table, its
        features)``): returns the read rows' indexes and one ``pyarrow.Array`` per
        feature (tables in order, the type :data:`ARROW_TYPES` gives its kind), each value
        as its kind says (long, double: non-finite as null, boolean, string, json: GET's
        JSON text; null where the key has no row), written by the C loop into the
        arrays' buffers. With ``mask`` (an int64 Arrow array, one value per row, no null),
        the rows whose mask lacks ``bit`` are skipped: they belong to other stores sharing
        the batch. Raises
        :class:`ReplayRefused` (with ``row``) at the first event the server would refuse;
        the events before it are applied."""
        import pyarrow as pa  # type: ignore[import-untyped]

        rows: list[int] = []
        tables = [(state.keys, tuple((f.name, state.column(f.name), KINDS.index(f.kind))
                                     for f in features))
                  for state, features in ((self._store.table(name), features)
                                          for name, features in reads)]
        buffers: list[tuple[bytes, bytes, bytes | None, int]] = []
        refused = replay_rows(batch, self._store.engine.routes, self._store.checkers,
                              events, tuple(tuple(f) for f in fields), tables, _encode_json,
                              rows, buffers, mask, bit)
        if refused is not None:
            row, event, time_ms, code = refused
            raise ReplayRefused(event, time_ms, code, row)
        kinds = [f.kind for _, features in reads for f in features]
        columns = []
        for kind, (valid, values, offsets, nulls) in zip(kinds, buffers, strict=True):
            parts = [pa.py_buffer(valid) if nulls else None]
            if offsets is not None:
                parts.append(pa.py_buffer(offsets))
            parts.append(pa.py_buffer(values))
            columns.append(pa.Array.from_buffers(getattr(pa, ARROW_TYPES[kind])(), len(rows),
                                                 parts, null_count=nulls))
        return rows, columns

    def state(self, table: str) -> bytes:
        """The table's whole state as the backfill operation uploads it (MessagePack)."""
        return bytes(_encode_msgpack(self._store.table(table).dump()))

    def sweep_dedupe(self) -> None:
        """Forget the dedupe entries whose window has passed at the clock's time."""
        self._store.sweep_dedupe()

    def key_of(self, table: str, event: str, time_ms: int, fields: Any) -> str | None:
        """The canonical key the push lands on in ``table`` (after the table's chain), None
        when the chain drops it or a key is null. Nothing is applied; raises
        :class:`ReplayRefused` for a push the server would refuse."""
        spec = self._store.registry.tables[table]
        if table not in self._chains:
            self._chains[table] = (compile_chain(spec.chain, spec.input_schema)
                                   if spec.chain else None)
        chain = self._chains[table]
        try:
            _, row = validate_push(event, fields, self._store.checkers)
        except BeavaError as err:
            raise ReplayRefused(event, time_ms, err.code) from None
        out = chain(dict(row)) if chain is not None else row
        return group_key(out, spec.keys) if out is not None else None


@contextmanager
def gc_paused() -> Iterator[None]:
    """No garbage collection inside the block (restored after, as it was): a replay's
    state is long-lived, and each collection would walk all of it; the reference
    cycles made inside it wait for the first collection after it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def float_key(value: float | None) -> str | None:
    """The canonical key text of a float key part (spec/wire.md §7.1); None for null or a
    non-finite value, which no row has."""
    if value is None or not math.isfinite(value):
        return None
    return keystr(float(value))
