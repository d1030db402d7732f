"""Lexer and parser of the expression language (spec/expressions.md §2-§3)."""

from __future__ import annotations

import math
import re
import time

import pytest

from beava.engine.expressions import ExpressionError, format_expression, parse_expression
from beava.engine.expressions.nodes import (
    Arith,
    Call,
    Compare,
    Field,
    Literal,
    Logic,
    Neg,
    Not,
    TypeName,
)


def canon(text: str) -> str:
    return format_expression(parse_expression(text))


def parse_error(text: str) -> ExpressionError:
    with pytest.raises(ExpressionError) as info:
        parse_expression(text)
    assert info.value.detail is None
    return info.value


def error_col(text: str) -> int:
    reason = parse_error(text).reason
    match = re.search(r"col (\d+)", reason)
    assert match is not None, reason
    return int(match.group(1))


# --- lexical structure ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "name"),
    [("amount", "amount"), ("_x1", "_x1"), ("geo.lat", "geo.lat"), ("a.b.c", "a.b.c")],
)
def test_identifiers_including_dotted_names(text: str, name: str) -> None:
    assert parse_expression(text) == Field(name)


def test_keywords_are_exact_lower_case() -> None:
    assert parse_expression("AND") == Field("AND")
    assert parse_expression("True") == Field("True")
    assert parse_expression("NULL") == Field("NULL")
    assert parse_expression("true") == Literal(True)
    assert parse_expression("null") == Literal(None)
    assert parse_expression("a.and") == Field("a.and")


def test_dot_not_followed_by_letter_ends_identifier() -> None:
    err = parse_error("a. b")
    assert "col 2" in err.reason
    assert "unknown character '.'" in err.reason
    assert error_col("a.1") == 2


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("42", 42),
        ("0", 0),
        ("9223372036854775807", 9223372036854775807),
        ("-7", -7),
        ("1.5", 1.5),
        ("-0.25", -0.25),
        ("2.5e-3", 0.0025),
        ("1.0e+16", 1e16),
        ("1.0E5", 100000.0),
    ],
)
def test_numeric_literals(text: str, value: float) -> None:
    lit = parse_expression(text)
    assert isinstance(lit, Literal)
    assert type(lit.value) is type(value)
    assert lit.value == value


def test_negative_zero_float_literal_keeps_sign() -> None:
    lit = parse_expression("-0.0")
    assert isinstance(lit, Literal)
    assert math.copysign(1.0, lit.value) == -1.0  # type: ignore[arg-type]


def test_float_overflow_gives_inf() -> None:
    assert parse_expression("1.0e400") == Literal(math.inf)
    assert parse_expression("-1.0e400") == Literal(-math.inf)


def test_integer_literal_must_fit_i64() -> None:
    err = parse_error("9223372036854775808")
    assert "invalid integer literal" in err.reason
    assert "invalid integer literal" in parse_error("-9223372036854775808").reason
    assert error_col("(a > 99999999999999999999)") == 6


@pytest.mark.parametrize("text", ["1e5", ".5", "5.", "1.e5", "(a > 1e5)"])
def test_not_floats(text: str) -> None:
    parse_error(text)


def test_exponent_without_digits() -> None:
    assert "invalid float literal" in parse_error("1.5e").reason
    assert "invalid float literal" in parse_error("(x > 1.5e+)").reason
    assert error_col("(x > 1.5e+)") == 6


def test_single_quoted_string_escapes() -> None:
    assert parse_expression(r"'it\'s'") == Literal("it's")
    assert parse_expression(r"'a\\b'") == Literal("a\\b")
    # Any other backslash pair is kept as two characters, including an escaped `"`.
    assert parse_expression(r"'a\"b'") == Literal('a\\"b')
    assert parse_expression(r"'a\nb'") == Literal("a\\nb")


def test_double_quoted_string_escapes() -> None:
    assert parse_expression(r'"say \"hi\""') == Literal('say "hi"')
    assert parse_expression(r'"a\\b"') == Literal("a\\b")
    assert parse_expression(r'"a\'b"') == Literal("a\\'b")
    assert parse_expression('"it\'s"') == Literal("it's")


