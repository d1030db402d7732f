"""Where a sharded client sends pushes and reads (beava_client.shard_routes, keys): the
key strings it computes are the server's own, and a table whose key a step writes is
refused before any shard sees the registry."""

from __future__ import annotations

import math
from typing import Any

import pytest

import beava as bv
from beava._fast.ops.table_kernel import fmt_f64_debug, group_key
from beava.dsl.compiler import compile_register_payload
from beava.engine.registry.describe import describe_node
from beava_client import RoutingError
from beava_client.keys import event_key, float_text, read_key
from beava_client.shard_routes import Routes

FLOATS = [0.0, -0.0, 1.0, 1.5, -2.25, 1e16, 1e15, 1.5e-7, 1e-4, 123456789.125, 5e-324,
          1.7976931348623157e308, 0.1 + 0.2, 2.0**63]


@pytest.mark.parametrize("x", FLOATS)
def test_float_text_is_the_servers(x: float) -> None:
    assert float_text(x) == fmt_f64_debug(x)


ROWS: list[dict[str, Any]] = [
    {"a": "u1", "b": "m|1", "c": 7},
    {"a": "", "b": "", "c": 0},
    {"a": "é|ü", "b": True, "c": -3},
    {"a": 1.5, "b": False, "c": 2**62},
    {"a": "x", "b": None, "c": 1},
    {"a": "x", "c": 1},
    {"a": math.inf, "b": "y", "c": 1},
    {"a": [1], "b": "y", "c": 1},
    {"a": -(2**63), "b": 2**63 - 1, "c": 1e16},
]


@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("fields", [(), ("a",), ("b",), ("a", "b"), ("c", "a", "b")])
def test_event_key_is_the_servers(row: dict[str, Any], fields: tuple[str, ...]) -> None:
    assert event_key(row, fields) == group_key(row, fields)


def test_an_int_beyond_64_bits_is_keyed_as_the_float_intake_makes_it() -> None:
    assert event_key({"c": 2**70}, ("c",)) == group_key({"c": float(2**70)}, ("c",))


@pytest.mark.parametrize(("key", "width", "text"), [
    ("u1", 1, "u1"), (7, 1, "7"), (True, 1, "true"), (None, 0, ""),
    (["u1", "m|1"], 2, "u1|m%7C1"), ("u1|m1", 2, "u1|m1"), (["a"], 1, "a"),
    (["a", 1, False], 3, "a|1|false"), (["a"], 2, None), ([{"x": 1}], 1, None),
])
def test_read_key(key: Any, width: int, text: str | None) -> None:
    assert read_key(key, width) == text


@bv.event
class Txn(bv.Event):
    user_id: str
    card: str
    merchant: str = "none"
    amount: float


@bv.table(key="user_id")
def UserSpend(t: Txn) -> bv.Table:  # noqa: N802
    big = t.filter(bv.col("amount") > 10).with_columns(usd=bv.col("amount") * 2)
    return big.group_by("user_id").agg(usd=bv.sum("usd"))


@bv.table(key=["user_id", "merchant"])
def Visits(t: Txn) -> bv.Table:  # noqa: N802
    return t.group_by("user_id", "merchant").agg(n=bv.count())


@bv.table
def AllTxns(t: Txn) -> bv.Table:  # noqa: N802
    return t.group_by().agg(n=bv.count())


@bv.table(key="uid")
def Renamed(t: Txn) -> bv.Table:  # noqa: N802
    return t.rename(user_id="uid").group_by("uid").agg(n=bv.count())


@bv.table(key="card")
def Recomputed(t: Txn) -> bv.Table:  # noqa: N802
    return t.with_columns(card=bv.col("user_id")).group_by("card").agg(n=bv.count())


def _nodes(*descriptors: Any) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = compile_register_payload(*descriptors)["nodes"]
    return nodes


def test_an_event_goes_to_every_tables_key() -> None:
    routes = Routes(_nodes(Txn, UserSpend, Visits, AllTxns))
    routes.check_routable()
    body = {"user_id": "u|1", "card": "c1", "amount": 3.0}
    # the default fills the absent merchant, as the server does; the global table by name
    assert routes.push_texts("Txn", body) == {"u|1", "u%7C1|none", "AllTxns"}
    assert routes.push_texts("Txn", {"card": "c1", "amount": 3.0}) == {"AllTxns"}
    assert routes.push_texts("Unknown", body) == set()
    assert routes.read_text("Visits", ["u|1", "none"]) == "u%7C1|none"
    assert routes.read_text("AllTxns", None) == "AllTxns"


@pytest.mark.parametrize(("table", "name", "step"), [(Renamed, "Renamed", "rename"),
                                                     (Recomputed, "Recomputed", "with_columns")])
def test_a_key_written_by_a_step_is_refused(table: Any, name: str, step: str) -> None:
    routes = Routes(_nodes(Txn, UserSpend, table))
    with pytest.raises(RoutingError) as caught:
        routes.check_routable()
    assert caught.value.code == "unroutable_key"
    assert caught.value.path == name
    assert repr(step) in str(caught.value)


def test_describe_lists_what_the_steps_write() -> None:
    nodes = _nodes(Txn, UserSpend, Renamed, Recomputed)
    described = [describe_node(n) for n in nodes]
    writes = {n["name"]: n.get("writes") for n in described}
    assert writes == {"Txn": None, "UserSpend": {"usd": "with_columns"},
                      "Renamed": {"uid": "rename"}, "Recomputed": {"card": "with_columns"}}
    # routes from describe and from the register payload agree
    routable = _nodes(Txn, UserSpend, Visits, AllTxns)
    body = {"user_id": "u1", "card": "c1", "amount": 30.0}
    assert Routes([describe_node(n) for n in routable]).push_texts("Txn", body) \
        == Routes(routable).push_texts("Txn", body) == {"u1", "u1|none", "AllTxns"}
    with pytest.raises(RoutingError):
        Routes(described).check_routable()


def test_a_server_without_writes_makes_every_writing_step_opaque() -> None:
    described = [describe_node(n) for n in _nodes(Txn, UserSpend)]
    for node in described:
        node.pop("writes", None)
    with pytest.raises(RoutingError, match="'with_columns'"):
        Routes(described).check_routable()
