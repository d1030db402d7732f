"""The compiled Registry (specs, routing of derivations, WAL-record round trip) and the
guarantee that `register` never raises for bad input."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from beava.engine.registry import (
    EventSpec,
    FeatureSpec,
    Registry,
    empty_registry,
    register,
    registry_from_record,
)
from tests.register_payloads import table_node


def txn(name: str = "Txn", **extra: Any) -> dict[str, Any]:
    node = {"kind": "event", "name": name,
            "schema": {"fields": {"user": "str", "amount": "f64", "merchant": "str",
                                  "lat": "f64", "lon": "f64"},
                       "optional_fields": ["note"], "defaults": {"merchant": "m0"}}}
    node.update(extra)
    return node


BIG = {"kind": "derivation", "name": "Big", "output_kind": "event", "upstreams": ["Txn"],
       "ops": [{"op": "filter", "expr": "(amount > 100)"},
               {"op": "with_columns", "exprs": {"x": "(amount * 2)"}}]}
BIGGER = {"kind": "derivation", "name": "Bigger", "output_kind": "event", "upstreams": ["Big"],
          "ops": [{"op": "filter", "expr": "(x > 1000)"}]}
PAYLOAD = {"nodes": [
    txn(cold_after="1d", dedupe_key="user", dedupe_window="5m"),
    BIG,
    BIGGER,
    table_node({"sx": {"op": "sum", "params": {"field": "x"}},
           "c": {"op": "count", "params": {"window": "1h"}},
           "q": {"op": "quantile", "params": {"field": "x", "q": 0.9, "window": "forever"}}},
          name="BigByUser", keys=["user"], up="Bigger",
          ops=[{"op": "select", "fields": ["user", "x"]}]),
    table_node({"total": {"op": "count", "params": {}},
           "home": {"op": "distance_from_home", "params": {"lat": "lat"}}},
          name="Global", keys=[]),
    txn("Other"),
]}


def build() -> Registry:
    out = register(empty_registry(), json.dumps(PAYLOAD))
    assert out.status == 200, out.body
    return out.registry


def test_empty_registry() -> None:
    reg = empty_registry(7)
    assert (reg.version, reg.node_count, reg.nodes) == (7, 0, ())
    assert dict(reg.events) == {} and dict(reg.tables) == {}
    assert reg.feeds("Txn") == ()


def test_event_spec() -> None:
    spec = build().events["Txn"]
    assert spec == EventSpec(
        name="Txn",
        fields={"user": "str", "amount": "f64", "merchant": "str", "lat": "f64", "lon": "f64"},
        required=frozenset({"user", "amount", "merchant", "lat", "lon"}),
        optional=frozenset({"note"}),
        defaults={"merchant": "m0"},
        dedupe_key="user",
        dedupe_window_ms=300_000,
        cold_after_ms=86_400_000,
        schema={"user": "str", "amount": "f64", "merchant": "str", "lat": "f64", "lon": "f64",
                "note": "json"},
    )


def test_table_fed_through_event_derivations_gets_the_flattened_chain() -> None:
    reg = build()
    t = reg.tables["BigByUser"]
    assert t.source == "Txn"
    assert t.chain == (
        {"op": "filter", "expr": "(amount > 100)"},
        {"op": "with_columns", "exprs": {"x": "(amount * 2)"}},
        {"op": "filter", "expr": "(x > 1000)"},
        {"op": "select", "fields": ["user", "x"]},
    )
    assert t.input_schema is reg.events["Txn"].schema
    assert t.keys == ("user",)
    assert t.cold_after_ms == 86_400_000
    assert list(t.features) == ["c", "q", "sx"]
    assert t.features["c"] == FeatureSpec("c", "count", {"where": None}, 3_600_000)
    assert t.features["q"] == FeatureSpec("q", "quantile",
                                          {"field": "x", "q": 0.9, "where": None}, None)
    assert t.features["sx"].window_ms is None


def test_feeds() -> None:
    reg = build()
    assert [t.name for t in reg.feeds("Txn")] == ["BigByUser", "Global"]
    assert reg.feeds("Other") == ()
    assert reg.feeds("Big") == ()  # derivation names are not event sources
    assert set(reg.tables) == {"BigByUser", "Global"}
    assert set(reg.events) == {"Txn", "Other"}
    assert reg.node_count == 6
    assert reg.names == ["Txn", "Big", "Bigger", "BigByUser", "Global", "Other"]


def test_global_table() -> None:
    g = build().tables["Global"]
    assert g.keys == () and g.chain == ()
    assert g.features["home"].params == {"lat_field": "lat", "lon_field": "lon",
                                         "samples": 100, "where": None}


def test_registry_from_record_reproduces_the_registry() -> None:
    out = register(empty_registry(), json.dumps(PAYLOAD))
    record = json.loads(json.dumps(out.record))  # as read back from the WAL
    rebuilt = registry_from_record(record, out.record["new_version"])
    assert rebuilt.version == out.registry.version == 1
    assert rebuilt.nodes == out.registry.nodes
    assert dict(rebuilt.events) == dict(out.registry.events)
    assert dict(rebuilt.tables) == dict(out.registry.tables)
    assert [t.name for t in rebuilt.feeds("Txn")] == ["BigByUser", "Global"]
    # re-registering the recorded nodes is a no-op
    again = register(rebuilt, json.dumps({"nodes": record["nodes"]}))
    assert again.status == 200 and again.registry is None


def test_registry_is_immutable() -> None:
    reg = build()
    for attempt in (
        lambda: setattr(reg, "version", 5),
        lambda: reg.events.__setitem__("X", None),
        lambda: reg.tables["Global"].features.__setitem__("x", None),
    ):
        try:
            attempt()
        except (AttributeError, TypeError):
            continue
        raise AssertionError("registry was mutated")


# never raises ---------------------------------------------------------------------------------

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8))
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20,
)
KEYS = ["kind", "name", "schema", "fields", "optional_fields", "defaults", "ops", "op", "agg",
        "key", "keys", "params", "upstreams", "output_kind", "table_primary_key", "window",
        "field", "n", "where", "expr", "dedupe_key", "cold_after", "force", "dry_run", "nodes"]


def _mutations(value: Any) -> st.SearchStrategy[Any]:
    """Payloads derived from a valid one: one sub-value replaced by something arbitrary."""
    paths: list[tuple[Any, ...]] = []

    def walk(v: Any, path: tuple[Any, ...]) -> None:
        paths.append(path)
        if isinstance(v, dict):
            for k, sub in v.items():
                walk(sub, (*path, k))
        elif isinstance(v, list):
            for i, sub in enumerate(v):
                walk(sub, (*path, i))

    walk(value, ())

    def mutate(path: tuple[Any, ...], new: Any) -> Any:
        doc = json.loads(json.dumps(value))
        if not path:
            return new
        target = doc
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = new
        return doc

    replacement = st.one_of(json_values, st.sampled_from(
        ["event", "derivation", "group_by", "join", "1h", "forever", "0s", "Txn", "user"]))
    return st.builds(mutate, st.sampled_from(paths), replacement)


def _assert_outcome(current: Registry, body: bytes, enforce: bool) -> None:
    out = register(current, body, memory_governance_enforce=enforce)
    assert out.status in (200, 400, 409)
    json.dumps(out.body)
    assert out.body["registry_version"] == current.version + (out.registry is not None)
    if out.status == 400:
        assert set(out.body["error"]) >= {"code", "path", "reason"}
    if out.registry is not None:
        assert out.record["new_version"] == out.registry.version


@settings(max_examples=400, deadline=None)
@given(payload=_mutations(PAYLOAD), enforce=st.booleans())
def test_mutated_payloads_never_raise(payload: Any, enforce: bool) -> None:
    _assert_outcome(build(), json.dumps(payload).encode(), enforce)
    _assert_outcome(empty_registry(), json.dumps(payload).encode(), enforce)


@settings(max_examples=300, deadline=None)
@given(nodes=st.lists(st.dictionaries(st.sampled_from(KEYS), json_values, max_size=6),
                      max_size=3),
       force=st.booleans(), dry_run=st.booleans())
def test_arbitrary_nodes_never_raise(nodes: list[Any], force: bool, dry_run: bool) -> None:
    body = json.dumps({"nodes": nodes, "force": force, "dry_run": dry_run}).encode()
    _assert_outcome(build(), body, True)


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=64))
def test_arbitrary_bytes_never_raise(raw: bytes) -> None:
    _assert_outcome(empty_registry(), raw, True)
