"""EngineState and TableState: routing, chains, group keys, cold TTL, where, reads and the
register transitions of spec/registry.md §9 (operators.md §3, §8; wire.md §7.1).
Time is explicit everywhere: ``now`` on apply, ``T`` on reads."""

from __future__ import annotations

import json

import msgspec
import pytest

from beava.engine.registry import Registry, empty_registry, register
from beava.engine.state.engine_state import EngineState
from beava.engine.state.tables import TableState, UnknownFeatures

T0 = 1_700_000_000_000
HOUR = 3_600_000


def f(op, **params):
    return {"op": op, "params": params}


def event(name, fields, optional=(), cold_after_ms=None):
    node = {"kind": "event", "name": name,
            "schema": {"fields": fields, "optional_fields": list(optional)}}
    if cold_after_ms is not None:
        node["cold_after_ms"] = cold_after_ms
    return node


def table(name, upstream, keys, agg, ops=()):
    return {"kind": "derivation", "name": name, "output_kind": "table", "upstreams": [upstream],
            "ops": [*ops, {"op": "group_by", "keys": keys, "agg": agg}],
            "table_primary_key": keys}


def registry(nodes, current: Registry | None = None, force=False) -> Registry:
    out = register(current or empty_registry(), json.dumps({"nodes": nodes, "force": force}))
    assert out.status == 200, out.body
    return out.registry if out.registry is not None else current


TXN = event("Txn", {"user": "str", "merchant": "str", "amount": "f64", "qty": "i64",
                    "ok": "bool"})


def txn(user="alice", merchant="m1", amount=10.0, qty=1, ok=True):
    return {"user": user, "merchant": merchant, "amount": amount, "qty": qty, "ok": ok}


# --- routing, chains, keys ------------------------------------------------------------------


def test_conformance_lifetime_core_values():
    reg = registry([TXN, table("S", "Txn", ["user"], {
        "cnt": f("count"), "x_sum": f("sum", field="amount"), "q_sum": f("sum", field="qty"),
        "x_mean": f("mean", field="amount"), "q_min": f("min", field="qty"),
        "x_max": f("max", field="amount"), "x_var": f("var", field="amount"),
        "x_std": f("std", field="amount"), "b_ratio": f("ratio", where="(ok == true)"),
    })])
    eng = EngineState(reg)
    for m, amount, qty, ok in [("m1", 12.5, 3, True), ("m2", 40.25, 1, False),
                               ("m1", 7.75, 5, True), ("m3", 100.0, 2, True),
                               ("m2", 0.5, 5, False)]:
        eng.apply("Txn", txn("alice", m, amount, qty, ok), T0)
    eng.apply("Txn", txn("bob", "m9", 19.99, 7, True), T0)
    s = eng.table("S")
    assert s.row("alice", T0) == {
        "b_ratio": 0.6, "cnt": 5, "q_min": 1, "q_sum": 16.0, "x_max": 100.0, "x_mean": 32.2,
        "x_std": 40.781199712612676, "x_sum": 161.0, "x_var": 1663.10625,
    }
    assert s.row("bob", T0) == {
        "b_ratio": 1.0, "cnt": 1, "q_min": 7, "q_sum": 7.0, "x_max": 19.99, "x_mean": 19.99,
        "x_std": None, "x_sum": 19.99, "x_var": None,
    }
    assert s.row("carol", T0) is None
    assert list(s.row("alice", T0)) == sorted(s.row("alice", T0))


def test_events_reach_only_their_tables():
    login = event("Login", {"user": "str", "ok": "bool"})
    reg = registry([TXN, login,
                    table("ByUser", "Txn", ["user"], {"u_n": f("count")}),
                    table("ByMerchant", "Txn", ["merchant"], {"m_n": f("count")}),
                    table("All", "Txn", [], {"all_n": f("count")}),
                    table("Logins", "Login", ["user"], {"l_n": f("count")})])
    eng = EngineState(reg)
    eng.apply("Txn", txn("u1", "m1"), T0)
    eng.apply("Txn", txn("u2", "m1"), T0)
    eng.apply("Login", {"user": "u1", "ok": True}, T0)
    eng.apply("Nope", {"user": "u1"}, T0)
    assert eng.table("ByUser").row("u1", T0) == {"u_n": 1}
    assert eng.table("ByMerchant").row("m1", T0) == {"m_n": 2}
    assert eng.table("All").row("", T0) == {"all_n": 2}
    assert eng.table("Logins").row("u1", T0) == {"l_n": 1}
    assert eng.table("Logins").row("u2", T0) is None
    assert eng.table("Txn") is None and eng.table("missing") is None
    assert eng.entity_count == 2 + 1 + 1 + 1


