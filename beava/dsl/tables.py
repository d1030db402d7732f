"""``@bv.table``: aggregation tables (spec/sdk.md §3)."""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable
from typing import Any, NoReturn, overload

from beava.catalogue.errors import with_known_names
from beava.dsl.chain import Aggregation, stream_of
from beava.dsl.upstreams import Deferred, bind_upstream, event_parameter
from beava.errors import DescriptorError

__all__ = ["TableDescriptor", "table"]


class TableDescriptor:
    """A table declared with ``@bv.table``: ``_name`` (the function name), ``_key_cols``,
    ``_parent`` (the event it aggregates), ``_chain`` (its wire steps). It has no chain
    methods and cannot feed another descriptor."""

    _kind = "table"
    __slots__ = ("_name", "_key_cols", "_parent", "_aggregation", "_deferred")

    def __init__(self, name: str, key_cols: list[str]) -> None:
        self._name = name
        self._key_cols = key_cols
        self._parent: Any = None
        self._aggregation: Aggregation | None = None
        self._deferred: Deferred | None = None

    @property
    def _chain(self) -> list[dict[str, Any]]:
        ops: list[dict[str, Any]] = self.node()["ops"]
        return ops

    def __repr__(self) -> str:
        keys = ", ".join(self._key_cols) or "global"
        return f"<bv table {self._name} ({keys})>"

    def _resolved(self) -> Aggregation:
        agg = self._aggregation
        if agg is None:
            raise TypeError(
                f"table {self._name!r} has an unannotated parameter: its upstream is only "
                "known once it is registered (or annotate the parameter)"
            )
        return agg

    def root_source(self) -> Any:
        """The event source class at the root of the table's chain."""
        return self._resolved()._source._root

    def node(self) -> dict[str, Any]:
        """The register node (sdk.md §7.3); the chain is flattened from the root source."""
        agg = self._resolved()
        ops = copy.deepcopy([*agg._source._steps, agg.group_by_step()])
        return {
            "kind": "derivation",
            "name": self._name,
            "output_kind": "table",
            "upstreams": [agg._source._root._name],
            "ops": ops,
            "schema": {"fields": agg.output_schema(), "optional_fields": []},
            "table_primary_key": list(self._key_cols),
        }


@overload
def table(target: Callable[..., Any], /) -> TableDescriptor: ...


@overload
def table(
    target: None = None, /, *, key: str | list[str] | tuple[str, ...] | None = None
) -> Callable[[Callable[..., Any]], TableDescriptor]: ...


def table(
    target: Any = None, /, *, key: str | list[str] | tuple[str, ...] | None = None
) -> Any:
    """Declare a table: ``@bv.table(key="user_id")`` (or a list for a composite key);
    ``@bv.table`` / ``@bv.table()`` without a key declares a global table."""
    keys = _key_list(key)
    if target is None:
        return lambda fn: _decorate(fn, keys)
    return _decorate(target, keys)


def _key_list(key: object) -> list[str]:
    if key is None:
        return []
    if isinstance(key, str):
        names = [key]
    elif isinstance(key, (list, tuple)):
        names = list(key)
    else:
        raise TypeError(f"key must be a str or a list of str, got {type(key).__name__}")
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"key names must be str, got {name!r}")
        if not name:
            raise ValueError("key names must be non-empty")
    if len(set(names)) != len(names):
        raise ValueError(f"key names must be distinct, got {names!r}")
    return names


def _decorate(target: Any, keys: list[str]) -> TableDescriptor:
    if isinstance(target, type):
        raise DescriptorError(
            code="bv_table_class_form_not_supported",
            path=target.__name__,
            message=(
                f"@bv.table on class {target.__name__}: declare tables as functions "
                "returning events.group_by(...).agg(...)"
            ),
        )
    if not inspect.isfunction(target):
        raise TypeError(
            f"@bv.table decorates a function, got {type(target).__name__} "
            "(give the key as @bv.table(key=...))"
        )
    fn: Callable[..., Any] = target
    param = event_parameter(fn, "table")
    desc = TableDescriptor(fn.__name__, keys)
    bind_upstream(desc, param, functools.partial(_complete, desc, fn))
    return desc


def _complete(desc: TableDescriptor, fn: Callable[..., Any], upstream: Any) -> None:
    stream = stream_of(upstream)
    result = fn(upstream)
    name = desc._name
    if not isinstance(result, Aggregation) or not result._source._built_from(stream):
        _fail(
            "bad_return_type", name,
            f"{name} must return {fn.__code__.co_varnames[0]}.group_by(...).agg(...) or "
            f"{fn.__code__.co_varnames[0]}.agg(...), got {result!r}",
        )
    if list(result._keys) != desc._key_cols:
        _fail(
            "table_key_invalid", name,
            f"{name}: group_by keys {list(result._keys)} differ from the table key "
            f"{desc._key_cols} (same names, same order; none for a global table)",
        )
    unknown = result.unknown_column()
    if unknown is not None:  # the register would refuse it; say so where it is written
        feature, param, column = unknown
        text = (f"field {column!r} does not exist in upstream schema" if param == "field"
                else f"where predicate references unknown field {column!r}")
        _fail(
            "aggregation_unknown_field" if param == "field" else "aggregation_invalid_where",
            f"{name}.ops[{len(result._source._steps)}].agg.{feature}.params.{param}",
            with_known_names(text, column, result._source._columns),
        )
    desc._parent = upstream
    desc._aggregation = result
    desc._deferred = None


def _fail(code: str, name: str, message: str) -> NoReturn:
    raise DescriptorError(code=code, path=name, message=message)
