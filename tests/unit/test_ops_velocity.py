"""Family F velocity and anomaly columns (spec/operators.md §15), driven with explicit `now`."""

from __future__ import annotations

import math

import pytest

from beava._fast.ops.ops_velocity import COLUMNS
from tests.op_columns import feed_events, through_snapshot

FIELDLESS = {"inter_arrival_stats", "burst_count"}
EMPTY = {"rate_of_change": None, "inter_arrival_stats": None, "burst_count": 0,
         "delta_from_prev": None, "trend": None, "trend_residual": None, "outlier_count": 0,
         "value_change_count": 0, "z_score": None}


def column(op: str, field: str | None = "x", params: dict | None = None, slots: int = 2,
           window_ms: int | None = None):
    if params is None:
        params = {"sub_window": 1000} if op == "burst_count" else {}
    col = COLUMNS[op](op, None if op in FIELDLESS else field, None, params, window_ms)
    col.py_ensure(slots)
    return col


def values(col, slots) -> list:
    return [col.py_read(slot, 0) for slot in slots]


def test_columns_are_the_velocity_ops():
    assert set(COLUMNS) == set(EMPTY)


@pytest.mark.parametrize("op", sorted(EMPTY))
def test_empty_value(op):
    col = column(op)
    assert col.py_read(1, 10**13) == EMPTY[op]
    assert type(col.py_read(0, 0)) is type(EMPTY[op])


@pytest.mark.parametrize("op", sorted(EMPTY))
def test_unmatched_events_change_nothing(op):
    col = column(op)
    feed_events(col, [(t, float(t * t), False) for t in range(10)])
    assert col.py_read(0, 100) == EMPTY[op]


@pytest.mark.parametrize("op", sorted(EMPTY))
def test_window_is_accepted_and_ignored(op):
    windowed, lifetime = column(op, window_ms=60_000), column(op)
    assert windowed.window_ms is None
    events = [(0, 1.0), (10, 5.0), (10_000_000, 2.0), (10_000_001, 2.5), (10_000_002, 9.0)]
    feed_events(windowed, events)
    feed_events(lifetime, events)
    assert windowed.py_read(0, 10**9) == lifetime.py_read(0, 10**9)


@pytest.mark.parametrize("op", sorted(set(EMPTY) - FIELDLESS - {"value_change_count"}))
@pytest.mark.parametrize("bad", [None, "5", True, ..., [1.0]])
def test_numeric_ops_skip_non_numeric_values(op, bad):
    good = [(0, 1.0), (10, 4.0), (30, 5.0), (40, 2), (50, 3.0), (60, 100.0)]
    col, ref = column(op), column(op)
    feed_events(col, [e for now, x in good for e in ((now, x), (now + 5, bad))])
    feed_events(ref, good)
    assert col.py_read(0, 0) == ref.py_read(0, 0)
    assert col.py_read(0, 0) != EMPTY[op]


# ---- rate_of_change ---------------------------------------------------------------------------


def test_rate_of_change_per_millisecond_with_dt_not_positive():
    col = column("rate_of_change")
    feed_events(col, [(0, 10)])
    assert col.py_read(0, 0) is None
    feed_events(col, [(30, 20)])
    assert col.py_read(0, 0) == 10 / 30
    feed_events(col, [(30, 50.0)])  # same ms: rate kept, point replaced
    assert col.py_read(0, 0) == 10 / 30
    feed_events(col, [(60, 80.0)])
    assert col.py_read(0, 0) == 1.0  # (80 - 50) / 30
    feed_events(col, [(20, 0.0)])  # clock stepped back: rate kept, point replaced
    assert col.py_read(0, 0) == 1.0
    feed_events(col, [(30, 5.0)])
    assert col.py_read(0, 0) == 0.5  # (5 - 0) / (30 - 20)


def test_rate_of_change_same_millisecond_only_stays_null():
    col = column("rate_of_change")
    feed_events(col, [(5, 1.0), (5, 2.0), (3, 9.0)])
    assert col.py_read(0, 0) is None


# ---- inter_arrival_stats ---------------------------------------------------------------------


def test_inter_arrival_mean_gap():
    col = column("inter_arrival_stats")
    feed_events(col, [(0, ...)])
    assert col.py_read(0, 0) is None
    feed_events(col, [(30, ...), (90, ...)])
    assert col.py_read(0, 0) == 45.0


