"""Expressions: ``bv.col`` / ``bv.lit`` and the operator overloads that build them
(spec/sdk.md §5), plus their register-time type (spec/expressions.md §8) used to type
derived columns.

Every node renders its wire string once, at construction, from its children's strings:
rendering is then free, and a long ``&`` chain never recurses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NoReturn

# The spelling and typing rules live in the catalogue the engine reads too, so the
# SDK renders and types expressions exactly as the server parses and checks them.
from beava.catalogue.expression_grammar import (
    CAST_TARGETS,
    I64_MAX,
    I64_MIN,
    IDENTIFIER,
    KEYWORDS,
    NULL,
    arith_type,
    comparable,
    format_literal,
    literal_type,
)

__all__ = ["CAST_TARGETS", "Col", "Expr", "Lit", "cast_target", "col", "infer_type", "lit"]

_CAST_TYPES: Mapping[type, str] = {str: "str", int: "int", float: "float", bool: "bool"}


def cast_target(target: object) -> str:
    """The cast target name for ``"str" "int" "float" "bool"`` or the types ``str int float
    bool``; anything else is a ``ValueError``."""
    if isinstance(target, str):
        if target in CAST_TARGETS:
            return target
    elif isinstance(target, type) and target in _CAST_TYPES:
        return _CAST_TYPES[target]
    raise ValueError(
        f"invalid cast target {target!r}; expected one of 'str', 'int', 'float', 'bool'"
    )


class Expr:
    """An immutable expression node. Python operators build new nodes; ``==`` and ``!=``
    build comparisons (never booleans). Use ``&``, ``|``, ``~`` for logic: the keywords
    ``and`` / ``or`` / ``not`` and chained comparisons (``1 < x < 5``) do not build
    expressions."""

    __slots__ = ("_text",)
    _text: str

    def __init__(self, text: str) -> None:
        object.__setattr__(self, "_text", text)

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def to_expr_string(self) -> str:
        """The wire form (fully parenthesised)."""
        return self._text

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._text}>"

    def __hash__(self) -> int:
        raise NotImplementedError  # every concrete node defines its own

    # arithmetic
    def __add__(self, other: object) -> Expr:
        return Binary("+", self, _operand(other))

    def __radd__(self, other: object) -> Expr:
        return Binary("+", _operand(other), self)

    def __sub__(self, other: object) -> Expr:
        return Binary("-", self, _operand(other))

    def __rsub__(self, other: object) -> Expr:
        return Binary("-", _operand(other), self)

    def __mul__(self, other: object) -> Expr:
        return Binary("*", self, _operand(other))

    def __rmul__(self, other: object) -> Expr:
        return Binary("*", _operand(other), self)

    def __truediv__(self, other: object) -> Expr:
        return Binary("/", self, _operand(other))

    def __rtruediv__(self, other: object) -> Expr:
        return Binary("/", _operand(other), self)

    def __neg__(self) -> Expr:
        # `(-1 * x)` rather than a prefix minus: the beava 0.0.6 server parses this form.
        return Binary("*", Lit(-1), self)

    # comparisons (Python reflects `100 < x` into `x > 100` by itself)
    def __gt__(self, other: object) -> Expr:
        return Compare(">", self, _operand(other))

    def __ge__(self, other: object) -> Expr:
        return Compare(">=", self, _operand(other))

    def __lt__(self, other: object) -> Expr:
        return Compare("<", self, _operand(other))

    def __le__(self, other: object) -> Expr:
        return Compare("<=", self, _operand(other))

    def __eq__(self, other: object) -> Expr:  # type: ignore[override]  # builds a Compare
        return Compare("==", self, _operand(other))

    def __ne__(self, other: object) -> Expr:  # type: ignore[override]  # builds a Compare
        return Compare("!=", self, _operand(other))

    # logic
    def __and__(self, other: object) -> Expr:
        return Logic("and", self, _operand(other))

    def __rand__(self, other: object) -> Expr:
        return Logic("and", _operand(other), self)

    def __or__(self, other: object) -> Expr:
        return Logic("or", self, _operand(other))

    def __ror__(self, other: object) -> Expr:
        return Logic("or", _operand(other), self)

    def __invert__(self) -> Expr:
        return Not(self)

    # methods
    def isnull(self) -> Expr:
        """``(x == null)``: true when the value is null or absent."""
        return Compare("==", self, Lit(None))

    def cast(self, target: str | type) -> Expr:
        """``cast(x, T)`` with ``T`` one of ``"str" "int" "float" "bool"`` (or the types)."""
        return Cast(self, cast_target(target))


class Col(Expr):
    """A column reference."""

    __slots__ = ("name",)
    name: str

    def __init__(self, name: str) -> None:
        super().__init__(name)
        object.__setattr__(self, "name", name)

    def __hash__(self) -> int:
        return hash((Col, self.name))


class Lit(Expr):
    """A literal: ``None``, ``bool``, ``int`` (signed 64-bit), finite ``float`` or ``str``."""

    __slots__ = ("value",)
    value: None | bool | int | float | str

    def __init__(self, value: object) -> None:
        checked = _literal_value(value)
        super().__init__(format_literal(checked))
        object.__setattr__(self, "value", checked)

    def __hash__(self) -> int:
        return hash((Lit, type(self.value), self.value))


class Binary(Expr):
    """``(left op right)`` for ``+ - * /``."""

    __slots__ = ("op", "left", "right")
    op: str
    left: Expr
    right: Expr

    def __init__(self, op: str, left: Expr, right: Expr) -> None:
        super().__init__(f"({left._text} {op} {right._text})")
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "left", left)
        object.__setattr__(self, "right", right)

    def __hash__(self) -> int:
        return hash((type(self), self.op, id(self.left), id(self.right)))


class Compare(Binary):
    """``(left op right)`` for ``> >= < <= == !=``."""

    __slots__ = ()


class Logic(Binary):
    """``(left and right)`` / ``(left or right)``."""

    __slots__ = ()


class Not(Expr):
    """``(not operand)``."""

    __slots__ = ("operand",)
    operand: Expr

    def __init__(self, operand: Expr) -> None:
        super().__init__(f"(not {operand._text})")
        object.__setattr__(self, "operand", operand)

    def __hash__(self) -> int:
        return hash((Not, id(self.operand)))


class Cast(Expr):
    """``cast(operand, target)``."""

    __slots__ = ("operand", "target")
    operand: Expr
    target: str

    def __init__(self, operand: Expr, target: str) -> None:
        super().__init__(f"cast({operand._text}, {target})")
        object.__setattr__(self, "operand", operand)
        object.__setattr__(self, "target", target)

    def __hash__(self) -> int:
        return hash((Cast, id(self.operand), self.target))


def col(name: str) -> Col:
    """A reference to column ``name`` (an identifier such as ``amount`` or ``geo.lat``)."""
    if not isinstance(name, str):
        raise TypeError(f"bv.col() takes a column name str, got {type(name).__name__}")
    if IDENTIFIER.fullmatch(name) is None:
        raise ValueError(
            f"invalid column name {name!r}: expected identifier segments "
            "[A-Za-z_][A-Za-z0-9_]* joined by single dots"
        )
    if name in KEYWORDS:
        raise ValueError(f"invalid column name {name!r}: it is a keyword of expressions")
    return Col(name)


def lit(value: None | bool | int | float | str) -> Lit:
    """An explicit literal (``None`` renders as ``null``)."""
    return Lit(value)


def _operand(value: object) -> Expr:
    return value if isinstance(value, Expr) else Lit(value)


def _literal_value(value: object) -> None | bool | int | float | str:
    # Subclasses (IntEnum, numpy floats, str enums) are reduced to the plain value so the
    # rendering never goes through a foreign __repr__.
    if value is None:
        return None
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        if not I64_MIN <= value <= I64_MAX:
            raise ValueError(f"integer literal {value} is outside the signed 64-bit range")
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"float literal {value!r} is not finite")
        return float(value)
    raise TypeError(
        f"unsupported literal of type {type(value).__name__}; "
        "expected None, bool, int, float or str"
    )


# -- register-time types (expressions.md §8) ---------------------------------------------


def columns_of(expr: Expr) -> tuple[str, ...]:
    """The columns ``expr`` reads, each once, in order of first appearance."""
    seen: dict[str, None] = {}
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, Col):
            seen.setdefault(node.name)
        elif isinstance(node, Binary):
            stack += (node.right, node.left)
        elif isinstance(node, (Not, Cast)):
            stack.append(node.operand)
    return tuple(seen)


def infer_type(expr: Expr, schema: Mapping[str, str]) -> str | None:
    """The static type of ``expr`` over ``schema`` (``{column: wire type}``): one of
    ``str i64 f64 bool null``, or ``None`` when it does not type-check."""
    try:
        return _infer(expr, schema)
    except RecursionError:
        return None


def _infer(expr: Expr, schema: Mapping[str, str]) -> str | None:
    # SDK schemas hold only str/i64/f64/bool (plus null), so the engine's rules for the
    # dynamic bytes/datetime/json types never apply here.
    if isinstance(expr, Col):
        return schema.get(expr.name)
    if isinstance(expr, Lit):
        return literal_type(expr.value)
    if isinstance(expr, Cast):
        if _infer(expr.operand, schema) is None:
            return None
        return CAST_TARGETS[expr.target]
    if isinstance(expr, Not):
        inner = _infer(expr.operand, schema)
        return "bool" if inner in ("bool", NULL) else None
    if isinstance(expr, Binary):
        left = _infer(expr.left, schema)
        right = _infer(expr.right, schema)
        if left is None or right is None:
            return None
        if isinstance(expr, Compare):
            # `x == null` is rewritten to isnull() by the server; comparable() allows it.
            return "bool" if comparable(left, right) else None
        if isinstance(expr, Logic):
            ok = left in ("bool", NULL) and right in ("bool", NULL)
            return "bool" if ok else None
        return arith_type(expr.op, left, right)
    return None
