"""Register diff, classification, force / dry-run / no-op, registry_version, response bodies
and the transition plan (registry.md §4 P4-P9, §8-§12; durability.md §5 REGISTRY record)."""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

import pytest

from beava.engine.registry import RegisterOutcome, Registry, register
from tests.register_payloads import event_derivation, register_json, table_node


def txn(name: str = "Txn", fields: dict[str, str] | None = None, optional: list[str] = (),
        defaults: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "fields": fields or {"user": "str", "amount": "f64", "merchant": "str"},
        "optional_fields": list(optional),
    }
    if defaults is not None:
        schema["defaults"] = defaults
    node = {"kind": "event", "name": name, "schema": schema}
    node.update(extra)
    return node


# The diffs below start from the table UserTxn.
table = functools.partial(table_node, name="UserTxn")


AGG = {"txn_count": {"op": "count", "params": {}},
       "txn_sum": {"op": "sum", "params": {"field": "amount"}}}


def install(*nodes: dict[str, Any]) -> Registry:
    out = register_json({"nodes": list(nodes)})
    assert out.status == 200, out.body
    return out.registry


def conflict(current: Registry, *nodes: dict[str, Any]) -> dict[str, Any]:
    """The diff of a destructive call (409)."""
    out = register_json({"nodes": list(nodes)}, current)
    assert out.status == 409, out.body
    assert out.registry is None and out.record is None
    return out.body["error"]["diff"]


def dry(current: Registry, *nodes: dict[str, Any]) -> dict[str, Any]:
    out = register_json({"nodes": list(nodes), "dry_run": True}, current)
    assert out.status == 200, out.body
    assert out.registry is None and out.record is None
    return out.body


def applied(current: Registry, *nodes: dict[str, Any], force: bool = False) -> RegisterOutcome:
    out = register_json({"nodes": list(nodes), "force": force}, current)
    assert out.status == 200, out.body
    assert out.registry is not None and out.registry.version == current.version + 1
    assert out.record["new_version"] == out.registry.version
    return out


BASE = (txn(), table(AGG))


@pytest.fixture
def base() -> Registry:
    return install(*BASE)


# bodies and registry_version ------------------------------------------------------------------

def test_first_register_body(base: Registry) -> None:
    out = register_json({"nodes": [txn(), table(AGG)]})
    assert out.body == {
        "added": ["Txn", "UserTxn"], "already_present": [], "changed": [],
        "registered_descriptors": ["Txn", "UserTxn"], "registry_version": 1, "removed": [],
        "status": "ok",
    }
    assert list(out.body) == sorted(out.body)
    assert out.record == {
        "force": False, "new_version": 1, "nodes": out.record["nodes"],
        "plan": {"clear_dedupe": [], "drop": [], "remove_features": [], "replace": [],
                 "reset_features": []},
    }
    assert [n["name"] for n in out.record["nodes"]] == ["Txn", "UserTxn"]
    assert out.registry.nodes == tuple(out.record["nodes"])
    assert out.registry.node_count == 2


def test_added_is_in_payload_order() -> None:
    out = register_json({"nodes": [txn("Zeta"), txn("Alpha"), table(AGG, up="Zeta")]})
    assert out.body["added"] == ["Zeta", "Alpha", "UserTxn"]
    assert out.body["registered_descriptors"] == ["Zeta", "Alpha", "UserTxn"]


def test_identical_re_register_is_a_noop(base: Registry) -> None:
    out = register_json({"nodes": list(BASE)}, base)
    assert out.body == {
        "added": [], "already_present": ["Txn", "UserTxn"], "changed": [],
        "registered_descriptors": ["Txn", "UserTxn"], "registry_version": 1, "removed": [],
        "status": "ok",
    }
    assert out.registry is None and out.record is None
    forced = register_json({"nodes": list(BASE), "force": True}, base)
    assert forced.status == 200 and forced.registry is None
    assert forced.body["registry_version"] == 1


def test_additive_new_descriptors(base: Registry) -> None:
    out = applied(base, *BASE, table({"m_count": {"op": "count", "params": {}}},
                                     name="MerchantTxn", keys=["merchant"]), txn("Refund"))
    assert out.body == {
        "added": ["MerchantTxn", "Refund"], "already_present": ["Txn", "UserTxn"],
        "changed": [], "registered_descriptors": ["Txn", "UserTxn", "MerchantTxn", "Refund"],
        "registry_version": 2, "removed": [], "status": "ok",
    }
    # unchanged descriptors keep their node objects
    assert out.record["nodes"][0] is base.nodes[0]
    assert out.record["nodes"][1] is base.nodes[1]


