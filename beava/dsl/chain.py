"""Chain methods (spec/sdk.md §4) and the objects they build.

``EventDerivation`` is an event stream: a root event source plus the wire steps applied to
it, with the schema tracked through them (§7.4). Every method returns a new object (a
receiver is never changed). ``group_by`` returns a ``GroupBy`` whose only method, ``agg``,
returns the ``Aggregation`` a ``@bv.table`` function must return.

``Event`` and ``Table`` are the types user code names (``bv.Event``, ``bv.Table``): an
``EventDerivation`` is an ``Event``, an ``Aggregation`` a ``Table``, and an event class
that derives from ``Event`` shows type checkers the chain methods ``@bv.event`` gives it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from beava.catalogue.errors import with_known_names
from beava.catalogue.operators import FieldUse, lookup
from beava.dsl.expressions import CAST_TARGETS, Expr, Lit, cast_target, infer_type
from beava.dsl.operators import AggDescriptor

if TYPE_CHECKING:
    from beava.dsl.upstreams import Deferred

__all__ = [
    "CHAIN_METHODS", "Aggregation", "Event", "EventDerivation", "GroupBy", "Table",
    "is_event_source", "stream_of",
]

Step = dict[str, Any]


class Event:
    """An event stream, as type checkers see it: what ``@bv.event`` functions return
    (``-> bv.Event``), and the base an event class may derive from
    (``@bv.event class Txn(bv.Event)``) so that ``txn.group_by(...)`` type-checks (the
    decorator gives the class these methods). A parameter annotated ``bv.Event`` is bound
    by its name when the pipeline is registered, like an unannotated one (sdk.md §2.3).
    """

    __slots__ = ()

    if TYPE_CHECKING:  # implemented by EventDerivation; set on event classes by @bv.event
        def filter(self, expr: Expr) -> Event: ...
        def select(self, *fields: str) -> Event: ...
        def drop(self, *fields: str) -> Event: ...
        def rename(self, mapping: Mapping[str, str] | None = None, /, **kw: str) -> Event: ...
        def with_columns(self, **exprs: Any) -> Event: ...
        def map(self, **exprs: Any) -> Event: ...
        def cast(self, **type_map: str | type) -> Event: ...
        def fillna(self, **defaults: str | int | float | bool) -> Event: ...
        def group_by(self, *keys: str) -> GroupBy: ...
        def agg(self, **features: Any) -> Aggregation: ...
        def named(self, name: str) -> Event: ...


class Table:
    """What a ``@bv.table`` function returns (``-> bv.Table``): ``group_by(...).agg(...)``."""

    __slots__ = ()


class EventDerivation(Event):
    """An event stream derived from a root event source by chain methods.

    Made by ``@bv.event def`` (``_is_bv_event_function`` is then ``True`` and ``_name`` is
    the function name) or by calling a chain method (an undecorated chain, which cannot be
    registered on its own). ``_chain`` is the list of wire steps from the root source.
    """

    _kind = "event_derivation"
    __slots__ = ("_root", "_steps", "_columns", "_name", "_is_bv_event_function", "_deferred")

    def __init__(
        self,
        root: Any,
        steps: tuple[Step, ...],
        columns: dict[str, str],
        name: str | None = None,
        *,
        is_event_function: bool = False,
    ) -> None:
        self._root = root
        self._steps = steps
        self._columns = columns
        self._name = name
        self._is_bv_event_function = is_event_function
        self._deferred: Deferred | None = None

    @property
    def _chain(self) -> list[Step]:
        self._ready()
        return list(self._steps)

    @property
    def _schema(self) -> dict[str, str]:
        self._ready()
        return dict(self._columns)

    def __repr__(self) -> str:
        if self._deferred is not None:
            return f"<bv event {self._name} (upstream resolved at register time)>"
        root = getattr(self._root, "_name", "?")
        label = self._name if self._is_bv_event_function else "chain"
        return f"<bv event {label}: {root} + {len(self._steps)} step(s)>"

    def _ready(self) -> None:
        if self._deferred is not None:
            raise TypeError(
                f"event {self._name!r} has an unannotated parameter: its upstream is only "
                "known once it is registered (or annotate the parameter)"
            )

    def _extend(self, step: Step, columns: dict[str, str]) -> EventDerivation:
        return EventDerivation(self._root, (*self._steps, step), columns)

    def _built_from(self, stream: EventDerivation) -> bool:
        """Whether chain methods built this stream from ``stream`` (or it is ``stream``)."""
        n = len(stream._steps)
        return (
            self._root is stream._root
            and len(self._steps) >= n
            and all(a is b for a, b in zip(self._steps, stream._steps, strict=False))
        )

    # -- chain methods ---------------------------------------------------------------------

    def filter(self, expr: Expr) -> EventDerivation:
        """Keep the events for which ``expr`` is true."""
        self._ready()
        if not isinstance(expr, Expr):
            raise TypeError(
                f"filter() takes an expression (bv.col(...) ...), got {type(expr).__name__}"
            )
        return self._extend({"op": "filter", "expr": expr.to_expr_string()}, self._columns)

    def select(self, *fields: str) -> EventDerivation:
        """Keep exactly these columns, in this order."""
        self._ready()
        names = _field_names("select", fields)
        columns = {n: self._columns[n] for n in names if n in self._columns}
        return self._extend({"op": "select", "fields": names}, columns)

    def drop(self, *fields: str) -> EventDerivation:
        """Remove these columns (names not present are ignored)."""
        self._ready()
        names = _field_names("drop", fields)
        gone = set(names)
        columns = {n: t for n, t in self._columns.items() if n not in gone}
        return self._extend({"op": "drop", "fields": names}, columns)

    def rename(self, mapping: Mapping[str, str] | None = None, /, **kw: str) -> EventDerivation:
        """Rename columns ``{old: new}`` (a dict and/or keywords), keeping their positions."""
        self._ready()
        merged: dict[str, str] = {}
        if mapping is not None:
            if not isinstance(mapping, Mapping):
                raise TypeError(f"rename() takes a dict, got {type(mapping).__name__}")
            merged.update(mapping)
        merged.update(kw)
        if not merged:
            raise ValueError("rename() needs at least one old=new entry")
        for old, new in merged.items():
            if not isinstance(old, str) or not isinstance(new, str):
                raise TypeError(f"rename() entries must map str to str, got {old!r}: {new!r}")
        columns = {merged.get(n, n): t for n, t in self._columns.items()}
        return self._extend({"op": "rename", "mapping": merged}, columns)

    def with_columns(self, **exprs: Any) -> EventDerivation:
        """Add or overwrite columns; entries are evaluated in keyword order, each seeing
        the columns of the entries before it."""
        return self._derive("with_columns", exprs)

    def map(self, **exprs: Any) -> EventDerivation:
        """``with_columns`` under the seed's name (emitted as ``"op": "map"``)."""
        return self._derive("map", exprs)

    def _derive(self, op: str, exprs: dict[str, Any]) -> EventDerivation:
        self._ready()
        if not exprs:
            raise ValueError(f"{op}() needs at least one name=expression entry")
        columns = dict(self._columns)
        rendered: dict[str, str] = {}
        for name, value in exprs.items():
            expr = value if isinstance(value, Expr) else Lit(value)
            typ = infer_type(expr, columns)
            columns[name] = "str" if typ is None or typ == "null" else typ
            rendered[name] = expr.to_expr_string()
        return self._extend({"op": op, "exprs": rendered}, columns)

    def cast(self, **type_map: str | type) -> EventDerivation:
        """Convert columns to ``"str" "int" "float" "bool"`` (or the types)."""
        self._ready()
        targets = {name: cast_target(target) for name, target in type_map.items()}
        columns = dict(self._columns)
        for name, target in targets.items():
            if name in columns:
                columns[name] = CAST_TARGETS[target]
        return self._extend({"op": "cast", "type_map": targets}, columns)

    def fillna(self, **defaults: str | int | float | bool) -> EventDerivation:
        """Replace nulls of these columns with a scalar."""
        self._ready()
        for name, value in defaults.items():
            if value is None:
                raise ValueError(f"fillna({name}=None) fills nothing; give a scalar value")
            if not isinstance(value, (str, int, float)):
                raise TypeError(
                    f"fillna() values must be str, int, float or bool, got {type(value).__name__}"
                )
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"fillna({name}={value!r}): the value must be finite")
        return self._extend({"op": "fillna", "defaults": dict(defaults)}, self._columns)

    def group_by(self, *keys: str) -> GroupBy:
        """Group by these columns (none: one global group); follow with ``.agg(...)``."""
        self._ready()
        seen: set[str] = set()
        for key in keys:
            if not isinstance(key, str) or not key:
                raise TypeError(f"group_by() keys must be non-empty str, got {key!r}")
            if key in seen:
                raise ValueError(f"group_by() key {key!r} is repeated")
            if key not in self._columns:
                raise ValueError(with_known_names(
                    f"group_by() key {key!r} is not a column here", key, self._columns))
            seen.add(key)
        return GroupBy(self, keys)

    def agg(self, **features: Any) -> Aggregation:
        """Global aggregation: ``group_by().agg(**features)``."""
        return self.group_by().agg(**features)

    def named(self, name: str) -> EventDerivation:
        """A copy tagged with ``name`` (no effect on the wire)."""
        self._ready()
        if not isinstance(name, str):
            raise TypeError(f"named() takes a str, got {type(name).__name__}")
        return EventDerivation(self._root, self._steps, self._columns, name)


