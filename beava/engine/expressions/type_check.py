"""Register-time field checks and type inference (spec/expressions.md §5, §8).

Static types are the schema type names plus `null` (the type of the `null` literal).
`bytes`, `datetime` and `json` fields are *dynamic*: pushes do not type-check their values
(an untyped optional field is `json`), so at run time they may hold any JSON value. They are
read as permissively as the spec allows: a dynamic type is accepted wherever the `null` type
is (logic, comparisons, arithmetic, unary minus, quadkey arguments, a `where` result), and
where the `null` rule would give a result type, a dynamic operand gives `json` instead.
"""

from __future__ import annotations

from collections.abc import Mapping

from beava.catalogue.errors import with_known_names
from beava.catalogue.expression_grammar import (
    CAST_TARGETS,
    DYNAMIC,
    NULL,
    NUMERIC,
    arith_type,
    comparable,
    literal_type,
)
from beava.engine.expressions.nodes import (
    DETAIL_INVALID_CAST_TARGET,
    DETAIL_SCHEMA_MISMATCH,
    DETAIL_UNKNOWN_FIELD,
    Arith,
    Call,
    Compare,
    Expr,
    ExpressionError,
    Field,
    Literal,
    Logic,
    Neg,
    Not,
    TypeName,
    iter_fields,
)

_BOOLISH = frozenset(("bool", NULL)) | DYNAMIC
_ARITY = {"cast": 2, "isnull": 1, "quadkey": 3}


def cast_target(arg: Expr) -> str | None:
    """The target spelling of a `cast` second argument (type name or string literal)."""
    if isinstance(arg, TypeName):
        return arg.name
    if isinstance(arg, Literal) and type(arg.value) is str:
        return arg.value
    return None


class TypeChecker:
    """Infers the static type of an expression against a schema.

    `where=True` applies the `where` rules: quadkey is allowed, cross-type comparisons are
    typed bool, and messages carry the `where predicate` prefix.
    """

    def __init__(self, schema: Mapping[str, str], where: bool) -> None:
        self.schema = schema
        self.where = where

    def fail(self, message: str, detail: str = DETAIL_SCHEMA_MISMATCH) -> ExpressionError:
        if self.where:
            message = f"where predicate: {message}"
        return ExpressionError(message, detail)

    def check_fields(self, expr: Expr) -> None:
        for name in iter_fields(expr):
            if name not in self.schema:
                if self.where:
                    reason = f"where predicate references unknown field '{name}'"
                else:
                    reason = f"field '{name}' not found in upstream schema"
                raise ExpressionError(with_known_names(reason, name, self.schema),
                                      DETAIL_UNKNOWN_FIELD)

    def infer(self, node: Expr) -> str:
        if isinstance(node, Literal):
            return literal_type(node.value)
        if isinstance(node, Field):
            if node.name not in self.schema:
                self.check_fields(node)
            return self.schema[node.name]
        if isinstance(node, Not):
            t = self.infer(node.operand)
            if t not in _BOOLISH:
                raise self.fail(f"operator 'not' requires a bool operand, got {t}")
            return "bool"
        if isinstance(node, Neg):
            t = self.infer(node.operand)
            if t in NUMERIC or t == NULL:
                return t
            if t in DYNAMIC:
                return "json"
            raise self.fail(f"unary '-' requires a numeric operand, got {t}")
        if isinstance(node, Logic):
            for operand in node.operands:
                t = self.infer(operand)
                if t not in _BOOLISH:
                    raise self.fail(f"operator '{node.op}' requires bool operands, got {t}")
            return "bool"
        if isinstance(node, Compare):
            a = self.infer(node.left)
            b = self.infer(node.right)
            if not self.where and not comparable(a, b):
                raise self.fail(f"cannot compare {a} with {b} using '{node.op}'")
            return "bool"
        if isinstance(node, Arith):
            acc = self.infer(node.operands[0])
            for op, operand in zip(node.ops, node.operands[1:], strict=True):
                rhs = self.infer(operand)
                result = arith_type(op, acc, rhs)
                if result is None:
                    raise self.fail(f"operator '{op}' cannot be applied to {acc} and {rhs}")
                acc = result
            return acc
        if isinstance(node, Call):
            return self.infer_call(node)
        raise self.fail(f"type name '{node.name}' used as a value")

    def infer_call(self, node: Call) -> str:
        name = node.name
        if name not in _ARITY:
            raise self.fail(f'unknown function "{name}"')
        if name == "quadkey" and not self.where:
            raise self.fail('unhandled builtin "quadkey"')
        expected = _ARITY[name]
        if len(node.args) != expected:
            raise self.fail(
                f'function "{name}" expects {expected} argument'
                f"{'s' if expected > 1 else ''}, got {len(node.args)}"
            )
        if name == "isnull":
            self.infer(node.args[0])
            return "bool"
        if name == "cast":
            self.infer(node.args[0])
            target = cast_target(node.args[1])
            if target not in CAST_TARGETS:
                shown = f"'{target}'" if target is not None else "(not a type name)"
                raise self.fail(
                    f"unknown cast target type {shown}; expected str, int, float or bool",
                    DETAIL_INVALID_CAST_TARGET,
                )
            return CAST_TARGETS[target]
        for index, label in ((0, "lat"), (1, "lon"), (2, "zoom")):
            t = self.infer(node.args[index])
            accepted = {"i64"} if label == "zoom" else NUMERIC
            if t not in accepted and t != NULL and t not in DYNAMIC:
                wanted = "i64" if label == "zoom" else "numeric"
                raise self.fail(f'function "quadkey" argument {label} must be {wanted}, got {t}')
        return "i64"