@pytest.mark.parametrize("force", [False, True])
def test_empty_nodes_is_always_a_noop(base: Registry, force: bool) -> None:
    out = register_json({"nodes": [], "force": force}, install(txn("Zed"), txn("Alpha")))
    assert out.body == {
        "added": [], "already_present": [], "changed": [],
        "registered_descriptors": ["Alpha", "Zed"], "registry_version": 1, "removed": [],
        "status": "ok",
    }
    assert out.registry is None and out.record is None


def test_empty_nodes_dry_run(base: Registry) -> None:
    out = register_json({"nodes": [], "dry_run": True, "force": True}, base)
    assert out.body == {
        "added": [], "changed": [],
        "diff": {"additive": [], "already_present": [], "destructive": []},
        "registry_version": 1, "removed": [], "status": "ok", "would_apply": False,
    }


def test_empty_nodes_skips_the_registry_checks() -> None:
    out = register_json({"nodes": [], "extra": {"descriptors": 1}})
    assert out.status == 200 and out.body["registered_descriptors"] == []


def test_version_counts_only_applied_calls(base: Registry) -> None:
    current = base
    for payload in (
        {"nodes": list(BASE)},
        {"nodes": [txn()], "dry_run": True},
        {"nodes": [txn()]},
        {"nodes": [txn(), table({"x": {"op": "nope", "params": {"window": "1h"}}})]},
        {"nodes": []},
        "{",
    ):
        out = register(current, payload if isinstance(payload, str) else json.dumps(payload))
        assert out.body["registry_version"] == 1 and out.registry is None
    current = applied(current, *BASE, txn("Refund")).registry
    current = applied(current, *BASE, force=True).registry
    assert current.version == 3
    assert register_json({"nodes": []}, current).body["registry_version"] == 3


# dry run ---------------------------------------------------------------------------------------

def test_dry_run_body(base: Registry) -> None:
    body = dry(base, *BASE, txn("Login"))
    assert body == {
        "added": ["Login"], "changed": [],
        "diff": {"additive": [{"descriptor_kind": "event", "kind": "new_descriptor",
                               "name": "Login"}],
                 "already_present": ["Txn", "UserTxn"], "destructive": []},
        "registry_version": 1, "removed": [], "status": "ok", "would_apply": False,
    }


def test_dry_run_reports_destructive_changes_with_200(base: Registry) -> None:
    for force in (False, True):
        out = register_json({"nodes": [txn()], "dry_run": True, "force": force}, base)
        assert out.status == 200 and out.registry is None
        assert out.body["diff"]["destructive"] == [{"agg": "", "kind": "agg_removal",
                                                    "table": "UserTxn"}]
        assert out.body["removed"] == ["UserTxn"]


def test_dry_run_validates() -> None:
    bad = table({"x": {"op": "count", "params": {}}}, keys=["nope"])
    for dry_run in (False, True):
        out = register_json({"nodes": [txn(), bad], "dry_run": dry_run})
        assert out.status == 400
        assert out.body["error"]["path"] == "nodes[1].ops[0].group_by[0]"


def test_invalid_and_destructive_is_409(base: Registry) -> None:
    bad = table({"x": {"op": "count", "params": {}}}, keys=["nope"], name="Bad")
    out = register_json({"nodes": [txn(), bad]}, base)
    assert out.status == 409
    # with force validation runs
    out = register_json({"nodes": [txn(), bad], "force": True}, base)
    assert out.status == 400 and out.body["registry_version"] == 1


# diff entries ----------------------------------------------------------------------------------

def test_409_body(base: Registry) -> None:
    changed = table({**AGG, "txn_count": {"op": "count", "params": {"window": "5m"}}})
    out = register_json({"nodes": [txn(), changed]}, base)
    assert out.body == {
        "added": [],
        "changed": [{"changed_features": [{"from": {"op": "count", "params": {}},
                                           "name": "txn_count",
                                           "to": {"op": "count", "params": {"window": "5m"}}}],
                     "name": "UserTxn"}],
        "error": {"code": "force_required",
                  "diff": {"additive": [], "already_present": ["Txn"],
                           "destructive": [{"agg": "UserTxn.txn_count", "from": "",
                                            "kind": "window_change", "to": "5m"}]},
                  "reason": "Destructive registry change requires force=true: changes the "
                            "window of UserTxn.txn_count from lifetime to 5m. Pass force=True "
                            "to apply it (the affected state restarts empty). The full diff "
                            "is in error.diff."},
        "registry_version": 1, "removed": [], "status": "conflict",
    }


