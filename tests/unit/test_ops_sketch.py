"""Family B state columns (spec/operators.md §11, §5, §18): n_unique, quantile, top_k,
bloom_member, entropy, plus the UDDSketch they use."""

from __future__ import annotations

import bisect
import json
import math
import random
import struct

import datasketches as ds
import pytest
from hypothesis import given
from hypothesis import strategies as st

from beava._fast.ops.ops_bloom_member import bloom_geometry, murmur3_128
from beava._fast.ops.uddsketch import UDDSketch
from beava.engine.state.columns import COLUMNS
from beava.engine.state.columns import family_counters as counters
from tests.op_columns import through_snapshot
from tests.support import CONFORMANCE_VECTORS

T0 = 1_700_000_000_000
HOUR = 3_600_000
VECTOR_X = [2.0, 1, 2, 5.5, -1.25, 2.0]  # operators.md §19 vectors 2-8


def make(op: str, field: str | None = "x", window: int | None = None, slots: int = 4,
         **params):
    column = COLUMNS[op](f"f_{op}", field, None, params, window)
    column.py_ensure(slots)
    return column


def push(column, values, *, slot: int = 0, now: int = T0, step: int = 0, matched=True,
         field: str = "x") -> int:
    """Push one event per value (``now`` advancing by ``step``); returns the last now."""
    for value in values:
        row = {} if value is _ABSENT else {field: value}
        column.py_update(slot, row, matched, now)
        now += step
    return now - step


_ABSENT = object()


def scenario(file: str, name: str) -> dict:
    data = json.loads((CONFORMANCE_VECTORS / file).read_text())
    return next(s for s in data["scenarios"] if s["name"] == name)


def test_each_sketch_op_has_its_own_module():
    ops = ("n_unique", "quantile", "top_k", "bloom_member", "entropy")
    assert {op: COLUMNS[op].__module__ for op in ops} == {
        op: f"beava._fast.ops.ops_{op}" for op in ops}


def test_counters_are_exposed_by_metric_name():
    assert {"beava_entropy_categories_capped_total", "beava_lifetime_op_cap_hit_total",
            "beava_bucket_reclaim_total"} <= set(counters())


# ---------------------------------------------------------------------------------------
# n_unique
# ---------------------------------------------------------------------------------------

def test_n_unique_spec_vector_and_empty_value():
    col = make("n_unique")
    assert col.py_read(0, T0) == 0
    push(col, VECTOR_X)
    assert col.py_read(0, T0) == 5          # 2 and 2.0 are distinct
    assert col.py_read(1, T0) == 0


def test_n_unique_typed_identity():
    col = make("n_unique")
    push(col, [1, 1.0, "1", True, 1, True, False, 0.0, -0.0, math.nan, float("nan"),
               -math.nan, math.inf, "", ""])
    # 1, 1.0, "1", True, False, 0.0, -0.0, nan, inf, ""
    assert col.py_read(0, T0) == 10


def test_n_unique_skips_null_absent_unmatched_and_non_scalars():
    col = make("n_unique")
    push(col, [None, _ABSENT, [1], {"a": 1}])
    push(col, ["a", "b"], matched=False)
    assert col.py_read(0, T0) == 0
    assert col.slot_bytes(0) == 8             # lifetime state is only created by a value
    no_field = make("n_unique", field=None)
    push(no_field, ["a"])
    assert no_field.py_read(0, T0) == 0


def test_n_unique_conformance_ops_core_lifetime():
    merchant, qty = make("n_unique", "merchant"), make("n_unique", "qty")
    steps = scenario("ops_core.json", "ops.core.lifetime")["steps"]
    for step in steps:
        if step["kind"] == "push" and step["data"]["user"] == "alice":
            merchant.py_update(0, step["data"], True, T0)
            qty.py_update(0, step["data"], True, T0)
    assert (merchant.py_read(0, T0), qty.py_read(0, T0)) == (3, 4)


def test_n_unique_exact_to_1024_then_hll_fed_per_spec():
    col = make("n_unique")
    values = [f"v{i}" for i in range(1024)] + [7, 7.5, True]
    push(col, values[:1024] + values[:10])
    assert col.py_read(0, T0) == 1024          # exact while <= 1024 distinct
    push(col, values[1024:])
    # The 1025th value converts to HLL(lg_k=12, HLL_8) fed with all values in arrival order
    reference = ds.hll_sketch(12, ds.tgt_hll_type.HLL_8)
    for item in [f"s:v{i}" for i in range(1024)] + ["i:7", "f:7.5", "b:true"]:
        reference.update(item)
    assert col.py_read(0, T0) == round(reference.get_estimate())
    assert col.slot_bytes(0) > 4000            # the sketch replaced the exact set


