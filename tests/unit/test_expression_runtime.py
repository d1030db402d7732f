"""Runtime value rules: arithmetic, comparisons, casts, quadkey (spec/expressions.md §5-§7)."""

from __future__ import annotations

import math

import pytest

from beava.engine.expressions import runtime as rt

MIN = -(2**63)
MAX = 2**63 - 1
NAN = math.nan
INF = math.inf


def same(a: object, b: object) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return a == b


# --- arithmetic -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fn", "a", "b", "expected"),
    [
        (rt.add, 1, 2, 3),
        (rt.add, MAX, 1, MAX),
        (rt.add, MIN, -1, MIN),
        (rt.add, -7, MAX, 9223372036854775800),
        (rt.add, 1, 0.5, 1.5),
        (rt.add, 0.5, 1, 1.5),
        (rt.add, INF, -INF, NAN),
        (rt.sub, MIN, 1, MIN),
        (rt.sub, 0, MIN, MAX),
        (rt.sub, 3, 1.5, 1.5),
        (rt.mul, -7, MAX, MIN),
        (rt.mul, MAX, MAX, MAX),
        (rt.mul, 2, 1.5, 3.0),
        (rt.mul, 1e308, 10.0, INF),
        (rt.div, -7, 2, -3),
        (rt.div, 7, -2, -3),
        (rt.div, -8, 2, -4),
        (rt.div, 7, 2, 3),
        (rt.div, -1, 2, 0),
        (rt.div, 5, 0, None),
        (rt.div, MIN, -1, MAX),
        (rt.div, MIN, 1, MIN),
        (rt.div, 1.5, 0.0, INF),
        (rt.div, -1.5, 0.0, -INF),
        (rt.div, 1.5, -0.0, -INF),
        (rt.div, 0.0, 0.0, NAN),
        (rt.div, NAN, 0.0, NAN),
        (rt.div, 3, 0.0, INF),
        (rt.div, 3.0, 0, INF),
        (rt.div, 7, 2.0, 3.5),
        (rt.div, 1e308, 0.1, INF),
    ],
)
def test_arithmetic(fn, a: object, b: object, expected: object) -> None:  # type: ignore[no-untyped-def]
    assert same(fn(a, b), expected)


@pytest.mark.parametrize("fn", [rt.add, rt.sub, rt.mul, rt.div])
@pytest.mark.parametrize(
    ("a", "b"),
    [
        (None, 1),
        (1, None),
        (None, None),
        ("a", "b"),
        ("1", 1),
        (True, 1),
        (1, False),
        (True, True),
        ([1], 1),
        ({"k": 1}, 1.0),
        (b"x", 1),
    ],
)
def test_arithmetic_on_non_numbers_is_null(fn, a: object, b: object) -> None:  # type: ignore[no-untyped-def]
    assert fn(a, b) is None


def test_negation() -> None:
    assert rt.neg(5) == -5
    assert rt.neg(MIN) == MAX
    assert same(rt.neg(0.0), -0.0)
    assert same(rt.neg(-1.5), 1.5)
    assert rt.neg(None) is None
    assert rt.neg(True) is None
    assert rt.neg("1") is None


# --- comparisons ------------------------------------------------------------------------------

GT, GE, LT, LE, EQ, NE = (rt.COMPARISONS[op] for op in (">", ">=", "<", "<=", "==", "!="))


def test_numeric_comparisons() -> None:
    assert EQ(1, 1.0) is True
    assert NE(1, 1.0) is False
    assert LT(-7, 1.5) is True
    assert GT(2, 1) is True
    # I64 vs F64 compares as doubles: 2^53 + 1 rounds to 2^53.
    assert EQ(2**53 + 1, float(2**53)) is True
    assert EQ(2**53 + 1, 2**53) is False


@pytest.mark.parametrize("cmp", [GT, GE, LT, LE, EQ, NE])
def test_nan_makes_every_comparison_false(cmp) -> None:  # type: ignore[no-untyped-def]
    assert cmp(NAN, 1.0) is False
    assert cmp(1.0, NAN) is False
    assert cmp(NAN, NAN) is False
    assert cmp(NAN, 1) is False
    assert cmp(1, NAN) is False


def test_string_and_bool_comparisons() -> None:
    assert LT("a", "b") is True
    assert GT("12", "a") is False
    assert LT("z", "é") is True  # code-point order
    assert LT(False, True) is True
    assert EQ(True, True) is True


@pytest.mark.parametrize("cmp", [GT, GE, LT, LE, EQ, NE])
@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("1", 1),
        (True, 1),
        (1, True),
        ("true", True),
        (None, 1),
        (None, None),
        ([1], [1]),
        ({}, {}),
        (b"a", b"a"),
        (1.0, "1"),
    ],
)
def test_cross_type_and_null_comparisons_are_null(cmp, a: object, b: object) -> None:  # type: ignore[no-untyped-def]
    assert cmp(a, b) is None


