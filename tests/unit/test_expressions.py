"""The expression facade: spec/expressions.md §11 vectors and compiled-function behaviour."""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest

from beava.engine.expressions import (
    ExpressionError,
    check_expression,
    check_where,
    compile_expression,
    compile_where,
    format_expression,
    parse_expression,
)

SCHEMA = {"a": "i64", "x": "f64", "s": "str", "b": "bool"}
ROW = {"a": -7, "x": 1.5, "s": "12", "b": True}
MIN = -(2**63)
MAX = 2**63 - 1


def evaluate(text: str, row: dict[str, Any] | None = None) -> Any:
    expr, _ = check_expression(text, SCHEMA)
    return compile_expression(expr)(dict(ROW if row is None else row))


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return type(a) is type(b) and a == b


# --- §11 runtime vectors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("number", "text", "expected"),
    [
        (1, "(a / 2)", -3),
        (2, "(a / 0)", None),
        (3, "(x / 0.0)", math.inf),
        (4, "(a * 9223372036854775807)", MIN),
        (5, "(a + 9223372036854775807)", 9223372036854775800),
        (6, "cast(x, str)", "1.5"),
        (7, "cast(s, int)", 12),
        (7, "cast(s, float)", 12.0),
        (7, "cast(s, bool)", None),
        (8, "cast(x, int)", 1),
        (8, "cast(b, int)", 1),
        (8, "cast(b, str)", "true"),
        (8, "cast(a, str)", "-7"),
        (9, "cast((x * 1000000000000000000000.0), str)", "1500000000000000000000"),
        (10, "cast((x / 3.0), str)", "0.5"),
        (11, "(s > 'a')", False),
        (12, "(x == a)", False),
        (13, "(((x - x) / 0.0) != 1.0)", False),
        (13, "(((x - x) / 0.0) == ((x - x) / 0.0))", False),
        (14, "(null + 1)", None),
        (15, "(b and null)", None),
        (15, "((not b) and null)", False),
        (15, "((not b) or null)", None),
        (15, "(b or null)", True),
        (16, "(a == null)", False),
        (16, "isnull(a)", False),
        (17, "(not a > 1)", True),
        (18, "(not b and false)", True),
        (18, "not b and false", False),
        (19, "a > -1 and x < 2", False),
        (20, "-x * 2", -3.0),
        (21, '(s == "12")', True),
        (22, "1.0e5 > a", True),
    ],
)
def test_runtime_vectors(number: int, text: str, expected: Any) -> None:
    assert same(evaluate(text), expected), number


def test_vector_21_unicode_literal_matches_pushed_text() -> None:
    assert evaluate("(s == 'é')", {"s": "é"}) is True
    assert evaluate('(s == "é")', {"s": "é"}) is True
    assert evaluate("(s == 'é')", {"s": "e"}) is False


def test_vector_22_exponent_only_float_is_rejected() -> None:
    with pytest.raises(ExpressionError):
        check_expression("1e5 > a", SCHEMA)


def test_vector_23_quadkey_in_where() -> None:
    where = compile_where(check_where("(quadkey(40.0, -74.0, 3) == 22)", SCHEMA))
    assert where(ROW) is True
    assert where({}) is True


def test_vector_25_cross_type_where_never_matches() -> None:
    where = compile_where(check_where("(s > 1)", SCHEMA))
    assert where(ROW) is False
    assert where({"s": "5"}) is False


# --- compiled functions -----------------------------------------------------------------------


def test_where_is_true_only_for_bool_true() -> None:
    where = compile_where(check_where("b", {"b": "json"}))
    assert where({"b": True}) is True
    for value in (False, None, 1, 1.0, "true", [True], {"b": True}):
        assert where({"b": value}) is False
    assert where({}) is False


def test_absent_fields_behave_as_null() -> None:
    assert evaluate("isnull(a)", {}) is True
    assert evaluate("(a + 1)", {}) is None
    assert evaluate("(a > 1)", {}) is None
    assert evaluate("(not b)", {}) is None
    assert evaluate("(b or true)", {}) is True


def test_dotted_name_is_one_field() -> None:
    fn = compile_expression(check_expression("(geo.lat > 40)", {"geo.lat": "f64"})[0])
    assert fn({"geo.lat": 41.0}) is True
    assert fn({"geo": {"lat": 41.0}}) is None


