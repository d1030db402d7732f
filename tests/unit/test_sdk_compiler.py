"""The register payload compiler and @bv.table: exact wire JSON (spec/sdk.md §3, §7)."""

from __future__ import annotations

import json
from typing import Any

import pytest

import beava as bv


@bv.event(cold_after="1d", dedupe_key="txn_id", dedupe_window="5m")
class Txn:
    txn_id: str
    user_id: str
    amount: float
    n: int
    merchant: str
    ok: bool
    note: str | None


@bv.event
def BigTxn(t: Txn) -> bv.Event:
    return (t.filter(bv.col("amount") > 100)
             .with_columns(x=bv.col("amount") * 2, y=bv.col("n").cast("float"))
             .select("user_id", "x", "y"))


@bv.table(key="user_id")
def UserTxn(t: Txn) -> bv.Table:
    return t.group_by("user_id").agg(
        c=bv.count(window="1h"),
        mx=bv.max("amount", where=bv.col("ok")),
        tk=bv.top_k("merchant", k=3, window="1d"),
        prev=bv.lag("amount", n=1),
        ew=bv.ema("amount", half_life="10m"),
    )


@bv.table(key="user_id")
def BigByUser(b: BigTxn) -> bv.Table:
    return b.group_by("user_id").agg(sx=bv.sum("x"), ly=bv.last("y"))


@bv.event
class Click:
    user_id: str
    page: str


SPEC_EXAMPLE = json.loads("""{"nodes": [
 {"kind": "event", "name": "Txn",
  "schema": {"fields": {"txn_id": "str", "user_id": "str", "amount": "f64", "n": "i64",
                        "merchant": "str", "ok": "bool", "note": "str"},
             "optional_fields": ["note"]},
  "cold_after_ms": 86400000, "dedupe_key": "txn_id", "dedupe_window_ms": 300000},
 {"kind": "derivation", "name": "BigTxn", "output_kind": "event", "upstreams": ["Txn"],
  "ops": [{"op": "filter", "expr": "(amount > 100)"},
          {"op": "with_columns", "exprs": {"x": "(amount * 2)", "y": "cast(n, float)"}},
          {"op": "select", "fields": ["user_id", "x", "y"]}],
  "schema": {"fields": {"user_id": "str", "x": "f64", "y": "f64"}, "optional_fields": []}},
 {"kind": "derivation", "name": "UserTxn", "output_kind": "table", "upstreams": ["Txn"],
  "ops": [{"op": "group_by", "keys": ["user_id"], "agg": {
            "c": {"op": "count", "params": {"window": "1h"}},
            "mx": {"op": "max", "params": {"field": "amount", "where": "ok"}},
            "tk": {"op": "top_k", "params": {"field": "merchant", "window": "1d", "k": 3}},
            "prev": {"op": "lag", "params": {"field": "amount", "n": 1}},
            "ew": {"op": "ewma", "params": {"field": "amount", "half_life": "10m"}}}}],
  "schema": {"fields": {"user_id": "str", "c": "i64", "mx": "f64", "tk": "str",
                        "prev": "f64", "ew": "f64"}, "optional_fields": []},
  "table_primary_key": ["user_id"]},
 {"kind": "derivation", "name": "BigByUser", "output_kind": "table", "upstreams": ["Txn"],
  "ops": [{"op": "filter", "expr": "(amount > 100)"},
          {"op": "with_columns", "exprs": {"x": "(amount * 2)", "y": "cast(n, float)"}},
          {"op": "select", "fields": ["user_id", "x", "y"]},
          {"op": "group_by", "keys": ["user_id"], "agg": {
            "sx": {"op": "sum", "params": {"field": "x"}},
            "ly": {"op": "last", "params": {"field": "y"}}}}],
  "schema": {"fields": {"user_id": "str", "sx": "f64", "ly": "f64"}, "optional_fields": []},
  "table_primary_key": ["user_id"]}
]}""")


def test_spec_example_exact() -> None:
    payload = bv.compile_register_payload(Txn, BigTxn, UserTxn, BigByUser)
    assert payload == SPEC_EXAMPLE
    # the emitted key order is the documented one
    assert list(payload["nodes"][0]) == ["kind", "name", "schema", "cold_after_ms",
                                         "dedupe_key", "dedupe_window_ms"]
    assert list(payload["nodes"][2]) == ["kind", "name", "output_kind", "upstreams", "ops",
                                         "schema", "table_primary_key"]
    assert list(payload["nodes"][2]["ops"][0]["agg"]["tk"]["params"]) == ["field", "window", "k"]


def test_payload_is_plain_json() -> None:
    payload = bv.compile_register_payload(Txn, BigTxn, UserTxn, BigByUser)
    assert json.loads(json.dumps(payload)) == payload


def test_compiling_twice_gives_independent_payloads() -> None:
    first = bv.compile_register_payload(UserTxn)
    first["nodes"][1]["ops"][0]["agg"]["c"]["params"]["window"] = "9d"
    assert bv.compile_register_payload(UserTxn)["nodes"][1] == SPEC_EXAMPLE["nodes"][2]


