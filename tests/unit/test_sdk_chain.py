"""Chain methods: exact emitted steps, validation, tracked schema (spec/sdk.md §4, §7.4)."""

from __future__ import annotations

from typing import Any

import pytest

import beava as bv
from beava.dsl.chain import EventDerivation, GroupBy


@bv.event
class Txn:
    user_id: str
    merchant: str
    amount: float
    n: int
    ok: bool
    note: str | None


def last_step(chain: EventDerivation) -> dict[str, Any]:
    return chain._chain[-1]


@pytest.mark.parametrize(
    ("build", "step"),
    [
        (lambda: Txn.filter(bv.col("amount") > 100), {"op": "filter", "expr": "(amount > 100)"}),
        (lambda: Txn.filter(bv.col("ok")), {"op": "filter", "expr": "ok"}),
        (lambda: Txn.select("user_id", "amount"),
         {"op": "select", "fields": ["user_id", "amount"]}),
        (lambda: Txn.drop("note", "missing"), {"op": "drop", "fields": ["note", "missing"]}),
        (lambda: Txn.rename(amount="amount_usd", merchant="vendor"),
         {"op": "rename", "mapping": {"amount": "amount_usd", "merchant": "vendor"}}),
        (lambda: Txn.rename({"amount": "a"}, n="count"),
         {"op": "rename", "mapping": {"amount": "a", "n": "count"}}),
        (lambda: Txn.with_columns(amount_x_2=bv.col("amount") * 2,
                                  is_big=bv.col("amount") > 100),
         {"op": "with_columns", "exprs": {"amount_x_2": "(amount * 2)",
                                          "is_big": "(amount > 100)"}}),
        (lambda: Txn.with_columns(one=1, label="x", nothing=None, flag=True),
         {"op": "with_columns", "exprs": {"one": "1", "label": "'x'", "nothing": "null",
                                          "flag": "true"}}),
        (lambda: Txn.map(double=bv.col("amount") * 2),
         {"op": "map", "exprs": {"double": "(amount * 2)"}}),
        (lambda: Txn.cast(amount="int", ok="bool", n=float, note=str),
         {"op": "cast", "type_map": {"amount": "int", "ok": "bool", "n": "float",
                                     "note": "str"}}),
        (lambda: Txn.fillna(merchant="unknown", n=0, amount=0.5, ok=False),
         {"op": "fillna", "defaults": {"merchant": "unknown", "n": 0, "amount": 0.5,
                                       "ok": False}}),
    ],
)
def test_emitted_step(build: Any, step: dict[str, Any]) -> None:
    chain = build()
    assert chain._chain == [step]
    assert list(last_step(chain)) == list(step)


def test_keyword_order_is_kept() -> None:
    chain = Txn.with_columns(b=bv.col("amount") + 1, a2=bv.col("b") * 2)
    assert list(last_step(chain)["exprs"]) == ["b", "a2"]
    assert chain._schema["b"] == "f64" and chain._schema["a2"] == "f64"


def test_receivers_are_never_mutated() -> None:
    base = Txn.filter(bv.col("ok"))
    a = base.select("user_id")
    b = base.drop("note")
    assert base._chain == [{"op": "filter", "expr": "ok"}]
    assert a._chain[-1]["op"] == "select" and b._chain[-1]["op"] == "drop"
    assert a is not base and b is not base


def test_chaining_accumulates_steps() -> None:
    chain = Txn.filter(bv.col("a") > 1).filter(bv.col("b") > 2)
    assert chain._chain == [{"op": "filter", "expr": "(a > 1)"},
                            {"op": "filter", "expr": "(b > 2)"}]


