"""End-to-end SDK flows against a real server over http://, tcp:// and embed mode:
register, push -> get, batch_get, features=, global and composite-key tables, derived
chains, field defaults, push_many, force / dry-run re-register, reset, errors."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import beava as bv
from beava.test import assert_features_eq, fixture
from tests.support import BeavaProcess


@bv.event
class Txn:
    user_id: str
    merchant: str
    amount: float
    ok: bool
    note: str | None
    currency: str = "USD"


@bv.event
def BigTxn(t: Txn) -> bv.Event:
    return t.filter(bv.col("amount") > 100).with_columns(doubled=bv.col("amount") * 2)


@bv.table(key="user_id")
def UserTxn(t: Txn) -> bv.Table:
    return t.group_by("user_id").agg(
        n=bv.count(),
        total=bv.sum("amount"),
        avg=bv.mean("amount", window="1h"),
        ok_n=bv.count(where=bv.col("ok")),
        top=bv.top_k("merchant", k=2, window="1h"),
        last_merchant=bv.last("merchant"),
        prev=bv.lag("amount", n=1),
    )


@bv.table(key="user_id")
def BigByUser(big: BigTxn) -> bv.Table:
    return big.group_by("user_id").agg(big_n=bv.count(), doubled=bv.sum("doubled"))


@bv.table(key=["user_id", "merchant"])
def UserMerchant(t: Txn) -> bv.Table:
    return t.group_by("user_id", "merchant").agg(um_n=bv.count())


@bv.table
def TotalTxn(t: Txn) -> bv.Table:
    return t.agg(all_txn=bv.count(window="forever"),
                 usd=bv.count(where=bv.col("currency") == "USD"))


@bv.event
class Order:
    shop_id: int
    vip: bool
    amount: float


@bv.table(key="shop_id")
def ShopOrders(o: Order) -> bv.Table:
    return o.group_by("shop_id").agg(orders=bv.count(), revenue=bv.sum("amount"))


@bv.table(key=["shop_id", "vip"])
def ShopVip(o: Order) -> bv.Table:
    return o.group_by("shop_id", "vip").agg(vip_orders=bv.count())


PIPELINE = (Txn, BigTxn, UserTxn, BigByUser, UserMerchant, TotalTxn)
NAMES = ["Txn", "BigTxn", "UserTxn", "BigByUser", "UserMerchant", "TotalTxn"]


def txn(user: str, merchant: str, amount: float, ok: bool = True, **extra: Any) -> dict[str, Any]:
    return {"user_id": user, "merchant": merchant, "amount": amount, "ok": ok, **extra}


def url_for(server: BeavaProcess, transport: str) -> str:
    return server.http_url if transport == "http" else f"tcp://{server.addrs['tcp']}"


@pytest.fixture(params=["http", "tcp", "embed"])
def app(request: pytest.FixtureRequest) -> Iterator[bv.App]:
    if request.param == "embed":
        with bv.App(test_mode=True) as embedded:
            yield embedded
        return
    server = request.getfixturevalue("clean_server")
    with bv.App(url_for(server, request.param)) as remote:
        yield remote


def test_register_and_reregister(app: bv.App) -> None:
    answer = app.register(*PIPELINE)
    assert answer["status"] == "ok"
    assert answer["added"] == NAMES
    version = answer["registry_version"]
    again = app.register(*PIPELINE)
    assert again["added"] == [] and sorted(again["already_present"]) == sorted(NAMES)
    assert again["registry_version"] == version


def test_register_adds_missing_root_sources(app: bv.App) -> None:
    assert app.register(UserTxn)["added"] == ["Txn", "UserTxn"]


def test_push_then_get_reflects_each_push(app: bv.App) -> None:
    app.register(*PIPELINE)
    ack = app.push("Txn", txn("u1", "m1", 10.5))
    assert set(ack) >= {"ack_lsn", "registry_version"}
    assert app.get("UserTxn", "u1") == {
        "n": 1, "total": 10.5, "avg": 10.5, "ok_n": 1, "top": [{"count": 1, "value": "m1"}],
        "last_merchant": "m1", "prev": None,
    }
    app.push("Txn", txn("u1", "m2", 20.25, ok=False))
    app.push("Txn", txn("u1", "m2", 1.0))
    assert_features_eq(app.get("UserTxn", "u1"), {
        "n": 3, "total": 31.75, "avg": 31.75 / 3, "ok_n": 2,
        "top": [{"count": 2, "value": "m2"}, {"count": 1, "value": "m1"}],
        "last_merchant": "m2", "prev": 20.25,
    })
    assert app.get("UserTxn", "nobody") == {}


def test_derived_chain_feeds_a_table(app: bv.App) -> None:
    app.register(*PIPELINE)
    for amount in (50.0, 150.0, 250.5):
        app.push("Txn", txn("u1", "m1", amount))
    assert app.get("BigByUser", "u1") == {"big_n": 2, "doubled": 801.0}
    assert app.get("UserTxn", "u1")["n"] == 3


def test_composite_and_typed_keys(app: bv.App) -> None:
    app.register(*PIPELINE, Order, ShopOrders, ShopVip)
    app.push("Txn", txn("u1", "m1", 1.0))
    app.push("Txn", txn("u1", "m1", 2.0))
    app.push("Txn", txn("u1", "m2", 3.0))
    assert app.get("UserMerchant", ["u1", "m1"]) == {"um_n": 2}
    assert app.get("UserMerchant", ("u1", "m2")) == {"um_n": 1}
    assert app.get("UserMerchant", "u1|m1") == {"um_n": 2}
    app.push("Order", {"shop_id": 7, "vip": True, "amount": 5.0})
    app.push("Order", {"shop_id": 7, "vip": False, "amount": 2.5})
    assert app.get("ShopOrders", 7) == {"orders": 2, "revenue": 7.5}
    assert app.get("ShopOrders", "7") == {"orders": 2, "revenue": 7.5}
    assert app.get("ShopVip", [7, True]) == {"vip_orders": 1}
    assert app.batch_get([("ShopVip", (7, False)), ("ShopOrders", 8)]) == [
        {"vip_orders": 1}, {}]


def test_global_table(app: bv.App) -> None:
    app.register(*PIPELINE)
    assert app.get("TotalTxn") == {}
    app.push("Txn", txn("u1", "m1", 1.0))
    app.push("Txn", txn("u2", "m1", 1.0, currency="EUR"))
    app.push("Txn", txn("u3", "m1", 1.0, note="hello"))
    assert app.get("TotalTxn") == {"all_txn": 3, "usd": 2}
    assert app.get("TotalTxn", None) == {"all_txn": 3, "usd": 2}


def test_field_default_is_filled(app: bv.App) -> None:
    app.register(*PIPELINE)
    app.push("Txn", txn("u1", "m1", 1.0, currency=None))
    assert app.get("TotalTxn") == {"all_txn": 1, "usd": 1}


def test_features_narrowing(app: bv.App) -> None:
    app.register(*PIPELINE)
    app.push("Txn", txn("u1", "m1", 4.0))
    assert app.get("UserTxn", "u1", features=["total", "n"]) == {"total": 4.0, "n": 1}
    assert app.get("UserTxn", "u1", features=[]) == {}
    with pytest.raises(bv.RegistrationError) as info:
        app.get("UserTxn", "u1", features=["nope"])
    assert info.value.code == "internal_error"


def test_batch_get(app: bv.App) -> None:
    app.register(*PIPELINE)
    app.push("Txn", txn("u1", "m1", 4.0))
    app.push("Txn", txn("u2", "m1", 500.0))
    rows = app.batch_get([
        ("UserTxn", "u1", ["n"]),
        ("BigByUser", "u2"),
        ("Nope", "u1"),
        ("TotalTxn", None),
        ("UserTxn", "u9", None),
    ])
    assert rows[0] == {"n": 1}
    assert rows[1] == {"big_n": 1, "doubled": 1000.0}
    assert rows[2]["error"]["code"] == "unknown_table"
    assert rows[3] == {"all_txn": 2, "usd": 2}
    assert rows[4] == {}
    assert app.batch_get([]) == []


def test_push_many(app: bv.App) -> None:
    app.register(*PIPELINE)
    rows = [txn("u1", "m1", float(i)) for i in range(5)]
    rows[3] = {"user_id": "u1"}  # missing required fields: rejected, reported inline
    result = app.push_many("Txn", rows, chunk_size=2)
    assert result["acks"] == 4
    assert [e["index"] for e in result["errors"]] == [3]
    assert result["errors"][0]["error"]["code"] in ("invalid_event", "schema_mismatch")
    assert isinstance(result["ack_lsn"], int)
    assert app.get("UserTxn", "u1")["n"] == 4
    assert app.push_many("Txn", []) == {"acks": 0, "ack_lsn": None, "errors": [],
                                        "registry_version": None}


def test_push_many_rejected_chunk(app: bv.App) -> None:
    app.register(*PIPELINE)
    with pytest.raises(bv.RegistrationError) as info:
        app.push_many("NoSuchEvent", [{"a": 1}])
    assert info.value.code == "event_not_found"
    assert info.value.details["acked_before"] == 0


def test_push_errors(app: bv.App) -> None:
    app.register(*PIPELINE)
    with pytest.raises(bv.RegistrationError) as info:
        app.push("NoSuchEvent", {"a": 1})
    assert info.value.code == "event_not_found"
    assert info.value.details["error"]["code"] == "event_not_found"
    with pytest.raises(ValueError):
        app.push("Txn", txn("u1", "m1", float("nan")))
    with pytest.raises(bv.RegistrationError):
        app.push("Txn", {"user_id": "u1"})
    assert app.get("UserTxn", "u1") == {}


def test_unknown_table_read(app: bv.App) -> None:
    with pytest.raises(bv.RegistrationError) as info:
        app.get("Nope", "k")
    assert info.value.code == "unknown_table"


def test_key_of_the_wrong_arity_says_what_the_table_takes(app: bv.App) -> None:
    app.register(*PIPELINE)
    with pytest.raises(bv.ReadError) as info:
        app.get("UserMerchant", "u1")
    err = info.value
    assert (err.code, err.expected, err.got) == ("key_parse_failure", ["user_id", "merchant"], "u1")
    assert err.message == (
        "table 'UserMerchant' is keyed by 'user_id', 'merchant' (2 values); the key 'u1' "
        "holds 1: send the 2 values in key order as a list, or as one string joined with '|'")
    with pytest.raises(bv.ReadError) as info:
        app.get("TotalTxn", "u1")
    assert (info.value.expected, info.value.got) == ([], "u1")
    assert info.value.hint == "read a global table with the key '' (in the SDK: leave the key out)"
    [entry] = app.batch_get([("UserMerchant", ["u1", "m1", "x"])])
    assert entry == {"error": {"code": "key_parse_failure", "message": (
        "table 'UserMerchant' is keyed by 'user_id', 'merchant' (2 values); the key "
        "'u1|m1|x' holds 3: send the 2 values in key order as a list, or as one string "
        "joined with '|'")}}


def test_register_error_paths_name_the_descriptor(app: bv.App) -> None:
    raw = {"kind": "derivation", "name": "RawSpend", "output_kind": "table",
           "upstreams": ["Txn"], "table_primary_key": ["user_id"],
           "ops": [{"op": "group_by", "keys": ["user_id"],
                    "agg": {"s": {"op": "sum", "params": {"field": "amout"}}}}]}
    with pytest.raises(bv.RegistrationError) as info:
        app.register(Txn, raw)  # a node dict is sent as it is: the server checks it
    err = info.value
    assert (err.code, err.path) == ("aggregation_unknown_field",
                                    "RawSpend.ops[0].agg.s.params.field")
    assert err.details["error"]["path"] == "nodes[1].ops[0].agg.s.params.field"
    assert err.message.endswith("; did you mean 'amount'?")


def test_force_reregister(app: bv.App) -> None:
    app.register(*PIPELINE)
    app.push("Txn", txn("u1", "m1", 1.0))

    @bv.event
    class Txn:  # noqa: N801 - the same event, redeclared
        user_id: str
        merchant: str
        amount: int  # type change: destructive
        ok: bool
        note: str | None
        currency: str = "USD"

    Txn2 = Txn
    with pytest.raises(bv.RegistrationError) as info:
        app.register(Txn2)
    e = info.value
    assert e.code == "force_required"
    assert e.details["error"]["diff"]["destructive"]
    assert e.details["changed"][0]["changed_fields"] == [
        {"name": "amount", "from": "f64", "to": "i64"}]
    assert app.get("UserTxn", "u1")["n"] == 1  # nothing applied

    dry = app.register(Txn2, force=True, dry_run=True)
    assert dry["would_apply"] is False
    assert app.get("UserTxn", "u1")["n"] == 1

    answer = app.register(Txn2, force=True)
    assert answer["status"] == "ok"
    assert set(answer["removed"]) == set(NAMES[1:])
    with pytest.raises(bv.RegistrationError) as gone:
        app.get("UserTxn", "u1")
    assert gone.value.code == "unknown_table"


def test_dry_run_applies_nothing(app: bv.App) -> None:
    answer = app.register(*PIPELINE, dry_run=True)
    assert answer["would_apply"] is False
    assert {d["name"] for d in answer["diff"]["additive"]} == set(NAMES)
    with pytest.raises(bv.RegistrationError):
        app.get("UserTxn", "u1")


def test_reset(app: bv.App) -> None:
    app.register(*PIPELINE)
    app.push("Txn", txn("u1", "m1", 1.0))
    assert app.reset() is None
    with pytest.raises(bv.RegistrationError) as info:
        app.get("UserTxn", "u1")
    assert info.value.code == "unknown_table"
    app.register(*PIPELINE)
    assert app.get("UserTxn", "u1") == {}


def test_chained_filters_match_the_conjunction(app: bv.App) -> None:
    @bv.table(key="user_id")
    def TwoFilters(t: Txn) -> bv.Table:
        return (t.filter(bv.col("amount") > 5).filter(bv.col("ok"))
                 .group_by("user_id").agg(two=bv.count()))

    @bv.table(key="user_id")
    def OneFilter(t: Txn) -> bv.Table:
        return t.filter((bv.col("amount") > 5) & bv.col("ok")).group_by("user_id").agg(
            one=bv.count())

    app.register(Txn, TwoFilters, OneFilter)
    for amount, ok in [(1.0, True), (6.0, True), (7.0, False), (9.0, True)]:
        app.push("Txn", txn("u1", "m1", amount, ok=ok))
    assert app.get("TwoFilters", "u1") == {"two": 2}
    assert app.get("OneFilter", "u1") == {"one": 2}


def test_with_columns_keyword_order(app: bv.App) -> None:
    @bv.table(key="user_id")
    def Ordered(t: Txn) -> bv.Table:
        return (t.with_columns(b=bv.col("amount") + 1, a2=bv.col("b") * 2)
                 .group_by("user_id").agg(a2=bv.sum("a2"), b=bv.max("b")))

    app.register(Txn, Ordered)
    app.push("Txn", txn("u1", "m1", 4.0))
    assert app.get("Ordered", "u1") == {"a2": 10.0, "b": 5.0}


def test_ping(app: bv.App) -> None:
    app.register(Txn)
    answer = app.ping()
    assert answer["registry_version"] >= 1
    if "pong" in answer:
        assert answer == {"pong": True, "registry_version": answer["registry_version"]}
    else:
        assert set(answer) == {"server_version", "registry_version"}


@pytest.mark.parametrize("transport", ["http", "tcp"])
def test_pooled_app_is_thread_safe(clean_server: BeavaProcess, transport: str) -> None:
    with bv.App(url_for(clean_server, transport), pool_size=4) as app:
        app.register(*PIPELINE)
        errors: list[BaseException] = []

        def worker(user: str) -> None:
            try:
                for i in range(25):
                    app.push("Txn", txn(user, "m1", 1.0))
                    assert app.get("UserTxn", user)["n"] == i + 1
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(f"u{i}",)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert app.get("TotalTxn") == {"all_txn": 200, "usd": 200}


def test_reconnect_after_the_server_closed_the_connection(clean_server: BeavaProcess) -> None:
    with bv.App(f"tcp://{clean_server.addrs['tcp']}", reconnect=True) as app:
        app.register(Txn)
        backend: Any = app._backend
        backend._sock.close()  # the connection dies under the App
        backend._sock = None
        assert app.ping()["registry_version"] >= 1


@pytest.mark.parametrize("transport", ["http", "tcp"])
def test_fixture_helper(clean_server: BeavaProcess, transport: str) -> None:
    url = url_for(clean_server, transport)
    with bv.App(url) as other:
        other.register(Txn)
    gen = fixture(url=url)
    app = next(gen)
    with pytest.raises(bv.RegistrationError):  # reset_each emptied the registry
        app.get("TotalTxn")
    app.register(*PIPELINE)
    app.push("Txn", txn("u1", "m1", 1.0))
    gen.close()
    with pytest.raises(RuntimeError, match="App is closed"):
        app.ping()

    gen = fixture(url=url, reset_each=False)
    app = next(gen)
    assert app.get("TotalTxn") == {"all_txn": 1, "usd": 1}
    with pytest.raises(StopIteration):
        next(gen)
    assert app._closed
