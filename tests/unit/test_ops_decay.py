"""Family E decay columns (spec/operators.md §14), driven with explicit `now` values.

Half-lives are chosen so that exp(-λ·dt) is exactly 0.5 (dt = one half-life) or 0.25
(two half-lives), which keeps the expectations hand-computable and exact.
"""

from __future__ import annotations

import math

import pytest

from beava._fast.ops.ops_decay import COLUMNS
from tests.op_columns import feed_events, through_snapshot

HL = 60_000  # half-life in ms used by most tests


def column(op: str, field: str | None = "x", params: dict | None = None, slots: int = 2,
           window_ms: int | None = None):
    col = COLUMNS[op](op, field, None, {"half_life": HL} if params is None else params,
                      window_ms)
    col.py_ensure(slots)
    return col


def test_columns_are_the_canonical_decay_ops():
    # `ema` is an alias the registry maps to `ewma` before the engine sees it.
    assert set(COLUMNS) == {"ewma", "ewvar", "ew_zscore", "decayed_sum", "decayed_count",
                            "twa"}


@pytest.mark.parametrize("op", ["ewma", "ewvar", "ew_zscore", "decayed_sum", "decayed_count"])
def test_half_life_is_required(op):
    with pytest.raises(ValueError, match="half_life"):
        COLUMNS[op](op, "x", None, {"half_life": None}, None)


@pytest.mark.parametrize("op", sorted(COLUMNS))
def test_empty_value_is_null(op):
    col = column(op, params={} if op == "twa" else None)
    assert col.py_read(0, 0) is None
    assert col.py_read(1, 10**13) is None


@pytest.mark.parametrize("op", sorted(COLUMNS))
def test_window_is_accepted_and_ignored(op):
    params = {} if op == "twa" else None
    windowed = column(op, params=params, window_ms=3_600_000)
    lifetime = column(op, params=params)
    assert windowed.window_ms is None
    events = [(0, 4.0), (60_000, 10.0), (60_000 + 10 * 3_600_000, 1.0)]
    feed_events(windowed, events)
    feed_events(lifetime, events)
    assert windowed.py_read(0, 0) == lifetime.py_read(0, 0)


@pytest.mark.parametrize("op", ["ewma", "ewvar", "ew_zscore", "decayed_sum", "twa"])
@pytest.mark.parametrize("bad", [None, "5", True, False, [1], ...])
def test_non_numeric_values_and_unmatched_events_change_nothing(op, bad):
    col = column(op, params={} if op == "twa" else None)
    feed_events(col, [(0, bad), (5, 3.0, False)])
    assert col.py_read(0, 5) is None
    feed_events(col, [(10, 2.0), (20, bad), (30, 9.0, False)])
    assert col.py_read(0, 30) == column_after(op, [(10, 2.0)])


def column_after(op: str, events) -> object:
    col = column(op, params={} if op == "twa" else None)
    feed_events(col, events)
    return col.py_read(0, 0)


# ---- ewma ------------------------------------------------------------------------------


def test_ewma_vector_18_one_half_life():
    col = column("ewma")
    feed_events(col, [(0, 0.0), (60_000, 100.0)])
    assert col.py_read(0, 60_000) == 50.0


def test_ewma_vector_19_same_millisecond_averages():
    col = column("ewma")
    feed_events(col, [(7, 10), (7, 250)])
    assert col.py_read(0, 7) == 130.0


def test_ewma_first_value_and_integer_input_read_as_float():
    col = column("ewma")
    feed_events(col, [(1_700_000_000_000, 42)])
    value = col.py_read(0, 0)
    assert value == 42.0 and type(value) is float


def test_ewma_two_half_lives_and_no_decay_at_read():
    col = column("ewma")
    feed_events(col, [(0, 0.0), (60_000, 100.0), (180_000, 10.0)])
    # alpha = 1 - 0.25 = 0.75: 0.75 * 10 + 0.25 * 50
    assert col.py_read(0, 180_000) == 20.0
    assert col.py_read(0, 10**12) == 20.0


def test_ewma_clock_step_back_averages_and_keeps_last_t():
    col = column("ewma")
    feed_events(col, [(0, 0.0), (60_000, 100.0), (30_000, 10.0)])
    assert col.py_read(0, 0) == 30.0  # 0.5 * 10 + 0.5 * 50
    # last_t stayed 60 000: one half-life to 120 000, so alpha = 0.5
    feed_events(col, [(120_000, 70.0)])
    assert col.py_read(0, 0) == 50.0


def test_ewma_slots_are_independent():
    col = column("ewma", slots=3)
    feed_events(col, [(0, 1.0)], slot=0)
    feed_events(col, [(0, 2.0)], slot=2)
    assert [col.py_read(s, 0) for s in range(3)] == [1.0, None, 2.0]


# ---- ewvar / ew_zscore --------------------------------------------------------------------


def test_ewvar_first_value_reads_zero_and_zscore_null():
    var, z = column("ewvar"), column("ew_zscore")
    for col in (var, z):
        feed_events(col, [(0, 42.5)])
    assert var.py_read(0, 0) == 0.0
    assert z.py_read(0, 0) is None


