"""One test per row of the Ambiguity Matrix (spec/sdk.md §12)."""

from __future__ import annotations

from typing import Any

import pytest

import beava as bv
from beava_client.messages import get_body


@bv.event
class Txn:
    user_id: str
    amount: float
    flag: bool


@bv.event
class Click:
    user_id: str
    page: str


def table_ops(table: Any) -> list[dict[str, Any]]:
    return bv.compile_register_payload(table)["nodes"][-1]["ops"]


def test_filter_filter_allowed_two_ops() -> None:
    @bv.event
    def E(t: Txn) -> bv.Event:
        return t.filter(bv.col("amount") > 1).filter(bv.col("flag"))

    assert E._chain == [{"op": "filter", "expr": "(amount > 1)"}, {"op": "filter", "expr": "flag"}]


def test_select_then_group_by_allowed() -> None:
    @bv.table(key="user_id")
    def T(t: Txn) -> bv.Table:
        return t.select("user_id", "amount").group_by("user_id").agg(s=bv.sum("amount"))

    assert table_ops(T) == [
        {"op": "select", "fields": ["user_id", "amount"]},
        {"op": "group_by", "keys": ["user_id"],
         "agg": {"s": {"op": "sum", "params": {"field": "amount"}}}},
    ]


def test_boolean_sum_pattern_allowed() -> None:
    @bv.table(key="user_id")
    def T(e: Txn) -> bv.Table:
        return (e.with_columns(big_int=bv.col("amount").cast("int"))
                 .group_by("user_id").agg(c=bv.sum("big_int", window="1h")))

    assert table_ops(T) == [
        {"op": "with_columns", "exprs": {"big_int": "cast(amount, int)"}},
        {"op": "group_by", "keys": ["user_id"],
         "agg": {"c": {"op": "sum", "params": {"field": "big_int", "window": "1h"}}}},
    ]


@pytest.mark.parametrize("field", [bv.col("amount") * 2, bv.col("flag").cast("int")])
def test_expression_as_sum_field_forbidden(field: Any) -> None:
    with pytest.raises(bv.RegistrationError) as info:
        bv.sum(field)
    assert info.value.code == "schema_mismatch"


@pytest.mark.parametrize("op", [bv.mean, bv.min, bv.max, bv.n_unique, bv.first, bv.last,
                                bv.delta_from_prev, bv.seasonal_deviation])
def test_cast_as_any_operator_field_forbidden(op: Any) -> None:
    with pytest.raises(bv.RegistrationError) as info:
        op(bv.col("x").cast("int"))
    assert info.value.code == "schema_mismatch"


@pytest.mark.parametrize("method", ["with_columns", "group_by", "filter"])
def test_group_by_then_stateless_op_forbidden(method: str) -> None:
    with pytest.raises(AttributeError):
        getattr(Txn.group_by("user_id"), method)


def test_cross_event_aggregation_forbidden() -> None:
    with pytest.raises(bv.DescriptorError) as info:
        @bv.table(key="user_id")
        def T(t: Txn, c: Click) -> bv.Table:
            return t.group_by("user_id").agg(n=bv.count())
    assert info.value.code == "joins_not_supported"
    assert isinstance(info.value, TypeError)

    with pytest.raises(bv.DescriptorError) as info:
        @bv.event
        def E(t: Txn, c: Click) -> bv.Event:
            return t.filter(bv.col("flag"))
    assert info.value.code == "joins_not_supported"


def test_event_time_field_forbidden() -> None:
    with pytest.raises(TypeError):
        @bv.event
        class E:
            user_id: str
            event_time: float


def test_hand_built_event_time_node_passes_through() -> None:
    node = {"kind": "event", "name": "Raw",
            "schema": {"fields": {"event_time": "i64", "a": "str"}, "optional_fields": []}}
    assert bv.compile_register_payload(node)["nodes"] == [node]


@pytest.mark.parametrize("option", ["event_time_field", "tolerate_delay"])
def test_event_time_options_forbidden(option: str) -> None:
    with pytest.raises(TypeError):
        bv.event(**{option: "ts"})(type("E", (), {"__annotations__": {"ts": int}}))


