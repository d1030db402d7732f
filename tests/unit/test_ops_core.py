"""Family A columns (spec/operators.md §5, §10): count, sum, mean, min, max, var, std, ratio.

Expected values are computed by hand from the spec's update/read rules; windowed tests use
W = 64 000 ms, so buckets are b = 1 000 ms wide and a bucket with epoch e is active for
reads at T with 0 <= T - e < 64 000.
"""

from __future__ import annotations

import gc
import math
import struct
import time

import pytest

from beava._fast.ops.ops_core import COLUMNS, share_windows
from tests.op_columns import through_snapshot

W = 64_000
OPS = ("count", "sum", "mean", "min", "max", "var", "std", "ratio")
SIX = [2.0, 1, 2, 5.5, -1.25, 2.0]  # operators.md §19 vectors 3 and 9


def make(op, window=None, field="x", slots=4, name="f"):
    col = COLUMNS[op](name, None if op in ("count", "ratio") else field, None, {}, window)
    col.py_ensure(slots)
    return col


def feed(col, values, slot=0, now=1_000, matched=True, field="x"):
    for v in values:
        col.py_update(slot, {field: v}, matched, now)


def test_columns_export_family_a():
    assert set(COLUMNS) == set(OPS)


# --- lifetime -------------------------------------------------------------------------------


@pytest.mark.parametrize("op,expected", [
    ("count", 6), ("sum", 11.25), ("mean", 1.875), ("min", -1.25), ("max", 5.5),
    ("var", 4.74375), ("std", 2.1780151514624504), ("ratio", 1.0),
])
def test_lifetime_values(op, expected):
    col = make(op)
    feed(col, SIX)
    value = col.py_read(0, 1_000)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize("op,empty", [
    ("count", 0), ("sum", None), ("mean", None), ("min", None), ("max", None),
    ("var", None), ("std", None), ("ratio", None),
])
def test_lifetime_empty_value_and_other_slots_untouched(op, empty):
    col = make(op)
    feed(col, SIX, slot=1)
    assert col.py_read(0, 1_000) == empty
    assert col.py_read(2, 1_000) == empty


def test_sum_of_ints_reads_as_float():
    col = make("sum")
    feed(col, [3, 4])
    assert col.py_read(0, 0) == 7.0 and type(col.py_read(0, 0)) is float


@pytest.mark.parametrize("op", ["sum", "mean", "var", "std"])
def test_numeric_ops_skip_null_absent_str_bool(op):
    col = make(op)
    feed(col, [None, "5", True, False, [1]])
    col.py_update(0, {}, True, 1_000)
    assert col.py_read(0, 0) is None
    feed(col, [4, "9", None, 6.0, True])
    expected = {"sum": 10.0, "mean": 5.0, "var": 2.0, "std": math.sqrt(2.0)}[op]
    assert col.py_read(0, 0) == expected


def test_var_needs_two_values():
    col = make("var")
    feed(col, [7.5])
    assert col.py_read(0, 0) is None
    feed(col, [9.5])
    assert col.py_read(0, 0) == 2.0


def test_unmatched_events_change_nothing_but_ratio_total():
    for op in ("count", "sum", "mean", "min", "max", "var", "std"):
        col = make(op)
        feed(col, [1, 2, 3], matched=False)
        assert col.py_read(0, 0) == (0 if op == "count" else None), op
    ratio = make("ratio")
    feed(ratio, [None, None], matched=False)
    feed(ratio, [None], matched=True)
    assert ratio.py_read(0, 0) == pytest.approx(1 / 3) and ratio.py_read(0, 0) == 1 / 3
    never = make("ratio")
    feed(never, [None], matched=False)
    assert never.py_read(0, 0) == 0.0


def test_ratio_vector_14():
    col = make("ratio")
    for ok in (False, True, True):
        col.py_update(0, {"ok": ok}, ok, 5)
    assert col.py_read(0, 5) == 0.6666666666666666