def test_inter_arrival_clamps_negative_gaps_and_skips_unmatched():
    col = column("inter_arrival_stats")
    feed_events(col, [(0, ...), (100, ...), (40, ...)])  # gaps 100 and max(-60, 0)
    assert col.py_read(0, 0) == 50.0
    feed_events(col, [(70, ..., False), (100, ...)])  # gap from 40, not from 70
    assert col.py_read(0, 0) == 50.0 + (60.0 - 50.0) / 3


# ---- burst_count -----------------------------------------------------------------------------


def test_burst_count_requires_sub_window():
    with pytest.raises(ValueError, match="sub_window"):
        COLUMNS["burst_count"]("b", None, None, {"sub_window": None}, None)


def test_burst_count_max_events_in_one_sub_window():
    col = column("burst_count")
    feed_events(col, [(0, ...), (500, ...), (999, ...)])
    assert col.py_read(0, 0) == 3
    feed_events(col, [(1000, ...), (1500, ...), (2999, ...), (3000, ..., False)])
    assert col.py_read(0, 0) == 3
    feed_events(col, [(2000, ...), (2001, ...), (2500, ...)])
    assert col.py_read(0, 0) == 4  # sub-window [2000, 3000) holds 4


def test_burst_count_clock_step_back_resumes_a_kept_slot():
    col = column("burst_count")
    feed_events(col, [(0, ...), (1, ...), (2, ...), (1000, ...), (5, ...)])
    assert col.py_read(0, 0) == 4  # ring slot 0 still holds sub-window 0 with 3
    feed_events(col, [(64_000, ...)])  # sub-window 64 takes ring slot 0
    feed_events(col, [(10, ...)])  # so sub-window 0 restarts at 1
    assert col.py_read(0, 0) == 4
    feed_events(col, [(1001, ...), (1002, ...), (1003, ...)])  # ring slot 1 kept sub-window 1
    assert col.py_read(0, 0) == 4
    feed_events(col, [(1004, ...)])
    assert col.py_read(0, 0) == 5


def test_burst_count_full_ring():
    col = column("burst_count")
    feed_events(col, [(q * 1000, ...) for q in range(64)])
    assert col.py_read(0, 0) == 1
    feed_events(col, [(0, ...)])  # every residue is held once: sub-window 0 is still there
    assert col.py_read(0, 0) == 2
    feed_events(col, [(64_000, ...), (64_001, ...), (1, ...)])  # 64 evicted 0 again
    assert col.py_read(0, 0) == 2
    feed_events(col, [(63_000, ...), (63_500, ...)])
    assert col.py_read(0, 0) == 3


def test_burst_count_floors_negative_times():
    col = column("burst_count")
    feed_events(col, [(-1, ...), (-1000, ...), (-1001, ...), (0, ...)])
    assert col.py_read(0, 0) == 2  # -1 and -1000 share [-1000, 0)


def test_burst_count_snapshot_keeps_spilled_slots():
    col = column("burst_count", slots=3)
    feed_events(col, [(q * 1000, ...) for q in range(40)] + [(0, ...)], slot=0)
    feed_events(col, [(7, ...), (8, ...)], slot=2)
    state = through_snapshot(col.dump(3))
    restored = COLUMNS["burst_count"]("b", None, None, {"sub_window": 1000}, None)
    restored.load(state, 3)
    assert values(restored, range(3)) == values(col, range(3)) == [2, 0, 2]
    for c in (col, restored):
        feed_events(c, [(5000, ...), (39_000, ...), (39_001, ...)], slot=0)
    assert restored.py_read(0, 0) == col.py_read(0, 0) == 3
    structs, records = state
    with pytest.raises(ValueError):
        restored.load([structs, records[:-8]], 3)
    assert values(restored, range(3)) == [0, 0, 0]  # a failed load leaves empty slots


# ---- delta_from_prev -------------------------------------------------------------------------


def test_delta_from_prev_vector_8():
    col = column("delta_from_prev")
    feed_events(col, [(0, 2.0)])
    assert col.py_read(0, 0) is None
    feed_events(col, [(1, 1), (2, 2), (3, 5.5), (4, -1.25), (5, 2.0)])
    assert col.py_read(0, 0) == 3.25


def test_delta_from_prev_of_integers_is_float_and_ignores_time():
    col = column("delta_from_prev")
    feed_events(col, [(9, 1), (9, 4), (3, 7)])
    value = col.py_read(0, 0)
    assert value == 3.0 and type(value) is float


