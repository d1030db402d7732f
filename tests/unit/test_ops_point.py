"""Family C columns (spec/operators.md §12): first, last, first_n, last_n, lag."""

from __future__ import annotations

import struct
import tracemalloc
from typing import Any

import pytest

from beava._fast.ops import ops_point
from tests.op_columns import engine_column, through_snapshot

COLUMNS = ops_point.COLUMNS
T0 = 1_700_000_000_000


def feed(col, values, slot: int = 0, field: str = "x", matched: bool = True) -> None:
    for i, v in enumerate(values):
        col.py_update(slot, {field: v}, matched, T0 + i)


def read(col, slot: int = 0):
    return col.py_read(slot, T0 + 1_000)


def same(a: Any, b: Any) -> bool:
    """Equal values with equal types, element-wise for lists (1 is not 1.0 nor True)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def roundtrip(col, op: str, nslots: int = 4, **wire: Any):
    """A fresh column loaded from ``col``'s snapshot state (through MessagePack)."""
    copy = engine_column(op, slots=1, **wire)
    copy.load(through_snapshot(col.dump(nslots)), nslots)
    return copy


def test_columns_cover_family_c():
    assert set(COLUMNS) == {"first", "last", "first_n", "last_n", "lag"}


# ---- first / last ---------------------------------------------------------------------

def test_first_keeps_first_present_value_with_its_type():
    col = engine_column("first", field="x")
    assert read(col) is None
    feed(col, [None, 7, 2.5, "s"])
    assert same(read(col), 7)
    absent = engine_column("first", field="x")
    absent.py_update(0, {"other": 1}, True, T0)
    absent.py_update(0, {"x": 1.0}, True, T0 + 1)
    assert same(read(absent), 1.0)


@pytest.mark.parametrize("value", [True, False, "m1", 3.25, -12, 0, 2**70, -(2**63)])
def test_first_and_last_inherit_the_row_type(value):
    for op in ("first", "last"):
        col = engine_column(op, field="x")
        feed(col, [value])
        assert same(read(col), value)


def test_last_overwrites_and_skips_nulls():
    col = engine_column("last", field="x")
    assert read(col) is None
    feed(col, ["a", 1, None, 2.0])
    assert same(read(col), 2.0)
    col.py_update(0, {}, True, T0 + 9)  # absent field: unchanged
    assert same(read(col), 2.0)
    feed(col, [False])
    assert same(read(col), False)


def test_first_last_where_false_changes_nothing():
    first, last = engine_column("first", field="x"), engine_column("last", field="x")
    for col in (first, last):
        feed(col, [1, 2], matched=False)
        assert read(col) is None
        feed(col, [3])
        feed(col, [4], matched=False)
    assert same(read(first), 3)
    assert same(read(last), 3)


def test_first_last_slots_are_independent_and_clear():
    col = engine_column("last", field="x")
    feed(col, ["a"], slot=0)
    feed(col, [5], slot=2)
    assert read(col, 0) == "a" and read(col, 1) is None and read(col, 2) == 5
    col.py_clear(0)
    assert read(col, 0) is None and read(col, 2) == 5
    col.py_ensure(10_000)  # growth keeps state
    assert read(col, 2) == 5 and read(col, 9_999) is None


def test_conformance_core_lifetime_first_last():
    # ops_core.json ops.core.lifetime and ops.core.typed_values (first/last keep their type).
    first_m = engine_column("first", field="merchant")
    last_m = engine_column("last", field="merchant")
    last_x, last_q = engine_column("last", field="amount"), engine_column("last", field="qty")
    rows = [("m1", 12.5, 3), ("m2", 40.25, 1), ("m1", 7.75, 5), ("m3", 100.0, 2),
            ("m2", 0.5, 5)]
    for i, (m, amount, qty) in enumerate(rows):
        row = {"merchant": m, "amount": amount, "qty": qty}
        for col in (first_m, last_m, last_x, last_q):
            col.py_update(0, row, True, T0 + i)
    assert (read(first_m), read(last_m)) == ("m1", "m2")
    assert same(read(last_x), 0.5) and same(read(last_q), 5)
    ifirst, ilast, blast = (engine_column("first", field="cnt"),
                            engine_column("last", field="cnt"),
                            engine_column("last", field="flag"))
    for i, (cnt, flag) in enumerate([(4, True), (9, False), (1, True), (7, True), (7, False),
                                     (3, False)]):
        for col in (ifirst, ilast, blast):
            col.py_update(0, {"cnt": cnt, "flag": flag}, True, T0 + i)
    assert same(read(ifirst), 4) and same(read(ilast), 3) and same(read(blast), False)


def test_first_last_snapshot_roundtrip():
    for op in ("first", "last"):
        col = engine_column(op, field="x")
        feed(col, ["txt"], slot=0)
        feed(col, [2.5], slot=1)
        feed(col, [-(2**63)], slot=3)
        copy = roundtrip(col, op, field="x")
        assert [copy.py_read(s, 0) for s in range(4)] == ["txt", 2.5, None, -(2**63)]
        feed(copy, [True], slot=2)
        assert same(copy.py_read(2, 0), True)