def test_string_content_is_unicode_text() -> None:
    assert parse_expression("'é漢字'") == Literal("é漢字")
    assert parse_expression('"é"') == Literal("é")


def test_unterminated_string() -> None:
    err = parse_error("(s == 'abc)")
    assert "unterminated string literal" in err.reason
    assert "col 7" in err.reason
    assert "unterminated string literal" in parse_error("'abc\\'").reason


def test_columns_are_byte_offsets() -> None:
    # `%` is code point 10 (0-based); 'é' takes two bytes and '漢' three.
    assert error_col("(s == 'é' % 2)") == 12
    assert error_col("(s == '漢' % 2)") == 13
    assert error_col("(s == 'x' % 2)") == 11


@pytest.mark.parametrize(
    ("text", "col", "fragment"),
    [
        ("(a % 2 == 0)", 4, "unknown character '%'"),
        ("(a & b)", 4, "unknown character '&'"),
        ("(a | b)", 4, "unknown character '|'"),
        ("a[0]", 2, "unknown character '['"),
        ("(a // 2)", 4, "'//'"),
        ("(a = 1)", 4, "use '==' for equality"),
        ("(!a)", 2, "'!'"),
        ("(a é 1)", 4, "unknown character 'é'"),
        ("(a > 1) b", 9, 'unexpected token "b"'),
        ("", 1, "unexpected token"),
        ("   ", 4, "unexpected token"),
        ("(a > 1", 7, "expected ')'"),
        ("(a > 1 > 2)", 8, "expected ')'"),
        ("f(a b)", 5, "expected ')'"),
        ("(not)", 5, 'unexpected token ")"'),
        ("1e5 > a", 2, 'unexpected token "e5"'),
    ],
)
def test_parse_errors_carry_column_and_reason(text: str, col: int, fragment: str) -> None:
    err = parse_error(text)
    assert err.reason.startswith(f"parse error at col {col}: "), err.reason
    assert fragment in err.reason
    assert err.col == col


def test_whitespace_kinds() -> None:
    assert canon("(a\t>\r\n1)") == "(a > 1)"


# --- syntax and precedence --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("amount > 100", "(amount > 100)"),
        ("a + b * 2 > 5", "((a + (b * 2)) > 5)"),
        ("a - b - c", "(a - b - c)"),
        ("a / b * c", "(a / b * c)"),
        ("a or b and c", "(a or (b and c))"),
        ("a and b or c and d", "((a and b) or (c and d))"),
        ("not a and b", "((not a) and b)"),
        ("x or not a", "(x or (not a))"),
        ("a and not b", "(a and (not b))"),
        ("not a > 1", "(not (a > 1))"),
        ("not not a", "(not (not a))"),
        ("a -1", "(a - 1)"),
        ("a - -1", "(a - -1)"),
        ("-x * 2", "((-x) * 2)"),
        ("-2 * 3", "(-2 * 3)"),
        ("- 5", "-5"),
        ("--5", "(-(-5))"),
        ("-(a + b)", "(-(a + b))"),
        ("-(5)", "(-(5))"),
        ("cast(a + 1, str)", "cast((a + 1), str)"),
        ("f()", "f()"),
        ("f(a, b, c)", "f(a, b, c)"),
    ],
)
def test_precedence(text: str, expected: str) -> None:
    assert canon(text) == expected


def test_negated_group_negates_whole_group() -> None:
    assert parse_expression("(not a and b)") == Not(Logic("and", (Field("a"), Field("b"))))
    assert parse_expression("(not x > 1)") == Not(Compare(">", Field("x"), Literal(1)))
    assert parse_expression("(not a or b)") == Not(Logic("or", (Field("a"), Field("b"))))
    # Without the group, `not` binds tighter than `and`.
    assert parse_expression("not a and b") == Logic("and", (Not(Field("a")), Field("b")))
    assert parse_expression("((not a) and b)") == Logic("and", (Not(Field("a")), Field("b")))


def test_comparison_does_not_chain_at_top_level() -> None:
    err = parse_error("a < b < c")
    assert 'unexpected token "<"' in err.reason