def test_named_tags_without_a_step() -> None:
    chain = Txn.filter(bv.col("ok")).named("OkTxn")
    assert chain._name == "OkTxn"
    assert chain._chain == [{"op": "filter", "expr": "ok"}]
    assert chain._is_bv_event_function is False
    with pytest.raises(TypeError):
        Txn.named(5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: Txn.filter("amount > 1"), TypeError),
        (lambda: Txn.filter(True), TypeError),
        (lambda: Txn.select(), ValueError),
        (lambda: Txn.select("a", 1), TypeError),
        (lambda: Txn.drop(), ValueError),
        (lambda: Txn.drop(["a"]), TypeError),
        (lambda: Txn.rename(), ValueError),
        (lambda: Txn.rename({}), ValueError),
        (lambda: Txn.rename(amount=1), TypeError),
        (lambda: Txn.rename({1: "a"}), TypeError),
        (lambda: Txn.rename([("a", "b")]), TypeError),
        (lambda: Txn.with_columns(), ValueError),
        (lambda: Txn.with_columns(a=[1]), TypeError),
        (lambda: Txn.with_columns(a=float("nan")), ValueError),
        (lambda: Txn.map(), ValueError),
        (lambda: Txn.map(a=object()), TypeError),
        (lambda: Txn.cast(amount="integer"), ValueError),
        (lambda: Txn.cast(amount=list), ValueError),
        (lambda: Txn.fillna(merchant=None), ValueError),
        (lambda: Txn.fillna(amount=float("nan")), ValueError),
        (lambda: Txn.fillna(amount=[0]), TypeError),
        (lambda: Txn.group_by(""), TypeError),
        (lambda: Txn.group_by(1), TypeError),
        (lambda: Txn.group_by("user_id", "user_id"), ValueError),
        (lambda: Txn.group_by("nope"), ValueError),
        (lambda: Txn.select("amount").group_by("user_id"), ValueError),
        (lambda: Txn.group_by("user_id").agg(), ValueError),
        (lambda: Txn.group_by("user_id").agg(c="count"), TypeError),
        (lambda: Txn.group_by("user_id").agg(c={"window": "1h"}), TypeError),
        (lambda: Txn.group_by("user_id").agg(c=bv.col("x")), TypeError),
        (lambda: Txn.agg(), ValueError),
    ],
)
def test_validation(call: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        call()


def test_group_by_has_only_agg() -> None:
    gb = Txn.group_by("user_id")
    assert isinstance(gb, GroupBy)
    for name in ("filter", "with_columns", "group_by", "select", "map", "named"):
        with pytest.raises(AttributeError):
            getattr(gb, name)


def test_group_by_key_after_rename_and_derive() -> None:
    chain = Txn.rename(user_id="uid").with_columns(bucket=bv.col("n") / 10)
    chain.group_by("uid", "bucket")  # both exist in the tracked schema
    with pytest.raises(ValueError):
        chain.group_by("user_id")


def test_plain_dict_features_pass_through() -> None:
    agg = Txn.group_by("user_id").agg(c={"op": "count", "window": "1h"},
                                     custom={"op": "future_op", "field": "amount"})
    assert agg.group_by_step() == {
        "op": "group_by", "keys": ["user_id"],
        "agg": {"c": {"op": "count", "params": {"window": "1h"}},
                "custom": {"op": "future_op", "params": {"field": "amount"}}},
    }
    assert agg.output_schema() == {"user_id": "str", "c": "i64", "custom": "str"}


@pytest.mark.parametrize(
    ("chain", "schema"),
    [
        (lambda: Txn.filter(bv.col("ok")),
         {"user_id": "str", "merchant": "str", "amount": "f64", "n": "i64", "ok": "bool",
          "note": "str"}),
        (lambda: Txn.select("n", "user_id", "missing", "n"), {"n": "i64", "user_id": "str"}),
        (lambda: Txn.drop("merchant", "missing", "note", "ok"),
         {"user_id": "str", "amount": "f64", "n": "i64"}),
        (lambda: Txn.select("user_id", "amount", "n").rename(amount="usd"),
         {"user_id": "str", "usd": "f64", "n": "i64"}),
        (lambda: Txn.select("user_id", "amount").rename({"user_id": "amount",
                                                         "amount": "user_id"}),
         {"amount": "str", "user_id": "f64"}),
        (lambda: Txn.select("n", "amount").with_columns(
            n=bv.col("n").cast("float"), half=bv.col("n") / 2, label="x", flag=bv.col("n") > 1,
            nothing=None, broken=bv.col("missing") + 1, both=bv.col("half") + bv.col("n")),
         {"n": "f64", "amount": "f64", "half": "f64", "label": "str", "flag": "bool",
          "nothing": "str", "broken": "str", "both": "f64"}),
        (lambda: Txn.select("n").with_columns(z=bv.col("n") + 1, n=bv.col("n") * 10),
         {"n": "i64", "z": "i64"}),
        (lambda: Txn.select("n", "ok", "amount").cast(n="str", ok=int, amount="bool",
                                                     missing="int"),
         {"n": "str", "ok": "i64", "amount": "bool"}),
        (lambda: Txn.select("note").fillna(note="-"), {"note": "str"}),
        (lambda: Txn.select("n").map(m=bv.col("n") * 1.5), {"n": "i64", "m": "f64"}),
    ],
)
def test_tracked_schema(chain: Any, schema: dict[str, str]) -> None:
    got = chain()._schema
    assert got == schema
    assert list(got) == list(schema)


@pytest.mark.parametrize(
    ("feature", "typ"),
    [
        (bv.count(), "i64"), (bv.n_unique("merchant"), "i64"), (bv.first_seen(), "i64"),
        (bv.last_seen(), "i64"), (bv.age(), "i64"), (bv.time_since(), "i64"),
        (bv.time_since_last_n(n=2), "i64"), (bv.streak(), "i64"), (bv.max_streak(), "i64"),
        (bv.negative_streak(), "i64"), (bv.burst_count(window="1h", sub_window="1m"), "i64"),
        (bv.outlier_count("amount", window="1h"), "i64"),
        (bv.value_change_count("n", window="1h"), "i64"),
        (bv.sum("n"), "f64"), (bv.mean("n"), "f64"), (bv.var("n"), "f64"), (bv.std("n"), "f64"),
        (bv.ratio(), "f64"), (bv.quantile("n", q=0.5), "f64"), (bv.entropy("merchant"), "f64"),
        (bv.ewma("n", half_life="1m"), "f64"), (bv.ewvar("n", half_life="1m"), "f64"),
        (bv.ew_zscore("n", half_life="1m"), "f64"), (bv.decayed_sum("n", half_life="1m"), "f64"),
        (bv.decayed_count(half_life="1m"), "f64"), (bv.twa("n", window="1h"), "f64"),
        (bv.rate_of_change("n", window="1h"), "f64"),
        (bv.inter_arrival_stats(window="1h"), "f64"), (bv.trend("n", window="1h"), "f64"),
        (bv.trend_residual("n", window="1h"), "f64"),
        (bv.z_score("n", baseline_window="1h"), "f64"), (bv.seasonal_deviation("n"), "f64"),
        (bv.geo_velocity(lat="a", lon="b"), "f64"), (bv.geo_distance(lat="a", lon="b"), "f64"),
        (bv.geo_spread(lat="a", lon="b"), "f64"), (bv.distance_from_home(lat="a", lon="b"), "f64"),
        (bv.bloom_member("merchant"), "bool"), (bv.has_seen(), "bool"),
        (bv.first_seen_in_window(window="1h"), "bool"),
        (bv.top_k("merchant", k=2), "str"), (bv.first_n("n", n=2), "str"),
        (bv.last_n("n", n=2), "str"), (bv.histogram("n", buckets=[1]), "str"),
        (bv.hour_of_day_histogram(), "str"), (bv.dow_hour_histogram(), "str"),
        (bv.event_type_mix("merchant"), "str"), (bv.most_recent_n("n", n=2), "str"),
        (bv.reservoir_sample("n", samples=2), "str"),
        (bv.min("n"), "i64"), (bv.max("amount"), "f64"), (bv.first("ok"), "bool"),
        (bv.last("merchant"), "str"), (bv.lag("n", n=1), "i64"),
        (bv.delta_from_prev("amount"), "f64"), (bv.min("missing"), "str"),
    ],
)
def test_feature_output_types(feature: Any, typ: str) -> None:
    schema = Txn.group_by("user_id").agg(f=feature).output_schema()
    assert schema == {"user_id": "str", "f": typ}


def test_inherited_types_use_the_tracked_schema() -> None:
    chain = Txn.rename(amount="usd").with_columns(cents=bv.col("usd") * 100,
                                                  whole=bv.col("usd").cast("int"))
    schema = chain.group_by("user_id").agg(a=bv.max("usd"), b=bv.last("cents"),
                                           c=bv.lag("whole", n=1)).output_schema()
    assert schema == {"user_id": "str", "a": "f64", "b": "f64", "c": "i64"}


def test_key_types_come_from_the_tracked_schema() -> None:
    agg = Txn.with_columns(bucket=bv.col("n") / 10).group_by("bucket", "ok").agg(c=bv.count())
    assert agg.output_schema() == {"bucket": "i64", "ok": "bool", "c": "i64"}


def test_a_typo_in_where_or_field_fails_at_the_table_decorator() -> None:
    columns = "(fields: 'user_id', 'merchant', 'amount', 'n', 'ok', 'note', 'big')"
    with pytest.raises(bv.RegistrationError) as info:
        @bv.table(key="user_id")
        def Spend(t: Txn) -> bv.Table:
            return t.with_columns(big=bv.col("amount") > 100).group_by("user_id").agg(
                n_big=bv.count(where=bv.col("ok") & (bv.col("amout") > 1)))
    assert (info.value.code, info.value.path) == (
        "aggregation_invalid_where", "Spend.ops[1].agg.n_big.params.where")
    assert info.value.message == (
        f"where predicate references unknown field 'amout' {columns}; did you mean 'amount'?")
    with pytest.raises(bv.RegistrationError) as info:
        @bv.table(key="user_id")
        def Total(t: Txn) -> bv.Table:
            return t.group_by("user_id").agg(s=bv.sum("amout"))
    assert (info.value.code, info.value.path) == (
        "aggregation_unknown_field", "Total.ops[0].agg.s.params.field")
    assert info.value.message.endswith("; did you mean 'amount'?")


def test_an_unknown_group_by_key_is_told_the_columns_and_the_nearest() -> None:
    with pytest.raises(ValueError) as info:
        Txn.select("user_id", "amount").group_by("usr_id")
    assert str(info.value) == ("group_by() key 'usr_id' is not a column here (fields: "
                               "'user_id', 'amount'); did you mean 'user_id'?")


def test_the_field_of_an_operator_the_register_does_not_check_is_left_to_it() -> None:
    # seasonal_deviation reads its field at run time only (the register accepts any name)
    @bv.table(key="user_id")
    def Seasonal(t: Txn) -> bv.Table:
        return t.group_by("user_id").agg(d=bv.seasonal_deviation("not_a_column"))
    assert bv.compile_register_payload(Seasonal)["nodes"][1]["name"] == "Seasonal"
