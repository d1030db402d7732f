"""Table scan pages in the engine (beava.engine.state.scan): budgets, key decoding,
cursors, without a server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from beava.catalogue.errors import BeavaError
from beava.engine.state import scan
from beava.engine.store import FeatureStore
from tests.register_payloads import table_node

EVENT = {"kind": "event", "name": "E", "schema": {
    "fields": {"u": "str", "n": "i64", "b": "bool", "s": "str"}, "optional_fields": []}}


def table(name: str, keys: list[str], agg: dict[str, Any]) -> dict[str, Any]:
    return table_node(agg, name=name, keys=keys, up="E")


def store_with(*tables: dict[str, Any]) -> FeatureStore:
    store = FeatureStore(clock=lambda: 1_700_000_000_000)
    status, body = store.register(json.dumps({"nodes": [EVENT, *tables]}).encode())
    assert status == 200, body
    return store


def page(store: FeatureStore, name: str, limit: int, position: int = 0) -> scan.ScanPage:
    request = scan.ScanRequest(name, position, None, limit, None, position == 0)
    state = store.table(name)
    return scan.scan_page(state, request, store.registry_version, store.query_time(), True)


def test_byte_budget_ends_a_page_at_the_row_that_passes_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scan, "SCAN_PAGE_SECONDS", 60.0)
    recent = {"op": "most_recent_n", "params": {"field": "s", "n": 50}}
    store = store_with(table("T", ["u"], {"r": recent}))
    for i in range(50):
        for u in range(30):
            store.push("E", {"u": f"u{u}", "n": i, "b": True, "s": f"{i:03d}" + "y" * 2000})
    first = page(store, "T", 1000)
    sizes = [len(r) for r in first.rows.rows()]
    assert sum(sizes) >= scan.SCAN_PAGE_BYTES > sum(sizes[:-1])
    assert first.cursor == scan.make_cursor("T", store.registry_version, len(sizes))
    read = len(sizes)
    while True:  # 100 KB rows: 11 to a page
        rest = page(store, "T", 1000, read)
        read += len(rest.rows)
        if rest.cursor is None:
            break
        assert len(rest.rows) == len(sizes)
    assert read == 30


def test_time_budget_ends_a_page_after_one_row_at_least(
        monkeypatch: pytest.MonkeyPatch) -> None:
    store = store_with(table("T", ["u"], {"c": {"op": "count"}}))
    for u in range(5):
        store.push("E", {"u": f"u{u}", "n": 1, "b": True, "s": "x"})
    monkeypatch.setattr(scan, "SCAN_PAGE_SECONDS", 0.0)
    assert len(page(store, "T", 1000).rows) == 1
    monkeypatch.setattr(scan, "SCAN_PAGE_SECONDS", 60.0)
    assert len(page(store, "T", 1000).rows) == 5


def test_key_columns_decode_to_values_that_address_the_entity() -> None:
    store = store_with(table("K", ["u", "n", "b"], {"c": {"op": "count"}}))
    pushes = [{"u": "a|b%7C", "n": 5, "b": True, "s": ""},
              {"u": "x", "n": 2.5, "b": False, "s": ""},
              {"u": "y", "n": 1e16, "b": False, "s": ""}]
    for body in pushes:
        store.push("E", body)
    rows = [json.loads(r) for r in page(store, "K", 10).rows.rows()]
    # "%7C" in a value reads back as "|": the stored key cannot tell them apart (as GET)
    assert [(r["u"], r["n"], r["b"]) for r in rows] == [
        ("a|b|", 5, True), ("x", 2.5, False), ("y", 1e16, False)]
    state = store.table("K")
    assert state is not None
    decode = scan.decode_key(state.spec)
    assert decode("p|3|true") == {"u": "p", "n": 3, "b": True}
    assert decode("p|q|maybe") == {"u": "p", "n": "q", "b": "maybe"}  # not from a push


@pytest.mark.parametrize(("cursor", "code"), [
    ("0.0.00000000", "invalid_scan"),       # another table's tag
    ("9.0.{tag}", "scan_cursor_expired"),   # another registry version
    ("1.x.{tag}", "invalid_scan"),
    ("1.0.{tag}.1", "invalid_scan"),
    ("-1.0.{tag}", "invalid_scan"),
])
def test_cursor_checks(cursor: str, code: str) -> None:
    store = store_with(table("T", ["u"], {"c": {"op": "count"}}))
    tag = scan.make_cursor("T", 0, 0).rsplit(".", 1)[1]
    with pytest.raises(BeavaError) as info:
        scan.parse_scan({"table": "T", "cursor": cursor.format(tag=tag)}, store.table,
                        store.registry_version)
    assert info.value.code == code
    assert info.value.top == {"registry_version": store.registry_version}


@pytest.mark.parametrize("arrays", [1, 0, "true", None, [True]])
def test_arrays_must_be_a_boolean(arrays: object) -> None:
    store = store_with(table("T", ["u"], {"c": {"op": "count"}}))
    request, _ = scan.parse_scan({"table": "T", "arrays": True}, store.table, 0)
    assert request.arrays
    request, _ = scan.parse_scan({"table": "T"}, store.table, 0)
    assert not request.arrays
    body = {"table": "T", "arrays": arrays}
    if arrays is None:  # absent and null both mean maps, as for the other optional fields
        assert not scan.parse_scan(body, store.table, 0)[0].arrays
        return
    with pytest.raises(BeavaError) as info:
        scan.parse_scan(body, store.table, 0)
    assert (info.value.code, info.value.fields["path"]) == ("invalid_scan", "arrays")


def test_splits_are_even_and_never_empty() -> None:
    store = store_with(table("T", ["u"], {"c": {"op": "count"}}))
    for u in range(10):
        store.push("E", {"u": f"u{u}", "n": 1, "b": True, "s": "x"})
    state = store.table("T")
    assert state is not None
    version = store.registry_version
    request = scan.ScanRequest("T", 0, None, 0, 4, True)
    result = scan.scan_page(state, request, version, 0, True)
    assert result.splits == [scan.make_cursor("T", version, p) for p in (0, 2, 5, 7)]
    request = scan.ScanRequest("T", 0, None, 0, 50, True)
    result = scan.scan_page(state, request, version, 0, True)
    assert result.splits == [scan.make_cursor("T", version, p) for p in range(10)]


def test_msgpack_pages_keep_the_byte_and_time_budgets(monkeypatch: pytest.MonkeyPatch) -> None:
    recent = {"op": "most_recent_n", "params": {"field": "s", "n": 50}}
    store = store_with(table("T", ["u"], {"r": recent}))
    for i in range(50):
        for u in range(30):
            store.push("E", {"u": f"u{u}", "n": i, "b": True, "s": f"{i:03d}" + "y" * 2000})
    state = store.table("T")
    request = scan.ScanRequest("T", 0, None, 1000, None, True)
    monkeypatch.setattr(scan, "SCAN_PAGE_SECONDS", 60.0)
    sizes = [len(r) for r in scan.scan_page(state, request, 1, store.query_time(),
                                            False).rows.rows()]
    assert sum(sizes) >= scan.SCAN_PAGE_BYTES > sum(sizes[:-1])
    monkeypatch.setattr(scan, "SCAN_PAGE_SECONDS", 0.0)
    assert len(scan.scan_page(state, request, 1, store.query_time(), False).rows) == 1


def test_a_value_nested_as_deep_as_a_push_may_nest_it_reads_in_both_page_kinds() -> None:
    """A json field's value 64 containers deep (the deepest a push stores) held in a list
    feature: its JSON page is its JSON text, and the reader's page_columns reads the
    MessagePack page (the page map, the rows, the row and the list around it)."""
    import msgspec

    from beava._fast.wire.msgpack_json import page_columns

    deep: Any = "x"
    for _ in range(64):
        deep = [deep]
    event = {"kind": "event", "name": "J", "schema": {"fields": {"u": "str", "j": "json"},
                                                      "optional_fields": []}}
    store = FeatureStore(clock=lambda: 1_700_000_000_000)
    recent = table_node({"r": {"op": "most_recent_n", "params": {"field": "j", "n": 2}}},
                        name="T", keys=["u"], up="J")
    status, body = store.register(json.dumps({"nodes": [event, recent]}).encode())
    assert status == 200, body
    store.push("J", {"u": "a", "j": deep})
    request = scan.ScanRequest("T", 0, None, 10, None, True)
    state = store.table("T")
    (text,) = scan.scan_page(state, request, 1, store.query_time(), True).rows.rows()
    assert json.loads(text) == {"u": "a", "r": [deep]}
    (row,) = scan.scan_page(state, request, 1, store.query_time(), False).rows.rows()
    reply = msgspec.msgpack.encode({"cursor": None, "rows": [msgspec.Raw(row)]})
    count, (_, (_, values, _, _)), _ = page_columns(reply, [b"u", b"r"], bytes([3, 4]))
    assert count == 1 and json.loads(bytes(values)) == [deep]

