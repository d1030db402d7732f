"""bv.col / bv.lit: exact rendering (spec/sdk.md §5), validation, typing (expressions.md §8)."""

from __future__ import annotations

import pytest

import beava as bv
from beava.dsl.expressions import Expr, infer_type

x = bv.col("x")


@pytest.mark.parametrize(
    ("expr", "text"),
    [
        (bv.col("x"), "x"),
        (bv.col("geo.lat"), "geo.lat"),
        (bv.col("_a1"), "_a1"),
        (x + 5, "(x + 5)"),
        (5 + x, "(5 + x)"),
        (bv.col("a") - bv.col("b"), "(a - b)"),
        (bv.col("a") * bv.col("b"), "(a * b)"),
        (bv.col("a") / bv.col("b"), "(a / b)"),
        (10 - x, "(10 - x)"),
        (2 * x, "(2 * x)"),
        (1 / x, "(1 / x)"),
        (x > 100, "(x > 100)"),
        (x >= 100, "(x >= 100)"),
        (x < 100, "(x < 100)"),
        (x <= 100, "(x <= 100)"),
        (x == 100, "(x == 100)"),
        (x != 100, "(x != 100)"),
        (100 < x, "(x > 100)"),  # noqa: SIM300 - the reflected form is under test
        (100 >= x, "(x <= 100)"),  # noqa: SIM300
        (bv.col("status") == "ok", "(status == 'ok')"),
        ("ok" == bv.col("status"), "(status == 'ok')"),  # noqa: SIM300
        (x == None, "(x == null)"),  # noqa: E711 - builds an expression
        (x != None, "(x != null)"),  # noqa: E711
        ((x > 1) & (x < 5), "((x > 1) and (x < 5))"),
        ((x > 1) | (x < 5), "((x > 1) or (x < 5))"),
        (~(x > 1), "(not (x > 1))"),
        (-x, "(-1 * x)"),
        (-(x + 1), "(-1 * (x + 1))"),
        (x.isnull(), "(x == null)"),
        (x.cast("int"), "cast(x, int)"),
        (x.cast("str"), "cast(x, str)"),
        (x.cast(float), "cast(x, float)"),
        (x.cast(bool), "cast(x, bool)"),
        (x.cast(str), "cast(x, str)"),
        ((x + 1).cast("int") > 3, "(cast((x + 1), int) > 3)"),
        (True & (x > 1), "(true and (x > 1))"),
        (((x > 1) & (bv.col("m") != "amazon")), "((x > 1) and (m != 'amazon'))"),
        (bv.lit(None), "null"),
        (bv.lit(True), "true"),
        (bv.lit(False), "false"),
        (bv.lit(42), "42"),
        (bv.lit(-7), "-7"),
        (bv.lit(1.5), "1.5"),
        (bv.lit(-0.0), "-0.0"),
        (bv.lit(1e16), "1.0e+16"),
        (bv.lit(1e-7), "1.0e-07"),
        (bv.lit(2.5e-3), "0.0025"),
        (bv.lit(1.5e300), "1.5e+300"),
        (bv.lit("hi"), "'hi'"),
        (bv.lit("it's"), "'it\\'s'"),
        (bv.lit("a\\b"), "'a\\\\b'"),
        (bv.lit('say "hi"'), "'say \"hi\"'"),
        (bv.lit("tab\there\nnew"), "'tab\there\nnew'"),
        (bv.lit("é€"), "'é€'"),
        (x + 1.5, "(x + 1.5)"),
        (x * 1e20, "(x * 1.0e+20)"),
        (x == True, "(x == true)"),  # noqa: E712
        (x + -3, "(x + -3)"),
        (bv.lit(2**63 - 1), "9223372036854775807"),
        (bv.lit(-(2**63)), "-9223372036854775808"),
    ],
)
def test_rendering(expr: Expr, text: str) -> None:
    assert expr.to_expr_string() == text


def test_chained_comparison_keeps_only_the_last() -> None:
    # Python evaluates `1 < x < 5` as `(1 < x) and (x < 5)`; bool(expr) is True
    assert (1 < x < 5).to_expr_string() == "(x < 5)"


def test_bool_of_an_expression_is_true() -> None:
    assert bool(x == 1) is True
    assert bool(bv.lit(False)) is True


def test_hash() -> None:
    assert hash(bv.col("a")) == hash(bv.col("a"))
    assert hash(bv.lit(1)) == hash(bv.lit(1))
    a = bv.col("a")
    left = a + 1
    assert hash(left) == hash(left)
    # compound expressions hash by the identity of their children
    one = bv.lit(1)
    assert hash(a + one) == hash(a + one)
    assert {bv.col("a"): 1}[bv.col("a")] == 1


def test_expressions_are_immutable() -> None:
    with pytest.raises(AttributeError):
        x.name = "y"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        (x + 1).op = "-"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del x.name


