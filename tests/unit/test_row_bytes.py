"""The read fast path: rows written straight from the columns as MessagePack are the bytes
the reply encoder gives the same rows (beava._fast.wire.msgpack_out, TableKernel.read_msgpack);
rows for a JSON reply, whose big maps are JSON text already (TableKernel.read_json), encode
to the bytes the plain rows encode to."""

from __future__ import annotations

import math

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from beava._fast.wire.msgpack_out import packb
from beava._fast.wire.reply_values import finite_or_none
from beava.engine.state import reads, scan
from beava.engine.store import FeatureStore
from beava.protocol.messages import encode_json, encode_msgpack
from tests.unit.test_snapshots import HOUR, USERS, Clock, every_op_store, push_range


def reply_bytes(value: object) -> bytes:
    return encode_msgpack(finite_or_none(value))


EDGES = [0, 1, 31, 32, 127, 128, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1,
         2**32, 2**63 - 1, 2**63, 2**64 - 1]


@pytest.mark.parametrize("value", [
    *EDGES, *[-e for e in EDGES if e <= 2**63], -33, -129, -32769, -(2**31) - 1,
    None, True, False, 0.0, -0.0, 1.5, 1e308, math.inf, -math.inf, math.nan,
    "", "a" * 31, "a" * 32, "a" * 255, "a" * 256, "a" * 65535, "a" * 65536, "é€😀",
    [], list(range(15)), list(range(16)), list(range(65536)), [1.0, math.nan, [math.inf]],
    {"b": 1, "a": [math.nan]}, {str(i): i for i in range(20)}, (1, 2), {"t": (1.5, "x")},
])
def test_values_encode_as_the_reply_encoder(value: object) -> None:
    assert packb(value) == reply_bytes(value)


JSON_LIKE = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats() | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=40)


@given(JSON_LIKE)
def test_any_value_encodes_as_the_reply_encoder(value: object) -> None:
    assert packb(value) == reply_bytes(value)


def test_an_integer_beyond_uint64_fails_as_the_encoder_does() -> None:
    with pytest.raises(OverflowError):
        reply_bytes(2**64)
    with pytest.raises(OverflowError):
        packb(2**64)


@pytest.fixture(scope="module")
def every_op() -> tuple[FeatureStore, Clock]:
    return every_op_store()


def test_every_operator_row_is_the_encoded_row(every_op) -> None:
    store, clock = every_op
    checked = 0
    for T in (clock.now, clock.now + 5 * 60_000, clock.now + 2 * HOUR):
        for name, keys in (("L", USERS), ("W", USERS), ("G", [""])):
            table = store.table(name)
            for key in keys:
                row = table.row(key, T)
                raw = table.row_msgpack(key, T)
                if row is None:
                    assert raw is None
                    continue
                assert raw == reply_bytes(row), (name, key, T)
                assert msgspec.msgpack.decode(raw).keys() == row.keys()
                assert encode_json(table.row_json(key, T)) == encode_json(row), (name, key, T)
                for feature in table.feature_names:  # each feature alone
                    alone = table.row(key, T, [feature])
                    assert table.row_msgpack(key, T, [feature]) == reply_bytes(alone)
                    assert encode_json(table.row_json(key, T, [feature])) == encode_json(alone)
                checked += 1
    assert checked >= 20