def test_filter_drops_the_event_before_any_row_exists():
    reg = registry([TXN, table("Pos", "Txn", ["user"], {
        "r": f("ratio", where="(ok == true)"), "n": f("count", where="(ok == true)"),
    }, ops=[{"op": "filter", "expr": "(amount > 0)"}])])
    eng = EngineState(reg)
    eng.apply("Txn", txn("b", amount=-1.0), T0)  # operators.md §19 vector 15
    assert eng.table("Pos").row("b", T0) is None and eng.entity_count == 0
    eng.apply("Txn", txn("b", amount=1.0, ok=False), T0)  # vector 16: row exists
    assert eng.table("Pos").row("b", T0) == {"n": 0, "r": 0.0}


def test_chain_output_feeds_keys_fields_and_where_without_touching_the_pushed_row():
    reg = registry([TXN, table("Derived", "Txn", ["uid"], {
        "s": f("sum", field="amount"),
        "big": f("count", where="(double > 30)"),
        "dmax": f("max", field="double"),
    }, ops=[{"op": "rename", "mapping": {"user": "uid"}},
            {"op": "with_columns", "exprs": {"double": "(amount * 2)", "amount": "(qty + 1)"}}])])
    eng = EngineState(reg)
    row = txn("alice", amount=20.0, qty=4)
    eng.apply("Txn", row, T0)
    eng.apply("Txn", txn("alice", amount=5.0, qty=9), T0)
    assert row == txn("alice", amount=20.0, qty=4)
    # amount was overwritten by qty + 1 in the chain: the feature reads the post-chain value
    assert eng.table("Derived").row("alice", T0) == {"big": 1, "dmax": 40.0, "s": 15.0}


def test_int_bool_composite_and_global_keys():
    order = event("Order", {"store": "i64", "vip": "bool", "tag": "str", "amt": "f64"})
    reg = registry([order,
                    table("ByStore", "Order", ["store"], {"st_n": f("count")}),
                    table("ByVip", "Order", ["vip"], {"vip_n": f("count")}),
                    table("ByTagStore", "Order", ["tag", "store", "vip"], {"tsv_n": f("count")}),
                    table("Total", "Order", [], {"s": f("sum", field="amt")})])
    eng = EngineState(reg)
    for store, vip, tag in [(42, True, "a|b"), (42, False, "a|b"), (-7, True, "")]:
        eng.apply("Order", {"store": store, "vip": vip, "tag": tag, "amt": 1.5}, T0)
    assert eng.table("ByStore").row("42", T0) == {"st_n": 2}
    assert eng.table("ByStore").row("-7", T0) == {"st_n": 1}
    assert eng.table("ByVip").row("true", T0) == {"vip_n": 2}
    assert eng.table("ByTagStore").row("a%7Cb|42|true", T0) == {"tsv_n": 1}
    assert eng.table("ByTagStore").row("|-7|true", T0) == {"tsv_n": 1}
    assert eng.table("Total").row("", T0) == {"s": 4.5}


def test_untyped_key_values_float_keys_and_skipped_keys():
    ev = event("E", {"u": "str"}, optional=["blob"])
    reg = registry([ev, table("ByBlob", "E", ["blob"], {"n": f("count")}),
                    table("ByU", "E", ["u"], {"u_n": f("count")})])
    eng = EngineState(reg)
    for blob in [9.0, 1e16, 9, "9", True, None, float("nan"), [1], {"a": 1}]:
        eng.apply("E", {"u": "x", "blob": blob}, T0)
    eng.apply("E", {"u": "x"}, T0)  # absent key value
    t = eng.table("ByBlob")
    assert {k: t.row(k, T0) for k in ("9.0", "1e16", "9", "true")} == {
        "9.0": {"n": 1}, "1e16": {"n": 1}, "9": {"n": 2}, "true": {"n": 1}}
    assert t.entity_count == 4
    assert eng.table("ByU").row("x", T0) == {"u_n": 10}