def test_declared_types_are_not_trusted_at_runtime() -> None:
    # An i64 field may carry a float (pushes keep numbers as sent) and an optional field
    # any JSON value; the compiled code checks value types itself.
    fn = compile_expression(check_expression("(a > 0)", SCHEMA)[0])
    assert fn({"a": 0.5}) is True
    assert fn({"a": "5"}) is None
    assert fn({"a": True}) is None
    assert fn({"a": [1]}) is None
    assert fn({"a": math.nan}) is False
    ne = compile_expression(check_expression("(a != 0)", SCHEMA)[0])
    assert ne({"a": math.nan}) is False
    assert ne({"a": 1}) is True
    assert ne({"a": 0.0}) is False


def test_literal_on_the_left_of_a_comparison() -> None:
    assert evaluate("(5 > a)") is True
    assert evaluate("(-7.0 == a)") is True
    assert evaluate("('12' == s)") is True
    assert evaluate("(true == b)") is True
    assert evaluate("(1.0 >= x)") is False


def test_mixed_int_float_comparison_converts_the_integer() -> None:
    fn = compile_expression(parse_expression("(a == 9007199254740992.0)"))
    assert fn({"a": 2**53 + 1}) is True
    fn = compile_expression(parse_expression("(x == 9007199254740993)"))
    assert fn({"x": 9007199254740992.0}) is True


def test_opaque_values_never_raise() -> None:
    fn = compile_expression(parse_expression("cast(((a + 1) * -a / 2), str)"))
    for value in ([1], {"k": 2}, b"x", None, "s", True):
        assert fn({"a": value}) is None
    assert fn({"a": math.inf}) == "-inf"
    assert fn({"a": math.nan}) == "NaN"
    assert compile_expression(parse_expression("isnull(a)"))({"a": [1]}) is False
    assert compile_expression(parse_expression("a"))({"a": [1]}) == [1]


def test_unchecked_ast_compiles_to_null_for_unknown_calls() -> None:
    assert compile_expression(parse_expression("foo(a)"))(ROW) is None
    assert compile_expression(parse_expression("cast(a, long)"))(ROW) is None
    assert compile_expression(parse_expression("isnull(a, b)"))(ROW) is None


def test_short_circuit_keeps_three_valued_results() -> None:
    row = {"p": None, "q": False, "r": 5}
    assert compile_expression(parse_expression("(p and q)"))(row) is False
    assert compile_expression(parse_expression("(r and q)"))(row) is None
    assert compile_expression(parse_expression("(r or true)"))(row) is None
    assert compile_expression(parse_expression("(q or r)"))(row) is None
    assert compile_expression(parse_expression("(p or true)"))(row) is True
    assert compile_expression(parse_expression("(true and p and false)"))(row) is False


def test_literal_results() -> None:
    assert compile_expression(parse_expression("42"))({}) == 42
    assert compile_expression(parse_expression("'x'"))({}) == "x"
    assert compile_expression(parse_expression("1.0e999"))({}) == math.inf
    assert compile_where(parse_expression("true"))({}) is True
    assert compile_where(parse_expression("1"))({}) is False
    assert compile_where(parse_expression("'true'"))({}) is False


def test_generated_code_has_no_syntax_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for text in [
            "isnull(5)",
            "isnull('x')",
            "(not 5)",
            "(5 and 'x')",
            "(1 or null)",
            "(null > a)",
            "(1 < 2)",
            "cast(5, str)",
            "(-(5))",
        ]:
            expr = parse_expression(text)
            compile_expression(expr)(ROW)
            compile_where(expr)(ROW)


def test_deep_and_long_expressions_compile_and_evaluate() -> None:
    nested = "b"
    for _ in range(500):
        nested = f"(b and {nested})"
    fn = compile_where(check_where(nested, SCHEMA))
    assert fn({"b": True}) is True
    assert fn({"b": False}) is False
    assert fn({"b": None}) is False

    # the longest flat chains the parser accepts: 2047 operands + the operator node
    flat = compile_expression(check_expression(" + ".join(["a"] * 2047), SCHEMA)[0])
    assert flat({"a": 1}) == 2047
    assert flat({"a": MAX}) == MAX

    nots = compile_expression(check_expression("not " * 511 + "b", SCHEMA)[0])
    assert nots({"b": True}) is False

    ors = compile_expression(parse_expression(" or ".join(["b"] * 2047)))
    assert ors({"b": False}) is False


def test_format_expression_is_canonical() -> None:
    assert format_expression(parse_expression("a > -1 and x < 2")) == "((a > -1) and (x < 2))"
    assert format_expression(parse_expression("(x == null)")) == "isnull(x)"


def test_check_expression_returns_ast_and_type() -> None:
    expr, type_name = check_expression("(a + 1)", SCHEMA)
    assert format_expression(expr) == "(a + 1)"
    assert type_name == "i64"
    assert check_expression("null", SCHEMA)[1] == "null"