def test_dow_hour_counts_in_every_layout() -> None:
    """The weekday-hour histogram writes its map from the counts: sparse, dense 32-bit and
    dense 64-bit blocks, an empty slot."""
    clock = Clock()
    store = FeatureStore(clock=clock)
    status, body = store.register(msgspec.json.encode({"nodes": [
        {"kind": "event", "name": "Ev", "schema": {"fields": {"user": "str"}}},
        {"kind": "derivation", "name": "T", "upstreams": ["Ev"], "key": ["user"],
         "agg": {"dow": {"op": "dow_hour_histogram", "params": {}},
                 "n": {"op": "count", "params": {}}}}]}))
    assert status == 200, body
    start = clock.now
    for j in range(400):  # "dense": every hour of the week once or more
        clock.now = start + j * 1_700_000
        store.push("Ev", {"user": "dense"})
    for j in range(3):
        clock.now = start + j * HOUR
        store.push("Ev", {"user": "sparse"})
    table = store.table("T")
    for key in ("dense", "sparse"):
        row = table.row(key, clock.now)
        assert row is not None
        assert table.row_msgpack(key, clock.now) == reply_bytes(row)
        assert encode_json(table.row_json(key, clock.now)) == encode_json(row)
    assert table.row("nobody", clock.now) is None and table.row_json("nobody", clock.now) is None
    assert sum(table.row("dense", clock.now)["dow"].values()) == 400


def test_get_answers_in_bytes_as_the_row_encoded(every_op) -> None:
    store, clock = every_op
    for body in ({"table": "L", "key": "u0"}, {"table": "L", "key": "nobody"},
                 {"table": "L", "key": "u1", "features": ["q", "dow", "top"]},
                 {"table": "L", "key": "u1", "features": []},
                 {"table": "G", "key": ""}):
        row = store.table(body["table"]).row(body["key"], clock.now, body.get("features"))
        plain = {} if row is None else row
        assert reads.get_msgpack(store.table, body, clock.now) == reply_bytes(plain)
        assert encode_json(reads.get(store.table, body, clock.now,
                                     legacy_shape_check=False)) == encode_json(plain)


def test_push_range_keeps_rows_alike() -> None:
    """Later pushes change rows the same for both readings (no state cached by a read)."""
    store, clock = every_op_store(400)
    push_range(store, clock, 400, 450)
    table = store.table("L")
    assert table.row_msgpack("u0", clock.now) == reply_bytes(table.row("u0", clock.now))


def test_bucket_histograms_write_their_json_as_the_encoder() -> None:
    """The bucket histogram writes its map's JSON text from its counts: a label that two
    cells share (edges out of order) reads as its last cell, as read() maps it; more cells
    than fit the stack array; one edge."""
    clock = Clock()
    store = FeatureStore(clock=clock)
    many = [round(i * 0.37 - 40, 2) for i in range(300)]
    status, body = store.register(msgspec.json.encode({"nodes": [
        {"kind": "event", "name": "Ev", "schema": {"fields": {"user": "str", "x": "f64"}}},
        {"kind": "derivation", "name": "T", "upstreams": ["Ev"], "key": ["user"],
         "agg": {"repeated": {"op": "histogram", "params": {"field": "x",
                                                            "buckets": [1, 2, 1, 2]}},
                 "many": {"op": "histogram", "params": {"field": "x", "buckets": many}},
                 "one": {"op": "histogram", "params": {"field": "x", "buckets": [0]}}}}]}))
    assert status == 200, body
    for j in range(500):
        store.push("Ev", {"user": "u", "x": (j * 7919 % 1000) / 10 - 50})
    table = store.table("T")
    row = table.row("u", clock.now)
    assert row is not None and len(row["repeated"]) == 4 and len(row["many"]) == 301
    assert sum(row["repeated"].values()) < 500  # one of the cells it shares a label with
    assert encode_json(table.row_json("u", clock.now)) == encode_json(row)
    for feature in ("repeated", "many", "one"):
        assert encode_json(table.row_json("u", clock.now, [feature])) == encode_json(
            table.row("u", clock.now, [feature]))


def _dict_built_page(table, rows: int, T: int,  # type: ignore[no-untyped-def]
                     json: bool = False, arrays: bool = False) -> list[bytes]:
    """A scan page's rows as they were encoded before they were written from the columns:
    a dict of the key columns and the features per row (``arrays``: a list of its values
    in the order of ``scan_columns``), then the reply encoder (JSON's when ``json``)."""
    key_columns = scan.decode_key(table.spec)
    names = [column["name"] for column in scan.scan_columns(table.spec)]
    out = []
    for slot, key in enumerate(table.slot_keys(0, rows)):
        row = key_columns(key)
        row.update(table.read_slot(slot, T))
        value = [row[name] for name in names] if arrays else row
        out.append(encode_json(value) if json else reply_bytes(value))
    return out