def test_min_max_inherit_type_vector_9():
    lo, hi = make("min"), make("max")
    for col in (lo, hi):
        feed(col, [2.0, 1])
    assert lo.py_read(0, 0) == 1 and type(lo.py_read(0, 0)) is int
    assert hi.py_read(0, 0) == 2.0 and type(hi.py_read(0, 0)) is float


def test_min_max_int_float_numeric_and_ties_keep_stored():
    lo, hi = make("min"), make("max")
    feed(lo, [2, 1.5, 4.0, 3])
    feed(hi, [2, 1.5, 4.0, 3])
    assert (lo.py_read(0, 0), hi.py_read(0, 0)) == (1.5, 4.0)
    tie_lo, tie_hi = make("min"), make("max")
    feed(tie_lo, [1, 1.0])
    feed(tie_hi, [1.0, 1])
    assert type(tie_lo.py_read(0, 0)) is int and type(tie_hi.py_read(0, 0)) is float


def test_min_max_large_ints_compare_exactly():
    hi = make("max")
    feed(hi, [2**62, 2**62 + 1])
    assert hi.py_read(0, 0) == 2**62 + 1
    beyond = make("max")
    feed(beyond, [5, 2**70, 7])
    assert beyond.py_read(0, 0) == 2**70


def test_min_max_strings_and_incomparable_kinds():
    lo, hi = make("min"), make("max")
    feed(lo, ["beta", "alpha", "gamma", 1, None])
    feed(hi, ["beta", "alpha", "gamma", 1, None])
    assert (lo.py_read(0, 0), hi.py_read(0, 0)) == ("alpha", "gamma")
    first_wins = make("min")
    feed(first_wins, [5, "a", True])
    assert first_wins.py_read(0, 0) == 5
    bools = make("max")
    feed(bools, [False, True])
    assert bools.py_read(0, 0) is False
    text_then_number = make("min")
    feed(text_then_number, ["z", -100])
    assert text_then_number.py_read(0, 0) == "z"


def test_min_max_nan_never_replaces_and_is_never_replaced():
    col = make("min")
    feed(col, [2.0, float("nan"), 1])
    assert col.py_read(0, 0) == 1
    stuck = make("max")
    feed(stuck, [float("nan"), 10.0, 3])
    assert math.isnan(stuck.py_read(0, 0))


def test_clear_restores_empty_state():
    for op in OPS:
        col = make(op)
        feed(col, ["s", 3, 4.5] if op in ("min", "max") else [3, 4.5])
        col.py_clear(0)
        assert col.py_read(0, 0) == (0 if op == "count" else None), op
        feed(col, [8])
        assert col.py_read(0, 0) == {"count": 1, "sum": 8.0, "mean": 8.0, "min": 8, "max": 8,
                                     "var": None, "std": None, "ratio": 1.0}[op]


def test_growth_keeps_state():
    col = make("mean", slots=1)
    feed(col, [1, 2], slot=0)
    col.py_ensure(1000)
    feed(col, [10], slot=999)
    assert (col.py_read(0, 0), col.py_read(999, 0), col.py_read(500, 0)) == (1.5, 10.0, None)


@pytest.mark.parametrize("op", OPS)
def test_lifetime_dump_load_round_trip(op):
    col = make(op)
    feed(col, ["b", 4, "a"] if op in ("min", "max") else SIX, slot=1)
    feed(col, [7], slot=3)
    state = through_snapshot(col.dump(4))
    fresh = make(op, slots=1)
    fresh.load(state, 4)
    assert [fresh.py_read(s, 0) for s in range(4)] == [col.py_read(s, 0) for s in range(4)]


# --- windowed -------------------------------------------------------------------------------


def test_windowed_values_match_lifetime_when_all_active():
    got = {}
    for op in OPS:
        col = make(op, window=W)
        for i, x in enumerate(SIX):
            col.py_update(0, {"x": x}, True, 10_000 + 700 * i)  # epochs 10 000..13 000
        got[op] = col.py_read(0, 14_000)
    assert got == {
        "count": 6, "sum": 11.25, "mean": 1.875, "min": -1.25, "max": 5.5,
        # Chan merge of buckets {2.0, 1}, {2}, {5.5, -1.25}, {2.0}: exact value 4.74375
        "var": pytest.approx(4.74375, rel=1e-12), "std": pytest.approx(2.1780151514624504),
        "ratio": 1.0,
    }


