"""Family D columns (spec/operators.md §13): recency and streaks."""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest

from beava._fast.ops import ops_recency
from tests.op_columns import engine_column, through_snapshot

COLUMNS = ops_recency.COLUMNS
T0 = 1_700_000_000_000


def push(col, now: int, matched: bool = True, slot: int = 0) -> None:
    col.py_update(slot, {}, matched, now)


def test_columns_cover_family_d():
    assert set(COLUMNS) == {
        "first_seen", "last_seen", "age", "has_seen", "time_since", "time_since_last_n",
        "streak", "max_streak", "negative_streak", "first_seen_in_window",
    }


def test_empty_values():
    expected = {"first_seen": None, "last_seen": None, "age": None, "has_seen": False,
                "time_since": None, "time_since_last_n": None, "streak": 0, "max_streak": 0,
                "negative_streak": 0, "first_seen_in_window": False}
    for op, empty in expected.items():
        wire = {"n": 2} if op == "time_since_last_n" else {}
        if op == "first_seen_in_window":
            wire = {"window": "1h"}
        col = engine_column(op, **wire)
        value = col.py_read(1, T0)
        assert value == empty and type(value) is type(empty), op


def test_first_last_seen_age_time_since_at_explicit_T():
    cols = {op: engine_column(op) for op in ("first_seen", "last_seen", "age", "time_since")}
    for now in (T0, T0 + 40, T0 + 100):
        for col in cols.values():
            push(col, now)
    read = {op: col.py_read(0, T0 + 250) for op, col in cols.items()}
    assert read == {"first_seen": T0, "last_seen": T0 + 100, "age": 250, "time_since": 150}
    assert all(type(v) is int for v in read.values())


def test_elapsed_reads_clamp_at_zero():
    age, since = engine_column("age"), engine_column("time_since")
    for col in (age, since):
        push(col, T0 + 500)
        assert col.py_read(0, T0 + 500) == 0
        assert col.py_read(0, T0) == 0  # T before the event
        assert col.py_read(0, T0 + 501) == 1


def test_elapsed_does_not_overflow():
    age = engine_column("age")
    push(age, -(2**63) + 1)
    assert age.py_read(0, 2**63 - 1) == 2**64 - 2


def test_unmatched_events_do_not_count_for_times():
    ops = ("first_seen", "last_seen", "age", "time_since", "has_seen")
    cols = [engine_column(op) for op in ops]
    for col in cols:
        push(col, T0, matched=False)
        push(col, T0 + 10)
        push(col, T0 + 20, matched=False)
    assert [col.py_read(0, T0 + 30) for col in cols] == [T0 + 10, T0 + 10, 20, 20, True]


def test_clock_step_back_keeps_arrival_order():
    # now_ms is not monotonic (operators.md §4): first/last follow arrival order.
    first, last, age, since = (engine_column(op)
                               for op in ("first_seen", "last_seen", "age", "time_since"))
    for col in (first, last, age, since):
        push(col, T0 + 1_000)
        push(col, T0 + 400)  # wall clock stepped back
    assert first.py_read(0, T0 + 2_000) == T0 + 1_000
    assert last.py_read(0, T0 + 2_000) == T0 + 400
    assert age.py_read(0, T0 + 2_000) == 1_000
    assert since.py_read(0, T0 + 2_000) == 1_600
    assert since.py_read(0, T0 + 200) == 0


def test_has_seen():
    col = engine_column("has_seen")
    push(col, T0, matched=False)
    assert col.py_read(0, T0) is False
    push(col, T0 + 1)
    push(col, T0 + 2, matched=False)
    assert col.py_read(0, T0) is True


def test_time_since_last_n():
    col = engine_column("time_since_last_n", n=3)
    push(col, T0)
    push(col, T0 + 10)
    assert col.py_read(0, T0 + 100) is None
    push(col, T0 + 30, matched=False)
    assert col.py_read(0, T0 + 100) is None
    push(col, T0 + 20)
    assert col.py_read(0, T0 + 100) == 100  # oldest of (T0, T0+10, T0+20)
    push(col, T0 + 50)
    push(col, T0 + 60)
    assert col.py_read(0, T0 + 100) == 80  # oldest of (T0+20, T0+50, T0+60)
    assert col.py_read(0, T0) == 0
    push(col, T0 + 70)
    assert col.py_read(0, T0 + 100) == 50