def test_removed_descriptors_and_rename_pairing() -> None:
    current = install(txn(), txn("A"), txn("B"), table(AGG))
    # removed A, B, UserTxn (ascending); new event C pairs with A, new table pairs with UserTxn
    diff = conflict(current, txn(), txn("C"), table(AGG, name="Renamed"))
    assert diff == {
        "additive": [], "already_present": ["Txn"],
        "destructive": [
            {"from": "A", "kind": "rename", "to": "C"},
            {"from": "UserTxn", "kind": "rename", "to": "Renamed"},
            {"agg": "", "kind": "agg_removal", "table": "B"},
        ],
    }
    body = register_json({"nodes": [txn(), txn("C"), table(AGG, name="Renamed")]}, current).body
    assert body["added"] == ["C", "Renamed"] and body["removed"] == ["A", "B", "UserTxn"]


def test_reason_of_a_register_adding_only_a_new_table_says_what_is_removed() -> None:
    current = install(txn(), table(AGG))
    out = register_json({"nodes": [txn(), table(AGG, name="MerchantTxn")]}, current)
    assert out.status == 409
    assert out.body["error"]["reason"].startswith(
        "Destructive registry change requires force=true: removes 'UserTxn' and its state "
        "(adds 'MerchantTxn'; the diff lists the pair as a rename). register replaces the "
        "whole registry:")


def test_kind_change(base: Registry) -> None:
    current = install(txn(), txn("X"))
    diff = conflict(current, txn(),
                    event_derivation("X", [{"op": "filter", "expr": "(amount > 1)"}]))
    assert diff["destructive"] == [{"agg": "", "kind": "agg_removal", "table": "X"}]
    assert diff["additive"] == [{"descriptor_kind": "derivation", "kind": "new_descriptor",
                                 "name": "X"}]
    out = applied(current, txn(), event_derivation("X", [{"op": "filter", "expr": "(amount > 1)"}]),
                  force=True)
    assert out.body["added"] == ["X"] and out.body["removed"] == []
    assert out.record["plan"]["replace"] == ["X"]
    assert out.record["plan"]["clear_dedupe"] == ["X"]


def test_event_field_entries(base: Registry) -> None:
    current = install(txn(fields={"user": "str", "amount": "i64", "qty": "i64", "gone": "str",
                                  "opt": "str", "req": "str"}, optional=["opt"]))
    new = txn(fields={"user": "str", "amount": "f64", "qty": "str", "opt": "str", "req": "str",
                      "note": "str", "cur": "str", "must": "i64"},
              optional=["note", "req"], defaults={"cur": "USD", "opt": "x"})
    diff = dry(current, new)["diff"]
    assert diff == {
        "additive": [
            {"field": "Txn.amount", "from": "i64", "kind": "type_change", "to": "f64"},
            {"default": "USD", "event": "Txn", "field": "cur", "kind": "new_field",
             "required": True, "type": "str"},
            {"event": "Txn", "field": "note", "kind": "new_field", "required": False,
             "type": "str"},
            {"field": "Txn.opt", "from": "optional", "kind": "optionality_change",
             "to": "required"},
            {"field": "Txn.req", "from": "required", "kind": "optionality_change",
             "to": "optional"},
            {"field": "Txn.opt", "from": None, "kind": "default_change", "to": "x"},
        ],
        "already_present": [],
        "destructive": [
            {"field": "Txn.gone", "from": "str", "kind": "type_change", "to": "<absent>"},
            {"field": "Txn.qty", "from": "i64", "kind": "type_change", "to": "str"},
            {"event": "Txn", "field": "must", "kind": "new_field", "required": True,
             "type": "i64"},
        ],
    }


