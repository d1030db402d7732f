"""The expression language of filters, with_columns/map and `where` (spec/expressions.md).

Public facade. The work is split by concern:
- nodes: nodes, ExpressionError, canonical formatting;
- parser: lexer and parser (grammar, precedence, nesting limit);
- type_check: register-time field checks and type inference;
- runtime: value semantics (null, NaN, saturation, casts, quadkey);
- codegen: code generation to Python functions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from beava.catalogue.expression_grammar import DYNAMIC
from beava.engine.expressions import nodes
from beava.engine.expressions.codegen import compile_predicate, compile_value
from beava.engine.expressions.nodes import (
    DETAIL_INVALID_CAST_TARGET,
    DETAIL_SCHEMA_MISMATCH,
    DETAIL_UNKNOWN_FIELD,
    Expr,
    ExpressionError,
)
from beava.engine.expressions.parser import parse, recursion_headroom
from beava.engine.expressions.type_check import TypeChecker

__all__ = [
    "DETAIL_INVALID_CAST_TARGET",
    "DETAIL_SCHEMA_MISMATCH",
    "DETAIL_UNKNOWN_FIELD",
    "Expr",
    "ExpressionError",
    "check_expression",
    "check_where",
    "compile_expression",
    "compile_where",
    "format_expression",
    "parse_expression",
]


def parse_expression(text: str) -> Expr:
    """Parse `text`; a failure's reason reads `parse error at col <N>: ...`."""
    return parse(text)


def check_expression(text: str, schema: Mapping[str, str]) -> tuple[Expr, str]:
    """Parse and type-check a filter / with_columns / map expression against `schema`.

    Returns the AST and its static type (a schema type name or "null"). Checks run in the
    order parse, field existence (first unknown field in source order), type inference.
    """
    expr = parse(text)
    checker = TypeChecker(schema, where=False)
    checker.check_fields(expr)
    with recursion_headroom():
        return expr, checker.infer(expr)


def check_where(text: str, schema: Mapping[str, str]) -> Expr:
    """Parse and type-check a feature's `where` predicate (the `where` rules of §8)."""
    try:
        expr = parse(text)
    except ExpressionError as exc:
        raise ExpressionError(f"where predicate {exc.reason}", None, exc.col) from None
    checker = TypeChecker(schema, where=True)
    checker.check_fields(expr)
    with recursion_headroom():
        result = checker.infer(expr)
    if result != "bool" and result not in DYNAMIC:
        raise ExpressionError(
            f"where predicate must evaluate to bool, got {result}", DETAIL_SCHEMA_MISMATCH
        )
    return expr


def compile_expression(expr: Expr) -> Callable[[Mapping[str, Any]], Any]:
    """A function mapping a row to the expression's value; it never raises."""
    return compile_value(expr)


def compile_where(expr: Expr) -> Callable[[Mapping[str, Any]], bool]:
    """A predicate that is True only when the value is exactly Bool(true)."""
    return compile_predicate(expr)


def format_expression(expr: Expr) -> str:
    """Canonical fully parenthesised text; parsing it gives back any parsed `expr`."""
    with recursion_headroom():
        return nodes.format_expression(expr)