def test_windowed_chan_merge_exact_bits():
    col = make("var", window=W)
    for now, x in [(1_000, 1.0), (1_500, 3.0), (2_000, 10.0)]:
        col.py_update(0, {"x": x}, True, now)
    # acc = {1, 3}: n=2 mean=2 m2=2; bucket {10}: delta=8, mean=2+8*1/3, m2=2+0+64*2*1/3
    assert col.py_read(0, 2_000) == (2.0 + 0.0 + 8.0 * 8.0 * 2 * 1 / 3) / 2


def test_windowed_buckets_expire():
    count, total, lo = make("count", window=W), make("sum", window=W), make("min", window=W)
    events = [(10_500, 5), (10_900, 3), (11_200, 7), (70_000, 9)]
    for col in (count, total, lo):
        for now, x in events:
            col.py_update(0, {"x": x}, True, now)
    # T=11 500: epochs 10 000 and 11 000 active, 70 000 is in the future
    assert (count.py_read(0, 11_500), total.py_read(0, 11_500), lo.py_read(0, 11_500)) == (
        3, 15.0, 3)
    # T=73 999: T - 10 000 = 63 999 < W, all active
    assert count.py_read(0, 73_999) == 4
    # T=74 000: epoch 10 000 is exactly W old -> inactive
    assert (count.py_read(0, 74_000), total.py_read(0, 74_000), lo.py_read(0, 74_000)) == (
        2, 16.0, 7)
    assert (count.py_read(0, 75_000), total.py_read(0, 75_000), lo.py_read(0, 75_000)) == (
        1, 9.0, 9)
    # T=134 000: nothing active
    assert (count.py_read(0, 134_000), total.py_read(0, 134_000), lo.py_read(0, 134_000)) == (
        0, None, None)


def test_count_window_vector_20():
    col = make("count", window=1_000)  # 1 s window: b = 16 ms
    for now in (0, 5, 10):
        col.py_update(0, {}, True, 1_700_000_000_000 + now)
    assert col.py_read(0, 1_700_000_000_010) == 3
    assert col.py_read(0, 1_700_000_001_610) == 0


@pytest.mark.parametrize("op,empty", [
    ("count", 0), ("sum", None), ("mean", None), ("min", None), ("max", None),
    ("var", None), ("std", None), ("ratio", None),
])
def test_windowed_empty_value(op, empty):
    col = make(op, window=W)
    assert col.py_read(0, 5_000) == empty
    assert col.py_read(100, 5_000) == empty  # slot beyond storage


def test_windowed_unmatched_event_creates_bucket():
    ratio, total = make("ratio", window=W), make("sum", window=W)
    for col in (ratio, total):
        col.py_update(0, {"x": 4}, False, 1_000)
        col.py_update(0, {"x": 6}, True, 2_000)
        col.py_update(0, {"x": 8}, False, 3_000)
    assert ratio.bucket_arena.bucket_count(0) == 3
    assert ratio.py_read(0, 3_000) == 1 / 3
    # T=65 000: only the bucket of 2 000 (matched) and 3 000 (unmatched) are active
    assert ratio.py_read(0, 65_000) == 0.5
    # sum only sums buckets with n > 0; the only active bucket at 66 000 never matched
    assert total.py_read(0, 65_000) == 6.0
    assert total.py_read(0, 66_000) is None


def test_windowed_mean_and_ratio_null_without_matches():
    mean, ratio = make("mean", window=W), make("ratio", window=W)
    mean.py_update(0, {"x": "text"}, True, 1_000)
    ratio.py_update(0, {}, False, 1_000)
    assert mean.py_read(0, 1_000) is None
    assert ratio.py_read(0, 1_000) == 0.0
    assert ratio.py_read(0, 200_000) is None