def test_ewvar_one_half_life():
    var, z = column("ewvar"), column("ew_zscore")
    for col in (var, z):
        feed_events(col, [(0, 0.0), (60_000, 10.0)])
    # alpha 0.5, delta 10, mean 5, m2 = 0.5 * 0 + 0.5 * 10 * (10 - 5)
    assert var.py_read(0, 0) == 25.0
    assert z.py_read(0, 0) == 1.0  # (10 - 5) / 5


def test_ewvar_dt_not_positive_keeps_moments_and_time_but_moves_last_x():
    var, z = column("ewvar"), column("ew_zscore")
    for col in (var, z):
        feed_events(col, [(0, 0.0), (60_000, 10.0), (60_000, 0.0), (30_000, 5.0)])
    assert var.py_read(0, 0) == 25.0  # alpha = 0: mean 5 and m2 25 unchanged
    assert z.py_read(0, 0) == 0.0  # last_x 5: (5 - 5) / 5
    for col in (var, z):
        feed_events(col, [(120_000, 15.0)])  # last_t still 60 000: alpha 0.5
    # delta 10, mean 10, m2 = 0.5 * 25 + 0.5 * 10 * (15 - 10) = 37.5
    assert var.py_read(0, 0) == 37.5
    assert z.py_read(0, 0) == 5.0 / math.sqrt(37.5)


def test_ew_zscore_null_while_variance_is_zero():
    z = column("ew_zscore")
    feed_events(z, [(0, 5.0), (60_000, 5.0), (120_000, 5)])
    assert z.py_read(0, 0) is None


def test_ew_zscore_sign_follows_last_value():
    z = column("ew_zscore")
    feed_events(z, [(0, 0.0), (60_000, 10.0), (120_000, 1.0)])
    # delta -4, mean 3, m2 = 0.5 * 25 + 0.5 * -4 * (1 - 3) = 16.5
    assert z.py_read(0, 0) == (1.0 - 3.0) / math.sqrt(16.5)


# ---- decayed_sum / decayed_count ------------------------------------------------------------


def test_decayed_sum_sequence_with_same_ms_and_step_back():
    col = column("decayed_sum")
    feed_events(col, [(0, 8)])
    assert col.py_read(0, 0) == 8.0
    feed_events(col, [(60_000, 2.0)])
    assert col.py_read(0, 0) == 6.0  # 8 * 0.5 + 2
    feed_events(col, [(60_000, 1.0)])
    assert col.py_read(0, 0) == 7.0  # dt = 0: no decay
    feed_events(col, [(0, 1.0)])
    assert col.py_read(0, 0) == 8.0  # step back: no decay, last_t stays 60 000
    feed_events(col, [(120_000, 4.0)])
    assert col.py_read(0, 10**12) == 8.0  # 8 * 0.5 + 4; nothing decays at read


def test_decayed_count_counts_matched_events_without_a_field():
    col = column("decayed_count", field=None)
    col.py_update(0, {}, True, 0)
    assert col.py_read(0, 0) == 1.0
    col.py_update(0, {"x": "ignored"}, True, 60_000)
    col.py_update(0, {}, False, 60_000)
    assert col.py_read(0, 0) == 1.5  # 1 * 0.5 + 1
    col.py_update(0, {}, True, 60_000)
    assert col.py_read(0, 0) == 2.5
    col.py_update(0, {}, True, 180_000)
    assert col.py_read(0, 0) == 2.5 * 0.25 + 1
    assert col.py_read(1, 0) is None


# ---- twa ---------------------------------------------------------------------------------


def test_twa_two_and_three_events():
    col = column("twa", params={}, slots=2)
    feed_events(col, [(0, 4.0), (25, 10.0)], slot=0)
    feed_events(col, [(0, 2.0), (10, 6.0), (30, 1000.0)], slot=1)
    assert col.py_read(0, 10**9) == 4.0
    assert col.py_read(1, 0) == (2.0 * 10 + 6.0 * 20) / 30


def test_twa_same_millisecond_reads_last_value():
    col = column("twa", params={})
    feed_events(col, [(5, 3.0), (5, 7)])
    value = col.py_read(0, 0)
    assert value == 7.0 and type(value) is float


def test_twa_clock_step_back_moves_last_t_back():
    col = column("twa", params={})
    feed_events(col, [(100, 1.0), (50, 5.0)])
    assert col.py_read(0, 0) == 5.0  # d = 0: nothing accumulated yet
    feed_events(col, [(150, 9.0), (200, 0.0)])
    # last_t went back to 50: 5 over 100 ms, then 9 over 50 ms
    assert col.py_read(0, 0) == (5.0 * 100 + 9.0 * 50) / 150


# ---- snapshots and slot management ---------------------------------------------------------