def test_time_since_last_n_one_equals_time_since():
    tsn, ts = engine_column("time_since_last_n", n=1), engine_column("time_since")
    for now in (T0, T0 + 7, T0 + 3):
        for col in (tsn, ts):
            push(col, now)
        assert tsn.py_read(0, T0 + 9) == ts.py_read(0, T0 + 9)


def test_time_since_last_n_same_millisecond():
    col = engine_column("time_since_last_n", n=2)
    push(col, T0)
    push(col, T0)
    assert col.py_read(0, T0) == 0
    assert col.py_read(0, T0 + 5) == 5


def test_time_since_last_n_large_n_grows_lazily():
    col = engine_column("time_since_last_n", n=1024)
    for i in range(1500):
        push(col, T0 + i)
    assert col.py_read(0, T0 + 2_000) == 2_000 - (1500 - 1024)


def test_streaks_vector_14_and_16():
    # operators.md §19: where=ok over ok = false, true, true => streak 2, max 2, negative 0;
    # one event with ok = false => negative_streak 1.
    st, mx, neg = (engine_column(op) for op in ("streak", "max_streak", "negative_streak"))
    for i, ok in enumerate([False, True, True]):
        for col in (st, mx, neg):
            push(col, T0 + i, matched=ok)
    assert (st.py_read(0, T0), mx.py_read(0, T0), neg.py_read(0, T0)) == (2, 2, 0)
    push(neg, T0, matched=False, slot=1)
    assert neg.py_read(1, T0) == 1


def test_conformance_recency_streaks():
    # ops_recency.json ops.recency.streaks
    features = {
        "st": ("streak", lambda r: r["ok"] is True),
        "mx": ("max_streak", lambda r: r["ok"] is True),
        "neg": ("negative_streak", lambda r: r["ok"] is True),
        "st_all": ("streak", lambda r: True),
        "mx_fail": ("max_streak", lambda r: r["ok"] is False),
        "neg_never": ("negative_streak", lambda r: r["code"] > 99),
    }
    cols = {name: (engine_column(op), pred) for name, (op, pred) in features.items()}
    p1 = [True, True, False, True, True, True, False, False]
    events = [(0, {"ok": ok, "code": i}) for i, ok in enumerate(p1)]
    events += [(1, {"ok": True, "code": i}) for i in range(3)]
    for i, (slot, row) in enumerate(events):
        for col, pred in cols.values():
            col.py_update(slot, row, pred(row), T0 + i)
    rows = [{name: col.py_read(slot, T0) for name, (col, _) in cols.items()} for slot in (0, 1)]
    assert rows[0] == {"mx": 3, "mx_fail": 2, "neg": 2, "neg_never": 8, "st": 0, "st_all": 8}
    assert rows[1] == {"mx": 3, "mx_fail": 0, "neg": 0, "neg_never": 3, "st": 3, "st_all": 3}


def test_first_seen_in_window_tests_latest_match():
    col = engine_column("first_seen_in_window", window="1s")
    push(col, T0)
    push(col, T0 + 5_000, matched=False)
    assert col.py_read(0, T0) is True
    assert col.py_read(0, T0 + 999) is True
    assert col.py_read(0, T0 + 1_000) is False
    assert col.py_read(0, T0 - 1) is False  # T before the match
    push(col, T0 + 2_000)
    assert col.py_read(0, T0 + 2_500) is True


def test_first_seen_in_window_forever_is_always_false():
    # operators.md §19 vector 21
    col = engine_column("first_seen_in_window", window="forever")
    push(col, T0)
    assert col.py_read(0, T0) is False
    assert col.py_read(0, T0 + 1) is False