def test_arithmetic_in_where_allowed() -> None:
    assert bv.count(where=bv.col("x") + 5 > 6).to_dict()["where"] == "((x + 5) > 6)"
    assert (bv.col("x") + 5).to_expr_string() == "(x + 5)"


def test_isnull_allowed() -> None:
    assert bv.col("x").isnull().to_expr_string() == "(x == null)"


def test_cast_in_with_columns_allowed() -> None:
    chain = Txn.with_columns(int_col=bv.col("amount").cast("int"))
    assert chain._chain == [{"op": "with_columns", "exprs": {"int_col": "cast(amount, int)"}}]


def test_table_function_form_allowed() -> None:
    @bv.table(key="user_id")
    def T(t: Txn) -> bv.Table:
        return t.group_by("user_id").agg(n=bv.count())

    node = bv.compile_register_payload(T)["nodes"][1]
    assert (node["kind"], node["output_kind"], node["table_primary_key"]) == (
        "derivation", "table", ["user_id"])


def test_table_without_key_is_global() -> None:
    @bv.table
    def G(c: Click) -> bv.Table:
        return c.agg(n=bv.count())

    node = bv.compile_register_payload(G)["nodes"][1]
    assert node["ops"][0]["keys"] == [] and node["table_primary_key"] == []


def test_agg_without_group_by_equals_empty_group_by() -> None:
    assert Click.agg(n=bv.count()).group_by_step() == Click.group_by().agg(
        n=bv.count()).group_by_step() == {
        "op": "group_by", "keys": [], "agg": {"n": {"op": "count", "params": {}}}}


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def get(self, table: str, key: Any = None, features: Any = None) -> Any:
        self.calls.append((table, key, features))
        return {}


def test_one_argument_get_reads_the_global_row() -> None:
    app = bv.App("tcp://127.0.0.1:1")
    recorder = _Recorder()
    app._backend = recorder  # type: ignore[assignment]
    assert app.get("GlobalTable") == {}
    table, key, features = recorder.calls[0]
    assert get_body(table, key, features) == {"table": "GlobalTable", "key": ""}
    app._backend = None
    app.close()


def test_lit_allowed() -> None:
    assert Txn.with_columns(c=bv.lit(1.5))._chain[0]["exprs"] == {"c": "1.5"}


def test_table_on_table_forbidden() -> None:
    @bv.table(key="user_id")
    def T(t: Txn) -> bv.Table:
        return t.group_by("user_id").agg(n=bv.count())

    with pytest.raises(bv.DescriptorError) as info:
        @bv.table(key="user_id")
        def U(t: T) -> bv.Table:  # type: ignore[valid-type]
            return t.group_by("user_id").agg(n=bv.count())
    assert info.value.code == "aggregation_on_table_not_supported"


def test_table_class_form_forbidden() -> None:
    with pytest.raises(bv.DescriptorError) as info:
        @bv.table(key="user_id")
        class T:
            user_id: str
    assert info.value.code == "bv_table_class_form_not_supported"


@pytest.mark.parametrize("method", ["upsert", "delete", "retract", "register_json"])
def test_table_mutation_forbidden(method: str) -> None:
    with pytest.raises(AttributeError):
        getattr(bv.App, method)
    with pytest.raises(AttributeError):
        getattr(bv.App("http://127.0.0.1:1"), method)


def test_session_windows_forbidden() -> None:
    with pytest.raises(bv.RegistrationError) as info:
        bv.session(gap_ms=30_000, inner=bv.count())
    assert info.value.code == "session_windows_not_supported_in_v0"


def test_fork_forbidden() -> None:
    with pytest.raises(AttributeError):
        bv.fork  # type: ignore[attr-defined]  # noqa: B018


def test_union_forbidden() -> None:
    with pytest.raises(bv.RegistrationError) as info:
        bv.union(Txn, Click)
    assert info.value.code == "unions_not_supported_in_v0"


def test_dry_run_and_force_flags() -> None:
    assert bv.compile_register_payload(Click, dry_run=True) == {
        "nodes": bv.compile_register_payload(Click)["nodes"], "dry_run": True}
    assert bv.compile_register_payload(Click, force=True) == {
        "nodes": bv.compile_register_payload(Click)["nodes"], "force": True}