def test_windowed_min_max_fold_ties_keep_earlier_bucket():
    lo, hi = make("min", window=W), make("max", window=W)
    for col in (lo, hi):
        col.py_update(0, {"x": 1}, True, 1_000)
        col.py_update(0, {"x": 1.0}, True, 2_000)
        col.py_update(0, {"x": "zz"}, True, 3_000)
    assert type(lo.py_read(0, 3_000)) is int and type(hi.py_read(0, 3_000)) is int
    # once the int's bucket expires, the float of the next bucket remains
    assert type(lo.py_read(0, 65_000)) is float
    assert hi.py_read(0, 66_000) == "zz"


def test_windowed_strings_across_buckets():
    lo = make("min", window=W)
    for now, s in [(1_000, "m"), (2_000, "c"), (3_000, "x")]:
        lo.py_update(0, {"x": s}, True, now)
    assert lo.py_read(0, 3_000) == "c"
    assert lo.py_read(0, 66_000) == "x"


def test_stale_buckets_are_dropped_when_a_new_bucket_is_created():
    col = make("count", window=W)
    for now in (10_500, 10_900, 11_200, 70_000):
        col.py_update(0, {}, True, now)
    assert col.bucket_arena.bucket_count(0) == 3
    col.py_update(0, {}, True, 80_000)  # 10 000 and 11 000 are now >= W old
    assert col.bucket_arena.bucket_count(0) == 2
    assert col.py_read(0, 80_000) == 2


def test_64_bucket_cap_evicts_smallest_epoch():
    col = make("count", window=W)
    # descending times (a wall clock stepping back): nothing is ever stale
    for k in range(64, -1, -1):
        if k != 10:
            col.py_update(0, {}, True, 200_000 + 1_000 * k)
    arena = col.bucket_arena
    assert arena.bucket_count(0) == 64 and arena.bucket_reclaims == 0
    assert col.py_read(0, 209_999) == 10  # epochs 200 000..209 000
    col.py_update(0, {}, True, 210_500)  # the 65th bucket: epoch 200 000 goes
    assert arena.bucket_count(0) == 64 and arena.bucket_reclaims == 1
    assert col.py_read(0, 209_999) == 9  # 201 000..209 000
    assert col.py_read(0, 210_500) == 10  # 201 000..210 000


def test_65th_bucket_with_smallest_epoch_is_itself_evicted():
    col = make("count", window=W)
    for k in range(64):
        col.py_update(0, {}, True, 100_000 + 1_000 * (63 - k))
    col.py_update(0, {}, True, 99_500)
    arena = col.bucket_arena
    assert arena.bucket_count(0) == 64 and arena.bucket_reclaims == 1
    assert col.py_read(0, 100_000) == 1  # only epoch 100 000; the 99 000 event was dropped


def test_events_evicted_at_once_never_reach_reads():
    lo = make("min", window=W)
    for k in range(64):
        lo.py_update(0, {"x": f"s{63 - k:02d}"}, True, 100_000 + 1_000 * (63 - k))
    lo.py_update(0, {"x": "a"}, True, 99_500)
    lo.py_update(0, {"x": "b"}, True, 98_500)
    assert lo.bucket_arena.bucket_reclaims == 2
    assert lo.py_read(0, 163_000) == "s00"


def test_negative_now_uses_floor_epochs():
    col = make("count", window=W)
    col.py_update(0, {}, True, -1)  # epoch -1 000
    assert col.py_read(0, 62_999) == 1
    assert col.py_read(0, 63_000) == 0
    assert col.py_read(0, -1_001) == 0


def test_longest_window_does_not_overflow_bucket_width():
    col = make("count", window=2**63 - 1)
    col.py_update(0, {}, True, 1_700_000_000_000)
    assert col.py_read(0, 1_700_000_000_000) == 1
    assert col.py_read(0, 2**62) == 1


def test_windowed_clear_and_same_millisecond_after_clear():
    col = make("sum", window=W)
    feed(col, [1, 2], now=5_000)
    col.py_clear(0)
    assert col.py_read(0, 5_000) is None and col.bucket_arena.bucket_count(0) == 0
    feed(col, [4], now=5_000)
    assert col.py_read(0, 5_000) == 4.0