def test_optionality_and_default_destructive_cases() -> None:
    current = install(txn(fields={"user": "str", "a": "str", "b": "str"}, optional=["a"],
                          defaults={"b": "z"}))
    diff = conflict(current, txn(fields={"user": "str", "a": "str", "b": "str"}))
    assert diff["destructive"] == [
        {"field": "Txn.a", "from": "optional", "kind": "optionality_change", "to": "required"},
        {"field": "Txn.b", "from": "z", "kind": "default_change", "to": None},
    ]
    # removing the default of an optional field is additive
    current = install(txn(fields={"user": "str", "a": "str"}, optional=["a"],
                          defaults={"a": "z"}))
    diff = dry(current, txn(fields={"user": "str", "a": "str"}, optional=["a"]))["diff"]
    assert diff["additive"] == [{"field": "Txn.a", "from": "z", "kind": "default_change",
                                 "to": None}]
    # numerically equal defaults are equal
    current = install(txn(fields={"user": "str", "x": "f64"}, defaults={"x": 1}))
    assert dry(current, txn(fields={"user": "str", "x": "f64"}, defaults={"x": 1.0}))[
        "diff"]["already_present"] == ["Txn"]


def test_event_settings_entries() -> None:
    current = install(txn(dedupe_key="user", keep_events_for_ms=1000, cold_after_ms=5))
    assert dry(current, txn(dedupe_key="user", dedupe_window_ms=86_400_000,
                            keep_events_for_ms=1000, cold_after_ms=5))["diff"][
        "already_present"] == ["Txn"]
    diff = dry(current, txn(dedupe_key="merchant", keep_events_for=None, cold_after="1h"))["diff"]
    assert diff == {
        "additive": [
            {"event": "Txn", "from": 1000, "kind": "retention_change", "to": None},
            {"event": "Txn", "from": 5, "kind": "cold_after_change", "to": 3_600_000},
        ],
        "already_present": [],
        "destructive": [
            {"event": "Txn", "from": {"dedupe_key": "user", "dedupe_window_ms": 86_400_000},
             "kind": "dedupe_change",
             "to": {"dedupe_key": "merchant", "dedupe_window_ms": 86_400_000}},
        ],
    }
    shrink = dry(current, txn(dedupe_key="user", dedupe_window="1h", keep_events_for_ms=10,
                              cold_after_ms=5))["diff"]
    assert [e["kind"] for e in shrink["destructive"]] == ["dedupe_change", "retention_change"]
    # window changes without a dedupe key are no entry
    plain = install(txn(dedupe_window_ms=5))
    assert dry(plain, txn(dedupe_window_ms=6))["diff"]["already_present"] == ["Txn"]


def test_retention_from_unlimited_to_a_value_is_destructive() -> None:
    diff = conflict(install(txn()), txn(keep_events_for="30d"))
    assert diff["destructive"] == [{"event": "Txn", "from": None, "kind": "retention_change",
                                    "to": 2_592_000_000}]


def test_feature_entries(base: Registry) -> None:
    agg = {
        "txn_count": {"op": "count", "params": {"window": "1h", "where": "(amount > 1)"}},
        "mx": {"op": "max", "params": {"field": "amount"}},
    }
    diff = conflict(base, txn(), table(agg))
    assert diff == {
        "additive": [
            {"agg": "mx", "kind": "new_agg", "source": "max", "table": "UserTxn"},
            {"agg": "txn_count", "kind": "new_agg", "source": "count", "table": "UserTxn"},
        ],
        "already_present": ["Txn"],
        "destructive": [
            {"agg": "txn_count", "kind": "agg_removal", "table": "UserTxn"},
            {"agg": "txn_sum", "kind": "agg_removal", "table": "UserTxn"},
            {"agg": "UserTxn.txn_count", "from": "", "kind": "window_change", "to": "1h"},
        ],
    }
    body = register_json({"nodes": [txn(), table(agg)]}, base).body
    assert body["changed"] == [{
        "added_features": ["mx"],
        "changed_features": [{"from": {"op": "count", "params": {}}, "name": "txn_count",
                              "to": {"op": "count",
                                     "params": {"where": "(amount > 1)", "window": "1h"}}}],
        "name": "UserTxn",
        "removed_features": ["txn_sum"],
    }]


def test_param_spellings_that_normalise_alike_are_no_change() -> None:
    agg = {"b": {"op": "bloom_member", "params": {"field": "user", "fpr": 0.1}},
           "e": {"op": "ema", "params": {"field": "amount", "half_life": "1m"}}}
    current = install(txn(), table(agg))
    same = {"b": {"op": "bloom_member", "params": {"target_fpr": 0.1, "field": "user",
                                                   "junk": 1}},
            "e": {"op": "ewma", "params": {"field": "amount", "half_life": "1m"}}}
    assert dry(current, txn(), table(same))["diff"]["already_present"] == ["Txn", "UserTxn"]


