"""Runtime value rules of the expression language (spec/expressions.md §5-§7).

Values are the JSON-decoded Python objects of a row: None (Null), bool, int (I64), float
(F64), str. Anything else (list, dict, bytes) is an opaque value: every operator, comparison
and cast on it gives Null, and `isnull` of it is false. Type tests use `type(v) is ...` so
that a bool is never taken for an integer. No function here raises.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from typing import Any

from beava.catalogue.expression_grammar import I64_MAX, I64_MIN
from beava.catalogue.float_display import fmt_f64_display

_TWO_63 = 9223372036854775808.0
_INF = math.inf
_NAN = math.nan

# Rust `i64::from_str` / `f64::from_str` grammars (§6); Python's int()/float() accept more.
_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_FLOAT_TEXT = re.compile(
    r"[+-]?(?:inf|infinity|nan|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)",
    re.IGNORECASE,
)


def saturate(x: int) -> int:
    """Clamp an exact integer result to the I64 range."""
    if x > I64_MAX:
        return I64_MAX
    if x < I64_MIN:
        return I64_MIN
    return x


def f64_to_i64(x: float) -> int:
    """Truncate toward zero and saturate; NaN gives 0 (Rust `as i64`)."""
    if x != x:
        return 0
    if x >= _TWO_63:
        return I64_MAX
    if x < -_TWO_63:
        return I64_MIN
    return int(x)


def f64_div(x: float, y: float) -> float:
    """IEEE division: a zero divisor gives ±inf, or NaN for 0/0 and NaN/0."""
    if y == 0.0:
        if x != x or x == 0.0:
            return _NAN
        return _INF if (x > 0.0) == (math.copysign(1.0, y) > 0.0) else -_INF
    return x / y


# --- arithmetic: Null and non-numeric operands give Null; I64 results saturate --------------


def _arithmetic(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """`a op b` for `+`, `-`, `*`: I64 op I64 saturates, a mix with F64 is an F64 result."""

    def apply(a: Any, b: Any) -> Any:
        ta = type(a)
        tb = type(b)
        if ta is int:
            if tb is int:
                r = op(a, b)
                return r if I64_MIN <= r <= I64_MAX else saturate(r)
            return op(a, b) if tb is float else None
        if ta is float and (tb is float or tb is int):
            return op(a, b)
        return None

    apply.__name__ = op.__name__
    return apply


add = _arithmetic(operator.add)
sub = _arithmetic(operator.sub)
mul = _arithmetic(operator.mul)


def div(a: Any, b: Any) -> Any:
    """I64 / I64 truncates toward zero (divisor 0 gives Null); otherwise IEEE division."""
    ta = type(a)
    tb = type(b)
    if ta is int and tb is int:
        if b == 0:
            return None
        q = a // b
        if q < 0 and q * b != a:
            q += 1  # floor -> truncation toward zero
        return q if I64_MIN <= q <= I64_MAX else saturate(q)
    if (ta is float or ta is int) and (tb is float or tb is int):
        return f64_div(float(a), float(b))
    return None


def neg(a: Any) -> Any:
    ta = type(a)
    if ta is int:
        return saturate(-a)
    if ta is float:
        return -a
    return None


# --- comparisons ------------------------------------------------------------------------------


def _comparison(op: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool | None]:
    def compare(a: Any, b: Any) -> bool | None:
        ta = type(a)
        tb = type(b)
        if ta is tb:
            if ta is int or ta is str or ta is bool:
                return op(a, b)
            if ta is float:
                # Any NaN operand makes all six comparisons false (Python's != says true).
                return False if a != a or b != b else op(a, b)
            return None
        if ta is int and tb is float:
            return False if b != b else op(float(a), b)
        if ta is float and tb is int:
            return False if a != a else op(a, float(b))
        return None

    compare.__name__ = f"compare_{op.__name__}"
    return compare


COMPARISONS: dict[str, Callable[[Any, Any], bool | None]] = {
    ">": _comparison(operator.gt),
    ">=": _comparison(operator.ge),
    "<": _comparison(operator.lt),
    "<=": _comparison(operator.le),
    "==": _comparison(operator.eq),
    "!=": _comparison(operator.ne),
}


# --- casts (§6): failure gives Null -----------------------------------------------------------


# The casts test ``type(v)`` once; each branch binds ``v`` to a local of the type the test
# proved, which is how the checker learns it (no call, unlike typing.cast).


def cast_str(v: Any) -> str | None:
    t = type(v)
    if t is str:
        text: str = v
        return text
    if t is int:
        return str(v)
    if t is float:
        return fmt_f64_display(v)
    if t is bool:
        return "true" if v else "false"
    return None


def cast_int(v: Any) -> int | None:
    t = type(v)
    if t is int:
        n: int = v
        return n
    if t is float:
        return f64_to_i64(v)
    if t is bool:
        return 1 if v else 0
    if t is str and _INT_TEXT.fullmatch(v):
        digits = v.lstrip("+-").lstrip("0")
        if len(digits) > 19:  # also keeps int() away from its huge-string limit
            return None
        n = int(v)
        return n if I64_MIN <= n <= I64_MAX else None
    return None


def cast_float(v: Any) -> float | None:
    t = type(v)
    if t is float:
        x: float = v
        return x
    if t is int:
        return float(v)
    if t is bool:
        return 1.0 if v else 0.0
    if t is str and _FLOAT_TEXT.fullmatch(v):
        return float(v)
    return None


def cast_bool(v: Any) -> bool | None:
    t = type(v)
    if t is bool:
        flag: bool = v
        return flag
    if t is int:
        n: int = v
        return n != 0
    if t is float:
        x: float = v
        return x != 0.0 and x == x
    if t is str:
        if v == "true":
            return True
        if v == "false":
            return False
    return None


# Cast target name (as written in `cast(x, T)` and the `cast` chain op) -> function.
CASTS: dict[str, Callable[[Any], Any]] = {
    "str": cast_str,
    "int": cast_int,
    "float": cast_float,
    "bool": cast_bool,
}


# --- quadkey (§5) -----------------------------------------------------------------------------

_MAX_LAT = 85.05112878


def _floor_i64(x: float) -> int:
    """Round toward -inf, then saturate as `f64_to_i64` does (NaN gives 0)."""
    return f64_to_i64(math.floor(x) if math.isfinite(x) else x)


def quadkey(lat: Any, lon: Any, zoom: Any) -> int | None:
    """Web-Mercator tile index `col * 2^zoom + row`; Null for non-numeric or bad zoom."""
    t = type(lat)
    if t is int:
        lat = float(lat)
    elif t is not float:
        return None
    t = type(lon)
    if t is int:
        lon = float(lon)
    elif t is not float:
        return None
    if type(zoom) is not int or not 1 <= zoom <= 24:
        return None
    n = 1 << zoom
    phi = lat if lat != lat else min(max(lat, -_MAX_LAT), _MAX_LAT)
    row = _floor_i64((math.sin(math.radians(phi)) + 1.0) / 2.0 * n)
    col = _floor_i64((lon + 180.0) / 360.0 * n)
    row = min(max(row, 0), n - 1)
    return saturate(saturate(col * n) + row)