CHAIN_METHODS = (
    "filter", "select", "drop", "rename", "with_columns", "map", "cast", "fillna",
    "group_by", "agg", "named",
)


def _field_names(op: str, fields: tuple[Any, ...]) -> list[str]:
    if not fields:
        raise ValueError(f"{op}() needs at least one column name")
    for name in fields:
        if not isinstance(name, str):
            raise TypeError(f"{op}() takes column names (str), got {name!r}")
    return list(fields)


class GroupBy:
    """The result of ``group_by``: its only method is ``agg``."""

    __slots__ = ("_source", "_keys")

    def __init__(self, source: EventDerivation, keys: tuple[str, ...]) -> None:
        self._source = source
        self._keys = keys

    def __repr__(self) -> str:
        return f"<bv group_by {list(self._keys)}>"

    def agg(self, **features: Any) -> Aggregation:
        """Name the features: each an operator result (``bv.count(...)``) or a dict with
        an ``"op"`` key (passed through)."""
        if not features:
            raise ValueError("agg() needs at least one feature, e.g. agg(n=bv.count())")
        entries: dict[str, dict[str, Any]] = {}
        types: dict[str, str] = {}
        where_reads: dict[str, tuple[str, ...]] = {}
        columns = self._source._columns
        for name, feature in features.items():
            if isinstance(feature, AggDescriptor):
                wire = feature.to_dict()
                where_reads[name] = feature.where_columns
            elif isinstance(feature, dict) and "op" in feature:
                wire = dict(feature)
            else:
                raise TypeError(
                    f"agg({name}=...) must be an operator such as bv.count() or a dict with "
                    f"an 'op' key, got {type(feature).__name__}"
                )
            op = wire.pop("op")
            entries[name] = {"op": op, "params": wire}
            types[name] = _feature_type(op, wire.get("field"), columns)
        return Aggregation(self._source, self._keys, entries, types, where_reads)


