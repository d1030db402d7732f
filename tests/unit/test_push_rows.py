"""Pushes applied from C rows (beava._fast.ops.row): a table whose columns all read them
(``TableKernel.takes_row``) is fed a body's values where they lie in its bytes, its key
found by those bytes. The state must be what the dict rows of the same pushes give, a key
reached either way must be one entity, and such a push must build no Python object."""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from typing import Any

import msgspec
import pytest

from beava._fast.intake.push_pass import apply_records
from beava._fast.ops.table_kernel import TableKernel, key_slot
from beava._fast.wal.wal_record import append_record
from beava._fast.wire.frame_splitter import FrameSplitter
from beava.durability import wal_format as wf
from beava.engine.registry import empty_registry, register
from beava.engine.sharding import ShardOwnership
from beava.engine.state.columns import COLUMNS
from beava.engine.state.push_validation import build_checkers
from beava.engine.store import FeatureStore
from beava.protocol.dispatch import FrameDispatch
from beava.protocol.server_state import ServerState
from beava.protocol.tcp import FramedTcpProtocol
from beava.server.service import Service
from beava_client.opcodes import CT_MSGPACK, OP_PUSH
from beava_client.slots import Shard, ShardMap, slot, split_slots
from tests.unit.fake_transport import FakeTransport, frame, split_frames

DECODE_MSGPACK = msgspec.msgpack.Decoder().decode
DECODE_JSON = msgspec.json.Decoder().decode
ENCODE_JSON = msgspec.json.Encoder().encode
HOUR = 3_600_000


def features() -> list[tuple[str, Any, int]]:
    """One feature of each op that reads a C row, lifetime and windowed: the core ops, the
    sketches (typed keys, keystr keys and numbers of every kind of value), the decay and
    velocity ops (numbers, events alone, and values of every type compared), the values
    kept as they are (first, last, their lists) and the recency ops."""
    specs: list[tuple[str, str, str | None, int | None, dict[str, Any]]] = [
        ("n", "count", None, None, {}), ("total", "sum", "v", None, {}),
        ("avg", "mean", "v", HOUR, {}), ("lo", "min", "v", None, {}),
        ("hi", "max", "v", HOUR, {}), ("lo_s", "min", "s", None, {}),
        ("hi_b", "max", "b", None, {}), ("var", "var", "v", None, {}),
        ("std", "std", "v", HOUR, {}), ("share", "ratio", None, None, {}),
        ("distinct", "n_unique", "i", None, {}), ("distinct_s", "n_unique", "s", HOUR, {}),
        ("top", "top_k", "i", HOUR, {"k": 3}), ("top_s", "top_k", "s", None, {"k": 2}),
        ("mix", "entropy", "i", None, {}), ("mix_s", "entropy", "s", HOUR, {}),
        ("seen", "bloom_member", "i", None, {}), ("seen_b", "bloom_member", "b", None, {}),
        ("p50", "quantile", "v", HOUR, {"q": 0.5}), ("p90", "quantile", "i", None, {"q": 0.9}),
        ("ew", "ewma", "v", None, {"half_life": HOUR}),
        ("ew_i", "ewma", "i", HOUR, {"half_life": 600_000}),  # a window is ignored
        ("ewv", "ewvar", "v", None, {"half_life": HOUR}),
        ("ewz", "ew_zscore", "v", None, {"half_life": 600_000}),
        ("dsum", "decayed_sum", "i", None, {"half_life": HOUR}),
        ("dcount", "decayed_count", None, None, {"half_life": HOUR}),
        ("twa", "twa", "v", None, {}), ("roc", "rate_of_change", "v", None, {}),
        ("gaps", "inter_arrival_stats", None, HOUR, {}),
        ("burst", "burst_count", None, HOUR, {"sub_window": 2_000_000}),
        ("delta", "delta_from_prev", "i", None, {}), ("slope", "trend", "v", None, {}),
        ("resid", "trend_residual", "v", None, {}),
        ("outliers", "outlier_count", "v", None, {"sigma": 0.5}),
        ("z", "z_score", "v", None, {}), ("changes_s", "value_change_count", "s", None, {}),
        ("changes_i", "value_change_count", "i", None, {}),
        ("changes_b", "value_change_count", "b", None, {}),
        ("first_i", "first", "i", None, {}), ("first_v", "first", "v", None, {}),
        ("last_i", "last", "i", None, {}), ("last_s", "last", "s", None, {}),
        ("last_v", "last", "v", None, {}), ("first_n_i", "first_n", "i", None, {"n": 4}),
        ("last_n_i", "last_n", "i", None, {"n": 3}), ("last_n_v", "last_n", "v", None, {"n": 2}),
        ("lag_i", "lag", "i", None, {"n": 1}), ("lag_b", "lag", "b", None, {"n": 2}),
        ("first_seen", "first_seen", None, None, {}), ("last_seen", "last_seen", None, None, {}),
        ("age", "age", None, None, {}), ("has_seen", "has_seen", None, None, {}),
        ("since", "time_since", None, None, {}), ("streak", "streak", None, None, {}),
        ("since_3", "time_since_last_n", None, None, {"n": 3}),
        ("max_streak", "max_streak", None, None, {}),
        ("negative_streak", "negative_streak", None, None, {}),
        ("recent", "first_seen_in_window", None, None, {"window": HOUR}),
        ("hist", "histogram", "v", None, {"buckets": [-1, 0.5, 3]}),
        ("hist_i", "histogram", "i", None, {"buckets": [0, 10]}),
        ("hours", "hour_of_day_histogram", None, None, {}),
        ("dow", "dow_hour_histogram", None, None, {}),
        ("season", "seasonal_deviation", "v", None, {}),
        ("kinds", "event_type_mix", "c", None, {}),
        ("kinds_few", "event_type_mix", "c", None, {"max_categories": 2}),
        ("kinds_of", "event_type_mix", "c", None, {"categories": ["u1", "7", "true", "t1"]}),
        ("recent_c", "most_recent_n", "c", None, {"n": 3}),
        ("sample", "reservoir_sample", "c", None, {"samples": 2}),
        ("sample_s", "reservoir_sample", "s", None, {"samples": 3}),
        ("speed", "geo_velocity", None, None, {}),
        ("travel", "geo_distance", None, None, {}),
        ("spread", "geo_spread", None, None,  # field names as a registration's JSON gives them
         {"lat_field": DECODE_JSON(b'"lat"'), "lon_field": DECODE_JSON(b'"lon"')}),
        ("away", "distance_from_home", None, None, {"samples": 3}),
    ]
    return [(name, COLUMNS[op](name, field, None, params, window), 0)
            for name, op, field, window, params in specs]