def test_left_associative_chains_are_flat_nodes() -> None:
    assert parse_expression("a + b - c") == Arith((Field("a"), Field("b"), Field("c")), ("+", "-"))
    assert parse_expression("(a + b) - c") == Arith(
        (Arith((Field("a"), Field("b")), ("+",)), Field("c")), ("-",)
    )


def test_negative_literal_versus_unary_minus() -> None:
    assert parse_expression("-5") == Literal(-5)
    assert parse_expression("-2.5") == Literal(-2.5)
    assert parse_expression("-x") == Neg(Field("x"))
    assert parse_expression("--5") == Neg(Literal(-5))
    assert parse_expression("a -1") == Arith((Field("a"), Literal(1)), ("-",))


def test_null_comparisons_are_rewritten_to_isnull() -> None:
    isnull_x = Call("isnull", (Field("x"),))
    assert parse_expression("(x == null)") == isnull_x
    assert parse_expression("(null == x)") == isnull_x
    assert parse_expression("(x != null)") == Not(isnull_x)
    assert parse_expression("(null != x)") == Not(isnull_x)
    assert parse_expression("(x > null)") == Compare(">", Field("x"), Literal(None))


def test_cast_type_name_is_not_a_field() -> None:
    assert parse_expression("cast(x, int)") == Call("cast", (Field("x"), TypeName("int")))
    assert parse_expression("cast(x, 'int')") == Call("cast", (Field("x"), Literal("int")))
    assert parse_expression("f(x, int)") == Call("f", (Field("x"), Field("int")))


# --- nesting limit ----------------------------------------------------------------------------


def test_nesting_limit_of_parenthesised_groups() -> None:
    ok = "(" * 511 + "a" + ")" * 511
    assert parse_expression(ok) == Field("a")
    err = parse_error("(" * 512 + "a" + ")" * 512)
    assert "nesting depth exceeds 512" in err.reason
    assert "col 512" in err.reason


def test_negated_group_counts_once() -> None:
    parse_expression("(not " * 511 + "a" + ")" * 511)
    assert "depth" in parse_error("(not " * 512 + "a" + ")" * 512).reason


def test_prefix_operators_and_call_arguments_open_levels() -> None:
    parse_expression("not " * 511 + "a")
    assert "depth" in parse_error("not " * 512 + "a").reason
    parse_expression("-" * 511 + "x")
    assert "depth" in parse_error("-" * 512 + "x").reason
    parse_expression("f(" * 511 + "a" + ")" * 511)
    assert "depth" in parse_error("f(" * 512 + "a" + ")" * 512).reason


def test_sdk_chain_of_600_predicates_exceeds_depth() -> None:
    text = "(a > 0)"
    for _ in range(599):
        text = f"({text} and (a > 0))"
    assert "nesting depth exceeds 512" in parse_error(text).reason


# --- size limits (docs/limits.md) -------------------------------------------------------------


def test_flat_chain_up_to_the_node_limit() -> None:
    expr = parse_expression(" + ".join(["a"] * 2047))  # 2047 fields + 1 operator node
    assert isinstance(expr, Arith)
    assert len(expr.operands) == 2047
    err = parse_error(" + ".join(["a"] * 2048))
    assert "expression too large: more than 2048 nodes" in err.reason
    assert "col " in err.reason


def test_node_limit_counts_every_kind_of_node() -> None:
    # each term: comparison, field, literal (3 nodes); 682 terms + the `or` node = 2047
    parse_expression(" or ".join(["x > 1"] * 682))
    assert "more than 2048 nodes" in parse_error(" or ".join(["x > 1"] * 683)).reason
    parse_expression(" or ".join(["f(x, 'a', -1)"] * 511))  # call, field, 2 literals: 4 nodes
    assert "more than 2048 nodes" in parse_error(" or ".join(["f(x, 'a', -1)"] * 512)).reason


def test_text_longer_than_the_limit_is_refused_before_tokenizing() -> None:
    parse_expression("a" * 16_384)  # one field of 16384 characters
    err = parse_error("a" * 16_385)
    assert "expression too long: 16385 characters, at most 16384" in err.reason
    # 40,000 or-terms (about 590 KB): refused on the length, without tokenizing
    text = " or ".join(f"x > {i}" for i in range(40_000))
    start = time.perf_counter()
    err = parse_error(text)
    assert "expression too long" in err.reason
    assert time.perf_counter() - start < 1.0  # it took seconds (and a GB) to compile