def test_key_cols_change_is_listed_once(base: Registry) -> None:
    diff = conflict(base, txn(), table(AGG, keys=["merchant"]))
    assert diff["destructive"] == [{"from": ["user"], "kind": "key_cols_change",
                                    "table": "UserTxn", "to": ["merchant"]}]
    out = applied(base, txn(), table(AGG, keys=["merchant"]), force=True)
    assert out.body == {
        "added": ["UserTxn"], "already_present": ["Txn"],
        "changed": [{"key": {"from": ["user"], "to": ["merchant"]}, "name": "UserTxn"}],
        "registered_descriptors": ["Txn", "UserTxn"], "registry_version": 2, "removed": [],
        "status": "ok",
    }
    assert out.record["plan"]["replace"] == ["UserTxn"]


def test_table_primary_key_and_declared_schema_are_not_compared(base: Registry) -> None:
    node = table(AGG)
    node["table_primary_key"] = ["whatever"]
    node["schema"] = {"fields": {"user": "str", "txn_count": "i64"}}
    out = register_json({"nodes": [txn(), node]}, base)
    assert out.status == 200 and out.registry is None
    assert out.body["already_present"] == ["Txn", "UserTxn"]


def test_prefix_op_entries() -> None:
    f1 = {"op": "filter", "expr": "(amount > 1)"}
    f2 = {"op": "filter", "expr": "(amount > 2)"}
    sel = {"op": "select", "fields": ["user", "amount"]}
    current = install(txn(), table(AGG, ops=[f1, sel]))
    # changed at 0, removed at 1
    diff = conflict(current, txn(), table(AGG, ops=[f2]))
    assert diff["destructive"] == [
        {"agg": "select[1]", "kind": "op_removal", "table": "UserTxn"},
        {"kind": "op_change", "op": "filter[0]", "table": "UserTxn"},
    ]
    # appended
    diff = conflict(current, txn(), table(AGG, ops=[f1, sel, f2]))
    assert diff["destructive"] == [{"kind": "op_change", "op": "filter[2]", "table": "UserTxn"}]
    body = register_json({"nodes": [txn(), table(AGG, ops=[f2])]}, current).body
    assert body["changed"] == [{"name": "UserTxn", "ops_changed": ["filter[0]", "select[1]"]}]
    # numbers compare numerically and key order is irrelevant
    fill = [{"op": "fillna", "defaults": {"amount": 1, "user": "u"}}]
    current = install(txn(), table(AGG, ops=fill))
    same = [{"op": "fillna", "defaults": {"user": "u", "amount": 1.0}}]
    assert dry(current, txn(), table(AGG, ops=same))["diff"]["already_present"] == [
        "Txn", "UserTxn"]


def test_upstreams_and_output_kind_entries() -> None:
    current = install(txn(), txn("Other"),
                      event_derivation("D", [{"op": "filter", "expr": "(amount > 1)"}]))
    diff = conflict(current, txn(), txn("Other"),
                    event_derivation("D", [{"op": "filter", "expr": "(amount > 1)"}], up="Other"))
    assert diff["destructive"] == [{"from": ["Txn"], "kind": "upstreams_change", "table": "D",
                                    "to": ["Other"]}]
    as_table = table({"n": {"op": "count", "params": {}}}, name="D",
                     ops=[{"op": "filter", "expr": "(amount > 1)"}])
    diff = conflict(current, txn(), txn("Other"), as_table)
    assert diff["destructive"] == [{"from": "event", "kind": "output_kind_change", "table": "D",
                                    "to": "table"}]
    body = register_json({"nodes": [txn(), txn("Other"), as_table]}, current).body
    assert body["changed"] == [{"name": "D", "output_kind": {"from": "event", "to": "table"}}]