def test_windowed_sparse_storage():
    col = make("count", window=W, slots=1000)
    arena = col.bucket_arena
    for slot in range(1000):
        col.py_update(slot, {}, True, 1_000)
        col.py_update(slot, {}, True, 1_200)
    assert all(arena.bucket_count(s) == 1 for s in range(1000))
    # 8-byte slot header + one 16-byte record (epoch + count) per slot, plus pool slack
    assert arena.nbytes() < 1000 * (8 + 16) * 1.6


@pytest.mark.parametrize("op", OPS)
def test_windowed_dump_load_round_trip(op):
    col = make(op, window=W)
    for now, x in [(1_000, "q"), (2_000, 5), (3_000, "b"), (64_500, 2.5)]:
        col.py_update(2, {"x": x}, True, now)
    state = through_snapshot(col.dump(4))
    fresh = make(op, window=W, slots=1)
    fresh.load(state, 4)
    for T in (3_000, 65_000, 66_000, 67_000):
        assert fresh.py_read(2, T) == col.py_read(2, T)
    assert fresh.bucket_arena.bucket_count(2) == 4


# --- shared arenas --------------------------------------------------------------------------


def test_share_windows_groups_by_window_and_keeps_state():
    a, b = make("count", window=W), make("sum", window=W)
    c, life = make("max", window=2 * W), make("count")
    for col in (a, b, c, life):
        col.py_update(1, {"x": 3}, True, 1_000)
        col.py_update(1, {"x": "s"}, True, 2_000)
    arenas = share_windows([a, b, c, life])
    assert [x.window for x in arenas] == [W, 2 * W]
    assert a.bucket_arena is b.bucket_arena is arenas[0]
    assert c.bucket_arena is arenas[1] and life.bucket_arena is None
    assert arenas[0].members == (a, b) and arenas[0].bucket_count(1) == 2
    # max keeps 3: a str is not comparable with a number
    assert (a.py_read(1, 2_000), b.py_read(1, 2_000), c.py_read(1, 2_000)) == (2, 3.0, 3)
    assert share_windows([a, b, c]) == arenas  # already shared: same arenas



def _share_seconds(n, slots):
    """Best-of-three time of share_windows over n fresh columns spread over 4 windows."""
    best = math.inf
    for _ in range(3):
        cols = [COLUMNS[OPS[i % 8]](f"f{i}", "x", None, {}, (i % 4 + 1) * W) for i in range(n)]
        for col in cols:
            col.py_ensure(slots)
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            arenas = share_windows(cols)
            best = min(best, time.perf_counter() - start)
        finally:
            gc.enable()
        assert len(arenas) == 4 and sum(len(a.members) for a in arenas) == n
    return best


@pytest.mark.parametrize("slots", [0, 4])
def test_share_windows_is_linear_in_the_number_of_columns(slots):
    # A table with thousands of windowed features over a few windows: every fresh column
    # brings its own arena. Grouping them must not compare every column with every arena
    # (16x the columns would take 256x the time), with or without slot storage to carry
    # over. The bound (128x) sits well below 256x: timings on a busy machine vary, and
    # allocation makes even the linear code cost 30-40x here.
    small = _share_seconds(1_000, slots)
    large = _share_seconds(16_000, slots)
    assert large < 128 * small + 0.01, (small, large)


def test_shared_arena_update_order_and_member_clear():
    a, b = make("count", window=W), make("mean", window=W)
    (arena,) = share_windows([a, b])
    arena.py_ensure(8)
    for now, x in [(1_000, 2), (1_000, 4), (5_000, 9)]:
        a.py_update(3, {"x": x}, True, now)
        b.py_update(3, {"x": x}, now != 5_000, now)
    assert (a.py_read(3, 5_000), b.py_read(3, 5_000)) == (3, 3.0)
    assert arena.bucket_count(3) == 2
    b.py_clear(3)  # only b's cells: a keeps its counts, the buckets stay
    assert (a.py_read(3, 5_000), b.py_read(3, 5_000)) == (3, None)
    arena.py_clear(3)
    assert (a.py_read(3, 5_000), arena.bucket_count(3)) == (0, 0)