@pytest.mark.parametrize("n", [1025, 5000, 100_000])
def test_n_unique_hll_accuracy(n):
    col = make("n_unique")
    rng = random.Random(n)
    values = [rng.choice((f"user-{i}", i, i + 0.5)) for i in range(n)]
    push(col, values + values[: n // 3])       # duplicates do not count
    assert abs(col.py_read(0, T0) - n) <= 0.05 * n


def test_n_unique_is_deterministic_for_an_input_order():
    a, b = make("n_unique"), make("n_unique")
    values = [f"k{i % 3000}" for i in range(9000)]
    push(a, values)
    push(b, values)
    assert a.py_read(0, T0) == b.py_read(0, T0)


def test_n_unique_windowed_union_and_expiry():
    col = make("n_unique", window=HOUR)
    width = math.ceil(HOUR / 64)
    push(col, ["a", "b"], now=T0)
    push(col, ["b", "c"], now=T0 + width)
    push(col, ["d"], now=T0 + 2 * width)
    first = T0 // width * width
    assert col.bucket_epochs(0) == [first + 2 * width, first + width, first]
    assert col.py_read(0, T0 + 2 * width) == 4
    # the first bucket is active while T - e < W
    assert col.py_read(0, first + HOUR - 1) == 4
    assert col.py_read(0, first + HOUR) == 3     # {b, c, d}
    assert col.py_read(0, first + width + HOUR) == 1
    assert col.py_read(0, first + 2 * width + HOUR) == 0
    assert col.py_read(0, first - 1) == 0        # buckets after T are inactive


def test_n_unique_windowed_union_past_1024_uses_hll_union_fed_value_by_value():
    col = make("n_unique", window=HOUR)
    width = math.ceil(HOUR / 64)
    first = [f"a{i}" for i in range(700)]
    second = [f"a{i}" for i in range(350, 1050)] + [3]
    push(col, first, now=T0)
    push(col, second, now=T0 + width)
    union = ds.hll_union(12)
    for item in [f"s:{v}" for v in first] + [f"s:{v}" for v in second[:-1]] + ["i:3"]:
        union.update(item)
    assert col.py_read(0, T0 + width) == round(union.get_result().get_estimate())
    assert abs(col.py_read(0, T0 + width) - 1051) <= 0.05 * 1051
    # one bucket still exact: its own size, exactly
    assert col.py_read(0, T0 // width * width + HOUR) == 701


def test_n_unique_windowed_union_of_sketch_buckets():
    col = make("n_unique", window=HOUR)
    width = math.ceil(HOUR / 64)
    push(col, [f"x{i}" for i in range(3000)], now=T0)
    push(col, [f"x{i}" for i in range(2000, 6000)], now=T0 + width)
    push(col, ["x1", "y"], now=T0 + 2 * width)
    assert abs(col.py_read(0, T0 + 2 * width) - 6001) <= 0.05 * 6001


# ---------------------------------------------------------------------------------------
# quantile
# ---------------------------------------------------------------------------------------

def test_quantile_spec_vectors():
    col = make("quantile", q=0.5)
    push(col, [10.0, 250.0, 3, 0.25])
    assert col.py_read(0, T0) == 6.5
    col = make("quantile", q=0.9)
    push(col, VECTOR_X)
    assert col.py_read(0, T0) == 3.75


def test_quantile_empty_nulls_wrong_types_and_non_finite():
    col = make("quantile")
    assert col.py_read(0, T0) is None
    push(col, [None, _ABSENT, "5", True, False, math.nan, math.inf, -math.inf])
    push(col, [1.0], matched=False)
    assert col.py_read(0, T0) is None
    push(col, [4, 2.0])
    assert col.py_read(0, T0) == 3.0
    assert type(make("quantile").py_read(0, T0)) is type(None)


def test_quantile_conformance_latency():
    steps = scenario("ops_sketch.json", "ops.sketch.quantile")["steps"]
    cols = {"q_def": make("quantile", "ms"), "q_a": make("quantile", "ms", q=0.9),
            "q_b": make("quantile", "ms", q=0.1), "q_c": make("quantile", "ms", q=0.75),
            "q_int": make("quantile", "n", q=0.75),
            "q_win": make("quantile", "ms", window=HOUR, q=0.9),
            "q_where": make("quantile", "ms", q=0.5)}
    slots = {"/api/a": 0, "/api/b": 1}
    now = T0
    for step in steps:
        if step["kind"] != "push":
            continue
        row = step["data"]
        for name, col in cols.items():
            matched = row["n"] > 2 if name == "q_where" else True
            col.py_update(slots[row["route"]], row, matched, now)
        now += 1
    for step in steps:
        if step["kind"] == "get":
            got = {name: col.py_read(slots[step["key"]], now) for name, col in cols.items()}
            assert got == step["expect"]["body"]


def test_quantile_uddsketch_matches_reference_bit_for_bit():
    steps = scenario("ops_sketch.json", "ops.sketch.quantile_uddsketch")["steps"]
    values = [s["data"]["x"] for s in steps if s["kind"] == "push"]
    assert len(values) == 300
    expected = next(s for s in steps if s["kind"] == "get")["expect"]["body"]
    for name, q in (("p10", 0.1), ("p50", 0.5), ("p90", 0.9)):
        col = make("quantile", q=q)
        push(col, values)
        assert col.py_read(0, T0) == expected[name]


def test_quantile_switches_to_sketch_at_257_values():
    col = make("quantile", q=0.5)
    push(col, list(range(1, 257)))
    assert col.py_read(0, T0) == 128.5               # exact interpolation
    push(col, [257])
    sketch = UDDSketch()
    for x in range(1, 258):
        sketch.update(x)
    assert col.py_read(0, T0) == sketch.quantile(0.5)
    assert abs(col.py_read(0, T0) - 129) <= 0.0102 * 129


@pytest.mark.parametrize("dist", ["lognormal", "signed", "with_zeros"])
def test_quantile_sketch_value_error_within_bound_on_100k_values(dist):
    rng = random.Random(dist)
    if dist == "lognormal":
        values = [rng.lognormvariate(3.0, 2.0) for _ in range(100_000)]
    elif dist == "signed":
        values = [rng.choice((-1, 1)) * rng.lognormvariate(0.0, 3.0) for _ in range(100_000)]
    else:
        values = [0.0 if rng.random() < 0.3 else rng.expovariate(0.01) for _ in range(100_000)]
    exact = sorted(values)
    for q in (0.001, 0.1, 0.5, 0.9, 0.95, 0.99, 0.999):
        col = make("quantile", q=q, slots=1)
        push(col, values)
        truth = exact[math.floor(q * (len(exact) - 1))]
        got = col.py_read(0, T0)
        assert abs(got - truth) <= 0.0102 * abs(truth), (q, got, truth)


def _exact_quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    pos = q * (len(values) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    if lo == hi:
        return values[lo]
    return values[lo] * (1.0 - (pos - lo)) + values[hi] * (pos - lo)


def _bits(x: float | None) -> bytes | None:
    return None if x is None else struct.pack("<d", x)


@given(st.lists(st.one_of(st.sampled_from([0.0, -0.0, 1.5, -2.0, 7.0]),
                          st.floats(-1e6, 1e6), st.just("read"), st.just("dump")),
                max_size=300),
       st.sampled_from([0.0, 0.25, 0.5, 0.9, 1.0]))
def test_quantile_values_read_as_if_inserted_in_order_on_arrival(steps, q):
    """A push appends its value and a read, a dump or the 257th value puts the list in
    order: every read is what inserting each value on arrival (after the values equal to
    it, -0.0 and 0.0 included) gives, bit for bit, and so is a snapshot loaded back."""
    col = make("quantile", q=q)
    model: list[float] = []
    for step in steps:
        if step == "read":
            assert _bits(col.py_read(0, T0)) == _bits(_exact_quantile(model, q))
        elif step == "dump":
            restored = make("quantile", q=q)
            restored.load(through_snapshot(col.dump(4)), 4)
            assert _bits(restored.py_read(0, T0)) == _bits(_exact_quantile(model, q))
        else:
            if len(model) == 256:  # the 257th value: the sketch takes over (tested above)
                return
            push(col, [step])
            bisect.insort_right(model, step)
    assert _bits(col.py_read(0, T0)) == _bits(_exact_quantile(model, q))


def test_quantile_is_deterministic_and_order_independent_without_collapse():
    rng = random.Random(5)
    values = [rng.uniform(-50, 500) for _ in range(20_000)]
    a, b = make("quantile", q=0.95), make("quantile", q=0.95)
    push(a, values)
    push(b, list(reversed(values)))
    assert a.py_read(0, T0) == b.py_read(0, T0)


def test_quantile_windowed_concatenates_then_sketches():
    width = math.ceil(HOUR / 64)
    col = make("quantile", window=HOUR, q=0.5)
    push(col, [1.0, 9.0], now=T0)
    push(col, [5.0], now=T0 + width)
    assert col.py_read(0, T0 + width) == 5.0
    first = T0 // width * width
    assert col.py_read(0, first + HOUR) == 5.0        # first bucket expired
    assert col.py_read(0, first + width + HOUR) is None
    # 200 + 200 values: more than 256 together -> one sketch over all of them
    col = make("quantile", window=HOUR, q=0.25)
    push(col, [float(i) for i in range(1, 201)], now=T0)
    push(col, [float(i) for i in range(201, 401)], now=T0 + width)
    sketch = UDDSketch()
    for x in range(1, 401):
        sketch.update(float(x))
    assert col.py_read(0, T0 + width) == sketch.quantile(0.25)


def test_quantile_windowed_sketch_plus_exact_inserts_values():
    width = math.ceil(HOUR / 64)
    col = make("quantile", window=HOUR, q=0.9)
    big = [float(i) for i in range(1000)]
    push(col, [-3.0, 0.0], now=T0)                    # exact, older
    push(col, big, now=T0 + width)                    # sketch
    push(col, [2000.0], now=T0 + 2 * width)          # exact, newer
    sketch = UDDSketch()
    for x in big + [-3.0, 0.0, 2000.0]:
        sketch.update(x)
    assert col.py_read(0, T0 + 2 * width) == sketch.quantile(0.9)
    # lifetime sees the same values through one sketch
    assert col.read_q(0, T0 + 2 * width, 0.0) == sketch.quantile(0.0)


def test_quantile_read_q_shares_one_state():
    col = make("quantile", q=0.5)
    push(col, [1.0, 2.0, 3.0, 4.0])
    assert (col.read_q(0, T0, 0.5), col.read_q(0, T0, 0.9)) == (2.5, 3.7)


# ---------------------------------------------------------------------------------------
# UDDSketch
# ---------------------------------------------------------------------------------------

def test_uddsketch_collapses_past_2048_buckets_and_keeps_its_alpha_bound():
    sketch = UDDSketch()
    values = [10.0 ** (i / 50.0) for i in range(-15000, 15000)]   # 1e-300 .. 1e300
    for x in values:
        sketch.update(x)
    assert sketch.collapses > 0 and sketch.num_buckets <= 2048
    alpha = 0.01
    for _ in range(sketch.collapses):
        alpha = 2 * alpha / (1 + alpha * alpha)
    assert sketch.alpha == alpha
    # the arithmetic bucket centre is within (gamma - 1) / 2 = alpha / (1 - alpha)
    bound = alpha / (1 - alpha)
    for q in (0.01, 0.5, 0.99):
        truth = values[math.floor(q * (len(values) - 1))]
        assert abs(sketch.quantile(q) - truth) <= bound * truth * 1.0001


def test_uddsketch_merge_equalises_collapses():
    wide, narrow = UDDSketch(), UDDSketch()
    for i in range(-15000, 15000):
        wide.update(10.0 ** (i / 50.0))
    for x in (1.0, 2.0, -3.0, 0.0):
        narrow.update(x)
    merged = UDDSketch.from_bytes(narrow.to_bytes())
    merged.merge(wide)
    assert merged.collapses == wide.collapses
    assert merged.total == wide.total + 4
    other = UDDSketch.from_bytes(wide.to_bytes())
    other.merge(narrow)                             # the other direction: same state
    assert other.to_bytes() == merged.to_bytes()
    assert narrow.total == 4 and narrow.collapses == 0   # the argument is left unchanged


def test_uddsketch_negative_zero_and_encoding():
    sketch = UDDSketch()
    assert sketch.quantile(0.5) is None
    for x in (-100.0, -1.0, 0.0, 0.0, 1.0, 100.0, math.nan):
        sketch.update(x)
    assert sketch.total == 6
    assert sketch.quantile(0.0) == pytest.approx(-100.0, rel=0.0101)
    assert sketch.quantile(0.4) == 0.0
    assert sketch.quantile(1.0) == pytest.approx(100.0, rel=0.0101)
    copy = UDDSketch.from_bytes(sketch.to_bytes())
    assert copy.to_bytes() == sketch.to_bytes()
    with pytest.raises(ValueError):
        UDDSketch.from_bytes(sketch.to_bytes()[:-1])


# ---------------------------------------------------------------------------------------
# top_k
# ---------------------------------------------------------------------------------------

def test_top_k_spec_vector_and_empty_value():
    col = make("top_k", k=10)
    assert col.py_read(0, T0) == []
    push(col, list("babcab"))
    assert col.py_read(0, T0) == [{"count": 3, "value": "b"}, {"count": 2, "value": "a"},
                                  {"count": 1, "value": "c"}]
    assert list(col.py_read(0, T0)[0]) == ["count", "value"]


def test_top_k_conformance_visits():
    steps = scenario("ops_sketch.json", "ops.sketch.top_k")["steps"]
    cols = {"tk2": (make("top_k", "page", k=2), None),
            "tk_def": (make("top_k", "page"), None),
            "tk_int": (make("top_k", "code", k=3), None),
            "tk_bool": (make("top_k", "ok", k=1), None),
            "tk_win": (make("top_k", "page", window=HOUR, k=3), None),
            "tk_where": (make("top_k", "page", k=2), lambda r: r["code"] >= 400),
            "tk_none": (make("top_k", "page"), lambda r: r["code"] > 999)}
    now = T0
    for step in steps:
        if step["kind"] == "push":
            for col, where in cols.values():
                col.py_update(0, step["data"], where is None or where(step["data"]), now)
            now += 1
    expected = next(s for s in steps if s["kind"] == "get")["expect"]["body"]
    assert {name: col.py_read(0, now) for name, (col, _) in cols.items()} == expected


def test_top_k_typed_items_and_tie_order():
    col = make("top_k", k=20)
    push(col, ["b", "a", 3, -2, 2.5, -0.0, 0.0, math.nan, -math.nan, True, False, 1, 1.0])
    got = col.py_read(0, T0)
    assert got[:2] == [{"count": 2, "value": 0.0}, {"count": 2, "value": got[1]["value"]}]
    assert math.isnan(got[1]["value"])
    assert [(e["count"], e["value"]) for e in got[2:]] == [
        (1, "a"), (1, "b"), (1, -2), (1, 1), (1, 3), (1, 1.0), (1, 2.5), (1, False),
        (1, True)]
    assert [type(e["value"]) for e in got[2:]] == [str, str, int, int, int, float, float,
                                                  bool, bool]


def test_top_k_conformance_typed_values():
    col = make("top_k", "val", k=3)
    for value in (1.0, 1, 2.5, 1.0, 2, 2.5):
        col.py_update(0, {"val": value}, True, T0)
    got = col.py_read(0, T0)
    assert got == [{"count": 2, "value": 1.0}, {"count": 2, "value": 2.5},
                   {"count": 1, "value": 1}]
    assert type(got[2]["value"]) is int


def _frequent_item(value) -> str:
    if isinstance(value, str):
        return "s:" + value
    return "i:" + str(value)


def test_top_k_sketch_mode_matches_frequent_items_fed_per_spec():
    rng = random.Random(11)
    stream = [f"hot{rng.randrange(5)}" if rng.random() < 0.4 else rng.randrange(3000)
              for _ in range(60_000)]
    col = make("top_k", k=5, slots=1)
    push(col, stream)
    # model: exact counts until the 1025th distinct item, then the sketch
    counts: dict = {}
    sketch = None
    for item in stream:
        if sketch is not None:
            sketch.update(_frequent_item(item))
            continue
        counts[item] = counts.get(item, 0) + 1
        if len(counts) > 1024:
            sketch = ds.frequent_strings_sketch(11)
            order = sorted(counts, key=lambda v: (isinstance(v, int), v))
            for key in order:
                sketch.update(_frequent_item(key), counts[key])
    rows = sketch.get_frequent_items(ds.frequent_items_error_type.NO_FALSE_NEGATIVES, 0)
    rows.sort(key=lambda r: (-r[1], r[0].startswith("i:"),
                             int(r[0][2:]) if r[0].startswith("i:") else r[0]))
    expected = [{"count": est, "value": int(item[2:]) if item.startswith("i:") else item[2:]}
                for item, est, _, _ in rows[:5]]
    got = col.py_read(0, T0)
    assert got == expected
    # accuracy contract: true <= count <= true + eps * N; every >1% item is reported
    truth = {}
    for item in stream:
        truth[item] = truth.get(item, 0) + 1
    eps = ds.frequent_strings_sketch.get_epsilon_for_lg_size(11)
    for entry in got:
        assert truth[entry["value"]] <= entry["count"] <= truth[entry["value"]] + eps * 60_000
    assert {e["value"] for e in got} == {f"hot{i}" for i in range(5)}


def test_top_k_windowed_adds_counts_and_expires():
    width = math.ceil(HOUR / 64)
    col = make("top_k", window=HOUR, k=2)
    push(col, ["a", "b", "b"], now=T0)
    push(col, ["a", "a", "c"], now=T0 + width)
    assert col.py_read(0, T0 + width) == [{"count": 3, "value": "a"},
                                          {"count": 2, "value": "b"}]
    first = T0 // width * width
    assert col.py_read(0, first + HOUR) == [{"count": 2, "value": "a"},
                                            {"count": 1, "value": "c"}]
    assert col.py_read(0, first + width + HOUR) == []


def test_top_k_windowed_union_past_1024_items_uses_sketch_merge():
    width = math.ceil(HOUR / 64)
    col = make("top_k", window=HOUR, k=3)
    push(col, ["top"] * 50 + [f"a{i}" for i in range(600)], now=T0)
    push(col, ["top"] * 40 + ["second"] * 30 + [f"b{i}" for i in range(600)],
         now=T0 + width)
    got = col.py_read(0, T0 + width)
    assert [e["value"] for e in got[:2]] == ["top", "second"]
    assert got[0]["count"] >= 90 and got[1]["count"] >= 30


# ---------------------------------------------------------------------------------------
# entropy
# ---------------------------------------------------------------------------------------

def test_entropy_spec_vector_and_empty_value():
    col = make("entropy")
    assert col.py_read(0, T0) == 0.0
    push(col, VECTOR_X)
    assert col.py_read(0, T0) == 2.251629167387823


def test_entropy_conformance_clicks():
    steps = scenario("ops_sketch.json", "ops.sketch.entropy")["steps"]
    cols = {"h_cat": (make("entropy", "cat"), None), "h_int": (make("entropy", "slot"), None),
            "h_win": (make("entropy", "cat", window=HOUR), None),
            "h_where": (make("entropy", "cat"), lambda r: r["slot"] > 2),
            "h_never": (make("entropy", "cat"), lambda r: r["slot"] > 99)}
    slots = {"u1": 0, "u2": 1}
    now = T0
    for step in steps:
        if step["kind"] == "push":
            row = step["data"]
            for col, where in cols.values():
                col.py_update(slots[row["uid"]], row, where is None or where(row), now)
            now += 1
    for step in steps:
        if step["kind"] == "get":
            got = {name: col.py_read(slots[step["key"]], now) for name, (col, _) in cols.items()}
            assert got == step["expect"]["body"]


def test_entropy_sums_in_ascending_key_order():
    # same distribution {3, 2, 1}; the summation order changes the last bit
    # (ops_core.json windowed: w_ent over m1 x3, m3 x2, m2 x1)
    col = make("entropy", window=HOUR)
    push(col, ["m1", "m3", "m1", "m2", "m1", "m3"], now=T0, step=1)
    assert col.py_read(0, T0 + 5) == 1.4591479170272446


def test_entropy_categories_are_key_strings():
    col = make("entropy")
    push(col, [1, "1", True, "true", 2.0, "2.0", 1e16, "1e16", None, _ABSENT])
    assert col.py_read(0, T0) == 2.0                 # four categories, two events each


def test_entropy_caps_at_1024_categories():
    before = counters()
    col = make("entropy")
    push(col, [f"c{i}" for i in range(1024)])
    push(col, ["new1", "new2", "c0"])
    after = counters()
    assert after["beava_entropy_categories_capped_total"] - \
        before["beava_entropy_categories_capped_total"] == 2
    assert after["beava_lifetime_op_cap_hit_total"] - \
        before["beava_lifetime_op_cap_hit_total"] == 2
    p_big, p = 2 / 1025, 1 / 1025
    expected = -(p_big * math.log2(p_big)) - 1023 * (p * math.log2(p))
    assert col.py_read(0, T0) == pytest.approx(expected, rel=1e-12)


def test_entropy_windowed_merge_may_exceed_the_cap():
    width = math.ceil(HOUR / 64)
    col = make("entropy", window=HOUR)
    push(col, [f"a{i}" for i in range(1024)], now=T0)
    push(col, [f"b{i}" for i in range(1024)], now=T0 + width)
    assert col.py_read(0, T0 + width) == pytest.approx(11.0, abs=1e-9)
    assert col.py_read(0, T0 // width * width + HOUR) == pytest.approx(10.0, abs=1e-9)


# ---------------------------------------------------------------------------------------
# bloom_member
# ---------------------------------------------------------------------------------------

def test_murmur3_x64_128_known_vectors():
    assert murmur3_128(b"") == (0, 0)
    assert murmur3_128(b"hello") == (0xCBD8A7B341BD9B02, 0x5B1E906A48AE1D19)
    assert murmur3_128(b"a") == (0x85555565F6597889, 0xE6B53A48510E895A)
    assert murmur3_128(b"10.0.0.1") == (0x85AF96B9D83BCE29, 0x37ABE641196ACE07)
    assert murmur3_128(b"abcdefghijklmnopq") == (0x7564747F88BDA657, 0xECDA499DA1110DE4)
    assert murmur3_128(b"x" * 33) == (0xB73A0F22CBD8F47D, 0xEB4972F1EE3E1064)


def test_bloom_geometry():
    assert bloom_geometry(1024, 0.01) == (9856, 7)
    col = make("bloom_member", expected_n=1024, target_fpr=0.01)
    assert (col.m, col.k) == (9856, 7)
    assert bloom_geometry(0, 0.01) == bloom_geometry(1, 0.01) == (64, 7)
    assert bloom_geometry(100, 0.5) == (192, 1)


def test_bloom_spec_vector_and_conformance():
    col = make("bloom_member")
    assert col.py_read(0, T0) is False
    push(col, ["a", "b", "a"])
    assert col.py_read(0, T0) is True
    push(col, ["c"])
    assert col.py_read(0, T0) is False
    steps = scenario("ops_sketch.json", "ops.sketch.bloom_member")["steps"]
    seen, seen_where = make("bloom_member", "ip"), make("bloom_member", "ip")
    slots = {"alice": 0, "bob": 1}
    for step in steps:
        if step["kind"] == "push":
            row = step["data"]
            seen.py_update(slots[row["uid"]], row, True, T0)
            seen_where.py_update(slots[row["uid"]], row, row["ok"] is True, T0)
        elif step["kind"] == "get":
            slot = slots[step["key"]]
            body = step["expect"]["body"]
            assert (seen.py_read(slot, T0), seen_where.py_read(slot, T0)) == \
                (body["seen"], body["seen_where"])


def test_bloom_members_are_key_strings_and_unmatched_is_ignored():
    col = make("bloom_member")
    push(col, [1])
    push(col, ["1"])
    assert col.py_read(0, T0) is True
    push(col, [None, _ABSENT])
    assert col.py_read(0, T0) is True
    push(col, [2.0])
    push(col, ["2.0"], matched=False)
    assert col.py_read(0, T0) is False


def _bloom_model(m: int, k: int, keys: list[str]) -> list[bool]:
    bits: set[int] = set()
    out = []
    for key in keys:
        h1, h2 = murmur3_128(key.encode())
        positions = [(h1 + i * h2) % (1 << 64) % m for i in range(k)]
        out.append(all(p in bits for p in positions))
        bits.update(positions)
    return out


def test_bloom_sparse_then_dense_matches_the_bit_model():
    col = make("bloom_member", expected_n=64, target_fpr=0.05)
    rng = random.Random(3)
    keys = [f"dev{rng.randrange(300)}" for _ in range(400)]
    expected = _bloom_model(col.m, col.k, keys)
    sizes = []
    for key, probe in zip(keys, expected, strict=True):
        col.py_update(0, {"x": key}, True, T0)
        assert col.py_read(0, T0) is probe
        sizes.append(col.slot_bytes(0))
    assert sizes[0] < 64 and sizes[-1] == 8 + (12 + col.m // 8 + 8 + 15) // 16 * 16
    assert any(expected) and not all(expected)


def test_bloom_false_positive_rate_near_target():
    col = make("bloom_member", expected_n=1000, target_fpr=0.01, slots=1)
    push(col, [f"known-{i}" for i in range(1000)])
    false_positives = 0
    for i in range(300):
        col.py_update(0, {"x": f"fresh-{i}"}, True, T0)
        false_positives += col.py_read(0, T0)
    assert false_positives <= 9                       # ~1-2 % expected


# ---------------------------------------------------------------------------------------
# windows: bucket creation, cap, activity
# ---------------------------------------------------------------------------------------

def test_unmatched_events_create_buckets_but_no_values():
    col = make("top_k", window=HOUR)
    push(col, ["a"], matched=False)
    assert len(col.bucket_epochs(0)) == 1
    assert col.py_read(0, T0) == []


def test_the_65th_bucket_evicts_the_smallest_epoch():
    window = 128                                      # b = 2 ms
    col = make("n_unique", window=window)
    before = counters()["beava_bucket_reclaim_total"]
    # clock stepping back: 64 buckets 2000, 1996, ..., 1748 (none expired)
    for i in range(64):
        col.py_update(0, {"x": f"v{i}"}, True, 2000 - 4 * i)
    assert len(col.bucket_epochs(0)) == 64
    col.py_update(0, {"x": "mid"}, True, 1750)        # 65th bucket: 1748 is evicted
    epochs = col.bucket_epochs(0)
    assert len(epochs) == 64 and min(epochs) == 1750 and 1748 not in epochs
    col.py_update(0, {"x": "old"}, True, 1746)        # smallest itself: dropped at once
    assert col.bucket_epochs(0) == epochs
    assert counters()["beava_bucket_reclaim_total"] - before == 2
    # active at T: T - 128 < e <= T
    assert col.py_read(0, 1876) == 33                 # mid (1750) and v31..v62 (1752..1876)
    assert col.py_read(0, 2000) == 32                 # v0..v31 (1876..2000)
    # expired buckets are dropped when a new bucket is created
    col.py_update(0, {"x": "late"}, True, 10_000)
    assert col.bucket_epochs(0) == [10_000]


@given(st.lists(st.tuples(st.integers(-40, 400), st.sampled_from(["a", "b", "c", None])),
                max_size=160),
       st.sampled_from(["n_unique", "top_k", "quantile", "entropy"]))
def test_bucket_list_holds_what_the_spec_keeps(steps, op):
    """Buckets created in and out of time order, matched or not, against the rule of
    operators.md §5 kept in Python: a bucket per epoch, created on the first event of its
    epoch, dropped when it can never be active again (e <= now - W) or as the smallest of
    65 when a bucket is created. After every event the column holds those epochs, newest
    first, and reads the values of the active ones at times around it; a snapshot of it
    restores the same buckets."""
    window, width = 128, 2
    col = make(op, window=window, slots=2)
    held: dict[int, list[str]] = {}
    now = 1_000

    def check_read(at: int) -> None:
        active = [v for e in sorted(held) if 0 <= at - e < window for v in held[e]]
        read = col.py_read(1, at)
        if op == "n_unique":
            assert read == len(set(active))
        elif op == "top_k":
            assert sorted(item["value"] for item in read) == sorted(set(active))
        elif op == "quantile":
            expected = sorted(float(ord(v)) for v in active)
            assert (read is None) == (not expected)
            if expected:
                assert expected[0] <= read <= expected[-1]
        else:
            assert (read is None or read == 0.0) == (len(set(active)) <= 1)

    for shift, value in steps:
        # mostly forward in time, now and then back (a clock stepping back)
        now = now + shift if shift >= 0 else now + shift * 3
        epoch = now // width * width
        if epoch not in held:
            held[epoch] = []
            for e in [e for e in held if e <= now - window]:
                del held[e]
            while len(held) > 64:
                del held[min(held)]
        if value is not None and epoch in held:
            held[epoch].append(value)
        x = {"quantile": float(ord(value)) if value else None}.get(op, value)
        col.py_update(1, {} if value is None else {"x": x}, value is not None, now)
        assert col.bucket_epochs(1) == sorted(held, reverse=True)
        for at in (now, now + window // 2, max(held) + window - 1):
            check_read(at)
    copy = make(op, window=window, slots=2)
    copy.load(through_snapshot(col.dump(2)), 2)
    assert copy.bucket_epochs(1) == col.bucket_epochs(1)
    assert copy.dump(2) == col.dump(2)


def test_clear_resets_a_slot():
    for op, window in (("n_unique", HOUR), ("quantile", None), ("top_k", HOUR),
                       ("entropy", None), ("bloom_member", None)):
        col = make(op, window=window)
        push(col, ["a", 1.0, 1.0], slot=2)
        col.py_clear(2)
        assert col.py_read(2, T0) == make(op, window=window).py_read(0, T0)
        assert col.slot_bytes(2) == 8


# ---------------------------------------------------------------------------------------
# snapshots
# ---------------------------------------------------------------------------------------

def _feed(col, rng_seed: int, n: int, now: int) -> int:
    rng = random.Random(rng_seed)
    for _ in range(n):
        slot = rng.randrange(3)
        value = rng.choice((f"s{rng.randrange(1500)}", rng.randrange(900),
                            rng.lognormvariate(2, 1), True))
        col.py_update(slot, {"x": value}, rng.random() < 0.9, now)
        now += rng.randrange(0, 120_000)
    return now


@pytest.mark.parametrize(("op", "window"), [
    *((op, window) for op in ("n_unique", "quantile", "top_k", "entropy")
      for window in (None, HOUR)),
    ("bloom_member", None),
])
def test_dump_load_round_trip_then_identical_updates(op, window):
    params = {"expected_n": 200} if op == "bloom_member" else {}
    original = make(op, window=window, **params)
    now = _feed(original, 1, 6000, T0)
    state = through_snapshot(original.dump(4))
    restored = make(op, window=window, slots=1, **params)
    restored.load(state, 4)
    if op != "top_k":
        # (DataSketches frequent items rebuild their hash map in another slot order, so
        # their bytes differ; their reads are compared below)
        assert restored.dump(4) == state
    for slot in range(4):
        assert restored.py_read(slot, now) == original.py_read(slot, now)
    # identical futures (sketch modes included)
    later_a, later_b = _feed(original, 2, 6000, now), _feed(restored, 2, 6000, now)
    assert later_a == later_b
    for slot in range(4):
        assert restored.py_read(slot, later_a) == original.py_read(slot, later_a)


def test_load_rejects_other_ops_and_corrupt_state():
    state = make("n_unique").dump(4)
    with pytest.raises(ValueError):
        make("top_k").load(state, 4)
    with pytest.raises(ValueError):
        make("n_unique", window=HOUR).load(state, 4)
    col = make("n_unique")
    push(col, ["a", "b"])
    with pytest.raises(ValueError):
        make("n_unique").load(col.dump(4)[:-2], 4)


# ---------------------------------------------------------------------------------------
# memory: an entity that saw two events costs tens of bytes per feature
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("op", "window", "values", "limit"), [
    ("n_unique", None, ["m_000123", "m_000456"], 72),
    ("n_unique", 86_400_000, ["m_000123", "m_000456"], 72),
    ("quantile", 86_400_000, [12.5, 99.0], 56),
    ("top_k", 86_400_000, ["m_000123", "m_000456"], 88),
    ("entropy", 86_400_000, ["5411", "5812"], 72),
    ("bloom_member", None, ["device-1", "device-2"], 56),
])
def test_two_events_cost_tens_of_bytes(op, window, values, limit):
    col = make(op, window=window)
    push(col, values, now=T0, step=1000)
    assert col.slot_bytes(0) <= limit