def test_depth_errors_still_win_over_the_size_limit() -> None:
    # nodes are counted as they are built, bottom-up: a deep input hits the depth first
    text = "(a > 0)"
    for _ in range(1000):  # 3 nodes more per level, 14 characters
        text = f"({text} and (a > 0))"
    assert "nesting depth exceeds 512" in parse_error(text).reason
    right = "a"
    for _ in range(1200):
        right = f"(a and {right})"
    assert "nesting depth exceeds 512" in parse_error(right).reason


# --- round trips ------------------------------------------------------------------------------


# Strings the SDK emits (spec/sdk.md §5) and what they parse to, canonically formatted.
SDK_FORMS = [
    ("x", "x"),
    ("(x + 5)", "(x + 5)"),
    ("(5 + x)", "(5 + x)"),
    ("(a - b)", "(a - b)"),
    ("(a * b)", "(a * b)"),
    ("(a / b)", "(a / b)"),
    ("(x > 100)", "(x > 100)"),
    ("(x >= 100)", "(x >= 100)"),
    ("(x < 100)", "(x < 100)"),
    ("(x <= 100)", "(x <= 100)"),
    ("(x == 100)", "(x == 100)"),
    ("(x != 100)", "(x != 100)"),
    ("(status == 'ok')", "(status == 'ok')"),
    ("(x == null)", "isnull(x)"),
    ("(x != null)", "(not isnull(x))"),
    ("((x > 1) and (y < 2))", "((x > 1) and (y < 2))"),
    ("((x > 1) or (y < 2))", "((x > 1) or (y < 2))"),
    ("(not (x == 'a'))", "(not (x == 'a'))"),
    ("(not ok)", "(not ok)"),
    ("(-1 * x)", "(-1 * x)"),
    ("((a + 1) * 2)", "((a + 1) * 2)"),
    ("isnull(x)", "isnull(x)"),
    ("cast(x, int)", "cast(x, int)"),
    ("cast(x, float)", "cast(x, float)"),
    ('cast(x, "float")', "cast(x, 'float')"),
    ("null", "null"),
    ("true", "true"),
    ("false", "false"),
    ("42", "42"),
    ("-7", "-7"),
    ("1.5", "1.5"),
    ("-0.0", "-0.0"),
    ("1.0e+16", "1.0e+16"),
    ("1.0e-07", "1.0e-07"),
    ("'hi'", "'hi'"),
    (r"'it\'s'", r"'it\'s'"),
    (r"'a\\b'", r"'a\\b'"),
    ("'é'", "'é'"),
    ("(((a > 1) and (b > 2)) and (c > 3))", "(((a > 1) and (b > 2)) and (c > 3))"),
    ("(geo.lat > 40.5)", "(geo.lat > 40.5)"),
    ("((x + 1) > cast(y, float))", "((x + 1) > cast(y, float))"),
]


@pytest.mark.parametrize(("text", "expected"), SDK_FORMS)
def test_sdk_forms_round_trip(text: str, expected: str) -> None:
    expr = parse_expression(text)
    assert format_expression(expr) == expected
    assert parse_expression(expected) == expr
    assert format_expression(parse_expression(expected)) == expected


def test_round_trip_of_literals_that_need_care() -> None:
    for expr in [
        Neg(Literal(5)),
        Neg(Literal(-5)),
        Neg(Literal(2.5)),
        Literal(math.inf),
        Literal(-math.inf),
        Literal(1e300),
        Literal(5e-324),
        Literal("quote ' and \\ backslash"),
        Literal('dq " inside'),
        Arith((Literal(-1), Literal(-2)), ("-",)),
    ]:
        assert parse_expression(format_expression(expr)) == expr, format_expression(expr)


def test_literal_equality_distinguishes_types() -> None:
    assert Literal(1) != Literal(1.0)
    assert Literal(1) != Literal(True)
    assert Literal(0.0) != Literal(-0.0)
    assert Literal("a") == Literal("a")