def test_entries_are_sorted_by_rank_then_keys() -> None:
    current = install(txn(fields={"user": "str", "b": "str", "a": "str"}),
                      table({"z": {"op": "count", "params": {}},
                             "y": {"op": "count", "params": {}}}, name="T2"),
                      table({"k": {"op": "count", "params": {}}}, name="T1"))
    diff = conflict(current, txn(fields={"user": "str"}), table({}, name="T1"),
                    table({"x": {"op": "count", "params": {}}}, name="T2"))
    assert [(e["kind"], e.get("field") or e.get("agg") or e.get("table")) for e in
            diff["destructive"]] == [
        ("type_change", "Txn.a"), ("type_change", "Txn.b"),
        ("agg_removal", "k"), ("agg_removal", "y"), ("agg_removal", "z"),
    ]
    assert [e["table"] for e in diff["destructive"][2:]] == ["T1", "T2", "T2"]


# summaries -------------------------------------------------------------------------------------

def test_changed_summary_for_events() -> None:
    current = install(txn(fields={"user": "str", "old": "str", "n": "i64", "c": "str"},
                          defaults={"c": "x"}, dedupe_key="user", cold_after_ms=1))
    new = txn(fields={"user": "str", "new": "str", "n": "f64", "c": "str"}, optional=["user"],
              defaults={"new": "d", "c": "y"}, cold_after_ms=2)
    body = register_json({"nodes": [new], "dry_run": True}, current).body
    assert body["changed"] == [{
        "changed_defaults": [{"from": "x", "name": "c", "to": "y"}],
        "changed_fields": [{"from": "i64", "name": "n", "to": "f64"}],
        "cold_after_ms": {"from": 1, "to": 2},
        "dedupe": {"from": {"dedupe_key": "user", "dedupe_window_ms": 86_400_000},
                   "to": {"dedupe_key": None, "dedupe_window_ms": 86_400_000}},
        "name": "Txn",
        "optionality_changed": [{"from": "required", "name": "user", "to": "optional"}],
        "renamed_fields": [{"from": "old", "to": "new"}],
    }]


def test_changed_summary_added_and_removed_fields() -> None:
    current = install(txn(fields={"user": "str", "a": "str", "b": "i64"}))
    new = txn(fields={"user": "str", "c": "str", "d": "f64"}, optional=["c"],
              defaults={"d": 1.5})
    body = register_json({"nodes": [new], "dry_run": True}, current).body
    assert body["changed"] == [{
        "added_fields": [{"name": "c", "required": False, "type": "str"},
                         {"default": 1.5, "name": "d", "required": True, "type": "f64"}],
        "name": "Txn",
        "removed_fields": ["a", "b"],
    }]


def test_additive_changes_apply_in_place() -> None:
    current = install(txn(fields={"user": "str", "amount": "i64"}),
                      table({"n": {"op": "count", "params": {}}}))
    out = applied(current, txn(fields={"user": "str", "amount": "f64", "note": "str",
                                       "currency": "str"},
                               optional=["note"], defaults={"currency": "USD"}),
                  table({"n": {"op": "count", "params": {}},
                         "cur": {"op": "last", "params": {"field": "currency"}}}))
    assert out.body == {
        "added": [], "already_present": [],
        "changed": [
            {"added_fields": [{"default": "USD", "name": "currency", "required": True,
                               "type": "str"},
                              {"name": "note", "required": False, "type": "str"}],
             "changed_fields": [{"from": "i64", "name": "amount", "to": "f64"}],
             "name": "Txn"},
            {"added_features": ["cur"], "name": "UserTxn"},
        ],
        "registered_descriptors": ["Txn", "UserTxn"], "registry_version": 2, "removed": [],
        "status": "ok",
    }
    assert out.record["plan"] == {"clear_dedupe": [], "drop": [], "remove_features": [],
                                  "replace": [], "reset_features": []}
    spec = out.registry.events["Txn"]
    assert spec.defaults == {"currency": "USD"} and spec.fields["amount"] == "f64"
    assert set(out.registry.tables["UserTxn"].features) == {"cur", "n"}


# force and the plan ----------------------------------------------------------------------------

def test_force_feature_level_effects(base: Registry) -> None:
    agg = {"txn_count": {"op": "count", "params": {"window": "1h"}},
           "mx": {"op": "max", "params": {"field": "amount"}}}
    out = applied(base, txn(), table(agg), force=True)
    assert out.body["added"] == [] and out.body["already_present"] == ["Txn"]
    assert out.record["force"] is True
    assert out.record["plan"] == {
        "clear_dedupe": [], "drop": [], "remove_features": [["UserTxn", "txn_sum"]],
        "replace": [], "reset_features": [["UserTxn", "txn_count"]],
    }


