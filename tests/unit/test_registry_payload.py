"""Register P1 (parse), P3 (strict decode, normalisation) and shapes A / B (registry.md §2-§3)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from beava.engine.registry import RegisterOutcome
from tests.register_payloads import register_json, table_node


def txn(**extra: Any) -> dict[str, Any]:
    node = {"kind": "event", "name": "Txn",
            "schema": {"fields": {"user": "str", "amount": "f64", "qty": "i64", "ok": "bool"},
                       "optional_fields": []}}
    node.update(extra)
    return node


COUNT = {"c": {"op": "count", "params": {}}}


def error(outcome: RegisterOutcome) -> tuple[str, str]:
    assert outcome.status == 400, outcome.body
    assert outcome.registry is None and outcome.record is None
    return outcome.body["error"]["code"], outcome.body["error"]["path"]


def assert_body_error(payload: Any, *needles: str) -> None:
    out = register_json(payload)
    assert error(out) == ("invalid_registration", "<body>")
    assert out.body["registry_version"] == 0
    for needle in needles:
        assert needle in out.body["error"]["reason"]


# P1 --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("raw", [b'{"nodes": [', b"", b"nodes", b'{"nodes": []} x', b"\xff\xfe"])
def test_malformed_json_is_a_body_error(raw: bytes) -> None:
    assert_body_error(raw)


@pytest.mark.parametrize("raw", [b"[]", b"5", b'"x"', b"null"])
def test_top_level_must_be_an_object(raw: bytes) -> None:
    assert_body_error(raw)


def test_error_bodies_carry_the_current_version() -> None:
    current = register_json({"nodes": [txn()]}).registry
    out = register_json(b"{", current)
    assert out.body == {
        "error": {"code": "invalid_registration", "path": "<body>",
                  "reason": out.body["error"]["reason"]},
        "registry_version": 1,
    }


# P3: decode ------------------------------------------------------------------------------------

def test_descriptors_instead_of_nodes() -> None:
    assert_body_error({"descriptors": [txn()]}, "nodes")


@pytest.mark.parametrize("payload", [
    {"nodes": 5},
    {"nodes": None},
    {"nodes": [5]},
    {"nodes": [{"name": "E", "schema": {"fields": {"a": "str"}}}]},  # kind missing
    {"nodes": [{"kind": "", "name": "E", "schema": {"fields": {"a": "str"}}}]},
    {"nodes": [{"kind": 7, "name": "E", "schema": {"fields": {"a": "str"}}}]},
    {"nodes": [{"kind": "event", "name": "E"}]},  # no schema
    {"nodes": [{"kind": "event", "schema": {"fields": {"a": "str"}}}]},  # no name
    {"nodes": [{"kind": "event", "name": 5, "schema": {"fields": {"a": "str"}}}]},
    {"nodes": [{"kind": "event", "name": "E", "schema": {}}]},
    {"nodes": [{"kind": "event", "name": "E",
                "schema": {"fields": {"a": "str"}, "optional_fields": None}}]},
    {"nodes": [txn(dedupe_window_ms=-1)]},
    {"nodes": [txn(cold_after_ms=1.5)]},
    {"nodes": [txn(keep_events_for_ms="1h")]},
    {"nodes": [txn(dedupe_key=5)]},
    {"nodes": [txn(), {"kind": "derivation", "name": "D", "output_kind": "stream",
                       "upstreams": ["Txn"], "ops": [{"op": "filter", "expr": "ok"}]}]},
    {"nodes": [txn(), {"kind": "derivation", "name": "D", "upstreams": ["Txn"],
                       "ops": [{"op": "filter", "expr": "ok"}]}]},  # output_kind missing
    {"nodes": [txn(), {"kind": "derivation", "name": "D", "output_kind": "event",
                       "ops": [{"op": "filter", "expr": "ok"}]}]},  # upstreams missing
    {"nodes": [txn(), {"kind": "derivation", "name": "D", "output_kind": "event",
                       "upstreams": "Txn", "ops": []}]},
    {"nodes": [txn(), {"kind": "derivation", "name": "D", "output_kind": "event",
                       "upstreams": ["Txn"], "ops": None}]},
    {"nodes": [txn(), {"kind": "derivation", "name": "D", "output_kind": "event",
                       "upstreams": ["Txn"], "ops": [5]}]},
    {"nodes": [txn(), {"kind": "derivation", "name": "D", "output_kind": "event",
                       "upstreams": ["Txn"], "ops": [{"expr": "ok"}]}]},
    {"nodes": [txn(), {"kind": "derivation", "name": "D", "output_kind": "event",
                       "upstreams": ["Txn"], "ops": [{"op": "filter"}]}]},
    {"nodes": [txn(), {"kind": "derivation", "name": "D", "output_kind": "event",
                       "upstreams": ["Txn"], "ops": [{"op": "with_columns",
                                                      "exprs": {"x": 5}}]}]},
    {"nodes": [txn(), {"kind": "derivation", "name": "D", "output_kind": "event",
                       "upstreams": ["Txn"], "ops": [{"op": "select", "fields": "user"}]}]},
    {"nodes": [txn(), table_node({"c": 5})]},
    {"nodes": [txn(), table_node({"c": {"params": {}}})]},
    {"nodes": [txn(), table_node({"c": {"op": "count", "params": [1]}})]},
    {"nodes": [txn(), table_node(COUNT, keys=None) | {"ops": [{"op": "group_by", "agg": COUNT}]}]},
])
def test_strict_decode_failures(payload: dict[str, Any]) -> None:
    assert_body_error(payload)


@pytest.mark.parametrize("typ", ["decimal", "int", "float", "string", "Str", "I64"])
def test_field_types_are_exact(typ: str) -> None:
    node = txn()
    node["schema"]["fields"]["x"] = typ
    assert_body_error({"nodes": [node]}, typ)


def test_every_declared_type_is_accepted() -> None:
    fields = {t: t for t in ("str", "i64", "f64", "bool", "bytes", "datetime", "json")}
    node = {"kind": "event", "name": "E", "schema": {"fields": fields}}
    out = register_json({"nodes": [node]})
    assert out.status == 200
    assert dict(out.registry.events["E"].fields) == fields


def test_unknown_chain_op_lists_the_valid_ops() -> None:
    node = table_node(COUNT, ops=[{"op": "explode", "field": "x"}])
    assert_body_error({"nodes": [txn(), node]}, "explode", "filter", "with_columns", "fillna")


def test_decode_errors_of_any_node_win_over_normalisation_errors() -> None:
    # node 0 fails normalisation (bad alias), node 1 fails decoding
    bad_alias = txn(cold_after="soon")
    broken = {"kind": "event", "name": "E", "schema": {"fields": {"a": "nope"}}}
    assert error(register_json({"nodes": [bad_alias, broken]})) == (
        "invalid_registration", "<body>")


@pytest.mark.parametrize("value", ["yes", 1, None, "true", [True], {"x": True}])
def test_force_and_dry_run_need_the_literal_true(value: Any) -> None:
    current = register_json({"nodes": [txn(), table_node(COUNT)]}).registry
    out = register_json({"nodes": [txn()], "force": value, "dry_run": value}, current)
    assert out.status == 409  # neither force nor dry_run took effect
    assert out.body["status"] == "conflict"


def test_unknown_keys_are_ignored_and_dropped() -> None:
    ev = txn(color="red", owner={"x": 1})
    ev["schema"]["comment"] = "x"
    tb = table_node({"c": {"op": "count", "params": {"baseline_window": "1h"}, "extra": 1}},
               ops=[{"op": "filter", "expr": "ok", "note": "n"}])
    tb["whatever"] = [1]
    out = register_json({"nodes": [ev, tb], "other": 1})
    assert out.status == 200
    nodes = out.record["nodes"]
    assert set(nodes[0]) == {"kind", "name", "schema", "dedupe_key", "dedupe_window_ms",
                             "keep_events_for_ms", "cold_after_ms"}
    assert set(nodes[0]["schema"]) == {"fields", "optional_fields", "defaults"}
    assert set(nodes[1]) == {"kind", "name", "output_kind", "upstreams", "ops", "schema",
                             "table_primary_key"}
    assert nodes[1]["ops"] == [
        {"op": "filter", "expr": "ok"},
        {"op": "group_by", "keys": ["user"], "agg": {"c": {"op": "count", "params": {}}}},
    ]


# normalisation -----------------------------------------------------------------------------

def test_normalised_event_node_fills_defaults() -> None:
    node = {"kind": "event", "name": "E", "schema": {"fields": {"a": "str"}}}
    out = register_json({"nodes": [node]})
    assert out.record["nodes"] == [{
        "kind": "event", "name": "E",
        "schema": {"fields": {"a": "str"}, "optional_fields": [], "defaults": {}},
        "dedupe_key": None, "dedupe_window_ms": None, "keep_events_for_ms": None,
        "cold_after_ms": None,
    }]
    spec = out.registry.events["E"]
    assert spec.dedupe_window_ms == 86_400_000 and spec.cold_after_ms is None


def test_normalised_params_and_ema() -> None:
    agg = {
        "e": {"op": "ema", "params": {"field": "amount", "half_life": "1m", "window": 5}},
        "b": {"op": "bloom_member", "params": {"field": "user", "fpr": 0.1, "capacity": 9}},
        "k": {"op": "top_k", "params": {"field": "user", "k": "3"}},
        "n": {"op": "count", "params": None},
    }
    out = register_json({"nodes": [txn(), table_node(agg)]})
    assert out.status == 200, out.body
    assert out.record["nodes"][1]["ops"][0]["agg"] == {
        "e": {"op": "ewma", "params": {"field": "amount", "half_life": "1m"}},
        "b": {"op": "bloom_member",
              "params": {"field": "user", "target_fpr": 0.1, "expected_n": 9}},
        "k": {"op": "top_k", "params": {"field": "user"}},
        "n": {"op": "count", "params": {}},
    }


def test_payloads_that_normalise_identically_are_identical() -> None:
    first = register_json({"nodes": [txn(), table_node({"e": {"op": "ema",
                                                "params": {"field": "amount",
                                                           "half_life": "1m"}}})]})
    again = {"nodes": [txn(cold_after_ms=None, junk=1),
                       table_node({"e": {"op": "ewma", "params": {"half_life": "1m", "x": 2,
                                                             "field": "amount",
                                                             "window": 60}}})]}
    out = register_json(again, first.registry)
    assert out.status == 200 and out.registry is None
    assert out.body["already_present"] == ["T", "Txn"]


@pytest.mark.parametrize("alias, ms_key, text, ms", [
    ("cold_after", "cold_after_ms", "1d", 86_400_000),
    ("cold_after", "cold_after_ms", "forever", None),
    ("keep_events_for", "keep_events_for_ms", "30d", 2_592_000_000),
    ("keep_events_for", "keep_events_for_ms", "forever", None),
    ("dedupe_window", "dedupe_window_ms", "5m", 300_000),
])
def test_duration_aliases(alias: str, ms_key: str, text: str, ms: int | None) -> None:
    node = txn(dedupe_key="user", **{alias: text})
    out = register_json({"nodes": [node]})
    assert out.status == 200, out.body
    normalised = out.record["nodes"][0]
    assert normalised[ms_key] == ms and alias not in normalised


@pytest.mark.parametrize("alias, text", [
    ("dedupe_window", "forever"), ("dedupe_window", "0s"), ("cold_after", "1w"),
    ("keep_events_for", "1.5d"), ("cold_after", ""), ("keep_events_for", "0ms"),
])
def test_invalid_duration_alias(alias: str, text: str) -> None:
    assert error(register_json({"nodes": [txn(), txn(name="E2", **{alias: text})]})) == (
        "invalid_registration", f"nodes[1].{alias}",
    )


def test_duration_alias_must_agree_with_ms_key() -> None:
    ok = register_json({"nodes": [txn(cold_after="1h", cold_after_ms=3_600_000)]})
    assert ok.status == 200 and ok.record["nodes"][0]["cold_after_ms"] == 3_600_000
    assert error(register_json({"nodes": [txn(cold_after="1h", cold_after_ms=60_000)]})) == (
        "invalid_registration", "nodes[0].cold_after",
    )
    both = txn(keep_events_for="forever", keep_events_for_ms=5)
    assert error(register_json({"nodes": [both]})) == (
        "invalid_registration", "nodes[0].keep_events_for",
    )


def test_optional_fields_may_name_untyped_fields() -> None:
    node = txn()
    node["schema"]["optional_fields"] = ["note", "ok"]
    out = register_json({"nodes": [node]})
    spec = out.registry.events["Txn"]
    assert spec.optional == frozenset({"note", "ok"})
    assert spec.required == frozenset({"user", "amount", "qty"})
    assert dict(spec.schema) == {"user": "str", "amount": "f64", "qty": "i64", "ok": "bool",
                                 "note": "json"}


# shape B ---------------------------------------------------------------------------------------

def shape_b(agg: Any, **extra: Any) -> dict[str, Any]:
    node = {"kind": "derivation", "name": "T", "upstreams": ["Txn"], "key": ["user"],
            "agg": agg}
    node.update(extra)
    return node


def test_shape_b_normalises_to_shape_a() -> None:
    ops = [{"op": "filter", "expr": "(amount > 0)"}]
    agg = {"c": {"op": "count", "params": {"window": "1h"}}}
    a = register_json({"nodes": [txn(), table_node(agg, ops=ops)]})
    b = register_json({"nodes": [txn(), shape_b(agg, ops=ops, output_kind="table")]})
    assert a.status == b.status == 200
    assert a.record["nodes"] == b.record["nodes"]
    again = register_json({"nodes": [txn(), shape_b(agg, ops=ops)]}, a.registry)
    assert again.status == 200 and again.registry is None  # identical: no-op


def test_shape_b_defaults() -> None:
    node = {"kind": "derivation", "name": "G", "upstreams": ["Txn"], "agg": COUNT}
    out = register_json({"nodes": [txn(), node]})
    assert out.status == 200, out.body
    normalised = out.record["nodes"][1]
    assert normalised["output_kind"] == "table"
    assert normalised["table_primary_key"] == []
    assert normalised["ops"] == [{"op": "group_by", "keys": [], "agg": {"c": {
        "op": "count", "params": {}}}}]
    assert out.registry.tables["G"].keys == ()


def test_shape_b_keeps_an_explicit_table_primary_key() -> None:
    out = register_json({"nodes": [txn(), shape_b(COUNT, table_primary_key=["x"])]})
    assert out.record["nodes"][1]["table_primary_key"] == ["x"]


@pytest.mark.parametrize("node, path", [
    (shape_b([1]), "nodes[1].agg"),
    (shape_b(None), "nodes[1].agg"),
    (shape_b(COUNT, key="user"), "nodes[1].key"),
    (shape_b(COUNT, key=["user", 1]), "nodes[1].key"),
    (shape_b(COUNT, ops=[{"op": "group_by", "keys": [], "agg": COUNT}]), "nodes[1].agg"),
    (shape_b(COUNT, output_kind="event"), "nodes[1].output_kind"),
])
def test_shape_b_normalisation_errors(node: dict[str, Any], path: str) -> None:
    assert error(register_json({"nodes": [txn(), node]})) == ("invalid_registration", path)


def test_shape_b_decode_errors_inside_agg_are_body_errors() -> None:
    assert_body_error({"nodes": [txn(), shape_b({"c": {"op": 5}})]})
    assert_body_error({"nodes": [txn(), shape_b(COUNT, output_kind="stream")]})


def test_group_by_with_output_kind_event_is_a_table() -> None:
    node = table_node(COUNT)
    node["output_kind"] = "event"
    out = register_json({"nodes": [txn(), node]})
    assert out.status == 200
    assert out.record["nodes"][1]["output_kind"] == "table"
    assert "T" in out.registry.tables



def test_nesting_depth_is_capped() -> None:
    def nested(depth: int) -> bytes:
        return b'{"nodes":' + b"[" * depth + b"]" * depth + b"}"

    # 64 levels decode (and fail later as a non-object node); deeper is rejected up front
    assert "Expected `object`" in register_json(nested(63)).body["error"]["reason"]
    assert_body_error(nested(64), "nesting")
    assert_body_error(nested(5000), "nesting")
    deep_default = txn()
    deep_default["schema"]["defaults"] = {"user": json.loads("[" * 70 + "]" * 70)}
    assert_body_error({"nodes": [deep_default]}, "nesting")