def kernel(key_fields: tuple[str, ...]) -> TableKernel:
    return TableKernel(key_fields, features(), [], None)


def test_tables_that_take_c_rows() -> None:
    assert kernel(("k",)).takes_row
    assert kernel(()).takes_row  # a global table
    assert not kernel(("k", "i")).takes_row  # a composite key: its text is built from objects
    assert not TableKernel(("k",), features(), [lambda row: True], None).takes_row  # a where


EVENT = {"kind": "event", "name": "A",
         "schema": {"fields": {"k": "str", "i": "i64", "v": "f64", "s": "str", "b": "bool",
                               "x": "str",
                               "c": "str", "lat": "f64", "lon": "f64"},
                    "optional_fields": ["i", "v", "s", "b", "x",
                                        "c", "lat", "lon"]}}


def checkers() -> dict[str, Any]:
    outcome = register(empty_registry(), json.dumps({"nodes": [EVENT]}).encode())
    assert outcome.status == 200, outcome.body
    return build_checkers(outcome.registry.events)


def records(rows: list[tuple[dict[str, Any], int, int]]) -> bytearray:
    data = bytearray()
    for lsn, (row, now, fmt) in enumerate(rows, 1):
        body = msgspec.msgpack.encode(row) if fmt == wf.BODY_MSGPACK else json.dumps(row).encode()
        append_record(data, lsn, wf.RECORD_EVENT, fmt, now, 1, b"A", body)
    return data


FORMATS = ((wf.BODY_MSGPACK, wf.BODY_JSON), (wf.BODY_JSON, wf.BODY_MSGPACK))


def pushes() -> list[tuple[dict[str, Any], int, int]]:
    """Bodies of every value kind, under keys of every kind, each key reached by a
    MessagePack body (a C row) and a JSON one (a dict row)."""
    keys: list[Any] = ["u1", "a-key-longer-than-sixteen-bytes", "", 7, -42, True, 2.5, 1e16]
    out = []
    now = 1_000
    for round_ in range(3):
        for n, key in enumerate(keys):
            # half the keys see a C row last, half a dict row: a C row's update is read
            # as it left the state, not only as a later dict row's update rewrote it
            for fmt in FORMATS[(n + round_) % 2]:
                now += 500_000  # some pushes fall into a new hour: new buckets
                body: dict[str, Any] = {"k": f"key-{n}", "i": key, "v": n * 1.25 - round_,
                                        "s": f"t{(n * 7 + round_) % 5}", "b": n % 2 == 0}
                if fmt == wf.BODY_JSON:
                    body["v"] = round_ - n  # an int where a float is declared: a number
                if isinstance(key, str):
                    body["k"] = key
                if n == 3:
                    del body["v"]  # absent: count, ratio and min of s only
                # values of every kind and a point of floats or ints (none without a latitude,
                # nor with a true longitude), each other than the other body's of the key
                body["c"] = keys[(n * (round_ + 1) + 3 * (fmt == wf.BODY_JSON)) % len(keys)]
                body["lat"] = ((40 + n + round_ if n % 2 else 40.5 + n * 0.25 - round_)
                               if fmt == wf.BODY_MSGPACK else 30 - n)
                body["lon"] = -70.25 + round_ * 1.5 if n != 6 else True
                if n == 5:
                    del body["lat"]
                out.append((body, now, fmt))
    return out