def _scan_page(table, T: int, json: bool = False,  # type: ignore[no-untyped-def]
               arrays: bool = False) -> list[bytes]:
    request = scan.ScanRequest(table.spec.name, 0, None, scan.MAX_SCAN_LIMIT, None, True,
                               arrays)
    page = scan.scan_page(table, request, 1, T, json)
    assert page.cursor is None
    return page.rows.rows()


def test_every_operator_scan_row_is_the_dict_built_row(every_op, monkeypatch) -> None:
    monkeypatch.setattr(scan, "SCAN_PAGE_SECONDS", 60.0)  # one page, on a loaded machine too
    store, clock = every_op
    for T in (clock.now, clock.now + 5 * 60_000, clock.now + 2 * HOUR):
        for name in ("L", "W", "G"):
            table = store.table(name)
            for json in (False, True):
                rows = _scan_page(table, T, json)
                assert len(rows) == table.entity_count >= 1
                assert rows == _dict_built_page(table, len(rows), T, json), (name, T, json)
                # rows as arrays: the same values, in the order of the columns
                arrays = _scan_page(table, T, json, arrays=True)
                assert arrays == _dict_built_page(table, len(rows), T, json, arrays=True), (
                    name, T, json)


def test_scan_rows_of_every_key_kind_are_the_dict_built_rows(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Several key columns (str, i64 holding floats too, bool; names sorted among the
    features'), the ``%7C`` escape, text that is not ASCII, non-finite feature values."""
    monkeypatch.setattr(scan, "SCAN_PAGE_SECONDS", 60.0)
    clock = Clock()
    store = FeatureStore(clock=clock)
    status, body = store.register(msgspec.json.encode({"nodes": [
        {"kind": "event", "name": "Ev", "schema": {"fields": {
            "user": "str", "n": "i64", "x": "f64", "b": "bool"}}},
        {"kind": "derivation", "name": "K", "upstreams": ["Ev"], "key": ["user", "n", "b"],
         "agg": {"c": {"op": "last", "params": {"field": "x"}},
                 "a": {"op": "count", "params": {}},
                 "s": {"op": "sum", "params": {"field": "x"}},  # infinite for one user
                 "z": {"op": "last_n", "params": {"field": "x", "n": 3}}}}]}))
    assert status == 200, body
    for i, (user, n) in enumerate([("a|b%7C", 5), ("é€😀", 2.5), ("y", 1e16), ("", -3)]):
        for x in ((1.5e308, 1.5e308) if i == 1 else (i * 0.5 - 1, i * 1e300)):
            store.push("Ev", {"user": user, "n": n, "x": x, "b": i % 2 == 0})
    table = store.table("K")
    rows = _scan_page(table, clock.now)
    assert len(rows) == table.entity_count == 4
    assert rows == _dict_built_page(table, len(rows), clock.now)
    assert _scan_page(table, clock.now, True) == _dict_built_page(table, 4, clock.now, True)
    decoded = msgspec.msgpack.decode(rows[0])
    assert decoded == {"a": 2, "b": True, "c": 0.0, "n": 5, "s": -1.0, "user": "a|b|",
                       "z": [-1.0, 0.0]}
    assert msgspec.msgpack.decode(rows[1])["s"] is None  # an infinite sum
    # rows as arrays: key columns first (in the key's order), then the features
    for json in (False, True):
        assert _scan_page(table, clock.now, json, arrays=True) == _dict_built_page(
            table, 4, clock.now, json, arrays=True)
    assert msgspec.msgpack.decode(_scan_page(table, clock.now, arrays=True)[0]) == [
        "a|b|", 5, True, 2, 0.0, -1.0, [-1.0, 0.0]]  # features by name: a, c, s, z


def test_count_and_mix_writers_are_the_encoded_values() -> None:
    """The histograms and event_type_mix write their values from their state: the bytes of
    each are those of read()'s value encoded, for a slot they hold nothing for (its events
    never match), for counts of one byte and of more, for categories whose order needs
    more than their first byte (a prefix, upper case, text that is not Latin-1), at several
    query times."""
    clock = Clock()
    store = FeatureStore(clock=clock)
    matched = {"where": "(b == true)"}
    status, body = store.register(msgspec.json.encode({"nodes": [
        {"kind": "event", "name": "Ev",
         "schema": {"fields": {"user": "str", "c": "str", "b": "bool"}}},
        {"kind": "derivation", "name": "T", "upstreams": ["Ev"], "key": ["user"],
         "agg": {"hod": {"op": "hour_of_day_histogram", "params": matched},
                 "dow": {"op": "dow_hour_histogram", "params": matched},
                 "mix": {"op": "event_type_mix", "params": {"field": "c", **matched}},
                 "n": {"op": "count", "params": {}}}}]}))
    assert status == 200, body
    categories = ["b", "ab", "a", "B", "é", "€", "😀", "abc", "", "a b"]
    start = clock.now
    for j in range(300):
        clock.now = start + j * 1_700_000
        store.push("Ev", {"user": "spread", "c": categories[j % len(categories)], "b": True})
        store.push("Ev", {"user": "never", "c": "x", "b": False})
    for j in range(200):  # one hour of one day past the one-byte counts
        clock.now += 1_000
        store.push("Ev", {"user": "crowded", "c": categories[j % 3], "b": True})
    table = store.table("T")
    for T in (clock.now, clock.now + HOUR, clock.now + 30 * 24 * HOUR):
        for key in ("spread", "never", "crowded"):
            for feature in ("hod", "dow", "mix"):
                value = table.row(key, T, [feature])
                assert table.row_msgpack(key, T, [feature]) == reply_bytes(value), \
                    (key, feature)
    assert table.row("never", clock.now)["mix"] == {}
    assert max(table.row("crowded", clock.now)["dow"].values()) == 200
    assert list(table.row("spread", clock.now)["mix"]) == sorted(categories)


def test_times_past_int64_write_as_the_encoded_values() -> None:
    """Elapsed times are unsigned: a span past 2**63 - 1 ms (a clock far back, a query time
    far ahead) is written as a uint 64, as the reply encoder writes read()'s int; a query
    time before the event reads 0, and a slot with no event null or false."""
    clock = Clock()
    store = FeatureStore(clock=clock)
    status, body = store.register(msgspec.json.encode({"nodes": [
        {"kind": "event", "name": "Ev", "schema": {"fields": {"user": "str", "b": "bool"}}},
        {"kind": "derivation", "name": "T", "upstreams": ["Ev"], "key": ["user"],
         "agg": {"age": {"op": "age", "params": {"where": "(b == true)"}},
                 "since": {"op": "time_since", "params": {"where": "(b == true)"}},
                 "since_2": {"op": "time_since_last_n", "params": {"n": 2}},
                 "first": {"op": "first_seen", "params": {"where": "(b == true)"}},
                 "fresh": {"op": "first_seen_in_window",
                           "params": {"window": "1h", "where": "(b == true)"}},
                 "seen": {"op": "has_seen", "params": {"where": "(b == true)"}}}}]}))
    assert status == 200, body
    start = -(2**62)
    for j in range(3):
        clock.now = start + j
        store.push("Ev", {"user": "early", "b": True})
        store.push("Ev", {"user": "never", "b": False})
    table = store.table("T")
    far = 2**62 + 5
    assert table.row("early", far)["age"] == far - start > 2**63
    for T in (start - 1, start + 2, start + 1_000, far):
        for key in ("early", "never"):
            row = table.row(key, T)
            assert table.row_msgpack(key, T) == reply_bytes(row), (key, T)
    assert table.row("early", start - 1)["since"] == 0
    assert table.row("never", far) == {"age": None, "since": None, "since_2": far - start - 1,
                                       "first": None, "fresh": False, "seen": False}