def test_force_spec_change_resets_the_feature(base: Registry) -> None:
    agg = {**AGG, "txn_sum": {"op": "sum", "params": {"field": "amount", "where": "(amount > 0)"}}}
    out = applied(base, txn(), table(agg), force=True)
    assert out.record["plan"]["reset_features"] == [["UserTxn", "txn_sum"]]
    assert out.record["plan"]["remove_features"] == []


def test_force_remove_a_table(base: Registry) -> None:
    out = applied(base, txn(), force=True)
    assert out.body == {
        "added": [], "already_present": ["Txn"], "changed": [],
        "registered_descriptors": ["Txn"], "registry_version": 2, "removed": ["UserTxn"],
        "status": "ok",
    }
    assert out.record["plan"]["drop"] == ["UserTxn"]
    assert "UserTxn" not in out.registry.tables and out.registry.node_count == 1


def test_force_rename_a_table_keeping_feature_names(base: Registry) -> None:
    out = applied(base, txn(), table(AGG, name="TxnByUser"), force=True)
    assert out.body == {
        "added": ["TxnByUser"], "already_present": ["Txn"], "changed": [],
        "registered_descriptors": ["Txn", "TxnByUser"], "registry_version": 2,
        "removed": ["UserTxn"], "status": "ok",
    }
    assert out.record["plan"]["drop"] == ["UserTxn"]
    assert set(out.registry.tables) == {"TxnByUser"}


def test_force_type_change_cascades_downstream() -> None:
    mid = event_derivation("Big", [{"op": "filter", "expr": "(amount > 10)"}])
    current = install(txn(dedupe_key="user"), mid, table(AGG, up="Big"), txn("Other"),
                      table({"o": {"op": "count", "params": {}}}, name="OT", up="Other"))
    new_txn = txn(fields={"user": "str", "amount": "f64", "merchant": "i64"}, dedupe_key="user")
    out = applied(current, new_txn, mid, table(AGG, up="Big"), txn("Other"),
                  table({"o": {"op": "count", "params": {}}}, name="OT", up="Other"),
                  force=True)
    assert out.record["plan"] == {
        "clear_dedupe": ["Txn"], "drop": [], "remove_features": [],
        "replace": ["Txn", "Big", "UserTxn"], "reset_features": [],
    }
    assert out.body["added"] == ["Txn", "Big", "UserTxn"]
    assert out.body["already_present"] == ["OT", "Other"]


def test_force_in_place_event_changes_do_not_cascade() -> None:
    current = install(txn(dedupe_key="user"), table(AGG))
    out = applied(current, txn(dedupe_key="merchant",
                               fields={"user": "str", "amount": "f64", "merchant": "str",
                                       "must": "str"}),
                  table(AGG), force=True)
    assert out.record["plan"] == {
        "clear_dedupe": ["Txn"], "drop": [], "remove_features": [], "replace": [],
        "reset_features": [],
    }
    assert out.body["added"] == [] and out.body["already_present"] == ["UserTxn"]


def test_force_dropped_event_with_dependents_removed() -> None:
    current = install(txn(), table(AGG), txn("Keep"))
    out = applied(current, txn("Keep"), force=True)
    assert out.record["plan"]["drop"] == ["Txn", "UserTxn"]
    assert out.record["plan"]["clear_dedupe"] == ["Txn"]
    assert out.registry.feeds("Txn") == () and set(out.registry.events) == {"Keep"}


def test_force_required_body_summary_keys(base: Registry) -> None:
    out = register_json({"nodes": [txn(fields={"user": "str", "amount": "i64", "merchant": "str"}),
                          table(AGG)]}, base)
    assert out.status == 409
    assert out.body["error"]["diff"] == {
        "additive": [], "already_present": ["UserTxn"],
        "destructive": [{"field": "Txn.amount", "from": "f64", "kind": "type_change",
                         "to": "i64"}],
    }
    assert out.body["changed"] == [{"changed_fields": [{"from": "f64", "name": "amount",
                                                        "to": "i64"}], "name": "Txn"}]


def test_register_does_not_mutate_the_current_registry(base: Registry) -> None:
    nodes_before = copy.deepcopy(base.nodes)
    applied(base, txn(), table({"n": {"op": "count", "params": {}}}), force=True)
    register_json({"nodes": [txn()], "dry_run": True}, base)
    assert base.nodes == nodes_before and base.version == 1
    assert set(base.tables["UserTxn"].features) == {"txn_count", "txn_sum"}
