"""Family G columns (spec/operators.md §16): buffers and distributions."""

from __future__ import annotations

import math
import random
import struct
import tracemalloc
from typing import Any

import pytest

from beava._fast.ops import ops_buffer
from tests.op_columns import block_records, engine_column, through_snapshot

COLUMNS = ops_buffer.COLUMNS
T0 = 1_700_000_000_000  # 2023-11-14 22:13:20 UTC, a Tuesday
HOUR = 3_600_000
INT32_MAX = 2**31 - 1


def feed(col, values, slot: int = 0, field: str = "x", matched: bool = True,
         now: int = T0) -> None:
    for v in values:
        col.py_update(slot, {field: v}, matched, now)


def read(col, slot: int = 0):
    return col.py_read(slot, T0)


def same(a: Any, b: Any) -> bool:
    """Equal values with equal types, element-wise for lists (1 is not 1.0 nor True)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def reservoir_reference(values: list, k: int) -> list:
    """operators.md §16.7 transcribed literally."""
    mask = (1 << 64) - 1
    out: list = []
    seen = 0
    for v in values:
        seen += 1
        if len(out) < k:
            out.append(v)
            continue
        s = seen ^ 0xA0B1C2D3E4F50617 ^ 0x9E3779B97F4A7C15
        if s == 0:
            s = 0xD2B74E4572D7C2B0
        s ^= (s << 13) & mask
        s ^= s >> 7
        s ^= (s << 17) & mask
        j = s % seen
        if j < k:
            out[j] = v
    return out


def test_columns_cover_family_g():
    assert set(COLUMNS) == {"histogram", "hour_of_day_histogram", "dow_hour_histogram",
                            "seasonal_deviation", "event_type_mix", "most_recent_n",
                            "reservoir_sample"}


# ---- histogram ------------------------------------------------------------------------

def test_histogram_vector_11():
    col = engine_column("histogram", field="a", buckets=[0.5, 10, 100])
    assert read(col) == {"0.5-10": 0, "10-100": 0, "<0.5": 0, ">=100": 0}
    feed(col, [0.25, 10, 3, 250], field="a")
    value = read(col)
    assert value == {"0.5-10": 1, "10-100": 1, "<0.5": 1, ">=100": 1}
    assert list(value) == ["0.5-10", "10-100", "<0.5", ">=100"]  # ascending keys


def test_conformance_buffer_histogram():
    # ops_buffer.json ops.buffer.histogram
    h_amt = engine_column("histogram", field="amt", buckets=[10, 100])
    h_n = engine_column("histogram", field="n", buckets=[2.5])
    h_where = engine_column("histogram", field="amt", buckets=[10, 100])  # where n > 2
    h_never = engine_column("histogram", field="amt", buckets=[10, 100])  # where n > 999
    for amt, n in [(5.0, 1), (10.0, 3), (99.99, 2), (100.0, 5), (250.5, 3), (0.0, 4)]:
        row = {"acct": "acc-1", "amt": amt, "n": n}
        for col, matched in ((h_amt, True), (h_n, True), (h_where, n > 2), (h_never, n > 999)):
            col.py_update(0, row, matched, T0)
    assert read(h_amt) == {"10-100": 2, "<10": 2, ">=100": 2}
    assert read(h_n) == {"<2.5": 2, ">=2.5": 4}
    assert read(h_never) == {"10-100": 0, "<10": 0, ">=100": 0}
    assert read(h_where) == {"10-100": 1, "<10": 1, ">=100": 2}


def test_histogram_labels():
    col = engine_column("histogram", field="x", buckets=[2.5e-7, -0.0, 1e21, math.inf])
    assert sorted(read(col)) == sorted(["<0.00000025", "0.00000025-0", "0-9223372036854775807",
                                        "9223372036854775807-inf", ">=inf"])
    assert read(engine_column("histogram", field="x")) == {"all": 0}
    assert read(engine_column("histogram", field="x", buckets=[-3, 1.5])) == {
        "-3-1.5": 0, "<-3": 0, ">=1.5": 0}


def test_histogram_only_counts_numbers():
    col = engine_column("histogram", field="x", buckets=[1])
    feed(col, [True, "0", None, 0, 0.5, 1, math.nan, -math.inf])
    col.py_update(0, {}, True, T0)
    assert read(col) == {"<1": 3, ">=1": 2}  # NaN lands in the last cell
    feed(col, [0, 5], matched=False)
    assert read(col) == {"<1": 3, ">=1": 2}
    noedges = engine_column("histogram", field="x")
    feed(noedges, [1, 2.5, "x"])
    assert read(noedges) == {"all": 2}


def test_histogram_unsorted_edges_use_first_edge_above():
    col = engine_column("histogram", field="x", buckets=[10, 5])
    feed(col, [7, 3, 12])
    assert read(col) == {"<10": 2, "10-5": 0, ">=5": 1}


@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.parametrize("n_edges", [40, 300])  # cells read on the stack / in a heap array
def test_histogram_cells_match_reference(ordered, n_edges):
    rng = random.Random(11)
    edges = sorted(rng.uniform(-100, 100) for _ in range(n_edges))
    if not ordered:
        rng.shuffle(edges)
    col = engine_column("histogram", field="x", buckets=edges)
    values = [rng.uniform(-120, 120) for _ in range(2_000)] + edges
    feed(col, values)
    counts = [0] * (len(edges) + 1)
    for v in values:
        counts[next((i for i, b in enumerate(edges) if v < b), len(edges))] += 1
    labels = (["<" + repr(edges[0])] + [f"{edges[i - 1]!r}-{edges[i]!r}"
                                        for i in range(1, len(edges))]
              + [">=" + repr(edges[-1])])
    got = read(col)
    assert all(got[label] == counts[cell] for cell, label in enumerate(labels))


# ---- hour / weekday histograms --------------------------------------------------------

def test_hour_of_day_vector_25():
    col = engine_column("hour_of_day_histogram")
    assert read(col) == [0] * 24
    col.py_update(0, {}, True, T0)
    assert read(col) == [0] * 22 + [1, 0]


def test_dow_hour_vector_26():
    col = engine_column("dow_hour_histogram")
    empty = read(col)
    assert len(empty) == 168 and set(empty.values()) == {0}
    assert list(empty)[:2] == ["Fri-00", "Fri-01"] and list(empty) == sorted(empty)
    col.py_update(0, {}, True, T0)
    value = read(col)
    assert value["Tue-22"] == 1 and sum(value.values()) == 1


def test_time_histograms_before_the_epoch_and_where():
    hod, dow = engine_column("hour_of_day_histogram"), engine_column("dow_hour_histogram")
    for col in (hod, dow):
        col.py_update(0, {}, True, -1)  # 1969-12-31 23:59:59.999 UTC, a Wednesday
        col.py_update(0, {}, False, T0)
    assert read(hod)[23] == 1 and sum(read(hod)) == 1
    assert read(dow)["Wed-23"] == 1 and sum(read(dow).values()) == 1


def test_time_histograms_count_every_cell():
    # Enough distinct cells to move past the sparse representation.
    hod, dow = engine_column("hour_of_day_histogram"), engine_column("dow_hour_histogram")
    monday = 1_699_833_600_000  # 2023-11-13 00:00 UTC
    for i in range(24 * 7 * 2 + 5):
        now = monday + (i % 168) * HOUR + 1_234
        hod.py_update(0, {}, True, now)
        dow.py_update(0, {}, True, now)
    assert read(hod) == [15] * 5 + [14] * 19
    d = read(dow)
    assert d["Mon-00"] == 3 and d["Mon-05"] == 2 and d["Sun-23"] == 2
    assert sum(d.values()) == 341


def test_conformance_buffer_time_histograms():
    # ops_buffer.json ops.buffer.time_histograms (v = 0..3, where v > 1), at a fixed time.
    cols = {"hod": engine_column("hour_of_day_histogram"),
            "dow": engine_column("dow_hour_histogram"),
            "hod_where": engine_column("hour_of_day_histogram"),
            "dow_where": engine_column("dow_hour_histogram")}
    for v in range(4):
        for name, col in cols.items():
            col.py_update(0, {"dev": "d1", "v": v}, not name.endswith("where") or v > 1, T0)
    assert sum(read(cols["hod"])) == 4 and sum(read(cols["hod_where"])) == 2
    assert sum(read(cols["dow"]).values()) == 4 and read(cols["dow_where"])["Tue-22"] == 2


def count_block(mode: int, ncells: int, cells: list[tuple[int, int]] | list[int],
                cap: int = 0) -> bytes:
    """A count block in the snapshot layout: int32 mode, used, cap, ncells, then cells."""
    if mode == 0:
        body = b"".join(struct.pack("=ii", c, n) for c, n in cells)
        body += b"\0" * 8 * (cap - len(cells))
        return struct.pack("=iiii", 0, len(cells), cap, ncells) + body
    return struct.pack("=iiii", mode, 0, 0, ncells) + struct.pack(f"={ncells}i", *cells)


def test_counts_widen_past_int32():
    hod = engine_column("hour_of_day_histogram")
    hod.load(block_records((0, count_block(0, 24, [(5, INT32_MAX - 1)], cap=2))), 1)
    for _ in range(2):
        hod.py_update(0, {}, True, 5 * HOUR)
    hod.py_update(0, {}, True, 6 * HOUR)
    assert read(hod)[5:7] == [2**31, 1]
    hist = engine_column("histogram", field="x", buckets=[1, 2])
    hist.load(block_records((0, count_block(1, 3, [INT32_MAX, 0, 7]))), 1)
    feed(hist, [0, 0, 5])
    assert read(hist) == {"1-2": 0, "<1": 2**31 + 1, ">=2": 8}


def test_histogram_snapshot_rejects_bad_blocks():
    hod = engine_column("hour_of_day_histogram")
    good = count_block(0, 24, [(3, 1)], cap=2)
    bad = [
        [(0, good)],  # not the bytes of block records
        block_records((0, count_block(0, 24, [(30, 1)], cap=2))),  # cell outside 24
        block_records((0, count_block(1, 3, [1, 2, 3]))),  # wrong cell count
        block_records((0, good[:-8])),  # size does not match cap
        block_records((1, good)),  # slot outside [0, 1)
        block_records((0, good))[:-1],  # truncated
        block_records((0, good)) + b"\0",  # trailing byte
    ]
    for state in bad:
        with pytest.raises(ValueError):
            hod.load(state, 1)
        assert read(hod) == [0] * 24  # nothing half-restored
    two = engine_column("hour_of_day_histogram", slots=2)
    with pytest.raises(ValueError, match="out of order"):
        two.load(block_records((1, good), (0, good)), 2)
    two.load(block_records((0, good), (1, good)), 2)
    assert read(two, 1)[3] == 1


# ---- seasonal_deviation ---------------------------------------------------------------

def test_conformance_seasonal_deviation():
    # ops_geo.json ops.seasonal: all pushes in one UTC hour.
    sd = engine_column("seasonal_deviation", field="kwh")
    sd_where = engine_column("seasonal_deviation", field="kwh")
    for i, kwh in enumerate([3.0, 4.5, 2.0, 8.0, 5.5]):
        for col, matched in ((sd, True), (sd_where, kwh > 2)):
            col.py_update(0, {"kwh": kwh}, matched, T0 + i)
    sd.py_update(1, {"kwh": 1.0}, True, T0)
    assert read(sd) == 0.38640491166698276
    assert read(sd_where) == 0.11895773785772161
    assert read(sd, 1) is None and read(sd_where, 1) is None and read(sd, 2) is None


def test_seasonal_deviation_uses_the_latest_values_hour():
    col = engine_column("seasonal_deviation", field="x")
    feed(col, [1, 3], now=T0)                # hour 22
    assert read(col) == 1.0 / math.sqrt(2.0)  # bucket (1, 3): mean 2, var 2
    feed(col, [10], now=T0 + HOUR)           # hour 23: a bucket of one value
    assert read(col) is None
    feed(col, [5], now=T0 + 24 * HOUR)       # hour 22 again: (1, 3, 5)
    assert read(col) == 1.0
    feed(col, ["7", True, None], now=T0)     # not numeric: ignored
    feed(col, [100], now=T0, matched=False)
    assert read(col) == 1.0


def test_seasonal_deviation_zero_variance_is_null():
    col = engine_column("seasonal_deviation", field="x")
    feed(col, [4.0, 4, 4.0])
    assert read(col) is None


def test_seasonal_deviation_every_hour():
    col = engine_column("seasonal_deviation", field="x")
    for day in range(3):
        for h in range(24):
            feed(col, [float(h + day)], now=h * HOUR + day * 24 * HOUR)
    # latest value: hour 23, bucket (23, 24, 25)
    assert read(col) == 1.0


# ---- event_type_mix -------------------------------------------------------------------

def test_conformance_buffer_event_type_mix():
    # ops_buffer.json ops.buffer.event_type_mix
    cols = {
        "mix": (engine_column("event_type_mix", field="kind"), lambda r: True),
        "mix_allow": (engine_column("event_type_mix", field="kind",
                                    categories=["view", "buy", "ghost"]), lambda r: True),
        "mix_cap": (engine_column("event_type_mix", field="kind", max_categories=2),
                    lambda r: True),
        "mix_int": (engine_column("event_type_mix", field="lvl"), lambda r: True),
        "mix_bool": (engine_column("event_type_mix", field="ok"), lambda r: True),
        "mix_where": (engine_column("event_type_mix", field="kind"), lambda r: r["lvl"] >= 2),
        "mix_never": (engine_column("event_type_mix", field="kind"), lambda r: r["lvl"] > 99),
    }
    events = [("view", 1, True), ("buy", 2, True), ("view", 1, False), ("cart", 3, True),
              ("view", 2, True), ("share", 1, False), ("buy", 2, True), ("view", 3, True)]
    for i, (kind, lvl, ok) in enumerate(events):
        row = {"sid": "sess-1", "kind": "".join(kind), "lvl": lvl, "ok": ok}
        for col, pred in cols.values():
            col.py_update(0, row, pred(row), T0 + i)
    assert {name: read(col) for name, (col, _) in cols.items()} == {
        "mix": {"buy": 0.25, "cart": 0.125, "share": 0.125, "view": 0.5},
        "mix_allow": {"buy": 0.25, "view": 0.5},
        "mix_bool": {"false": 0.25, "true": 0.75},
        "mix_cap": {"buy": 0.25, "view": 0.5},
        "mix_int": {"1": 0.375, "2": 0.375, "3": 0.25},
        "mix_never": {},
        "mix_where": {"buy": 0.4, "cart": 0.2, "view": 0.4},
    }
    assert list(read(cols["mix"][0])) == ["buy", "cart", "share", "view"]


def test_event_type_mix_vector_12():
    col = engine_column("event_type_mix", field="s", categories=["b", "zz"])
    feed(col, list("babcab"), field="s")
    assert read(col) == {"b": 0.5}


def test_event_type_mix_ignores_floats_and_nulls():
    # ops_core.json ops.core.typed_values: ints and floats pushed into an f64 field.
    col = engine_column("event_type_mix", field="val")
    feed(col, [1.0, 1, 2.5, 1.0, 2, 2.5, None], field="val")
    assert read(col) == {"1": 0.5, "2": 0.5}
    only_floats = engine_column("event_type_mix", field="val")
    feed(only_floats, [1.5, math.nan], field="val")
    assert read(only_floats) == {}


def test_event_type_mix_category_text_identity():
    col = engine_column("event_type_mix", field="x")
    feed(col, ["1", 1, -12, "-12", True, "true", "café", "caf" + "é", "日本", "".join("日本")])
    assert read(col) == {"-12": 0.2, "1": 0.2, "true": 0.2, "café": 0.2, "日本": 0.2}
    allow = engine_column("event_type_mix", field="x", categories=["7", "false", "日本"])
    feed(allow, [7, False, "".join(["日", "本"]), 8])
    assert read(allow) == {"7": 0.25, "false": 0.25, "日本": 0.25}


def test_event_type_mix_caps_and_empty_allowlist():
    none_admitted = engine_column("event_type_mix", field="x", max_categories=0)
    feed(none_admitted, ["a", "b"])
    assert read(none_admitted) == {}
    empty_allow = engine_column("event_type_mix", field="x", categories=[])
    feed(empty_allow, ["a"])
    assert read(empty_allow) == {}
    capped = engine_column("event_type_mix", field="x", max_categories=300)
    feed(capped, [f"c{i}" for i in range(400)] + ["c0"])
    value = read(capped)
    assert len(value) == 300 and value["c0"] == 2 / 401 and "c300" not in value


def test_event_type_mix_shares_category_strings_between_entities():
    col = engine_column("event_type_mix", field="x")
    feed(col, ["".join(["vi", "ew"])], slot=0)
    feed(col, ["".join(["v", "iew"])], slot=1)
    names, _records = col.dump(2)
    assert names == ["view"]  # one category string for the column
    copy = engine_column("event_type_mix", slots=2, field="x")
    copy.load(through_snapshot(col.dump(2)), 2)
    feed(copy, ["".join(["vie", "w"])], slot=0)
    assert read(copy) == {"view": 1.0} and copy.dump(2)[0] == ["view"]


def test_event_type_mix_clear_and_snapshot():
    col = engine_column("event_type_mix", field="x", categories=["a", "b"])
    feed(col, ["a", "c", "b", "a"], slot=0)
    feed(col, ["b"], slot=2)
    feed(col, ["a"], slot=3)
    col.py_clear(3)
    copy = engine_column("event_type_mix", slots=1, field="x", categories=["a", "b"])
    copy.load(through_snapshot(col.dump(4)), 4)
    assert [copy.py_read(s, 0) for s in range(4)] == [
        {"a": 0.5, "b": 0.25}, {}, {"b": 1.0}, {}]
    feed(copy, ["b", "z"], slot=0)
    assert read(copy) == {"a": 2 / 6, "b": 2 / 6}


# ---- most_recent_n / reservoir_sample -------------------------------------------------

def test_conformance_buffer_lists_buffer_ops():
    # ops_buffer.json ops.buffer.lists: recent, recent_where, sample.
    recent = engine_column("most_recent_n", field="item", n=3)
    recent_where = engine_column("most_recent_n", field="qty", n=2)  # where price > 5
    sample = engine_column("reservoir_sample", field="qty", samples=3)
    c1 = [("apple", 1, 2.5), ("pear", 4, 7.0), ("fig", 2, 3.25), ("kiwi", 6, 12.0),
          ("plum", 3, 1.0), ("lime", 5, 9.5), ("date", 7, 6.0)]
    c2 = [("solo", 2, 4.0), ("duo", 3, 8.0)]
    for slot, rows in ((0, c1), (1, c2)):
        for item, qty, price in rows:
            row = {"item": item, "qty": qty, "price": price}
            recent.py_update(slot, row, True, T0)
            sample.py_update(slot, row, True, T0)
            recent_where.py_update(slot, row, price > 5, T0)
    assert read(recent) == ["plum", "lime", "date"] and read(recent, 1) == ["solo", "duo"]
    assert same(read(recent_where), [5, 7]) and same(read(recent_where, 1), [3])
    assert same(read(sample), [1, 4, 3]) and same(read(sample, 1), [2, 3])


def test_most_recent_n_defaults_and_types():
    col = engine_column("most_recent_n", field="x")  # n defaults to 10
    assert read(col) == []
    values = [1, 2.0, "3", True, None, *range(4, 12)]
    feed(col, values)
    assert same(read(col), ["3", True, 4, 5, 6, 7, 8, 9, 10, 11])
    zero = engine_column("most_recent_n", field="x", n=0)
    feed(zero, [1, 2])
    assert read(zero) == []


def test_reservoir_vector_13():
    col = engine_column("reservoir_sample", field="x", samples=2)
    feed(col, [10, 20, 30, 40, 50])
    assert same(read(col), [30, 20])


def test_reservoir_matches_spec_algorithm_on_a_long_stream():
    values = [f"v{i}" if i % 3 else i * 0.5 for i in range(5_000)]
    for k in (1, 5, 64):
        col = engine_column("reservoir_sample", field="x", samples=k)
        feed(col, values)
        assert same(read(col), reservoir_reference(values, k))


def test_reservoir_size_param_and_skips():
    aliased = engine_column("reservoir_sample", field="x", k=2)
    default = engine_column("reservoir_sample", field="x")
    zero = engine_column("reservoir_sample", field="x", samples=0)
    values = list(range(1, 40))
    for col in (aliased, default, zero):
        for v in values:
            col.py_update(0, {"x": v}, True, T0)
            col.py_update(0, {"x": -v}, False, T0)  # unmatched: not seen
            col.py_update(0, {"x": None}, True, T0)  # null: not seen
    assert read(aliased) == reservoir_reference(values, 2)
    assert read(default) == reservoir_reference(values, 10)
    assert read(zero) == []


def test_value_buffers_clear_and_snapshot():
    for op, wire in (("most_recent_n", {"n": 3}), ("reservoir_sample", {"samples": 3})):
        col = engine_column(op, field="x", **wire)
        feed(col, [1, "b", 2.5, True, 5], slot=0)
        feed(col, [9], slot=2)
        feed(col, [7], slot=3)
        col.py_clear(3)
        copy = engine_column(op, slots=1, field="x", **wire)
        copy.load(through_snapshot(col.dump(4)), 4)
        for c in (col, copy):
            feed(c, list(range(20)), slot=0)
        for slot in range(4):
            assert same(copy.py_read(slot, 0), col.py_read(slot, 0))
        assert read(copy, 3) == []


def test_count_and_season_snapshot_roundtrip():
    cases = [("histogram", {"field": "x", "buckets": [1, 10]}), ("hour_of_day_histogram", {}),
             ("dow_hour_histogram", {}), ("seasonal_deviation", {"field": "x"})]
    for op, wire in cases:
        col = engine_column(op, **wire)
        for i in range(60):
            col.py_update(i % 3, {"x": i % 13}, True, T0 + i * 7 * HOUR)
        col.py_clear(1)
        copy = engine_column(op, slots=1, **wire)
        copy.load(through_snapshot(col.dump(4)), 4)
        for c in (col, copy):
            c.py_update(0, {"x": 2}, True, T0)
        assert [copy.py_read(s, 0) for s in range(4)] == [col.py_read(s, 0) for s in range(4)]
        assert copy.py_read(1, 0) == engine_column(op, **wire).py_read(1, 0)


@pytest.mark.parametrize("op", sorted(COLUMNS))
def test_lifetime_only(op):
    params = {"field": "x", "where": None, "n": 2, "samples": 2, "buckets": (),
              "max_categories": 256, "categories": None}
    with pytest.raises(ValueError, match="lifetime-only"):
        COLUMNS[op]("f", "x", None, params, 60_000)


def test_memory_per_entity():
    def per_slot(op: str, events: int, **wire: Any) -> float:
        rows = [{"x": float(i % 50), "s": "".join(["vi", "ew"])} for i in range(20_000 * events)]
        tracemalloc.start()
        try:
            col = engine_column(op, slots=20_000, **wire)
            for i, row in enumerate(rows):
                col.py_update(i % 20_000, row, True, T0 + i)
            return tracemalloc.get_traced_memory()[0] / 20_000
        finally:
            tracemalloc.stop()

    # A slot that never saw an event holds one NULL pointer.
    for op, wire in (("dow_hour_histogram", {}), ("histogram", {"field": "x", "buckets": [1]}),
                     ("seasonal_deviation", {"field": "x"}), ("most_recent_n", {"field": "x"}),
                     ("event_type_mix", {"field": "s"})):
        assert per_slot(op, 0, **wire) <= 8.5, op
    assert per_slot("dow_hour_histogram", 2) <= 40.5  # sparse (cell, count) pairs
    assert per_slot("hour_of_day_histogram", 2) <= 40.5
    assert per_slot("seasonal_deviation", 2, field="x") <= 64.5
    assert per_slot("event_type_mix", 2, field="s") <= 56.5  # the category string is shared
    assert per_slot("reservoir_sample", 2, field="x", samples=100) <= 44