def test_delta_from_prev_nan_values():
    col = column("delta_from_prev")
    feed_events(col, [(0, math.nan), (1, 5.0)])
    assert col.py_read(0, 0) is None  # 5 - NaN: NaN, which reads null
    feed_events(col, [(2, 7.0)])
    assert col.py_read(0, 0) == 2.0
    feed_events(col, [(3, math.nan), (4, 8.0)])
    assert col.py_read(0, 0) is None
    feed_events(col, [(5, 8.5)])
    assert col.py_read(0, 0) == 0.5


# ---- trend / trend_residual --------------------------------------------------------------------


def trend_pair(events):
    trend, residual = column("trend"), column("trend_residual")
    feed_events(trend, events)
    feed_events(residual, events)
    return trend.py_read(0, 0), residual.py_read(0, 0)


def test_trend_vector_23_and_24():
    t = 1_700_000_000_000
    assert trend_pair([(t, 1), (t + 2, 3)]) == (1.0, 0.0)
    assert trend_pair([(t, 1), (t, 3)]) == (None, None)
    assert trend_pair([(t, 5.0)]) == (None, None)


def test_trend_relative_axis_is_exact_at_epoch_scale():
    t = 1_700_000_000_000
    assert trend_pair([(t, 1.0), (t + 2, 3.0), (t + 4, 5.0)]) == (1.0, 0.0)
    assert trend_pair([(t, 7.5), (t + 20, 7.5), (t + 40, 7.5)]) == (0.0, 0.0)


def test_trend_rising_fit_and_residual():
    # x = 0, 20, 40; y = 1, 2, 4: mean_x 20, mean_y 7/3, M2x 800, Cxy 60 => slope 0.075;
    # residual of (40, 4): 4 - (7/3 + 0.075 * 20) = 1/6
    slope, residual = trend_pair([(100, 1.0), (120, 2.0), (140, 4.0)])
    assert slope == pytest.approx(0.075, rel=1e-15)
    assert residual == pytest.approx(1 / 6, rel=1e-12)


def test_trend_counts_every_point_of_a_millisecond():
    # x = 0, 0, 10; y = 1, 3, 5: M2x = 600/9, Cxy = 20 => slope 0.3; residual of (10, 5):
    # 5 - (3 + 0.3 * 20/3) = 0
    slope, residual = trend_pair([(50, 1.0), (50, 3.0), (60, 5)])
    assert slope == pytest.approx(0.3, rel=1e-15)
    assert residual == pytest.approx(0.0, abs=1e-12)


def test_trend_clock_step_back_gives_negative_x():
    slope, residual = trend_pair([(100, 1.0), (90, 3.0)])
    assert slope == pytest.approx(-0.2, rel=1e-15)
    assert residual == pytest.approx(0.0, abs=1e-12)


# ---- outlier_count -----------------------------------------------------------------------------


def test_outlier_count_needs_five_prior_values_and_positive_variance():
    col = column("outlier_count", params={"sigma": 1})
    feed_events(col, [(0, 0.0), (1, 1000.0), (2, -1000.0), (3, 0.0), (4, 5e6)])
    assert col.py_read(0, 0) == 0  # fewer than 5 values before each of these
    flat = column("outlier_count", params={"sigma": 1})
    feed_events(flat, [(t, 2.0) for t in range(5)] + [(5, 100.0)])
    assert flat.py_read(0, 0) == 0  # variance 0 before the jump


def test_outlier_count_compares_before_the_update():
    # 1..5: mean 3, sample variance 2.5 (std 1.5811...)
    col = column("outlier_count", params={"sigma": 1.0})
    feed_events(col, [(t, float(t + 1)) for t in range(5)] + [(5, 4.5)])
    assert col.py_read(0, 0) == 0  # |4.5 - 3| = 1.5 <= 1.58
    col = column("outlier_count", params={"sigma": 1.0})
    feed_events(col, [(t, t + 1) for t in range(5)] + [(5, 4.6)])
    assert col.py_read(0, 0) == 1  # |4.6 - 3| = 1.6 > 1.58


def test_outlier_count_default_sigma_is_three():
    col = column("outlier_count", params={"sigma": None})
    feed_events(col, [(t, float(t + 1)) for t in range(5)] + [(5, 7.7), (6, -100.0)])
    # 7.7: |4.7| <= 3 * 1.5811 = 4.74; -100 is far out
    assert col.py_read(0, 0) == 1


# ---- value_change_count ------------------------------------------------------------------------


def changes(vals, matched=None) -> int:
    col = column("value_change_count", field="v")
    for i, v in enumerate(vals):
        col.py_update(0, {} if v is ... else {"v": v}, True if matched is None else matched[i], i)
    return col.py_read(0, 0)