@pytest.mark.parametrize("op", sorted(COLUMNS))
def test_dump_load_round_trip(op):
    params = {} if op == "twa" else None
    events = [(0, 1.0), (30_000, 3.0), (90_000, -2.0)]
    col = column(op, params=params, slots=3)
    feed_events(col, events, slot=0)
    feed_events(col, events[:1], slot=2)
    state = through_snapshot(col.dump(3))
    restored = COLUMNS[op](op, "x", None, {} if op == "twa" else {"half_life": HL}, None)
    restored.load(state, 3)
    for slot in range(3):
        assert restored.py_read(slot, 0) == col.py_read(slot, 0)
    for c in (col, restored):
        feed_events(c, [(150_000, 7.0)], slot=2)
    assert restored.py_read(2, 0) == col.py_read(2, 0)
    with pytest.raises(ValueError):
        restored.load(state[:-1], 3)


def test_clear_and_growth_keep_other_slots():
    col = column("ewvar", slots=1)
    feed_events(col, [(0, 0.0), (60_000, 10.0)], slot=0)
    col.py_ensure(1000)
    assert col.py_read(0, 0) == 25.0
    assert col.py_read(999, 0) is None
    feed_events(col, [(0, 3.0)], slot=999)
    col.py_clear(0)
    assert col.py_read(0, 0) is None
    assert col.py_read(999, 0) == 0.0


# ---- conformance scenarios (tests/conformance/vectors/ops_decay.json), hand-translated -----------


def test_conformance_single_event():
    cols = {
        "ew": column("ewma", params={"half_life": 300_000}),
        "ewv": column("ewvar", params={"half_life": 300_000}),
        "ewz": column("ew_zscore", params={"half_life": 300_000}),
        "dsum": column("decayed_sum", params={"half_life": 300_000}),
        "dcnt": column("decayed_count", field=None, params={"half_life": 300_000}),
        "twa": column("twa", params={}, window_ms=3_600_000),
        "ew_never": column("ewma", params={"half_life": 300_000}),
        "dcnt_never": column("decayed_count", field=None, params={"half_life": 300_000}),
        "twa_never": column("twa", params={}),
    }
    row = {"m": "one", "x": 42.5}
    for name, col in cols.items():
        col.py_update(0, row, not name.endswith("_never"), 1_700_000_000_000)
    got = {name: col.py_read(0, 1_700_000_000_005) for name, col in cols.items()}
    assert got == {"ew": 42.5, "ewv": 0.0, "ewz": None, "dsum": 42.5, "dcnt": 1.0,
                   "twa": 42.5, "ew_never": None, "dcnt_never": None, "twa_never": None}


def test_conformance_long_half_life():
    hl = {"half_life": 1000 * 86_400_000}
    cols = {op: column(op, field=None if op == "decayed_count" else "x", params=hl)
            for op in ("ewma", "ewvar", "ew_zscore", "decayed_sum", "decayed_count")}
    cnt_where = column("decayed_count", field=None, params=hl)
    t0 = 1_700_000_000_000
    for i, x in enumerate([20.0, 25.0, 30.0, 45.0]):
        row = {"m": "a", "x": x}
        for col in cols.values():
            col.py_update(0, row, True, t0 + 25 * i)
        cnt_where.py_update(0, row, x > 20, t0 + 25 * i)
    assert cols["decayed_count"].py_read(0, 0) == pytest.approx(4.0, rel=1e-4)
    assert cnt_where.py_read(0, 0) == pytest.approx(3.0, rel=1e-4)
    assert cols["decayed_sum"].py_read(0, 0) == pytest.approx(120.0, rel=1e-4)
    assert cols["ewma"].py_read(0, 0) == pytest.approx(20.0, rel=1e-4)
    assert 0.0 <= cols["ewvar"].py_read(0, 0) <= 0.05
    assert cols["ew_zscore"].py_read(0, 0) >= 0.0


def test_conformance_short_half_life():
    hl = {"half_life": 1}
    cols = {op: column(op, field=None if op == "decayed_count" else "x", params=hl)
            for op in ("ewma", "ewvar", "decayed_sum", "decayed_count")}
    for i, x in enumerate([10.0, 500.0, 80.0]):
        for col in cols.values():
            col.py_update(0, {"m": "b", "x": x}, True, 40 * i)
    assert cols["decayed_count"].py_read(0, 0) == pytest.approx(1.0, rel=1e-5)
    assert cols["decayed_sum"].py_read(0, 0) == pytest.approx(80.0, rel=1e-5)
    assert cols["ewma"].py_read(0, 0) == pytest.approx(80.0, rel=1e-5)
    assert 0.0 <= cols["ewvar"].py_read(0, 0) <= 0.001


def test_conformance_twa_with_where():
    twa = column("twa", params={}, slots=2, window_ms=3_600_000)
    twa_where = column("twa", params={}, slots=2, window_ms=600_000)
    pushes = [(0, 0, 4.0), (0, 25, 10.0), (1, 25, 2.0), (1, 50, 6.0), (1, 75, 1000.0)]
    for slot, now, x in pushes:
        twa.py_update(slot, {"x": x}, True, now)
        twa_where.py_update(slot, {"x": x}, x < 100, now)
    assert (twa.py_read(0, 0), twa_where.py_read(0, 0)) == (4.0, 4.0)
    assert 2.0 <= twa.py_read(1, 0) <= 6.0
    assert twa_where.py_read(1, 0) == 2.0