def test_first_last_snapshot_is_deterministic():
    col = engine_column("last", field="x")
    feed(col, ["a", "b"], slot=1)
    assert col.dump(3) == roundtrip(col, "last", 3, field="x").dump(3)


# ---- first_n / last_n -----------------------------------------------------------------

def test_first_n_appends_then_freezes():
    col = engine_column("first_n", field="x", n=3)
    assert read(col) == []
    feed(col, [1, None, "b"])
    assert same(read(col), [1, "b"])
    feed(col, [2.5, 9, 10])
    assert same(read(col), [1, "b", 2.5])


def test_first_n_where_false_and_absent_values_skip():
    col = engine_column("first_n", field="x", n=2)
    feed(col, [1, 2], matched=False)
    col.py_update(0, {}, True, T0)
    assert read(col) == []
    feed(col, [True, 1])
    assert same(read(col), [True, 1])


def test_last_n_keeps_last_n_oldest_to_newest():
    col = engine_column("last_n", field="x", n=3)
    assert read(col) == []
    feed(col, [1.0])
    assert same(read(col), [1.0])
    feed(col, [2, None, "c"])
    assert same(read(col), [1.0, 2, "c"])
    feed(col, [4, 5.5])
    assert same(read(col), ["c", 4, 5.5])
    feed(col, [6, 7, 8, 9])
    assert read(col) == [7, 8, 9]
    feed(col, ["ignored"], matched=False)
    assert read(col) == [7, 8, 9]


def test_last_n_n1_and_n1024():
    one = engine_column("last_n", field="x", n=1)
    feed(one, [1, 2, 3])
    assert read(one) == [3]
    big = engine_column("last_n", field="x", n=1024)
    feed(big, list(range(3000)))
    assert read(big) == list(range(3000 - 1024, 3000))


def test_conformance_buffer_lists_point_ops():
    # ops_buffer.json ops.buffer.lists: firsts, firsts_where, lasts, lag_a, lag_b.
    firsts = engine_column("first_n", field="qty", n=2)
    firsts_where = engine_column("first_n", field="item", n=2)  # where qty > 1
    lasts = engine_column("last_n", field="price", n=3)
    lag_a = engine_column("lag", field="price", n=1)
    lag_b = engine_column("lag", field="item", n=3)
    c1 = [("apple", 1, 2.5), ("pear", 4, 7.0), ("fig", 2, 3.25), ("kiwi", 6, 12.0),
          ("plum", 3, 1.0), ("lime", 5, 9.5), ("date", 7, 6.0)]
    c2 = [("solo", 2, 4.0), ("duo", 3, 8.0)]
    for slot, rows in ((0, c1), (1, c2)):
        for i, (item, qty, price) in enumerate(rows):
            row = {"cid": f"c{slot + 1}", "item": item, "qty": qty, "price": price}
            for col in (firsts, lasts, lag_a, lag_b):
                col.py_update(slot, row, True, T0 + i)
            firsts_where.py_update(slot, row, qty > 1, T0 + i)
    assert same(read(firsts, 0), [1, 4]) and read(firsts_where, 0) == ["pear", "fig"]
    assert same(read(lasts, 0), [1.0, 9.5, 6.0])
    assert same(read(lag_a, 0), 9.5) and read(lag_b, 0) == "kiwi"
    assert same(read(firsts, 1), [2, 3]) and read(firsts_where, 1) == ["solo", "duo"]
    assert same(read(lasts, 1), [4.0, 8.0])
    assert same(read(lag_a, 1), 4.0) and read(lag_b, 1) is None


def test_ring_ops_snapshot_roundtrip():
    for op, n in (("first_n", 2), ("last_n", 3), ("lag", 2)):
        col = engine_column(op, field="x", n=n)
        feed(col, [1, "b", 2.5, True, 5], slot=0)
        feed(col, [9], slot=2)
        copy = roundtrip(col, op, field="x", n=n)
        for slot in range(4):
            assert same(copy.py_read(slot, 0), col.py_read(slot, 0))
        for c in (col, copy):
            feed(c, [6, 7], slot=0)
            feed(c, [8], slot=3)
        for slot in range(4):
            assert same(copy.py_read(slot, 0), col.py_read(slot, 0))


def test_ring_clear_frees_the_slot():
    col = engine_column("last_n", field="x", n=2)
    feed(col, ["a", "b", "c"], slot=1)
    col.py_clear(1)
    assert read(col, 1) == []
    feed(col, ["d"], slot=1)
    assert read(col, 1) == ["d"]
    records, objects = col.dump(4)
    assert objects == ["d"] and struct.unpack_from("=qq", records) == (1, 8 + 9)
    assert len(records) == 16 + 8 + 9  # one record: slot 1, seen, one payload and tag


