"""Stateless chain ops: register-time checks, output schema, compilation (expressions.md §10).

A chain compiles to ONE generated Python function `row -> row | None`: the ops become
straight-line statements in order, each filter an early `return None`, each expression
inlined by the expression code generator. A filter on a numeric field therefore costs one
Python call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from beava.catalogue.errors import with_known_names
from beava.catalogue.expression_grammar import CAST_TARGETS, I64_MAX, I64_MIN
from beava.engine.expressions import check_expression
from beava.engine.expressions.codegen import FunctionBuilder
from beava.engine.expressions.nodes import (
    DETAIL_INVALID_CAST_TARGET,
    DETAIL_SCHEMA_MISMATCH,
    DETAIL_UNKNOWN_FIELD,
    Expr,
    ExpressionError,
)

CHAIN_OPS = ("filter", "select", "drop", "rename", "with_columns", "map", "cast", "fillna")

INVALID_EXPRESSION = "invalid_expression"
INVALID_REGISTRATION = "invalid_registration"


class ChainOpError(Exception):
    """The first failing op of a chain.

    `index` is the op's position in the list; the registry builds the wire path as
    `nodes[i].ops[<index>]` + `path_suffix` (or `<body>` for invalid_registration).
    """

    def __init__(
        self, index: int, code: str, path_suffix: str, reason: str, detail: str | None = None
    ) -> None:
        super().__init__(reason)
        self.index = index
        self.code = code
        self.path_suffix = path_suffix
        self.reason = reason
        self.detail = detail


# A checked op, ready to compile: (kind, payload).
_Step = tuple[str, Any]


def chain_output_schema(
    ops: Sequence[Mapping[str, Any]], schema: Mapping[str, str]
) -> dict[str, str]:
    """Check `ops` in order against `schema`; return the schema after the last op."""
    return _plan(ops, schema)[0]


def compile_chain(
    ops: Sequence[Mapping[str, Any]], schema: Mapping[str, str]
) -> Callable[[dict[str, Any]], dict[str, Any] | None]:
    """One function mapping an input row to the output row, or None when a filter drops it.

    It may mutate and return its argument.
    """
    steps = _plan(ops, schema)[1]
    builder = FunctionBuilder("_chain")
    for kind, payload in steps:
        _EMITTERS[kind](builder, payload)
    builder.line("return row")
    return builder.build()


# --- register-time checks -------------------------------------------------------------------


def _plan(
    ops: Sequence[Mapping[str, Any]], schema: Mapping[str, str]
) -> tuple[dict[str, str], list[_Step]]:
    current = dict(schema)
    steps: list[_Step] = []
    for index, op in enumerate(ops):
        name = op.get("op") if isinstance(op, Mapping) else None
        if name not in CHAIN_OPS:
            raise ChainOpError(
                index,
                INVALID_REGISTRATION,
                "",
                f"unknown chain op {name!r}; expected one of {', '.join(CHAIN_OPS)}",
            )
        checker = _CHECKERS[str(name)]
        current, payload = checker(index, op, current)
        steps.append((str(name), payload))
    return current, steps


def _shape_error(index: int, op: Mapping[str, Any], key: str, wanted: str) -> ChainOpError:
    return ChainOpError(
        index, INVALID_REGISTRATION, "", f"{op.get('op')} op needs {key!r} as {wanted}"
    )


def _unknown_field(index: int, name: str, schema: Mapping[str, str]) -> ChainOpError:
    return ChainOpError(
        index,
        INVALID_EXPRESSION,
        ".expr",
        with_known_names(f"field '{name}' not found in upstream schema", name, schema),
        DETAIL_UNKNOWN_FIELD,
    )


def _expression(index: int, text: str, schema: Mapping[str, str]) -> tuple[Expr, str]:
    try:
        return check_expression(text, schema)
    except ExpressionError as exc:
        # Parse errors and unknown fields point at `.expr`; type failures at the op itself.
        suffix = ".expr" if exc.detail in (None, DETAIL_UNKNOWN_FIELD) else ""
        raise ChainOpError(index, INVALID_EXPRESSION, suffix, exc.reason, exc.detail) from None


def _names(index: int, op: Mapping[str, Any]) -> list[str]:
    fields = op.get("fields")
    if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
        raise _shape_error(index, op, "fields", "a list of strings")
    return list(dict.fromkeys(fields))  # a repeated name counts once, at its first position


def _string_map(index: int, op: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = op.get(key)
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise _shape_error(index, op, key, "an object")
    return value


def _check_filter(
    index: int, op: Mapping[str, Any], schema: dict[str, str]
) -> tuple[dict[str, str], Expr]:
    text = op.get("expr")
    if not isinstance(text, str):
        raise _shape_error(index, op, "expr", "a string")
    expr, _ = _expression(index, text, schema)
    return schema, expr  # a non-bool filter is legal: it drops every row


def _check_select(
    index: int, op: Mapping[str, Any], schema: dict[str, str]
) -> tuple[dict[str, str], list[str]]:
    names = _names(index, op)
    for name in names:
        if name not in schema:
            raise _unknown_field(index, name, schema)
    return {name: schema[name] for name in names}, names


def _check_drop(
    index: int, op: Mapping[str, Any], schema: dict[str, str]
) -> tuple[dict[str, str], list[str]]:
    names = _names(index, op)
    dropped = set(names)
    return {k: t for k, t in schema.items() if k not in dropped}, names


def _check_rename(
    index: int, op: Mapping[str, Any], schema: dict[str, str]
) -> tuple[dict[str, str], list[tuple[str, str]]]:
    mapping = _string_map(index, op, "mapping")
    pairs: list[tuple[str, str]] = []
    for old, new in mapping.items():
        if not isinstance(new, str):
            raise _shape_error(index, op, "mapping", "an object of strings")
        if old not in schema:
            raise _unknown_field(index, old, schema)
        if new != old and new in schema and new not in mapping:
            raise ChainOpError(
                index,
                INVALID_EXPRESSION,
                ".mapping",
                f"rename collision on field '{new}'",
                DETAIL_SCHEMA_MISMATCH,
            )
        pairs.append((old, new))
    # Two sources renamed to one name: the entry that comes last in the mapping wins.
    winner = {new: schema[old] for old, new in pairs}
    renamed = dict(pairs)
    out: dict[str, str] = {}
    for name, type_name in schema.items():
        if name in renamed:
            new = renamed[name]
            out.setdefault(new, winner[new])
        else:
            out[name] = type_name
    return out, pairs


def _check_with_columns(
    index: int, op: Mapping[str, Any], schema: dict[str, str]
) -> tuple[dict[str, str], list[tuple[str, Expr]]]:
    exprs = _string_map(index, op, "exprs")
    out = dict(schema)
    columns: list[tuple[str, Expr]] = []
    for name, text in exprs.items():  # payload order (§10.5)
        if not isinstance(text, str):
            raise ChainOpError(
                index,
                INVALID_REGISTRATION,
                "",
                f"{op.get('op')} expression for column '{name}' must be a string",
            )
        expr, type_name = _expression(index, text, out)
        out[name] = "str" if type_name == "null" else type_name
        columns.append((name, expr))
    return out, columns


def _check_cast(
    index: int, op: Mapping[str, Any], schema: dict[str, str]
) -> tuple[dict[str, str], list[tuple[str, str]]]:
    type_map = _string_map(index, op, "type_map")
    out = dict(schema)
    casts: list[tuple[str, str]] = []
    for name, target in type_map.items():
        if name not in schema:
            raise _unknown_field(index, name, schema)
        if not isinstance(target, str) or target not in CAST_TARGETS:
            raise ChainOpError(
                index,
                INVALID_EXPRESSION,
                "",
                f"unknown cast target type {target!r} for field '{name}'; "
                "expected str, int, float or bool",
                DETAIL_INVALID_CAST_TARGET,
            )
        out[name] = CAST_TARGETS[target]
        casts.append((name, target))
    return out, casts


_DEFAULT_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "str": (lambda v: type(v) is str, "a string"),
    "i64": (lambda v: type(v) is int, "an integer"),
    "f64": (lambda v: type(v) is int or type(v) is float, "a number"),
    "bool": (lambda v: type(v) is bool, "a boolean"),
}
_ANY_SCALAR = (lambda v: type(v) in (str, int, float, bool), "a non-null scalar")


def _check_fillna(
    index: int, op: Mapping[str, Any], schema: dict[str, str]
) -> tuple[dict[str, str], list[tuple[str, Any]]]:
    defaults = _string_map(index, op, "defaults")
    fills: list[tuple[str, Any]] = []
    for name, value in defaults.items():
        if name not in schema:
            raise _unknown_field(index, name, schema)
        type_name = schema[name]
        # bytes / datetime / json take any non-null scalar.
        accepts, wanted = _DEFAULT_RULES.get(type_name, _ANY_SCALAR)
        if not accepts(value):
            raise ChainOpError(
                index,
                INVALID_EXPRESSION,
                "",
                f"fillna default for field '{name}' ({type_name}) must be {wanted}, "
                f"got {_json_kind(value)}",
                DETAIL_SCHEMA_MISMATCH,
            )
        if type(value) is int and not I64_MIN <= value <= I64_MAX:
            value = float(value)  # as a pushed integer outside the I64 range is decoded
        fills.append((name, value))
    return schema, fills


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


_Checker = Callable[[int, Mapping[str, Any], dict[str, str]], tuple[dict[str, str], Any]]
_CHECKERS: dict[str, _Checker] = {
    "filter": _check_filter,
    "select": _check_select,
    "drop": _check_drop,
    "rename": _check_rename,
    "with_columns": _check_with_columns,
    "map": _check_with_columns,
    "cast": _check_cast,
    "fillna": _check_fillna,
}


# --- code generation ------------------------------------------------------------------------


def _emit_filter(b: FunctionBuilder, expr: Expr) -> None:
    result = b.value(expr)
    b.line(f"if not ({b.is_true(result)}):")
    b.line("return None", 1)


def _emit_select(b: FunctionBuilder, names: list[str]) -> None:
    source = b.fresh("_s")
    b.line(f"{source} = row")
    b.line("row = {}")
    for name in names:
        b.line(f"if {name!r} in {source}:")
        b.line(f"row[{name!r}] = {source}[{name!r}]", 1)


def _emit_drop(b: FunctionBuilder, names: list[str]) -> None:
    for name in names:
        b.line(f"row.pop({name!r}, None)")


def _emit_rename(b: FunctionBuilder, pairs: list[tuple[str, str]]) -> None:
    # Atomic: take every source out first, so swaps and chains of renames work.
    held = []
    for old, _ in pairs:
        temp = b.fresh("_r")
        b.line(f"{temp} = row.pop({old!r}, _MISSING)")
        held.append(temp)
    for temp, (_, new) in zip(held, pairs, strict=True):
        b.line(f"if {temp} is not _MISSING:")
        b.line(f"row[{new!r}] = {temp}", 1)


def _emit_with_columns(b: FunctionBuilder, columns: list[tuple[str, Expr]]) -> None:
    for name, expr in columns:
        result = b.value(expr)
        b.line(f"row[{name!r}] = {result}")


def _emit_cast(b: FunctionBuilder, casts: list[tuple[str, str]]) -> None:
    for name, target in casts:
        b.line(f"if {name!r} in row:")
        b.line(f"row[{name!r}] = _cast_{target}(row[{name!r}])", 1)


def _emit_fillna(b: FunctionBuilder, fills: list[tuple[str, Any]]) -> None:
    for name, value in fills:
        b.line(f"if row.get({name!r}) is None:")
        b.line(f"row[{name!r}] = {b.literal(value)}", 1)


_EMITTERS: dict[str, Callable[[FunctionBuilder, Any], None]] = {
    "filter": _emit_filter,
    "select": _emit_select,
    "drop": _emit_drop,
    "rename": _emit_rename,
    "with_columns": _emit_with_columns,
    "map": _emit_with_columns,
    "cast": _emit_cast,
    "fillna": _emit_fillna,
}
