"""Property tests: compiled expressions agree with a plain reference interpreter of the spec.

The reference below is written straight from spec/expressions.md §5-§7 (tables encoded as
data, no shared code with the engine) and evaluates the AST recursively.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beava.engine.expressions import (
    compile_expression,
    compile_where,
    format_expression,
    parse_expression,
)
from beava.engine.expressions.nodes import (
    Arith,
    Call,
    Compare,
    Expr,
    Field,
    Literal,
    Logic,
    Neg,
    Not,
    TypeName,
)

LO = -(2**63)
HI = 2**63 - 1
FIELDS = ["a", "b", "c", "d", "geo.lat"]

# --- the reference interpreter ----------------------------------------------------------------


def kind(v: Any) -> str:
    if v is None:
        return "null"
    if v is True or v is False:
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "str"
    return "other"


def clamp(n: int) -> int:
    return max(LO, min(HI, n))


def ref_arith(op: str, a: Any, b: Any) -> Any:
    ka, kb = kind(a), kind(b)
    if ka == "int" and kb == "int":
        if op == "/":
            if b == 0:
                return None
            q = abs(a) // abs(b)
            return clamp(-q if (a < 0) != (b < 0) else q)
        return clamp({"+": a + b, "-": a - b, "*": a * b}[op])
    if ka in ("int", "float") and kb in ("int", "float"):
        x, y = float(a), float(b)
        if op == "+":
            return x + y
        if op == "-":
            return x - y
        if op == "*":
            return x * y
        if y == 0.0:
            if math.isnan(x) or x == 0.0:
                return math.nan
            return math.inf * math.copysign(1.0, x) * math.copysign(1.0, y)
        return x / y
    return None


def ref_compare(op: str, a: Any, b: Any) -> Any:
    ka, kb = kind(a), kind(b)
    if ka == "int" and kb == "int":
        x, y = a, b
    elif ka in ("int", "float") and kb in ("int", "float"):
        x, y = float(a), float(b)
        if math.isnan(x) or math.isnan(y):
            return False
    elif ka == kb and ka == "str":
        x, y = a, b
    elif ka == kb and ka == "bool":
        x, y = int(a), int(b)
    else:
        return None
    return {
        "<": x < y,
        "<=": x <= y,
        ">": x > y,
        ">=": x >= y,
        "==": x == y,
        "!=": x != y,
    }[op]


def letter(v: Any) -> str:
    return {True: "T", False: "F"}.get(v, "N") if v is None or kind(v) == "bool" else "X"


# Rows: a = T, F, N, X; columns: b = T, F, N, X (spec/expressions.md §7).
AND_TABLE = {"T": "TFNN", "F": "FFFF", "N": "NFNN", "X": "NNNN"}
OR_TABLE = {"T": "TTTT", "F": "TFNN", "N": "TNNN", "X": "NNNN"}
LETTER_VALUE = {"T": True, "F": False, "N": None}


def ref_logic(op: str, a: Any, b: Any) -> Any:
    table = AND_TABLE if op == "and" else OR_TABLE
    return LETTER_VALUE[table[letter(a)]["TFNX".index(letter(b))]]


def ref_display(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    text = repr(x)
    sign = "-" if text.startswith("-") else ""
    text = text.lstrip("-")
    mantissa, _, exponent = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    point = len(whole) + (int(exponent) if exponent else 0)
    if point <= 0:
        out = "0." + "0" * (-point) + digits
    elif point >= len(digits):
        out = digits + "0" * (point - len(digits))
    else:
        out = digits[:point] + "." + digits[point:]
    if "." in out:
        out = out.rstrip("0").rstrip(".")
    head, dot, tail = out.partition(".")
    head = head.lstrip("0") or "0"
    return sign + head + dot + tail


def is_int_text(s: str) -> bool:
    body = s[1:] if s[:1] in ("+", "-") else s
    return body != "" and all(ch in "0123456789" for ch in body)


def is_float_text(s: str) -> bool:
    body = s[1:] if s[:1] in ("+", "-") else s
    if body.lower() in ("inf", "infinity", "nan"):
        return True
    mantissa, marker, exponent = body.replace("E", "e").partition("e")
    if marker:
        exp_digits = exponent[1:] if exponent[:1] in ("+", "-") else exponent
        if not is_int_text(exp_digits) or exp_digits[:1] in ("+", "-"):
            return False
    whole, dot, fraction = mantissa.partition(".")
    digits_ok = all(ch in "0123456789" for ch in whole + fraction)
    return digits_ok and (whole + fraction) != "" and "." not in fraction


def ref_cast(v: Any, target: str) -> Any:
    k = kind(v)
    if k in ("null", "other"):
        return None
    if target == "str":
        return {
            "str": lambda: v,
            "int": lambda: format(v, "d"),
            "float": lambda: ref_display(v),
            "bool": lambda: "true" if v else "false",
        }[k]()
    if target == "int":
        if k == "str":
            return int(v) if is_int_text(v) and LO <= int(v) <= HI else None
        if k == "float":
            if math.isnan(v):
                return 0
            if math.isinf(v):
                return HI if v > 0 else LO
            return clamp(math.trunc(v))
        return int(v)
    if target == "float":
        if k == "str":
            return float(v) if is_float_text(v) else None
        return float(v)
    if target == "bool":
        if k == "str":
            return {"true": True, "false": False}.get(v)
        if k == "float":
            return not math.isnan(v) and v != 0.0
        return v != 0 if k == "int" else v
    return None


def ref_quadkey(lat: Any, lon: Any, zoom: Any) -> Any:
    if kind(lat) not in ("int", "float") or kind(lon) not in ("int", "float"):
        return None
    if kind(zoom) != "int" or not 1 <= zoom <= 24:
        return None

    def to_i64(x: float) -> int:
        if math.isnan(x):
            return 0
        if math.isinf(x):
            return HI if x > 0 else LO
        return clamp(math.floor(x))

    n = 2**zoom
    phi = float(lat)
    if not math.isnan(phi):
        phi = max(-85.05112878, min(85.05112878, phi))
    row = to_i64((math.sin(phi * math.pi / 180.0) + 1.0) / 2.0 * n)
    col = to_i64((float(lon) + 180.0) / 360.0 * n)
    row = max(0, min(n - 1, row))
    return clamp(clamp(col * n) + row)


def ref_eval(e: Expr, row: dict[str, Any]) -> Any:
    if isinstance(e, Literal):
        return e.value
    if isinstance(e, Field):
        return row.get(e.name)
    if isinstance(e, Not):
        v = ref_eval(e.operand, row)
        return (not v) if kind(v) == "bool" else None
    if isinstance(e, Neg):
        v = ref_eval(e.operand, row)
        if kind(v) == "int":
            return clamp(-v)
        return -v if kind(v) == "float" else None
    if isinstance(e, Arith):
        acc = ref_eval(e.operands[0], row)
        for op, operand in zip(e.ops, e.operands[1:], strict=True):
            acc = ref_arith(op, acc, ref_eval(operand, row))
        return acc
    if isinstance(e, Logic):
        acc = ref_eval(e.operands[0], row)
        for operand in e.operands[1:]:
            acc = ref_logic(e.op, acc, ref_eval(operand, row))
        return acc
    if isinstance(e, Compare):
        return ref_compare(e.op, ref_eval(e.left, row), ref_eval(e.right, row))
    if isinstance(e, Call):
        args = e.args
        if e.name == "isnull" and len(args) == 1:
            return ref_eval(args[0], row) is None
        if e.name == "cast" and len(args) == 2:
            target = args[1]
            name = target.name if isinstance(target, TypeName) else None
            if isinstance(target, Literal) and isinstance(target.value, str):
                name = target.value
            return ref_cast(ref_eval(args[0], row), name) if name else None
        if e.name == "quadkey" and len(args) == 3:
            return ref_quadkey(*(ref_eval(arg, row) for arg in args))
        return None
    return None


def same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return bool(a == b)


# --- strategies -------------------------------------------------------------------------------

edge_ints = st.sampled_from([LO, LO + 1, HI, HI - 1, 0, 1, -1, 2, -7, 2**53 + 1, 3, 10])
ints = st.one_of(edge_ints, st.integers(min_value=LO, max_value=HI))
literal_ints = st.one_of(edge_ints, st.integers(min_value=-1000, max_value=1000)).filter(
    lambda n: n != LO
)
edge_floats = st.sampled_from([0.0, -0.0, 1.5, -1.5, 0.5, 1e21, 1e-7, 2.0**63, 9.2e18, 2.0**53])
texts = st.one_of(
    st.sampled_from(
        ["12", "-3", "+7", "1e5", " 1", "1_0", "true", "false", "nan", "-inf", ".5", "5.", "é"]
    ),
    st.text(max_size=4),
)
literals = st.one_of(
    st.none(),
    st.booleans(),
    literal_ints,
    st.one_of(edge_floats, st.floats(allow_nan=False, width=64)),
    texts,
).map(Literal)
row_values = st.one_of(
    st.none(),
    st.booleans(),
    ints,
    st.one_of(edge_floats, st.sampled_from([math.nan, math.inf, -math.inf]), st.floats(width=64)),
    texts,
    st.sampled_from([[1, 2], {"k": 1}, b"raw"]),
)
rows = st.dictionaries(st.sampled_from(FIELDS), row_values, min_size=2, max_size=len(FIELDS))
numbers = st.one_of(literal_ints, edge_floats, st.sampled_from([math.inf, -math.inf])).map(Literal)
leaves = st.one_of(literals, st.sampled_from(FIELDS).map(Field))
CAST_NAMES = ["str", "int", "float", "bool", "long"]


def compound(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    many = st.lists(children, min_size=2, max_size=4)
    return st.one_of(
        children.map(Not),
        children.map(Neg),
        many.flatmap(
            lambda xs: st.lists(
                st.sampled_from(["+", "-"]), min_size=len(xs) - 1, max_size=len(xs) - 1
            ).map(lambda ops: Arith(tuple(xs), tuple(ops)))
        ),
        many.flatmap(
            lambda xs: st.lists(
                st.sampled_from(["*", "/"]), min_size=len(xs) - 1, max_size=len(xs) - 1
            ).map(lambda ops: Arith(tuple(xs), tuple(ops)))
        ),
        st.tuples(st.sampled_from(["and", "or"]), many).map(lambda t: Logic(t[0], tuple(t[1]))),
        st.tuples(st.sampled_from(["<", "<=", ">", ">=", "==", "!="]), children, children).map(
            lambda t: Compare(*t)
        ),
        children.map(lambda c: Call("isnull", (c,))),
        st.tuples(children, st.sampled_from(CAST_NAMES)).map(
            lambda t: Call("cast", (t[0], TypeName(t[1])))
        ),
        st.tuples(children, children, st.one_of(children, st.integers(0, 26).map(Literal))).map(
            lambda t: Call("quadkey", t)
        ),
        st.lists(children, max_size=2).map(lambda xs: Call("foo", tuple(xs))),
        # The compiler inlines `local op number` and `number op local`: exercise it often.
        st.tuples(children, st.sampled_from(["+", "-", "*", "/"]), numbers, st.booleans()).map(
            lambda t: Arith((t[0], t[2]) if t[3] else (t[2], t[0]), (t[1],))
        ),
    )


trees = st.recursive(leaves, compound, max_leaves=20)
expressions = st.one_of(trees, compound(trees))

SETTINGS = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@SETTINGS
@given(expressions, st.lists(rows, min_size=1, max_size=4))
def test_compiled_expression_matches_reference(expr: Expr, samples: list[dict]) -> None:
    value_fn = compile_expression(expr)
    where_fn = compile_where(expr)
    for row in samples:
        expected = ref_eval(expr, row)
        got = value_fn(dict(row))
        assert same(got, expected), (format_expression(expr), row, got, expected)
        assert where_fn(row) is (expected is True)


def rewrite_null_tests(e: Expr) -> Expr:
    """The post-parse rewrite of spec §3: `x == null` -> isnull(x), `x != null` -> not isnull(x)."""
    if isinstance(e, Not | Neg):
        return type(e)(rewrite_null_tests(e.operand))
    if isinstance(e, Arith):
        return Arith(tuple(rewrite_null_tests(x) for x in e.operands), e.ops)
    if isinstance(e, Logic):
        return Logic(e.op, tuple(rewrite_null_tests(x) for x in e.operands))
    if isinstance(e, Call):
        return Call(e.name, tuple(rewrite_null_tests(x) for x in e.args))
    if isinstance(e, Compare):
        left, right = rewrite_null_tests(e.left), rewrite_null_tests(e.right)
        if e.op in ("==", "!="):
            tested = None
            if right == Literal(None):
                tested = left
            elif left == Literal(None):
                tested = right
            if tested is not None:
                test = Call("isnull", (tested,))
                return test if e.op == "==" else Not(test)
        return Compare(e.op, left, right)
    return e


# Numbers where I64/F64 conversion, saturation and NaN rules make a difference.
BOUNDARY = [0, 1, -1, 2, 2**53, 2**53 + 1, HI, HI - 1, LO + 1, 0.0, -0.0, 0.5, 2.0**53]
BOUNDARY += [2.0**63, -(2.0**63), 1e300, math.inf, -math.inf]
boundary_literals = st.one_of(
    st.sampled_from(BOUNDARY),
    st.integers(min_value=LO + 1, max_value=HI),
    st.floats(allow_nan=False),
).map(Literal)
numeric_values = st.one_of(
    st.sampled_from([*BOUNDARY, LO, math.nan, None, True, "1", [1]]),
    st.integers(min_value=LO, max_value=HI),
    st.floats(width=64),
)


@SETTINGS
@given(
    st.sampled_from(["+", "-", "*", "/", "<", "<=", ">", ">=", "==", "!="]),
    boundary_literals,
    st.booleans(),
    st.lists(numeric_values, min_size=1, max_size=8),
)
def test_field_with_number_literal_matches_reference(
    op: str, number: Literal, field_first: bool, values: list[Any]
) -> None:
    # The compiler inlines these shapes (type test + native operator); check them densely.
    pair = (Field("a"), number) if field_first else (number, Field("a"))
    expr: Expr = Arith(pair, (op,)) if op in "+-*/" else Compare(op, *pair)
    fn = compile_expression(expr)
    for value in values:
        expected = ref_eval(expr, {"a": value})
        assert same(fn({"a": value}), expected), (format_expression(expr), value)


def binary(op: str, left: Expr, right: Expr) -> Expr:
    return Arith((left, right), (op,)) if op in "+-*/" else Compare(op, left, right)


@pytest.mark.parametrize("op", ["+", "-", "*", "/", "<", "<=", ">", ">=", "==", "!="])
def test_boundary_grid_matches_reference(op: str) -> None:
    # Every boundary number against every boundary value, through both the inlined
    # `field op literal` code and the general helpers (`field op field`).
    values = [*BOUNDARY, LO, math.nan, None, True, "1", [1]]
    for number in BOUNDARY:
        for literal_first in (False, True):
            a, k, lit = Field("a"), Field("k"), Literal(number)
            expr = binary(op, lit, a) if literal_first else binary(op, a, lit)
            inline = compile_expression(expr)
            general = compile_expression(binary(op, k, a) if literal_first else binary(op, a, k))
            for value in values:
                expected = ref_eval(expr, {"a": value})
                assert same(inline({"a": value}), expected), (format_expression(expr), value)
                assert same(general({"a": value, "k": number}), expected), (op, value, number)


@SETTINGS
@given(expressions)
def test_format_parse_round_trip(expr: Expr) -> None:
    text = format_expression(expr)
    reparsed = parse_expression(text)
    assert reparsed == rewrite_null_tests(expr), text
    assert format_expression(parse_expression(format_expression(reparsed))) == format_expression(
        reparsed
    )


@given(st.floats(width=64))
def test_display_formatting_matches_reference(x: float) -> None:
    assert compile_expression(parse_expression("cast(v, str)"))({"v": x}) == ref_display(x)


@given(st.one_of(texts, st.text(alphabet="0123456789+-.eEinfatyINFAY_ x", max_size=8)))
def test_string_casts_match_reference(s: str) -> None:
    for target in ("int", "float", "bool"):
        fn = compile_expression(Call("cast", (Field("v"), TypeName(target))))
        assert same(fn({"v": s}), ref_cast(s, target)), (s, target)
