"""Register-time type inference of expressions (spec/expressions.md §5, §8, §9)."""

from __future__ import annotations

import pytest

from beava.engine.expressions import (
    DETAIL_INVALID_CAST_TARGET,
    DETAIL_SCHEMA_MISMATCH,
    DETAIL_UNKNOWN_FIELD,
    ExpressionError,
    check_expression,
    check_where,
)

SCHEMA = {
    "a": "i64",
    "n": "i64",
    "x": "f64",
    "y": "f64",
    "s": "str",
    "t": "str",
    "b": "bool",
    "c": "bool",
    "raw": "bytes",
    "ts": "datetime",
    "j": "json",
    "geo.lat": "f64",
}


def type_of(text: str) -> str:
    return check_expression(text, SCHEMA)[1]


def chain_error(text: str) -> ExpressionError:
    with pytest.raises(ExpressionError) as info:
        check_expression(text, SCHEMA)
    return info.value


def where_error(text: str) -> ExpressionError:
    with pytest.raises(ExpressionError) as info:
        check_where(text, SCHEMA)
    return info.value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a", "i64"),
        ("geo.lat", "f64"),
        ("42", "i64"),
        ("-1.5", "f64"),
        ("'x'", "str"),
        ("true", "bool"),
        ("null", "null"),
        ("(not b)", "bool"),
        ("(not null)", "bool"),
        ("-a", "i64"),
        ("-x", "f64"),
        ("-null", "null"),
        ("(a > n)", "bool"),
        ("(a > x)", "bool"),
        ("(s < t)", "bool"),
        ("(b == c)", "bool"),
        ("(s > null)", "bool"),
        ("(b and c)", "bool"),
        ("(b or null)", "bool"),
        ("(a + n)", "i64"),
        ("(a - x)", "f64"),
        ("(x * y)", "f64"),
        ("(null + null)", "null"),
        ("(null + 1)", "i64"),
        ("(s + null)", "str"),
        ("(null * b)", "bool"),
        ("(a / n)", "i64"),
        ("(a / x)", "f64"),
        ("(null / a)", "i64"),
        ("(x / null)", "f64"),
        ("(null / null)", "null"),
        ("isnull(s)", "bool"),
        ("cast(s, int)", "i64"),
        ("cast(a, float)", "f64"),
        ("cast(x, str)", "str"),
        ("cast(a, bool)", "bool"),
        ("cast(a, 'float')", "f64"),
        ("cast((s + null), int)", "i64"),
        ("((a + 1) * 2)", "i64"),
        ("(a + 1 + 2.0)", "f64"),
    ],
)
def test_inferred_types(text: str, expected: str) -> None:
    assert type_of(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "(not a)",
        "(not s)",
        "-s",
        "-b",
        "(s > 1)",
        "(b > a)",
        "(s == b)",
        "(a and b)",
        "(b or s)",
        "(a + b)",
        "(s + t)",
        "(s * 2)",
        "(b - b)",
        "(s / 2)",
        "(null / s)",
        "(b / null)",
        "(x + s)",
        "isnull((s + 1))",
        "cast((s + 1), int)",
    ],
)
def test_operand_type_errors(text: str) -> None:
    err = chain_error(text)
    assert err.detail == DETAIL_SCHEMA_MISMATCH


def test_unknown_field_is_reported_before_type_errors() -> None:
    err = chain_error("((s + 1) > zz)")
    assert err.detail == DETAIL_UNKNOWN_FIELD
    assert err.reason == ("field 'zz' not found in upstream schema "
                          "(fields: 'a', 'n', 'x', 'y', 's', 't', 'b', 'c', 'raw', 'ts', 'j', "
                          "'geo.lat')")
    # First unknown field in source order.
    assert "'p'" in chain_error("(p > q)").reason
    # Only the second argument of `cast` is a type name; elsewhere `int` is a field.
    assert chain_error("CAST(a, int)").detail == DETAIL_UNKNOWN_FIELD