def test_value_change_count_vector_6():
    assert changes([2.0, 1, 2, 5.5, -1.25, 2.0]) == 5


def test_value_change_count_typed_equality():
    assert changes([1, 1.0, 1, True, 1]) == 4  # I64, F64 and Bool differ
    assert changes([True, True, False, False]) == 1
    assert changes([0.0, -0.0, 0]) == 1  # IEEE: 0.0 == -0.0
    assert changes([math.nan, math.nan]) == 1  # NaN is never equal
    assert changes([2**70, 2**70, 2**70 + 1, 5]) == 2
    assert changes(["1", 1, "1"]) == 2


def test_value_change_count_ignores_null_absent_and_unmatched():
    assert changes([None, "a", None, ..., "a", "b"]) == 1
    assert changes(["a", "b", "a", "a"], matched=[True, False, True, True]) == 0


def test_value_change_count_strings_short_long_and_wide():
    long_a = "device-" + "a" * 30
    long_b = "device-" + "a" * 29 + "b"
    assert changes(["x" * 16, "x" * 16, "x" * 17, "x" * 17, "x" * 16]) == 2
    assert changes([long_a, long_a, long_b, long_a, 3, long_a]) == 4
    assert changes(["café", "café", "caf€", "caf€", "caf\U0001f600", "caf\U0001f600"]) == 2
    assert changes(["é" * 20, "é" * 20, "€" * 10]) == 1
    assert changes(["", "", "a", ""]) == 2


def test_value_change_count_conformance_values():
    tags, nums = column("value_change_count", field="tag"), column("value_change_count", "n")
    for i, (n, tag) in enumerate(zip([1, 1, 2, 2, 3, 3, 1, 4], "aabbaacc", strict=True)):
        for col in (tags, nums):
            col.py_update(0, {"n": n, "tag": tag}, True, i)
    assert (tags.py_read(0, 0), nums.py_read(0, 0)) == (3, 4)


def test_value_change_count_snapshot_with_long_strings():
    col = column("value_change_count", field="v", slots=4)
    for slot, vals in enumerate([["s" * 40, "t" * 40], ["short"], [], [1.5, "u" * 33, 2]]):
        for i, v in enumerate(vals):
            col.py_update(slot, {"v": v}, True, i)
    state = through_snapshot(col.dump(4))
    restored = COLUMNS["value_change_count"]("v", "v", None, {}, None)
    restored.load(state, 4)
    assert values(restored, range(4)) == values(col, range(4)) == [1, 0, 0, 2]
    for c in (col, restored):
        c.py_update(0, {"v": "t" * 40}, True, 9)  # same long text: no change
        c.py_update(1, {"v": "short"}, True, 9)
        c.py_update(3, {"v": 2}, True, 9)
    assert values(restored, range(4)) == values(col, range(4)) == [1, 0, 0, 2]
    structs, records = state
    with pytest.raises(ValueError):
        restored.load([structs, records[:-1]], 4)


def test_value_change_count_clear_frees_long_text():
    col = column("value_change_count", field="v")
    feed_v = [{"v": "w" * 50}, {"v": "z" * 50}]
    for i, row in enumerate(feed_v):
        col.py_update(0, row, True, i)
    col.py_clear(0)
    assert col.py_read(0, 0) == 0
    assert col.dump(2)[1] == b""  # no side block left
    col.py_update(0, {"v": "z" * 50}, True, 5)
    assert col.py_read(0, 0) == 0


# ---- z_score -----------------------------------------------------------------------------------


def test_z_score_vector_8():
    col = column("z_score")
    feed_events(col, [(i, v) for i, v in enumerate([2.0, 1, 2, 5.5, -1.25, 2.0])])
    assert col.py_read(0, 0) == 0.057391703595848484


def test_z_score_null_cases():
    col = column("z_score", slots=3)
    feed_events(col, [(0, 4.0)], slot=0)
    feed_events(col, [(0, 4.0), (1, 4)], slot=1)
    feed_events(col, [(0, 1.0), (1, 3.0)], slot=2)
    # one value; zero variance; two values: (3 - 2) / sqrt(2)
    assert values(col, range(3)) == [None, None, 1.0 / math.sqrt(2.0)]


# ---- conformance scenarios (tests/conformance/vectors/ops_velocity.json), hand-translated --------