GLOBAL_NODE = {
    "kind": "derivation", "name": "TotalClicks", "output_kind": "table", "upstreams": ["Click"],
    "ops": [{"op": "group_by", "keys": [], "agg": {
        "total": {"op": "count", "params": {"window": "forever"}}}}],
    "schema": {"fields": {"total": "i64"}, "optional_fields": []},
    "table_primary_key": [],
}


def _global_tables() -> list[Any]:
    @bv.table
    def TotalClicks(clicks: Click) -> bv.Table:
        return clicks.agg(total=bv.count(window="forever"))

    t1 = TotalClicks

    @bv.table()
    def TotalClicks(clicks: Click) -> bv.Table:  # noqa: F811
        return clicks.group_by().agg(total=bv.count(window="forever"))

    t2 = TotalClicks

    @bv.table(key=None)
    def TotalClicks(clicks: Click) -> bv.Table:  # noqa: F811
        return clicks.agg(total=bv.count(window="forever"))

    t3 = TotalClicks

    @bv.table(key=[])
    def TotalClicks(clicks: Click) -> bv.Table:  # noqa: F811
        return clicks.group_by().agg(total=bv.count(window="forever"))

    return [t1, t2, t3, TotalClicks]


@pytest.mark.parametrize("index", range(4))
def test_global_table_spellings(index: int) -> None:
    table = _global_tables()[index]
    assert bv.compile_register_payload(Click, table)["nodes"][1] == GLOBAL_NODE


def test_composite_key() -> None:
    @bv.table(key=["user_id", "merchant"])
    def UM(t: Txn) -> bv.Table:
        return t.group_by("user_id", "merchant").agg(c=bv.count())

    @bv.table(key=("merchant", "user_id"))
    def MU(t: Txn) -> bv.Table:
        return t.group_by("merchant", "user_id").agg(c=bv.count())

    um = bv.compile_register_payload(UM)["nodes"][1]
    assert um["ops"][0]["keys"] == ["user_id", "merchant"]
    assert um["table_primary_key"] == ["user_id", "merchant"]
    assert um["schema"]["fields"] == {"user_id": "str", "merchant": "str", "c": "i64"}
    assert bv.compile_register_payload(MU)["nodes"][1]["table_primary_key"] == [
        "merchant", "user_id"]
    assert UM._key_cols == ["user_id", "merchant"]


def test_table_descriptor_attributes() -> None:
    assert UserTxn._name == "UserTxn"
    assert UserTxn._kind == "table"
    assert UserTxn._key_cols == ["user_id"]
    assert UserTxn._parent is Txn
    assert BigByUser._parent is BigTxn
    assert UserTxn._chain == SPEC_EXAMPLE["nodes"][2]["ops"]
    with pytest.raises(AttributeError):
        UserTxn.filter(bv.col("c") > 1)  # type: ignore[attr-defined]


def test_table_chain_ops_before_group_by() -> None:
    @bv.table(key="user_id")
    def UserFraud(txn: Txn) -> bv.Table:
        return (txn.with_columns(is_ok_int=bv.col("ok").cast("int"))
                   .group_by("user_id")
                   .agg(ok_count_1h=bv.sum("is_ok_int", window="1h")))

    assert bv.compile_register_payload(UserFraud)["nodes"][1]["ops"] == [
        {"op": "with_columns", "exprs": {"is_ok_int": "cast(ok, int)"}},
        {"op": "group_by", "keys": ["user_id"], "agg": {
            "ok_count_1h": {"op": "sum", "params": {"field": "is_ok_int", "window": "1h"}}}},
    ]


