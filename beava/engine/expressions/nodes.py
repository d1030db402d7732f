"""Expression AST nodes, the expression error type, and the spelling of the language:
identifiers, keywords, the I64 literal range and canonical formatting. The spelling rules
are shared by the lexer, the canonical formatter and the SDK's expression renderer.

Left-associative runs of one precedence tier (`a + b - c`, `a and b and c`) are kept as one
n-ary node, so a long flat chain does not make the tree deep: the tree depth stays bounded
by the parser's nesting limit (spec/expressions.md §3) times the number of precedence tiers.
"""

from __future__ import annotations

from dataclasses import dataclass

from beava.catalogue.expression_grammar import format_literal

# Finer error kinds of spec/expressions.md §9 (the optional `detail` key of an error body).
DETAIL_UNKNOWN_FIELD = "unknown_field_reference"
DETAIL_SCHEMA_MISMATCH = "schema_mismatch"
DETAIL_INVALID_CAST_TARGET = "invalid_cast_target"


class ExpressionError(Exception):
    """A register-time expression failure: parse, unknown field or type inference.

    `reason` is the human message; `detail` is one of the DETAIL_* codes, or None for parse
    errors; `col` is the 1-based byte column of a parse error.
    """

    def __init__(self, reason: str, detail: str | None = None, col: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail
        self.col = col


@dataclass(frozen=True, slots=True, eq=False)
class Literal:
    """A literal: None (null), bool, int (i64), float (f64) or str."""

    value: None | bool | int | float | str

    def _key(self) -> tuple[type, str]:
        # repr keeps 1 / 1.0 / True apart and distinguishes -0.0 from 0.0.
        return (type(self.value), repr(self.value))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Literal) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True, slots=True)
class Field:
    """A field reference; a dotted name names one field."""

    name: str


@dataclass(frozen=True, slots=True)
class TypeName:
    """A bare identifier in the second argument of `cast`: a type name, not a field."""

    name: str


@dataclass(frozen=True, slots=True)
class Not:
    operand: Expr


@dataclass(frozen=True, slots=True)
class Neg:
    operand: Expr


@dataclass(frozen=True, slots=True)
class Arith:
    """`operands[0] ops[0] operands[1] ops[1] ...`, evaluated left to right.

    All ops belong to one tier: `+`/`-` or `*`/`/`.
    """

    operands: tuple[Expr, ...]
    ops: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Logic:
    """`operands[0] op operands[1] op ...` with op `and` or `or`, left to right."""

    op: str
    operands: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Compare:
    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Call:
    name: str
    args: tuple[Expr, ...]


Expr = Literal | Field | TypeName | Not | Neg | Arith | Logic | Compare | Call



def format_expression(expr: Expr) -> str:
    """Canonical, fully parenthesised text of an expression; parsing it gives `expr` back.

    Each compound node is wrapped in parentheses, so the text of a tree whose original
    source relied on precedence can nest deeper than the source did.
    """
    if isinstance(expr, Literal):
        return format_literal(expr.value)
    if isinstance(expr, Field | TypeName):
        return expr.name
    if isinstance(expr, Not):
        return f"(not {format_expression(expr.operand)})"
    if isinstance(expr, Neg):
        inner = format_expression(expr.operand)
        if isinstance(expr.operand, Literal) and isinstance(expr.operand.value, int | float):
            # `-5` would read back as the literal -5; keep the negation explicit.
            inner = f"({inner})"
        return f"(-{inner})"
    if isinstance(expr, Arith):
        parts = [format_expression(expr.operands[0])]
        for op, operand in zip(expr.ops, expr.operands[1:], strict=True):
            parts.append(op)
            parts.append(format_expression(operand))
        return "(" + " ".join(parts) + ")"
    if isinstance(expr, Logic):
        return "(" + f" {expr.op} ".join(format_expression(e) for e in expr.operands) + ")"
    if isinstance(expr, Compare):
        return f"({format_expression(expr.left)} {expr.op} {format_expression(expr.right)})"
    return expr.name + "(" + ", ".join(format_expression(a) for a in expr.args) + ")"


def iter_fields(expr: Expr) -> list[str]:
    """Field names referenced by `expr`, in source order (repeats included)."""
    found: list[str] = []
    stack: list[Expr] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, Field):
            found.append(node.name)
        elif isinstance(node, Not | Neg):
            stack.append(node.operand)
        elif isinstance(node, Arith | Logic):
            stack.extend(reversed(node.operands))
        elif isinstance(node, Compare):
            stack.append(node.right)
            stack.append(node.left)
        elif isinstance(node, Call):
            stack.extend(reversed(node.args))
    return found