def _feature_type(op: Any, field: Any, columns: Mapping[str, str]) -> str:
    """The schema type the SDK declares for a feature (§7.4): the catalogue's, or the
    tracked type of its field for the ops whose value is the field's own."""
    spec = lookup(op) if isinstance(op, str) else None
    if spec is None:
        return "str"
    if spec.wire_type is not None:
        return spec.wire_type
    return columns.get(field, "str") if isinstance(field, str) else "str"


class Aggregation(Table):
    """``group_by(...).agg(...)``: what a ``@bv.table`` function returns."""

    _kind = "aggregation"
    __slots__ = ("_source", "_keys", "_agg", "_types", "_where_reads")

    def __init__(
        self,
        source: EventDerivation,
        keys: tuple[str, ...],
        agg: dict[str, dict[str, Any]],
        types: dict[str, str],
        where_reads: dict[str, tuple[str, ...]],
    ) -> None:
        self._source = source
        self._keys = keys
        self._agg = agg
        self._types = types
        self._where_reads = where_reads  # feature -> the columns its where= reads

    def unknown_column(self) -> tuple[str, str, str] | None:
        """The first ``(feature, param, column)`` naming a column the aggregated events do
        not have: a feature's ``field`` (for the operators whose field the register checks)
        or a column its ``where`` reads; None when every column exists."""
        columns = self._source._columns
        for feature, entry in self._agg.items():
            field = entry["params"].get("field")
            spec = lookup(entry["op"]) if isinstance(entry["op"], str) else None
            if (spec is not None and spec.field in (FieldUse.CHECKED, FieldUse.REQUIRED)
                    and isinstance(field, str) and field not in columns):
                return feature, "field", field
            for name in self._where_reads.get(feature, ()):
                if name not in columns:
                    return feature, "where", name
        return None

    def __repr__(self) -> str:
        return f"<bv aggregation by {list(self._keys)}: {', '.join(self._agg)}>"

    def group_by_step(self) -> Step:
        """The wire step ``{"op": "group_by", "keys", "agg"}``."""
        return {"op": "group_by", "keys": list(self._keys), "agg": self._agg}

    def output_schema(self) -> dict[str, str]:
        """Key columns (tracked types) then the features (§7.4)."""
        columns = self._source._columns
        out = {key: columns.get(key, "str") for key in self._keys}
        out.update(self._types)
        return out


def is_event_source(obj: object) -> bool:
    """Whether ``obj`` is a class decorated with ``@bv.event``."""
    return isinstance(obj, type) and isinstance(obj.__dict__.get("_bv_stream"), EventDerivation)


def stream_of(upstream: Any) -> EventDerivation:
    """The stream of an event source class or an event derivation."""
    if isinstance(upstream, EventDerivation):
        return upstream
    stream: EventDerivation = upstream.__dict__["_bv_stream"]
    return stream