def test_arena_dump_maps_members_by_name():
    a, b = make("count", window=W, name="a"), make("min", window=W, name="b")
    (arena,) = share_windows([a, b])
    a.py_update(0, {}, True, 1_000)
    b.py_update(0, {"x": "k"}, True, 1_000)
    state = arena.dump(4)
    assert state["members"] == [["a", "count"], ["b", "min"]] and state["window_ms"] == W
    renamed = COLUMNS["min"]("b", "x", None, {}, W)
    renamed.py_ensure(4)
    renamed.load(state, 4)
    assert renamed.py_read(0, 1_000) == "k"
    other = COLUMNS["min"]("other", "x", None, {}, W)
    other.py_ensure(4)
    other.load(state, 4)  # no member named "other": buckets come back, cells stay empty
    assert other.py_read(0, 1_000) is None and other.bucket_arena.bucket_count(0) == 1


def test_lifetime_snapshot_rejects_bad_states():
    col = make("max")
    feed(col, ["b", 4, "a"], slot=1)
    good = through_snapshot(col.dump(4))
    cell = struct.Struct("=qq")  # tag, value / object handle
    cells = good["cells"]
    handle_9 = cells[:16] + cell.pack(3, 9) + cells[32:]
    bad_tag = cells[:16] + cell.pack(7, 0) + cells[32:]
    for state in (
        [good["cells"], good["objs"]],  # not a map
        {**good, "cells": cells[:-1]},  # not 4 cells
        {**good, "cells": list(cells)},  # not bytes
        {**good, "objs": "ab"},  # not a list
        {**good, "cells": handle_9},  # object handle outside objs
        {**good, "objs": [None] * len(good["objs"])},  # handle of a released object
        {**good, "cells": bad_tag},  # unknown tag
    ):
        fresh = make("max")
        with pytest.raises(ValueError):
            fresh.load(state, 4)
        assert [fresh.py_read(s, 0) for s in range(4)] == [None] * 4
    fresh = make("max")
    fresh.load(good, 4)
    assert fresh.py_read(1, 0) == "b"


def test_arena_snapshot_rejects_bad_states():
    a, b = make("count", window=W, name="a"), make("max", window=W, name="b")
    (arena,) = share_windows([a, b])
    for now, x in [(1_000, "k"), (2_000, 3), (2_500, "z")]:
        a.py_update(1, {}, True, now)
        b.py_update(1, {"x": x}, True, now)
    good = through_snapshot(arena.dump(4))
    records = good["records"]  # [epoch | count | max tag | max value] per bucket
    swapped = records[24:48] + records[:24]  # epochs out of order
    for state in (
        {**good, "window_ms": 2 * W},
        {**good, "members": [["a", "count"]]},  # another set of members
        {**good, "members": [["a", "count"], ["b", "min"]]},
        {**good, "members": [["a", "count"], ["b", "max"], ["b", "max"]]},
        {**good, "members": [["a", "nope"], ["b", "max"]]},
        {**good, "counts": good["counts"][:3]},  # not 4 slots
        {**good, "counts": b"\0\x41\0\0"},  # 65 buckets
        {**good, "records": records[:-1]},
        {**good, "records": records + bytes(32)},
        {**good, "records": swapped},
        {**good, "objs": []},  # the str maxima have no value
        {**good, "counts": "x"},
    ):
        fresh = make("count", window=W, name="a")
        other = make("max", window=W, name="b")
        (target,) = share_windows([fresh, other])
        with pytest.raises(ValueError):
            target.load(state, 4)
        assert target.bucket_count(1) == 0
    fresh, other = make("count", window=W, name="a"), make("max", window=W, name="b")
    (target,) = share_windows([other, fresh])  # member order does not matter
    target.load(good, 4)
    assert (fresh.py_read(1, 2_500), other.py_read(1, 2_500)) == (3, "k")
    assert (a.py_read(1, 2_500), b.py_read(1, 2_500)) == (3, "k")