# ---- lag ------------------------------------------------------------------------------

def test_lag_spec_example():
    col = engine_column("lag", field="x", n=1)
    feed(col, [10.0])
    assert read(col) is None
    feed(col, [25.0, 50.0])
    assert same(read(col), 25.0)


def test_lag_vector_7():
    # operators.md §19 vector 7: lag(x, n=2) over 2.0, 1, 2, 5.5, -1.25, 2.0 => 5.5
    col = engine_column("lag", field="x", n=2)
    feed(col, [2.0, 1, 2])
    assert same(read(col), 2.0)
    feed(col, [5.5, -1.25, 2.0])
    assert same(read(col), 5.5)


def test_lag_skips_nulls_and_unmatched():
    col = engine_column("lag", field="x", n=1)
    feed(col, ["a", None])
    feed(col, ["z"], matched=False)
    assert read(col) is None
    feed(col, ["b"])
    assert read(col) == "a"


# ---- construction ---------------------------------------------------------------------

@pytest.mark.parametrize("op", ["first", "last", "first_n", "last_n", "lag"])
def test_lifetime_only(op):
    params = {"field": "x", "where": None, "n": 2}
    with pytest.raises(ValueError, match="lifetime-only"):
        COLUMNS[op]("f", "x", None, params, 60_000)


@pytest.mark.parametrize("op", ["first_n", "last_n", "lag"])
@pytest.mark.parametrize("n", [0, 1025, None, 2.0, True])
def test_n_out_of_range_is_rejected(op, n):
    with pytest.raises(ValueError, match="n must be"):
        COLUMNS[op]("f", "x", None, {"field": "x", "n": n, "where": None}, None)


def test_dump_needs_storage_for_every_slot():
    col = engine_column("last_n", field="x", n=2)
    with pytest.raises(ValueError, match="cannot dump"):
        col.dump(10_000)


def bytes_per_slot(build, events_per_slot: int, slots: int = 20_000) -> float:
    """Traced heap bytes per slot of a column after feeding every slot (values pre-made)."""
    rows = [{"x": float(i)} for i in range(slots * events_per_slot)]
    tracemalloc.start()
    try:
        col = build(slots)
        for i, row in enumerate(rows):
            col.py_update(i % slots, row, True, T0 + i)
        return tracemalloc.get_traced_memory()[0] / slots
    finally:
        tracemalloc.stop()


def test_memory_per_entity():
    # first/last: one tag byte and one 8-byte payload; rings only for slots with values.
    assert bytes_per_slot(lambda n: engine_column("last", slots=n, field="x"), 2) <= 9.5
    assert bytes_per_slot(lambda n: engine_column("last_n", slots=n, field="x", n=1024), 0) <= 8.5
    assert bytes_per_slot(lambda n: engine_column("last_n", slots=n, field="x", n=1024), 2) <= 44
    assert bytes_per_slot(lambda n: engine_column("lag", slots=n, field="x", n=1), 2) <= 44


def test_snapshot_states_are_checked():
    first = engine_column("first", field="x")
    feed(first, ["a"], slot=0)
    feed(first, [3], slot=1)
    tags, payloads, objects = through_snapshot(first.dump(3))
    for state in (
        (tags, payloads, objects),  # a tuple is not snapshot data
        [tags, payloads],
        [tags[:-1], payloads, objects],
        [tags, payloads + b"\0", objects],
        [tags, payloads, []],  # the str of slot 0 is missing
        [tags, payloads, ["a", "b"]],
        [tags, payloads, [None]],
        [b"\x09" + tags[1:], payloads, []],  # unknown tag
    ):
        copy = engine_column("first", field="x")
        with pytest.raises(ValueError):
            copy.load(state, 3)
        assert [read(copy, s) for s in range(3)] == [None] * 3
    ring = engine_column("last_n", field="x", n=2)
    feed(ring, ["a", 1, "b"], slot=1)
    records, objects = through_snapshot(ring.dump(3))
    seen_at = 16  # after the record header
    for state in (
        [records[:-1], objects],
        [records, []],
        [records, objects + ["c"]],
        [records.replace(struct.pack("=q", 1), struct.pack("=q", 3), 1), objects],  # slot 3
        [records[:seen_at] + struct.pack("=q", 1) + records[seen_at + 8:], objects],  # seen < 2
        [records, "ab"],
    ):
        copy = engine_column("last_n", field="x", n=2)
        with pytest.raises(ValueError):
            copy.load(state, 3)
        assert [read(copy, s) for s in range(3)] == [[], [], []]
    small = engine_column("last_n", field="x", n=1)  # two values do not fit a ring of one
    with pytest.raises(ValueError):
        small.load([records, objects], 3)
    copy = engine_column("last_n", field="x", n=2)
    copy.load([records, objects], 3)
    assert read(copy, 1) == [1, "b"]
