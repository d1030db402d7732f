"""Stateless chain ops (spec/expressions.md §9-§11)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from beava.engine.expressions.chain_ops import ChainOpError, chain_output_schema, compile_chain

SCHEMA = {"a": "i64", "x": "f64", "s": "str", "b": "bool"}
ROW = {"a": -7, "x": 1.5, "s": "12", "b": True}


def run(ops: list[dict[str, Any]], row: dict[str, Any] | None = None) -> dict[str, Any] | None:
    return compile_chain(ops, SCHEMA)(dict(ROW if row is None else row))


def failure(ops: list[dict[str, Any]], schema: dict[str, str] | None = None) -> ChainOpError:
    with pytest.raises(ChainOpError) as info:
        chain_output_schema(ops, SCHEMA if schema is None else schema)
    return info.value


# --- filter -----------------------------------------------------------------------------------


def test_filter_keeps_only_bool_true() -> None:
    ops = [{"op": "filter", "expr": "(a > -10)"}]
    assert chain_output_schema(ops, SCHEMA) == SCHEMA
    assert run(ops) == ROW
    assert run(ops, {"a": -11}) is None
    assert run(ops, {}) is None  # Null drops the row


def test_filter_on_float_field() -> None:
    chain = compile_chain([{"op": "filter", "expr": "(amount > 0)"}], {"amount": "f64"})
    assert chain({"amount": 0.5}) == {"amount": 0.5}
    assert chain({"amount": 3}) == {"amount": 3}
    assert chain({"amount": 0.0}) is None
    assert chain({"amount": math.nan}) is None
    assert chain({"amount": None}) is None


def test_non_bool_filter_registers_and_drops_every_row() -> None:
    ops = [{"op": "filter", "expr": "(a + 1)"}]
    assert chain_output_schema(ops, SCHEMA) == SCHEMA
    assert run(ops) is None
    assert run([{"op": "filter", "expr": "true"}]) == ROW
    assert run([{"op": "filter", "expr": "1"}]) is None


def test_filter_stops_later_ops() -> None:
    ops = [
        {"op": "with_columns", "exprs": {"seen": "true"}},
        {"op": "filter", "expr": "b"},
        {"op": "with_columns", "exprs": {"after": "(a * 2)"}},
    ]
    assert run(ops) == {**ROW, "seen": True, "after": -14}
    assert run(ops, {**ROW, "b": False}) is None


def test_two_filters_equal_conjunction() -> None:
    two = [{"op": "filter", "expr": "(a < 0)"}, {"op": "filter", "expr": "(x > 1)"}]
    one = [{"op": "filter", "expr": "((a < 0) and (x > 1))"}]
    for row in ({"a": -1, "x": 2.0}, {"a": 1, "x": 2.0}, {"a": -1}, {}):
        assert (run(two, row) is None) == (run(one, row) is None)


@pytest.mark.parametrize(
    ("expr", "suffix", "detail", "fragment"),
    [
        ("(zz > 1)", ".expr", "unknown_field_reference", "zz"),
        ("(a % 2 == 0)", ".expr", None, "col 4"),
        ("(a > 1 > 2)", ".expr", None, "expected ')'"),
        ("(s > 1)", "", "schema_mismatch", "cannot compare"),
        ("(a + b)", "", "schema_mismatch", "operator '+'"),
        ("(foo(a) > 1)", "", "schema_mismatch", 'unknown function "foo"'),
        ("(quadkey(x, x, 3) > 1)", "", "schema_mismatch", 'unhandled builtin "quadkey"'),
        ("(cast(a, long) > 1)", "", "invalid_cast_target", "unknown cast target"),
    ],
)
def test_filter_errors(expr: str, suffix: str, detail: str | None, fragment: str) -> None:
    err = failure(
        [{"op": "select", "fields": ["a", "x", "s", "b"]}, {"op": "filter", "expr": expr}]
    )
    assert err.index == 1
    assert err.code == "invalid_expression"
    assert err.path_suffix == suffix
    assert err.detail == detail
    assert fragment in err.reason


def test_filter_depth_error() -> None:
    text = "(a > 0)"
    for _ in range(600):
        text = f"({text} and (a > 0))"
    err = failure([{"op": "filter", "expr": text}])
    assert err.code == "invalid_expression"
    assert "depth" in err.reason


# --- select / drop ----------------------------------------------------------------------------


def test_select_orders_and_dedupes() -> None:
    ops = [{"op": "select", "fields": ["s", "a", "s"]}]
    assert list(chain_output_schema(ops, SCHEMA).items()) == [("s", "str"), ("a", "i64")]
    out = run(ops)
    assert out is not None
    assert list(out.items()) == [("s", "12"), ("a", -7)]
    assert run(ops, {"a": 1, "x": 2.0}) == {"a": 1}


def test_select_unknown_field() -> None:
    err = failure([{"op": "select", "fields": ["a", "zz"]}])
    assert (err.index, err.code, err.path_suffix) == (0, "invalid_expression", ".expr")
    assert err.reason == ("field 'zz' not found in upstream schema (fields: 'a', 'x', 's', "
                          "'b')")
    assert failure([{"op": "select", "fields": ["ss"]}]).reason.endswith(
        "; did you mean 's'?")
    assert err.detail == "unknown_field_reference"


def test_drop_never_fails_r10() -> None:
    assert chain_output_schema([{"op": "drop", "fields": ["zz"]}], SCHEMA) == SCHEMA
    ops = [{"op": "drop", "fields": ["a", "a", "zz"]}]
    assert chain_output_schema(ops, SCHEMA) == {"x": "f64", "s": "str", "b": "bool"}
    assert run(ops) == {"x": 1.5, "s": "12", "b": True}
    assert run(ops, {"x": 1.0}) == {"x": 1.0}


# --- rename -----------------------------------------------------------------------------------


def test_rename_keeps_positions() -> None:
    ops = [{"op": "rename", "mapping": {"x": "price"}}]
    schema = chain_output_schema(ops, SCHEMA)
    assert list(schema.items()) == [("a", "i64"), ("price", "f64"), ("s", "str"), ("b", "bool")]
    assert run(ops) == {"a": -7, "price": 1.5, "s": "12", "b": True}


def test_rename_swap_r12() -> None:
    ops = [{"op": "rename", "mapping": {"a": "x", "x": "a"}}]
    assert chain_output_schema(ops, SCHEMA) == {"x": "i64", "a": "f64", "s": "str", "b": "bool"}
    out = run(ops)
    assert out is not None
    assert out["a"] == 1.5
    assert out["x"] == -7


def test_rename_identity_and_absent_source() -> None:
    ops = [{"op": "rename", "mapping": {"a": "a", "s": "t"}}]
    assert chain_output_schema(ops, SCHEMA) == {"a": "i64", "x": "f64", "t": "str", "b": "bool"}
    assert run(ops, {"a": 1}) == {"a": 1}


def test_rename_two_sources_to_one_name_last_wins() -> None:
    ops = [{"op": "rename", "mapping": {"a": "z", "s": "z"}}]
    assert chain_output_schema(ops, SCHEMA) == {"z": "str", "x": "f64", "b": "bool"}
    assert run(ops) == {"x": 1.5, "b": True, "z": "12"}
    assert run(ops, {"a": 3}) == {"z": 3}


def test_rename_errors() -> None:
    err = failure([{"op": "rename", "mapping": {"zz": "q"}}])
    assert (err.code, err.path_suffix, err.detail) == (
        "invalid_expression",
        ".expr",
        "unknown_field_reference",
    )
    err = failure([{"op": "rename", "mapping": {"a": "s"}}])
    assert (err.code, err.path_suffix, err.detail) == (
        "invalid_expression",
        ".mapping",
        "schema_mismatch",
    )
    assert "rename collision on field 's'" in err.reason
    # A target may reuse a name that is itself renamed away.
    chain_output_schema([{"op": "rename", "mapping": {"a": "s", "s": "t"}}], SCHEMA)


# --- with_columns / map -----------------------------------------------------------------------


def test_with_columns_payload_order_r24() -> None:
    ops = [{"op": "with_columns", "exprs": {"z": "(x + 1)", "x": "(x * 10)"}}]
    assert chain_output_schema(ops, SCHEMA) == {**SCHEMA, "z": "f64"}
    out = run(ops)
    assert out is not None
    assert out["z"] == 2.5
    assert out["x"] == 15.0


def test_with_columns_sees_earlier_entries_r14() -> None:
    ops = [{"op": "map", "exprs": {"b": "(a + 1)", "a2": "(b * 2)"}}]
    schema = chain_output_schema(ops, SCHEMA)
    assert list(schema.items()) == [
        ("a", "i64"),
        ("x", "f64"),
        ("s", "str"),
        ("b", "i64"),
        ("a2", "i64"),
    ]
    out = run(ops)
    assert out is not None
    assert (out["b"], out["a2"]) == (-6, -12)


def test_with_columns_cannot_see_later_entries_r9() -> None:
    err = failure([{"op": "with_columns", "exprs": {"w": "((x * 2) + y)", "y": "(a + 1)"}}])
    assert (err.index, err.code, err.path_suffix) == (0, "invalid_expression", ".expr")
    assert "'y'" in err.reason


def test_with_columns_types_and_null() -> None:
    ops = [
        {
            "op": "with_columns",
            "exprs": {"n": "null", "q": "(a / 0)", "r": "cast(s, float)", "ok": "(a < 0)"},
        }
    ]
    schema = chain_output_schema(ops, SCHEMA)
    assert (schema["n"], schema["q"], schema["r"], schema["ok"]) == ("str", "i64", "f64", "bool")
    out = run(ops)
    assert out is not None
    assert out["n"] is None and out["q"] is None
    assert out["r"] == 12.0 and out["ok"] is True
    assert "n" in out  # a Null result is stored, not skipped


def test_with_columns_stores_nan_and_inf() -> None:
    out = run([{"op": "with_columns", "exprs": {"i": "(x / 0.0)", "n": "((x - x) / 0.0)"}}])
    assert out is not None
    assert out["i"] == math.inf
    assert math.isnan(out["n"])


def test_with_columns_errors() -> None:
    err = failure([{"op": "with_columns", "exprs": {"q": "(s + 1)"}}])
    assert (err.code, err.path_suffix) == ("invalid_expression", "")
    err = failure([{"op": "with_columns", "exprs": {"ok": "(a > 0)", "q": 5}}])
    assert (err.index, err.code) == (0, "invalid_registration")


# --- cast -------------------------------------------------------------------------------------


def test_cast_op() -> None:
    ops = [{"op": "cast", "type_map": {"s": "int", "a": "str", "x": "bool"}}]
    assert chain_output_schema(ops, SCHEMA) == {"a": "str", "x": "bool", "s": "i64", "b": "bool"}
    assert run(ops) == {"a": "-7", "x": True, "s": 12, "b": True}
    # Failure gives Null; an absent field stays absent.
    assert run(ops, {"s": "1.5"}) == {"s": None}


def test_cast_result_is_seen_by_later_ops() -> None:
    ops = [
        {"op": "cast", "type_map": {"s": "int"}},
        {"op": "filter", "expr": "(s > 10)"},
    ]
    assert run(ops) is not None
    assert run(ops, {"s": "9"}) is None


def test_cast_errors() -> None:
    err = failure([{"op": "cast", "type_map": {"zz": "int"}}])
    assert (err.code, err.path_suffix, err.detail) == (
        "invalid_expression",
        ".expr",
        "unknown_field_reference",
    )
    err = failure([{"op": "cast", "type_map": {"a": "i64"}}])
    assert (err.code, err.path_suffix, err.detail) == (
        "invalid_expression",
        "",
        "invalid_cast_target",
    )


# --- fillna -----------------------------------------------------------------------------------


def test_fillna_fills_null_and_absent() -> None:
    ops = [{"op": "fillna", "defaults": {"a": 0, "x": 1, "s": "none", "b": False}}]
    assert chain_output_schema(ops, SCHEMA) == SCHEMA
    assert run(ops, {"a": None}) == {"a": 0, "x": 1, "s": "none", "b": False}
    assert run(ops) == ROW
    out = run(ops, {})
    assert out is not None
    assert type(out["x"]) is int  # the JSON shape decides I64 vs F64


def test_fillna_dynamic_types_take_any_scalar() -> None:
    schema = {"j": "json", "r": "bytes", "t": "datetime"}
    ops = [{"op": "fillna", "defaults": {"j": 1.5, "r": "x", "t": True}}]
    assert chain_output_schema(ops, schema) == schema
    assert compile_chain(ops, schema)({}) == {"j": 1.5, "r": "x", "t": True}


@pytest.mark.parametrize(
    ("field", "default"),
    [
        ("a", "str"),
        ("a", 1.5),
        ("a", True),
        ("x", "1"),
        ("x", False),
        ("s", 1),
        ("b", 0),
        ("a", None),
        ("s", ["x"]),
        ("s", {"k": "v"}),
    ],
)
def test_fillna_incompatible_defaults_r11(field: str, default: Any) -> None:
    err = failure([{"op": "fillna", "defaults": {field: default}}])
    assert (err.code, err.path_suffix, err.detail) == ("invalid_expression", "", "schema_mismatch")


def test_fillna_dynamic_rejects_null_and_containers() -> None:
    for default in (None, [1], {"k": 1}):
        err = failure([{"op": "fillna", "defaults": {"j": default}}], {"j": "json"})
        assert err.code == "invalid_expression"


def test_fillna_unknown_field() -> None:
    err = failure([{"op": "fillna", "defaults": {"zz": 1}}])
    assert (err.path_suffix, err.detail) == (".expr", "unknown_field_reference")


def test_fillna_huge_integer_becomes_float() -> None:
    out = compile_chain([{"op": "fillna", "defaults": {"x": 10**30}}], SCHEMA)({})
    assert out == {"x": 1e30}
    assert type(out["x"]) is float  # type: ignore[index]


# --- chains, shapes, misc ---------------------------------------------------------------------


def test_schema_flows_through_ops_in_order() -> None:
    ops = [
        {"op": "rename", "mapping": {"x": "amount"}},
        {"op": "with_columns", "exprs": {"big": "(amount > 1.0)"}},
        {"op": "filter", "expr": "big"},
        {"op": "select", "fields": ["big", "amount", "a"]},
        {"op": "cast", "type_map": {"a": "float"}},
    ]
    assert chain_output_schema(ops, SCHEMA) == {"big": "bool", "amount": "f64", "a": "f64"}
    assert run(ops) == {"big": True, "amount": 1.5, "a": -7.0}
    assert run(ops, {**ROW, "x": 0.5}) is None
    # The old name is gone after rename.
    err = failure([ops[0], {"op": "filter", "expr": "(x > 1)"}])
    assert err.index == 1


def test_input_schema_is_not_mutated() -> None:
    schema = dict(SCHEMA)
    chain_output_schema(
        [{"op": "with_columns", "exprs": {"q": "1"}}, {"op": "cast", "type_map": {"a": "str"}}],
        schema,
    )
    assert schema == SCHEMA


def test_empty_chain() -> None:
    assert chain_output_schema([], SCHEMA) == SCHEMA
    assert run([]) == ROW


@pytest.mark.parametrize(
    "op",
    [
        {"op": "explode"},
        {"op": "group_by", "keys": []},
        {"op": "join"},
        {},
        {"op": "filter", "expr": 5},
        {"op": "select", "fields": "a"},
        {"op": "select", "fields": [1]},
        {"op": "rename", "mapping": ["a"]},
        {"op": "rename", "mapping": {"a": 1}},
        {"op": "with_columns", "exprs": "x"},
        {"op": "cast", "type_map": None},
        {"op": "fillna"},
    ],
)
def test_undecodable_ops_are_invalid_registration_r13(op: dict[str, Any]) -> None:
    err = failure([{"op": "drop", "fields": []}, op])
    assert (err.index, err.code, err.path_suffix) == (1, "invalid_registration", "")


def test_unusual_field_names_are_safe_in_generated_code() -> None:
    name = "we'ird\"\\\n name"
    schema = {name: "str", "k": "i64"}
    ops = [
        {"op": "select", "fields": [name, "k"]},
        {"op": "fillna", "defaults": {name: "d"}},
        {"op": "rename", "mapping": {name: "clean"}},
    ]
    assert compile_chain(ops, schema)({"k": 1}) == {"k": 1, "clean": "d"}