def read_all(table: TableKernel, now: int) -> dict[str, Any]:
    state = table.dump()
    return {key: table.read(slot, now) for slot, key in enumerate(state["keys"])}


def apply_both(rows: list[tuple[dict[str, Any], int, int]], by_rows: TableKernel,
               by_dicts: TableKernel) -> None:
    """The records of ``rows`` applied to ``by_rows`` as the push path does (a MessagePack
    body as a C row), and the rows the decoders give to ``by_dicts`` as dicts."""
    data = records(rows)
    newest, end, done = apply_records({"A": (by_rows,)}, checkers(), ["A"] * len(rows), data,
                                      0, 0, len(rows), 0.0, DECODE_MSGPACK, DECODE_JSON)
    assert (newest, end, done) == (rows[-1][1], len(data), len(rows))
    for body, now, fmt in rows:
        by_dicts.apply(DECODE_MSGPACK(msgspec.msgpack.encode(body)) if fmt == wf.BODY_MSGPACK
                       else DECODE_JSON(json.dumps(body).encode()), now)


@pytest.mark.parametrize("key_fields", [("k",), ("i",), ()])
def test_c_rows_and_dict_rows_give_the_same_state(key_fields: tuple[str, ...]) -> None:
    rows = pushes()
    by_rows, by_dicts = kernel(key_fields), kernel(key_fields)
    assert by_rows.takes_row
    apply_both(rows, by_rows, by_dicts)
    assert by_rows.dump()["keys"] == by_dicts.dump()["keys"]  # one entity per key
    assert by_rows.dump() == by_dicts.dump()  # each column's state, to the bit
    T = rows[-1][1]
    assert read_all(by_rows, T) == read_all(by_dicts, T)
    assert ENCODE_JSON(read_all(by_rows, T)) == ENCODE_JSON(read_all(by_dicts, T))  # types
    # a table that takes C rows has no where: every event matches, and negative_streak,
    # which a C row counted as unmatched would raise, reads 0 (spec/operators.md §13)
    assert {row["negative_streak"] for row in read_all(by_rows, T).values()} == {0}
    if key_fields == ("i",):
        assert set(by_rows.dump()["keys"]) >= {"7", "-42", "true", "2.5", "1e16", "u1"}


def test_every_column_keeps_from_c_rows_what_it_keeps_from_dict_rows() -> None:
    """Every push a C row: each column's whole state (its snapshot, where a boolean kept
    is not the int 1, and a ring holds more than its value shows) is the one the dict rows
    of the same bodies leave."""
    rows = [(body, now, wf.BODY_MSGPACK) for body, now, _ in pushes()]
    by_rows, by_dicts = kernel(("k",)), kernel(("k",))
    apply_both(rows, by_rows, by_dicts)
    expected = by_dicts.dump()
    assert expected["keys"] and by_rows.dump() == expected


def test_a_push_read_as_a_c_row_builds_no_python_object() -> None:
    """Applying records of known keys from C rows allocates nothing through Python's
    allocators: no row dict, no key str, no value objects (a dict row of these bodies holds
    a str of a kilobyte, which no column reads)."""
    table = kernel(("k",))
    rows = [({"k": f"user-{i % 8}", "i": i, "v": i * 0.5, "x": "p" * 1000, "b": True,
              "c": i % 4, "lat": i * 0.01, "lon": i * -0.02},  # c: categories already held
             1_000 + i, wf.BODY_MSGPACK) for i in range(400)]
    data = records(rows)
    routes, checks, events = {"A": (table,)}, checkers(), ["A"] * len(rows)
    apply_records(routes, checks, events, data, 0, 0, 200, 0.0, DECODE_MSGPACK, DECODE_JSON)
    offset = 0
    for _ in range(200):
        offset += wf.record_size_at(data, offset, len(data))
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        apply_records(routes, checks, events, data, offset, 200, 400, 0.0, DECODE_MSGPACK,
                      DECODE_JSON)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak - before < 200  # the call's own result tuple, nothing per push
    assert table.read(table.dump()["keys"].index("user-3"), 2_000)["n"] == 50