def test_cast_type_name_is_not_a_field_reference() -> None:
    assert type_of("cast(a, str)") == "str"
    err = chain_error("cast(a, INT)")
    assert err.detail == DETAIL_INVALID_CAST_TARGET
    assert "unknown cast target type" in err.reason
    assert chain_error("cast(a, 'long')").detail == DETAIL_INVALID_CAST_TARGET
    assert chain_error("cast(a, 5)").detail == DETAIL_INVALID_CAST_TARGET


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("(foo(a) > 1)", 'unknown function "foo"'),
        ("CAST(a, n)", 'unknown function "CAST"'),
        ("quadkey(x, y, 3)", 'unhandled builtin "quadkey"'),
        ("isnull()", 'function "isnull" expects 1 argument, got 0'),
        ("isnull(a, n)", 'function "isnull" expects 1 argument, got 2'),
        ("cast(a)", 'function "cast" expects 2 arguments, got 1'),
        ("cast(a, int, n)", 'function "cast" expects 2 arguments, got 3'),
    ],
)
def test_function_errors(text: str, fragment: str) -> None:
    err = chain_error(text)
    assert fragment in err.reason
    assert err.detail == DETAIL_SCHEMA_MISMATCH


def test_filter_result_need_not_be_bool() -> None:
    assert type_of("(a + 1)") == "i64"
    assert type_of("s") == "str"


# --- dynamic types: bytes, datetime, json ----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("j", "json"),
        ("raw", "bytes"),
        ("(j > 1)", "bool"),
        ("(j == 'x')", "bool"),
        ("(raw < s)", "bool"),
        ("(ts >= 5)", "bool"),
        ("(not j)", "bool"),
        ("(j and b)", "bool"),
        ("-j", "json"),
        ("(j + 1)", "json"),
        ("(j + s)", "json"),
        ("(null + j)", "json"),
        ("(ts * 2.0)", "json"),
        ("(j / 2)", "json"),
        ("(raw / j)", "json"),
        ("cast(j, int)", "i64"),
        ("isnull(raw)", "bool"),
    ],
)
def test_dynamic_types_are_permissive(text: str, expected: str) -> None:
    assert type_of(text) == expected


def test_dynamic_division_by_non_numeric_is_rejected() -> None:
    assert chain_error("(j / s)").detail == DETAIL_SCHEMA_MISMATCH
    assert chain_error("(b / raw)").detail == DETAIL_SCHEMA_MISMATCH


# --- where rules ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "b",
        "isnull(s)",
        "(a > 1)",
        "(s > 1)",  # cross-type comparison: legal in where, never matches
        "(b == 'x')",
        "((s > 1) and b)",
        "(not (s > a))",
        "(quadkey(40.0, -74.0, 3) == 22)",
        "(quadkey(a, x, n) > 0)",
        "(quadkey(null, j, null) > 0)",
        "(x == null)",
        "j",
        "(cast(s, int) > 3)",
    ],
)
def test_where_accepted(text: str) -> None:
    check_where(text, SCHEMA)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("(a + 1)", "must evaluate to bool, got i64"),
        ("a", "got i64"),
        ("x", "got f64"),
        ("s", "got str"),
        ("null", "got null"),
        ("(a + b)", "operator '+'"),
        ("(s + 1)", "operator '+'"),
        ("(foo(a) > 1)", 'unknown function "foo"'),
        ("foo(a)", 'unknown function "foo"'),
        ("quadkey(1.0, 2.0)", 'function "quadkey" expects 3 arguments, got 2'),
        ("(quadkey(x, y, 3.0) > 1)", "argument zoom must be i64, got f64"),
        ("(quadkey(s, y, 3) > 1)", "argument lat must be numeric, got str"),
        ("(cast(a, long) > 1)", "unknown cast target type"),
        ("(not a)", "operator 'not'"),
    ],
)
def test_where_rejected(text: str, fragment: str) -> None:
    err = where_error(text)
    assert fragment in err.reason
    assert err.reason.startswith("where predicate")


def test_where_unknown_field_message() -> None:
    err = where_error("(zz > 1)")
    assert err.reason == ("where predicate references unknown field 'zz' "
                          "(fields: 'a', 'n', 'x', 'y', 's', 't', 'b', 'c', 'raw', 'ts', 'j', "
                          "'geo.lat')")
    assert err.detail == DETAIL_UNKNOWN_FIELD
    assert where_error("(rawr > 1)").reason.endswith("; did you mean 'raw'?")


def test_where_parse_error_prefix() -> None:
    err = where_error("(a % 2 == 0)")
    assert err.reason.startswith("where predicate parse error at col 4: ")
    assert err.detail is None
    assert err.col == 4
    deep = where_error("(" * 600 + "b" + ")" * 600)
    assert "nesting depth exceeds 512" in deep.reason


def test_quadkey_allowed_only_in_where() -> None:
    check_where("(quadkey(x, y, 5) > 0)", SCHEMA)
    err = chain_error("(quadkey(x, y, 5) > 0)")
    assert 'unhandled builtin "quadkey"' in err.reason
