"""The spelling and typing rules of the expression language (spec/expressions.md §2, §5):
identifiers, keywords, the I64 literal range, canonical literal text, static type names and
the result types of comparisons and arithmetic. The engine's lexer, formatter and type
checker and the SDK's expression renderer all read these, so the SDK writes and types
expressions exactly as the server parses and checks them."""

from __future__ import annotations

import math
import re

# A field name: identifier segments joined by single dots (spec/expressions.md §2).
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
KEYWORDS = frozenset(("and", "or", "not", "true", "false", "null"))
I64_MIN = -(1 << 63)
I64_MAX = (1 << 63) - 1

def format_literal(value: None | bool | int | float | str) -> str:
    """Render a literal so that the lexer reads back the same value."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isinf(value):
            # The lexer turns an overflowing literal into inf; NaN has no literal form.
            return "1.0e999" if value > 0 else "-1.0e999"
        text = repr(value)
        if "e" in text and "." not in text:
            mantissa, exponent = text.split("e")
            text = f"{mantissa}.0e{exponent}"
        return text
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


NULL = "null"
NUMERIC = frozenset(("i64", "f64"))
DYNAMIC = frozenset(("bytes", "datetime", "json"))

# `cast` target spelling -> resulting static type.
CAST_TARGETS: dict[str, str] = {"str": "str", "int": "i64", "float": "f64", "bool": "bool"}

def literal_type(value: object) -> str:
    if value is None:
        return NULL
    if type(value) is bool:
        return "bool"
    if type(value) is int:
        return "i64"
    if type(value) is float:
        return "f64"
    return "str"


def comparable(a: str, b: str) -> bool:
    if a == b or NULL in (a, b) or a in DYNAMIC or b in DYNAMIC:
        return True
    return a in NUMERIC and b in NUMERIC


def arith_type(op: str, a: str, b: str) -> str | None:
    """Result type of `a op b`, or None when the operand types are rejected."""
    if a == NULL and b == NULL:
        return NULL
    if op == "/":
        allowed = NUMERIC | DYNAMIC | {NULL}
        if a not in allowed or b not in allowed:
            return None
        if a in DYNAMIC or b in DYNAMIC:
            return "json"
        if a == NULL:
            return b
        if b == NULL:
            return a
    else:
        if a in DYNAMIC or b in DYNAMIC:
            return "json"
        if a == NULL:
            return b  # null with any type gives that type, as the reference
        if b == NULL:
            return a
        if a not in NUMERIC or b not in NUMERIC:
            return None
    return "f64" if "f64" in (a, b) else "i64"