def test_conformance_timing():
    cols = {"roc": column("rate_of_change", window_ms=3_600_000),
            "iat": column("inter_arrival_stats", window_ms=3_600_000),
            "burst": column("burst_count", params={"sub_window": 3_600_000}),
            "burst_where": column("burst_count", params={"sub_window": 3_600_000}),
            "roc_where": column("rate_of_change")}
    where = {"burst_where": lambda x: x > 15, "roc_where": lambda x: x > 1000}
    t0 = 1_700_000_000_000  # not on an hour boundary, as the reference run required
    pushes = [(0, 0, 10.0), (0, 30, 20.0), (0, 60, 50.0), (0, 90, 130.0), (1, 90, 1.0)]
    for slot, dt, x in pushes:
        for name, col in cols.items():
            col.py_update(slot, {"car": "c", "x": x}, where.get(name, bool)(x), t0 + dt)
    assert {n: c.py_read(0, 0) for n, c in cols.items()} == {
        "burst": 4, "burst_where": 3, "iat": 30.0, "roc": 80 / 30, "roc_where": None}
    assert {n: c.py_read(1, 0) for n, c in cols.items()} == {
        "burst": 1, "burst_where": 0, "iat": None, "roc": None, "roc_where": None}


def test_conformance_values():
    cols = {"dlt": column("delta_from_prev"), "dlt_i": column("delta_from_prev", field="n"),
            "out1": column("outlier_count", params={"sigma": 1.0}, window_ms=3_600_000),
            "out_def": column("outlier_count", params={"sigma": 3.0}),
            "vcc_s": column("value_change_count", field="tag"),
            "vcc_n": column("value_change_count", field="n"),
            "z": column("z_score"), "z_where": column("z_score")}
    xs = [10.0, 11.0, 9.5, 10.5, 10.0, 30.0, 10.25, -5.0]
    ns = [1, 1, 2, 2, 3, 3, 1, 4]
    for i, (x, n, tag) in enumerate(zip(xs, ns, "aabbaacc", strict=True)):
        row = {"sym": "S", "x": x, "n": n, "tag": tag}
        for name, col in cols.items():
            col.py_update(0, row, n > 1 if name == "z_where" else True, 1000 + i)
    assert {n: c.py_read(0, 0) for n, c in cols.items()} == {
        "dlt": -15.25, "dlt_i": 3.0, "out1": 2, "out_def": 1, "vcc_n": 4, "vcc_s": 3,
        "z": -1.6745845537278912, "z_where": -1.2846330334459204}


def test_conformance_trend():
    t0 = 1_700_000_000_000
    assert trend_pair([(t0, 5.0)]) == (None, None)
    slope, residual = trend_pair([(t0, 7.5), (t0 + 20, 7.5), (t0 + 40, 7.5)])
    assert slope == pytest.approx(0.0, abs=1e-9) and residual == pytest.approx(0.0, abs=1e-9)
    slope, residual = trend_pair([(t0, 1.0), (t0 + 20, 2.0), (t0 + 40, 4.0)])
    assert 0.0001 <= slope <= 1.0 and type(residual) is float


# ---- snapshots and slot management ------------------------------------------------------------


@pytest.mark.parametrize("op", sorted(EMPTY))
def test_dump_load_round_trip(op):
    events = [(0, 1.0), (10, 3.0), (20, -2.0), (25, 8.0), (40, 0.5), (70, 9.5), (80, 1.0)]
    col = column(op, slots=3)
    feed_events(col, events, slot=0)
    feed_events(col, events[:2], slot=2)
    restored = column(op, slots=0)
    restored.load(through_snapshot(col.dump(3)), 3)
    assert values(restored, range(3)) == values(col, range(3))
    for c in (col, restored):
        feed_events(c, [(100, 50.0), (2000, 2.0)], slot=2)
    assert restored.py_read(2, 0) == col.py_read(2, 0)


@pytest.mark.parametrize("op", sorted(EMPTY))
def test_clear_and_growth(op):
    events = [(0, 1.0), (1500, 3.0), (1600, -2.0), (1700, 8.0), (4000, 0.5), (9000, 9.5)]
    col, ref = column(op, slots=1), column(op, slots=1)
    feed_events(col, events)
    feed_events(ref, events)
    col.py_ensure(500)
    assert col.py_read(0, 0) == ref.py_read(0, 0)
    assert col.py_read(499, 0) == EMPTY[op]
    feed_events(col, events, slot=499)
    col.py_clear(0)
    assert col.py_read(0, 0) == EMPTY[op]
    assert col.py_read(499, 0) == ref.py_read(0, 0)