def test_a_shard_skips_the_c_rows_of_keys_it_does_not_own() -> None:
    """A sharded table tests a C row's key slot from its bytes as it tests a dict row's."""
    rows = pushes()
    owned = bytearray(2048)
    for key in ("u1", "key-4", "key-7"):  # the keys of other shards are skipped
        slot = key_slot(key)
        owned[slot >> 3] |= 1 << (slot & 7)
    by_rows, by_dicts = kernel(("k",)), kernel(("k",))
    for table in (by_rows, by_dicts):
        table.set_ownership(bytes(owned), False)
    apply_both(rows, by_rows, by_dicts)
    assert sorted(by_rows.dump()["keys"]) == ["key-4", "key-7", "u1"]
    assert by_rows.dump()["keys"] == by_dicts.dump()["keys"]
    assert by_rows.skipped == by_dicts.skipped == len(rows) - 3 * 6
    assert read_all(by_rows, rows[-1][1]) == read_all(by_dicts, rows[-1][1])


CLICKS = [
    {"kind": "event", "name": "Click", "schema": {"fields": {"user": "str", "note": "str"}}},
    {"kind": "derivation", "name": "Clicks", "upstreams": ["Click"], "key": ["user"],
     "agg": {"n": {"op": "count"}}},
]


async def test_a_read_of_pushes_makes_no_object_per_frame() -> None:
    """A socket read of pipelined MessagePack pushes is split, checked, applied and acked
    without an object per frame: what the read allocates stays below what its acks take
    (about 85 bytes each, copied once onto the connection's queue), although every pushed
    frame is over a kilobyte (a frame copied out as bytes would exceed it)."""
    store = FeatureStore()
    service = Service(store, test_mode=True)
    assert store.register(json.dumps({"nodes": CLICKS}).encode())[0] == 200
    dispatch = FrameDispatch(service.frame_handlers(), push_run=service.push_pass.run)
    conn = FramedTcpProtocol(dispatch, 1 << 22, ServerState(store.intake))
    transport = FakeTransport()
    conn.connection_made(transport)

    def read(pushes: int) -> bytes:
        return b"".join(frame(OP_PUSH, CT_MSGPACK, msgspec.msgpack.encode(
            {"event": "Click", "body": {"user": f"user-{i % 8}", "note": "p" * 1000}}))
            for i in range(pushes))

    async def acks(pushes: int) -> int:
        """The acks written once the loop has run until ``pushes`` are (a read is handled
        in turns) or 10,000 iterations have passed."""
        written = 0
        for _ in range(10_000):
            written += len(split_frames(transport.take()))
            if written >= pushes:
                break
            await asyncio.sleep(0)
        return written

    conn.data_received(read(64))  # every key known, the tables grown
    assert await acks(64) == 64
    data = read(1000)
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        conn.data_received(data)
        written = await acks(1000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert written == 1000 and store.pushes_total == 1064
    assert peak - before < 300 * 1000


def test_a_shard_decides_from_a_c_row_whether_a_push_is_its_own() -> None:
    """A sharded server reads a push into a C row too: it tests its key's slot from the
    row's bytes before anything is applied, takes a push of its own keys without building
    a row dict (the body's kilobyte of text never copied out), and still answers
    wrong_shard for one whose key another shard owns."""
    shards = [Shard(f"s{i}", (ranges,), f"127.0.0.1:{7100 + i}", f"http://127.0.0.1:{7200 + i}")
              for i, ranges in enumerate(split_slots(2))]
    ownership = ShardOwnership(ShardMap(1, shards), "s0")
    store = FeatureStore(shard=ownership)
    service = Service(store, test_mode=True)
    assert store.register(json.dumps({"nodes": CLICKS}).encode())[0] == 200
    users = [f"user-{i}" for i in range(40)]
    ours = [user for user in users if ownership.owns(slot(user))][:2]
    theirs = next(user for user in users if not ownership.owns(slot(user)))

    def pushes(*keys: str) -> Any:
        return FrameSplitter().feed(b"".join(frame(OP_PUSH, CT_MSGPACK, msgspec.msgpack.encode(
            {"event": "Click", "body": {"user": user, "note": "p" * 1000}})) for user in keys))

    out = bytearray()
    warm = pushes(ours[0], theirs, ours[1])
    assert service.push_pass.run(warm, 0, len(warm), out) == 3
    replies = split_frames(bytes(out))
    assert [json.loads(payload).get("error", {}).get("code") for _, _, payload in replies] \
        == [None, "wrong_shard", None]
    assert store.pushes_total == 2 and ownership.wrong_pushes == 1
    one = pushes(ours[0])
    out = bytearray()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        assert service.push_pass.run(one, 0, 1, out) == 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak - before < 600  # the ack and the call's own objects, no row of the body
    assert store.pushes_total == 3
    table = store.engine.table("Clicks")
    assert table is not None and table.entity_count == 2
    assert (table.row(ours[0], 2**62) or {})["n"] == 2