# --- casts ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("abc", "abc"),
        (-12, "-12"),
        (1.0, "1"),
        (1.5, "1.5"),
        (1e21, "1000000000000000000000"),
        (1.5e21, "1500000000000000000000"),
        (1.5e-7, "0.00000015"),
        (-0.0, "-0"),
        (0.5, "0.5"),
        (NAN, "NaN"),
        (INF, "inf"),
        (-INF, "-inf"),
        (True, "true"),
        (False, "false"),
        (None, None),
        ([1], None),
    ],
)
def test_cast_to_str(value: object, expected: object) -> None:
    assert rt.cast_str(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("12", 12),
        ("-12", -12),
        ("+7", 7),
        ("007", 7),
        ("9223372036854775807", MAX),
        ("-9223372036854775808", MIN),
        ("9223372036854775808", None),
        ("0" * 30 + "5", 5),
        ("1" * 5000, None),
        (" 1", None),
        ("1 ", None),
        ("1_0", None),
        ("1.0", None),
        ("", None),
        ("+", None),
        ("٣", None),
        ("0x10", None),
        (5, 5),
        (1.9, 1),
        (-1.9, -1),
        (1e300, MAX),
        (-INF, MIN),
        (INF, MAX),
        (NAN, 0),
        (True, 1),
        (False, 0),
        (None, None),
        ({"a": 1}, None),
    ],
)
def test_cast_to_int(value: object, expected: object) -> None:
    assert same(rt.cast_int(value), expected)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("12", 12.0),
        ("1e5", 1e5),
        (".5", 0.5),
        ("5.", 5.0),
        ("-2.5E-3", -0.0025),
        ("NaN", NAN),
        ("nan", NAN),
        ("-inf", -INF),
        ("Infinity", INF),
        ("+INF", INF),
        ("1e400", INF),
        (" 1", None),
        ("1_0", None),
        ("0x10", None),
        ("1e", None),
        ("e5", None),
        (".", None),
        ("infinit", None),
        ("١", None),
        (3, 3.0),
        (1.5, 1.5),
        (True, 1.0),
        (False, 0.0),
        (None, None),
        ([1.0], None),
    ],
)
def test_cast_to_float(value: object, expected: object) -> None:
    assert same(rt.cast_float(value), expected)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("true", True),
        ("false", False),
        ("True", None),
        ("1", None),
        ("", None),
        (0, False),
        (-3, True),
        (0.0, False),
        (-0.0, False),
        (0.1, True),
        (NAN, False),
        (INF, True),
        (True, True),
        (None, None),
        (b"x", None),
    ],
)
def test_cast_to_bool(value: object, expected: object) -> None:
    assert rt.cast_bool(value) is expected


def test_cast_table_names() -> None:
    assert set(rt.CASTS) == {"str", "int", "float", "bool"}


# --- quadkey ----------------------------------------------------------------------------------


def test_quadkey_spec_vector() -> None:
    assert rt.quadkey(40.0, -74.0, 3) == 22
    assert rt.quadkey(40, -74, 3) == 22


def test_quadkey_argument_rules() -> None:
    assert rt.quadkey(40.0, -74.0, 0) is None
    assert rt.quadkey(40.0, -74.0, 25) is None
    assert rt.quadkey(40.0, -74.0, 3.0) is None
    assert rt.quadkey(40.0, -74.0, True) is None
    assert rt.quadkey("40", -74.0, 3) is None
    assert rt.quadkey(40.0, None, 3) is None
    assert rt.quadkey(True, -74.0, 3) is None


def test_quadkey_clamping_and_saturation() -> None:
    # Latitude is clamped to the Mercator limit; row is clamped into [0, n - 1].
    assert rt.quadkey(90.0, 0.0, 1) == 1 * 2 + 1
    assert rt.quadkey(-90.0, 0.0, 1) == 1 * 2 + 0
    # Longitude is not clamped: col may leave the tile range.
    assert rt.quadkey(0.0, 540.0, 1) == 4 * 2 + 1
    # NaN latitude gives row 0; infinite longitude saturates col.
    assert rt.quadkey(NAN, 0.0, 2) == 2 * 4 + 0
    assert rt.quadkey(0.0, INF, 2) == MAX
    assert rt.quadkey(0.0, -INF, 2) == MIN + 2
    assert rt.quadkey(0.0, NAN, 2) == 0 * 4 + 2


# --- helpers ----------------------------------------------------------------------------------


def test_saturation_helpers() -> None:
    assert rt.saturate(2**70) == MAX
    assert rt.saturate(-(2**70)) == MIN
    assert rt.saturate(5) == 5
    assert rt.f64_to_i64(9.3e18) == MAX
    assert rt.f64_to_i64(-9.3e18) == MIN
    assert rt.f64_to_i64(-(2.0**63)) == MIN
    assert rt.f64_to_i64(-3.7) == -3