def test_conformance_recency_seen_at_explicit_times():
    # ops_recency.json ops.recency.seen, with explicit push times and a read 5 ms later.
    features = {
        "fs": ("first_seen", {}, None), "ls": ("last_seen", {}, None), "age": ("age", {}, None),
        "hs": ("has_seen", {}, 5), "hs_never": ("has_seen", {}, 99),
        "ts": ("time_since", {}, None), "ts_never": ("time_since", {}, 99),
        "tsn2": ("time_since_last_n", {"n": 2}, None),
        "tsn9": ("time_since_last_n", {"n": 9}, None),
        "fsiw": ("first_seen_in_window", {"window": "1h"}, None),
        "fsiw_never": ("first_seen_in_window", {"window": "1h"}, 99),
        "fs_where": ("first_seen", {}, 5), "ls_never": ("last_seen", {}, 99),
    }
    cols = {name: (engine_column(op, **wire), above)
            for name, (op, wire, above) in features.items()}
    events = [(0, 3), (0, 7), (0, 1), (1, 1)]  # (slot, risk)
    for i, (slot, risk) in enumerate(events):
        for col, above in cols.values():
            col.py_update(slot, {"risk": risk}, above is None or risk > above, T0 + i)
    T = T0 + 3 + 5
    dev1 = {name: col.py_read(0, T) for name, (col, _) in cols.items()}
    assert dev1 == {"age": 8, "fs": T0, "fs_where": T0 + 1, "fsiw": True, "fsiw_never": False,
                    "hs": True, "hs_never": False, "ls": T0 + 2, "ls_never": None, "ts": 6,
                    "ts_never": None, "tsn2": 7, "tsn9": None}
    dev2 = {name: col.py_read(1, T) for name, (col, _) in cols.items()}
    assert dev2 == {"age": 5, "fs": T0 + 3, "fs_where": None, "fsiw": True,
                    "fsiw_never": False, "hs": False, "hs_never": False, "ls": T0 + 3,
                    "ls_never": None, "ts": 5, "ts_never": None, "tsn2": None, "tsn9": None}


def test_clear_and_snapshot_roundtrip():
    wires = {"time_since_last_n": {"n": 2}, "first_seen_in_window": {"window": "1m"}}
    for op in COLUMNS:
        wire = wires.get(op, {})
        col = engine_column(op, **wire)
        pattern = [(0, T0, True), (0, T0 + 5, False), (0, T0 + 9, True), (2, T0 + 3, True),
                   (3, T0 + 1, True)]
        for slot, now, matched in pattern:
            push(col, now, matched, slot)
        col.py_clear(3)
        copy = engine_column(op, slots=1, **wire)
        copy.load(through_snapshot(col.dump(4)), 4)
        T = T0 + 20
        assert [copy.py_read(s, T) for s in range(4)] == [col.py_read(s, T) for s in range(4)]
        assert copy.py_read(3, T) == engine_column(op, **wire).py_read(3, T), op
        for c in (col, copy):
            push(c, T0 + 30, True, 0)
            push(c, T0 + 31, False, 1)
        assert [copy.py_read(s, T) for s in range(4)] == [col.py_read(s, T) for s in range(4)]


def test_growth_keeps_state():
    col = engine_column("max_streak", slots=2)
    push(col, T0)
    push(col, T0 + 1)
    col.py_ensure(50_000)
    assert col.py_read(0, T0) == 2 and col.py_read(49_999, T0) == 0


@pytest.mark.parametrize("op", sorted(COLUMNS))
def test_lifetime_only(op):
    params = {"where": None, "n": 2, "window": 1000}
    with pytest.raises(ValueError, match="lifetime-only"):
        COLUMNS[op]("f", None, None, params, 60_000)


@pytest.mark.parametrize("n", [0, 1025, None])
def test_time_since_last_n_bounds(n):
    with pytest.raises(ValueError, match="n must be"):
        COLUMNS["time_since_last_n"]("f", None, None, {"n": n, "where": None}, None)


def test_dump_needs_storage_for_every_slot():
    with pytest.raises(ValueError, match="cannot dump"):
        engine_column("streak").dump(10_000)


def test_memory_per_entity():
    def per_slot(op: str, **wire: Any) -> float:
        tracemalloc.start()
        try:
            col = engine_column(op, slots=20_000, **wire)
            for i in range(40_000):
                push(col, T0 + i, slot=i % 20_000)
            return tracemalloc.get_traced_memory()[0] / 20_000
        finally:
            tracemalloc.stop()

    for op in ("first_seen", "last_seen", "age", "time_since", "streak", "negative_streak"):
        assert per_slot(op) <= 8.5, op
    assert per_slot("first_seen_in_window", window="1h") <= 8.5
    assert per_slot("max_streak") <= 16.5
    assert per_slot("has_seen") <= 1.5
    assert per_slot("time_since_last_n", n=1024) <= 40.5  # pointer + 16-byte header + 2 times