@pytest.mark.parametrize(
    ("key", "error"),
    [(5, TypeError), ({"user_id"}, TypeError), (["user_id", 1], TypeError), ("", ValueError),
     (["a", ""], ValueError), (["user_id", "user_id"], ValueError)],
)
def test_bad_table_key(key: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        bv.table(key=key)


@pytest.mark.parametrize(
    ("key", "group"),
    [("user_id", ()), (None, ("user_id",)), (["user_id", "merchant"], ("merchant", "user_id")),
     ("merchant", ("user_id",)), (["user_id", "merchant"], ("user_id",))],
)
def test_table_key_must_match_group_by(key: Any, group: tuple[str, ...]) -> None:
    def T(t: Txn) -> bv.Table:
        return t.group_by(*group).agg(c=bv.count())

    with pytest.raises(bv.DescriptorError) as info:
        bv.table(key=key)(T)
    assert info.value.code == "table_key_invalid"
    assert isinstance(info.value, TypeError)


@pytest.mark.parametrize(
    "body",
    [lambda t: t.filter(bv.col("ok")), lambda t: t.group_by("user_id"), lambda t: 1,
     lambda t: Click.group_by("user_id").agg(c=bv.count()), lambda t: t],
)
def test_table_bad_return_type(body: Any) -> None:
    def T(t: Txn) -> Any:
        return body(t)

    with pytest.raises(bv.DescriptorError) as info:
        bv.table(key="user_id")(T)
    assert info.value.code == "bad_return_type"


def test_table_class_form() -> None:
    with pytest.raises(bv.DescriptorError) as info:
        @bv.table
        class T:
            user_id: str
    assert info.value.code == "bv_table_class_form_not_supported"
    with pytest.raises(bv.DescriptorError):
        bv.table(key="user_id")(type("T", (), {}))


def test_table_on_a_table_and_joins() -> None:
    with pytest.raises(bv.DescriptorError) as info:
        @bv.table(key="user_id")
        def T(u: UserTxn) -> bv.Table:  # type: ignore[valid-type]
            return u.group_by("user_id").agg(c=bv.count())
    assert info.value.code == "aggregation_on_table_not_supported"

    with pytest.raises(bv.DescriptorError) as info:
        @bv.table(key="user_id")
        def J(t: Txn, c: Click) -> bv.Table:
            return t.group_by("user_id").agg(c=bv.count())
    assert info.value.code == "joins_not_supported"


def test_unannotated_table_resolves_at_register() -> None:
    @bv.table(key="user_id")
    def ClicksByUser(clicks):  # type: ignore[no-untyped-def]
        return clicks.group_by("user_id").agg(n=bv.count())

    with pytest.raises(TypeError):
        ClicksByUser.node()
    nodes = bv.compile_register_payload(Txn, Click, ClicksByUser)["nodes"]
    assert [n["name"] for n in nodes] == ["Txn", "Click", "ClicksByUser"]
    assert nodes[2]["upstreams"] == ["Click"]
    assert ClicksByUser._parent is Click


def test_unannotated_table_key_checked_at_register() -> None:
    @bv.table(key="page")
    def Wrong(clicks):  # type: ignore[no-untyped-def]
        return clicks.group_by("user_id").agg(n=bv.count())

    with pytest.raises(bv.DescriptorError) as info:
        bv.compile_register_payload(Click, Wrong)
    assert info.value.code == "table_key_invalid"


# -- order, closure, flags ---------------------------------------------------------------


def names(*descriptors: Any) -> list[str]:
    return [n["name"] for n in bv.compile_register_payload(*descriptors)["nodes"]]


def test_order_and_closure() -> None:
    assert names(UserTxn, Txn) == ["Txn", "UserTxn"]
    assert names(UserTxn) == ["Txn", "UserTxn"]
    assert names(BigByUser) == ["Txn", "BigByUser"]  # only the root source is added
    assert names(BigTxn, UserTxn, Txn, BigTxn) == ["Txn", "BigTxn", "UserTxn"]
    assert names(Click, UserTxn, Click) == ["Click", "Txn", "UserTxn"]
    assert names() == []


def test_plain_dicts_are_emitted_unchanged_in_place() -> None:
    raw = {"kind": "event", "name": "Raw", "schema": {"fields": {"a": "i64"}}, "custom": 1}
    payload = bv.compile_register_payload(raw, UserTxn, raw)
    assert payload["nodes"] == [raw, SPEC_EXAMPLE["nodes"][0], SPEC_EXAMPLE["nodes"][2], raw]
    assert payload["nodes"][0] is raw


def test_flags() -> None:
    assert bv.compile_register_payload(Click) == {"nodes": [
        {"kind": "event", "name": "Click",
         "schema": {"fields": {"user_id": "str", "page": "str"}, "optional_fields": []}}]}
    assert bv.compile_register_payload(Click, force=True)["force"] is True
    assert bv.compile_register_payload(Click, dry_run=True)["dry_run"] is True
    both = bv.compile_register_payload(Click, force=True, dry_run=True)
    assert list(both) == ["nodes", "force", "dry_run"]
    assert "force" not in bv.compile_register_payload(Click, force=False)


def test_undecorated_chain_is_an_invalid_descriptor() -> None:
    chain = Click.filter(bv.col("page") == "/").named("Home")
    with pytest.raises(bv.RegistrationError) as info:
        bv.compile_register_payload(Click, chain)
    assert info.value.code == "invalid_descriptor"
    assert info.value.path == "descriptors[1]"
    assert not isinstance(info.value, TypeError)


@pytest.mark.parametrize("obj", [42, "Txn", None, [Txn], Click.group_by("user_id"),
                                 Click.agg(n=bv.count()), bv.count(), type("Plain", (), {})])
def test_other_objects_are_type_errors(obj: Any) -> None:
    with pytest.raises(TypeError):
        bv.compile_register_payload(Click, obj)


def test_checks_run_before_anything_is_resolved() -> None:
    @bv.table(key="user_id")
    def Later(clicks):  # type: ignore[no-untyped-def]
        return clicks.group_by("user_id").agg(n=bv.count())

    with pytest.raises(TypeError):
        bv.compile_register_payload(Click, Later, 42)
    assert Later._deferred is not None


def test_non_ascii_names_and_literals() -> None:
    @bv.event
    def Café(c: Click) -> bv.Event:
        return c.filter(bv.col("page") == "é/ü")

    payload = bv.compile_register_payload(Café)
    assert payload["nodes"][1]["name"] == "Café"
    assert payload["nodes"][1]["ops"][0]["expr"] == "(page == 'é/ü')"