def test_where_only_events_still_create_the_row():
    reg = registry([TXN, table("W", "Txn", ["user"], {
        "never_cnt": f("count", where="(amount < 0)"),
        "never_sum": f("sum", field="amount", where="(amount < 0)"),
        "never_ratio": f("ratio", where="(amount < 0)"),
        "never_min": f("min", field="amount", where="(amount < 0)"),
        "same_where": f("count", where="amount < 0"),
        "w_cnt": f("count", window="1h", where="(qty > 1)"),
    })])
    eng = EngineState(reg)
    eng.apply("Txn", txn(qty=1), T0)
    eng.apply("Txn", txn(qty=3), T0 + 1)
    assert eng.table("W").row("alice", T0 + 1) == {
        "never_cnt": 0, "never_min": None, "never_ratio": 0.0, "never_sum": None,
        "same_where": 0, "w_cnt": 1,
    }


def test_windowed_features_expire_with_query_time():
    reg = registry([TXN, table("Win", "Txn", ["user"], {
        "c": f("count", window="1h"), "s": f("sum", field="amount", window="1h"),
        "lo": f("min", field="qty", window="1h"), "forever": f("count", window="forever"),
    })])
    eng = EngineState(reg)
    eng.apply("Txn", txn(amount=1.0, qty=5), T0)
    eng.apply("Txn", txn(amount=2.0, qty=3), T0 + HOUR // 2)
    t = eng.table("Win")
    assert t.row("alice", T0 + HOUR // 2) == {"c": 2, "forever": 2, "lo": 3, "s": 3.0}
    # b = 56 250 ms; the first bucket (epoch <= T0) is inactive once T - e >= 1 h
    assert t.row("alice", T0 + HOUR + 56_250) == {"c": 1, "forever": 2, "lo": 3, "s": 2.0}
    assert t.row("alice", T0 + 2 * HOUR) == {"c": 0, "forever": 2, "lo": None, "s": None}


def test_read_projection():
    reg = registry([TXN, table("P", "Txn", ["user"], {
        "b": f("count"), "a": f("sum", field="amount"), "c": f("max", field="qty")})])
    eng = EngineState(reg)
    eng.apply("Txn", txn(amount=2.5, qty=4), T0)
    t = eng.table("P")
    assert list(t.row("alice", T0, ["c", "a", "c"]).items()) == [("a", 2.5), ("c", 4)]
    assert t.row("alice", T0, []) == {}
    assert t.row("nobody", T0, ["a"]) is None
    with pytest.raises(UnknownFeatures) as err:
        t.row("nobody", T0, ["zz", "a", "y"])
    assert err.value.missing == ["zz", "y"]
    assert str(err.value) == 'feature_not_found: missing=["zz", "y"] table=P'
    assert t.feature_names == ("a", "b", "c")


# --- cold TTL -------------------------------------------------------------------------------


def test_cold_ttl_resets_keyed_rows_but_never_the_global_row():
    ev = event("E", {"u": "str", "x": "i64"}, cold_after_ms=1_000)
    reg = registry([ev, table("K", "E", ["u"], {"n": f("count"), "s": f("sum", field="x"),
                                                "w": f("count", window="1h")}),
                    table("G", "E", [], {"g_n": f("count")})])
    eng = EngineState(reg)
    eng.apply("E", {"u": "a", "x": 1}, T0)
    eng.apply("E", {"u": "a", "x": 2}, T0 + 1_000)
    eng.apply("E", {"u": "b", "x": 5}, T0 + 1_500)
    assert eng.table("K").row("a", T0 + 1_500) == {"n": 2, "s": 3.0, "w": 2}
    assert eng.cold_evictions == 0
    eng.apply("E", {"u": "a", "x": 7}, T0 + 2_001)
    assert eng.table("K").row("a", T0 + 2_001) == {"n": 1, "s": 7.0, "w": 1}
    assert eng.table("K").row("b", T0 + 2_001) == {"n": 1, "s": 5.0, "w": 1}  # reads never expire
    assert eng.table("G").row("", T0 + 2_001) == {"g_n": 4}
    assert eng.cold_evictions == 1


# --- transitions ----------------------------------------------------------------------------

BASE = [TXN, table("S", "Txn", ["user"], {
    "n": f("count"), "s": f("sum", field="amount"), "w": f("count", window="1h"),
    "lo": f("min", field="qty", window="1h"),
})]


def seeded(nodes=BASE):
    reg = registry(nodes)
    eng = EngineState(reg)
    eng.apply("Txn", txn("alice", amount=2.0, qty=3), T0)
    eng.apply("Txn", txn("bob", amount=5.0, qty=1), T0)
    return reg, eng


def transition(eng, old, nodes, force=True):
    out = register(old, json.dumps({"nodes": nodes, "force": force}))
    assert out.status == 200, out.body
    if out.registry is None:  # a no-op register changes nothing
        return old
    eng.transition(out.registry, out.record["plan"])
    return out.registry


def test_identical_registry_keeps_table_object():
    reg, eng = seeded()
    before = eng.table("S")
    transition(eng, reg, BASE)
    assert eng.table("S") is before


def test_added_feature_starts_empty_others_keep_state():
    reg, eng = seeded()
    nodes = [TXN, table("S", "Txn", ["user"], {
        **BASE[1]["ops"][0]["agg"], "hi": f("max", field="qty", window="1h"),
        "m": f("mean", field="amount")})]
    transition(eng, reg, nodes, force=False)
    assert eng.table("S").row("alice", T0) == {
        "hi": None, "lo": 3, "m": None, "n": 1, "s": 2.0, "w": 1}
    eng.apply("Txn", txn("alice", amount=4.0, qty=7), T0 + 10)
    assert eng.table("S").row("alice", T0 + 10) == {
        "hi": 7, "lo": 3, "m": 4.0, "n": 2, "s": 6.0, "w": 2}


def test_removed_and_changed_features():
    reg, eng = seeded()
    nodes = [TXN, table("S", "Txn", ["user"], {
        "n": f("count"),
        "s": f("sum", field="amount", where="(qty > 0)"),   # params changed: reset
        "w": f("count", window="2h"),                       # window changed: reset
    })]  # lo removed
    transition(eng, reg, nodes)
    assert eng.table("S").row("alice", T0) == {"n": 1, "s": None, "w": 0}
    assert eng.table("S").entity_count == 2


def test_window_spelling_change_resets_the_feature():
    reg, eng = seeded()
    agg = dict(BASE[1]["ops"][0]["agg"], w=f("count", window="60m"))
    transition(eng, reg, [TXN, table("S", "Txn", ["user"], agg)])
    assert eng.table("S").row("alice", T0) == {"lo": 3, "n": 1, "s": 2.0, "w": 0}


def test_key_or_chain_change_replaces_the_table():
    reg, eng = seeded()
    agg = BASE[1]["ops"][0]["agg"]
    reg2 = transition(eng, reg, [TXN, table("S", "Txn", ["merchant"], agg)])
    assert eng.table("S").row("alice", T0) is None and eng.table("S").entity_count == 0
    eng.apply("Txn", txn("alice", merchant="m7"), T0)
    transition(eng, reg2, [TXN, table("S", "Txn", ["merchant"], agg,
                                      ops=[{"op": "filter", "expr": "(qty > 0)"}])])
    assert eng.table("S").row("m7", T0) is None


def test_cold_after_change_keeps_state_and_applies_next_event():
    reg, eng = seeded()
    cold = dict(TXN, cold_after_ms=1_000)
    transition(eng, reg, [cold, BASE[1]], force=False)
    assert eng.table("S").row("alice", T0) == {"lo": 3, "n": 1, "s": 2.0, "w": 1}
    eng.apply("Txn", txn("alice", amount=1.0), T0 + 5_000)
    assert eng.table("S").row("alice", T0 + 5_000) == {"lo": 1, "n": 1, "s": 1.0, "w": 1}
    assert eng.cold_evictions == 1


def test_type_change_replaces_downstream_widening_keeps_it():
    reg, eng = seeded()
    wide = event("Txn", {"user": "str", "merchant": "str", "amount": "f64", "qty": "f64",
                         "ok": "bool"})
    reg2 = transition(eng, reg, [wide, BASE[1]], force=False)
    assert eng.table("S").row("alice", T0) == {"lo": 3, "n": 1, "s": 2.0, "w": 1}
    narrow = event("Txn", {"user": "str", "merchant": "str", "amount": "f64", "qty": "str",
                           "ok": "bool"})
    transition(eng, reg2, [narrow, BASE[1]])
    assert eng.table("S").row("alice", T0) is None


def test_removed_table_is_dropped_and_new_table_starts_empty():
    reg, eng = seeded()
    transition(eng, reg, [TXN, table("Other", "Txn", ["user"], {"n": f("count")})])
    assert eng.table("S") is None
    assert eng.table("Other").row("alice", T0) is None
    eng.apply("Txn", txn("alice"), T0)
    assert eng.table("Other").row("alice", T0) == {"n": 1}


def test_counters_stay_monotonic_across_transitions():
    ev = event("E", {"u": "str"}, cold_after_ms=10)
    nodes = [ev, table("K", "E", ["u"], {"n": f("count")})]
    reg = registry(nodes)
    eng = EngineState(reg)
    eng.apply("E", {"u": "a"}, 0)
    eng.apply("E", {"u": "a"}, 100)
    assert eng.cold_evictions == 1
    transition(eng, reg, [ev, table("K", "E", ["u"], {"m": f("count")})])
    assert eng.cold_evictions == 1
    transition(eng, reg, [ev, table("K2", "E", ["u"], {"m": f("count")})])
    assert eng.cold_evictions == 1 and eng.entity_count == 0
    assert eng.table("K2").row("a", 100) is None


def test_bucket_reclaims_count_64_cap_evictions():
    reg = registry([TXN, table("Cap", "Txn", ["user"], {
        "c64": f("count", window="64s"), "s64": f("sum", field="amount", window="64s")})])
    eng = EngineState(reg)
    before = eng.bucket_reclaims
    for k in range(64, -1, -1):  # a clock stepping back: 65 live buckets of 1 s
        eng.apply("Txn", txn(amount=1.0), T0 + 1_000 * k)
    t = eng.table("Cap")
    assert t.bucket_reclaims == 2  # the newest-created bucket (smallest epoch), per feature
    assert eng.bucket_reclaims - before == 2
    assert t.row("alice", T0 + 63_999) == {"c64": 63, "s64": 63.0}  # T0 bucket gone


# --- snapshots ------------------------------------------------------------------------------


def test_dump_load_round_trip():
    nodes = [event("Txn", TXN["schema"]["fields"], cold_after_ms=HOUR),
             table("S", "Txn", ["user"], {
                 "n": f("count"), "lo": f("min", field="merchant"),
                 "w": f("sum", field="amount", window="1h"),
                 "r": f("ratio", where="(ok == true)", window="1h")}),
             table("G", "Txn", [], {"v": f("var", field="amount")})]
    reg = registry(nodes)
    eng = EngineState(reg)
    for i, (user, merchant, amount, ok) in enumerate(
            [("a", "m2", 1.0, True), ("b", "m1", 2.0, False), ("a", "m0", 4.0, False)]):
        eng.apply("Txn", txn(user, merchant, amount, ok=ok), T0 + i * 60_000)
    state = msgspec.msgpack.decode(msgspec.msgpack.encode(eng.dump()))
    restored = EngineState(reg)
    restored.load(state)
    T = T0 + 120_000
    for name, key in [("S", "a"), ("S", "b"), ("G", "")]:
        assert restored.table(name).row(key, T) == eng.table(name).row(key, T)
    assert restored.table("S").row("a", T) == {"lo": "m0", "n": 2, "r": 0.5, "w": 5.0}
    restored.apply("Txn", txn("a", amount=1.0), T0 + 2 * HOUR)  # cold TTL from restored touch
    assert restored.table("S").row("a", T0 + 2 * HOUR)["n"] == 1
    with pytest.raises(ValueError):
        EngineState(registry([TXN])).load(state)


def test_table_state_push_and_spec():
    reg = registry(BASE)
    t = TableState(reg.tables["S"])
    t.push(txn("z", amount=3.0, qty=2), T0)
    assert t.spec is reg.tables["S"]
    assert t.row("z", T0) == {"lo": 2, "n": 1, "s": 3.0, "w": 1}
    assert t.entity_count == 1 and t.bucket_reclaims == 0 and t.cold_evictions == 0