@pytest.mark.parametrize("name", ["and", "or", "not", "true", "false", "null"])
def test_col_rejects_keywords(name: str) -> None:
    with pytest.raises(ValueError, match="keyword"):
        bv.col(name)


@pytest.mark.parametrize("name", ["", "1a", "a-b", "a b", "a.", ".a", "a..b", "a.1", "é", "a()"])
def test_col_rejects_non_identifiers(name: str) -> None:
    with pytest.raises(ValueError, match="invalid column name"):
        bv.col(name)


@pytest.mark.parametrize("name", [1, None, b"x", ["x"]])
def test_col_requires_a_str(name: object) -> None:
    with pytest.raises(TypeError):
        bv.col(name)  # type: ignore[arg-type]


def test_keyword_case_variants_are_identifiers() -> None:
    assert bv.col("AND").to_expr_string() == "AND"
    assert bv.col("True").to_expr_string() == "True"


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, float("nan"), float("inf"), -float("inf")])
def test_lit_rejects_out_of_range(value: object) -> None:
    with pytest.raises(ValueError):
        bv.lit(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [[1, 2], (1,), {"a": 1}, b"x", object(), 1j])
def test_lit_rejects_other_types(value: object) -> None:
    with pytest.raises(TypeError):
        bv.lit(value)  # type: ignore[arg-type]


def test_operands_are_coerced_like_lit() -> None:
    with pytest.raises(ValueError):
        x + float("nan")
    with pytest.raises(TypeError):
        x + [1]
    with pytest.raises(ValueError):
        _ = x > 2**64


def test_lit_reduces_subclasses_to_plain_values() -> None:
    import enum

    class Level(enum.IntEnum):
        HIGH = 3

    class Name(str):
        def __repr__(self) -> str:
            return "Name(...)"

    assert bv.lit(Level.HIGH).to_expr_string() == "3"
    assert bv.lit(Name("o'k")).to_expr_string() == "'o\\'k'"


@pytest.mark.parametrize("target", ["integer", "Int", "f64", int | None, list, None])
def test_cast_rejects_other_targets(target: object) -> None:
    with pytest.raises(ValueError, match="cast target"):
        x.cast(target)  # type: ignore[arg-type]


def test_unsupported_operators() -> None:
    with pytest.raises(TypeError):
        x % 2  # type: ignore[operator]
    with pytest.raises(TypeError):
        x // 2  # type: ignore[operator]
    with pytest.raises(TypeError):
        x ** 2  # type: ignore[operator]
    with pytest.raises(TypeError):
        _ = 1 in x  # type: ignore[operator]
    with pytest.raises(AttributeError):
        x.alias("y")  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        x.startswith("a")  # type: ignore[attr-defined]


def test_long_and_chain_renders_without_recursion() -> None:
    expr = x > 0
    for i in range(3000):
        expr = expr & (x != i)
    text = expr.to_expr_string()
    assert text.startswith("(" * 3000 + "(x > 0) and (x != 0))")
    assert text.endswith("and (x != 2999))")


SCHEMA = {"i": "i64", "f": "f64", "s": "str", "b": "bool"}


@pytest.mark.parametrize(
    ("expr", "typ"),
    [
        (bv.col("i"), "i64"),
        (bv.col("missing"), None),
        (bv.lit(None), "null"),
        (bv.lit(1), "i64"),
        (bv.lit(1.0), "f64"),
        (bv.lit("a"), "str"),
        (bv.lit(True), "bool"),
        (bv.col("i") + 1, "i64"),
        (bv.col("i") + 1.0, "f64"),
        (bv.col("i") * bv.col("f"), "f64"),
        (bv.col("i") / 2, "i64"),  # integer division
        (bv.col("f") / 2, "f64"),
        (bv.col("i") + None, "i64"),
        (bv.lit(None) + bv.lit(None), "null"),
        (bv.col("s") + None, "str"),
        (bv.col("s") / None, None),
        (bv.col("s") + 1, None),
        (bv.col("b") + 1, None),
        (-bv.col("i"), "i64"),
        (-bv.col("f"), "f64"),
        (-bv.col("s"), None),
        (bv.col("i") > 1.5, "bool"),
        (bv.col("s") == "a", "bool"),
        (bv.col("s") > 1, None),
        (bv.col("s") == None, "bool"),  # noqa: E711
        (bv.col("missing").isnull(), None),
        ((bv.col("b")) & (bv.col("i") > 1), "bool"),
        (bv.col("i") & bv.col("b"), None),
        (~bv.col("b"), "bool"),
        (~bv.col("i"), None),
        (~bv.lit(None), "bool"),
        (bv.col("b").cast("int"), "i64"),
        (bv.col("s").cast("float"), "f64"),
        (bv.col("i").cast("str"), "str"),
        (bv.col("f").cast("bool"), "bool"),
        (bv.col("missing").cast("int"), None),
    ],
)
def test_infer_type(expr: Expr, typ: str | None) -> None:
    assert infer_type(expr, SCHEMA) == typ
