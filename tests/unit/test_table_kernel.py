"""TableKernel: group keys, slots, cold TTL, where evaluation, reads, snapshots
(spec/operators.md §3, spec/wire.md §7.1). Time is explicit: ``now`` on apply, ``T`` on read."""

from __future__ import annotations

import math

import msgspec
import pytest

from beava._fast.ops.ops_core import COLUMNS
from beava._fast.ops.table_kernel import TableKernel, fmt_f64_debug, group_key
from beava.engine.state import keys

W = 64_000


def col(op, name, field="x", window=None):
    return COLUMNS[op](name, field, None, {}, window)


def kernel(features, predicates=(), key_fields=("u",), cold_after=None):
    return TableKernel(key_fields, list(features), list(predicates), cold_after)


# --- group keys -----------------------------------------------------------------------------


@pytest.mark.parametrize("value,text", [
    ("alice", "alice"), ("a|b", "a|b"), ("", ""), (42, "42"), (-12, "-12"), (0, "0"),
    (2**63 - 1, "9223372036854775807"), (True, "true"), (False, "false"),
    (9.0, "9.0"), (1e16, "1e16"), (1.5e-7, "1.5e-7"), (-0.0, "-0.0"), (0.1, "0.1"),
])
def test_single_key_is_keystr_unescaped(value, text):
    assert group_key({"k": value}, ("k",)) == text


@pytest.mark.parametrize("value", [None, float("nan"), float("inf"), float("-inf"), [1], {"a": 1},
                                   b"raw"])
def test_invalid_key_values_skip(value):
    assert group_key({"k": value}, ("k",)) is None
    assert group_key({"k": value, "j": "x"}, ("j", "k")) is None


def test_absent_key_skips_and_global_key_is_empty():
    assert group_key({}, ("k",)) is None
    assert group_key({"j": 1}, ("j", "k")) is None
    assert group_key({}, ()) == ""


def test_composite_key_escapes_pipes_in_key_order():
    row = {"user": "alice", "merchant": "m|1", "hour": -1, "card": True, "px": 2.5}
    assert group_key(row, ("user", "merchant")) == "alice|m%7C1"
    assert group_key(row, ("merchant", "user")) == "m%7C1|alice"
    assert group_key(row, ("user", "hour", "card", "px")) == "alice|-1|true|2.5"


def test_fmt_f64_debug_matches_keys_module():
    values = [0.0, -0.0, 1.0, 0.5, 1e15, 1e16, 1e-5, 1e-4, 123456789.125, 2.0**70, -3.75e-300,
              5e-324, 1.7976931348623157e308, math.pi, float("nan"), float("inf")]
    for v in values:
        assert fmt_f64_debug(v) == keys.fmt_f64_debug(v), v


# --- apply ----------------------------------------------------------------------------------


def test_apply_creates_slots_in_arrival_order_and_skips_bad_keys():
    k = kernel([("n", col("count", "n", None), 0)])
    assert k.apply({"u": "a"}, 1) == 0
    assert k.apply({"u": "b"}, 2) == 1
    assert k.apply({"u": "a"}, 3) == 0
    assert k.apply({"u": None}, 4) == -1
    assert k.apply({}, 5) == -1
    assert k.keys.names == ["a", "b"] and k.entity_count == 2
    assert k.read(0, 10) == {"n": 2} and k.read(1, 10) == {"n": 1}


def test_each_distinct_where_runs_once_per_event():
    calls = []

    def big(row):
        calls.append(row["x"])
        return row["x"] > 10

    def truthy_not_bool(row):
        return 1  # only exactly True matches

    k = kernel([
        ("a", col("count", "a", None), 1),
        ("b", col("sum", "b"), 1),
        ("c", col("ratio", "c", None), 1),
        ("d", col("count", "d", None), 2),
        ("e", col("count", "e", None), 0),
    ], predicates=[big, truthy_not_bool])
    for x in (5, 20, 30):
        k.apply({"u": "k", "x": x}, 100)
    assert calls == [5, 20, 30]
    assert k.read(0, 100) == {"a": 2, "b": 50.0, "c": 2 / 3, "d": 0, "e": 3}


def test_row_is_not_mutated():
    k = kernel([("s", col("sum", "s"), 0), ("m", col("min", "m", window=W), 0)])
    row = {"u": "k", "x": 3}
    k.apply(row, 1_000)
    assert row == {"u": "k", "x": 3}


def test_global_table_has_one_entity():
    k = kernel([("n", col("count", "n", None), 0)], key_fields=())
    for i in range(3):
        assert k.apply({"u": i}, i) == 0
    assert k.keys.names == [""] and k.read(0, 5) == {"n": 3}
    assert k.last_touch(0) is None


def test_cold_ttl_resets_the_whole_row():
    k = kernel([("n", col("count", "n", None), 0), ("s", col("sum", "s", window=W), 0)],
               cold_after=1_000)
    k.apply({"u": "a", "x": 1}, 10_000)
    k.apply({"u": "a", "x": 2}, 11_000)  # exactly cold_after later: kept
    assert k.read(0, 11_000) == {"n": 2, "s": 3.0} and k.cold_evictions == 0
    k.apply({"u": "a", "x": 5}, 12_001)  # 1 001 ms after the last touch: reset first
    assert k.read(0, 12_001) == {"n": 1, "s": 5.0} and k.cold_evictions == 1
    assert k.last_touch(0) == 12_001
    k.apply({"u": "a", "x": 1}, 5_000)  # clock stepped back: no reset, touch follows now
    assert k.read(0, 12_001) == {"n": 2, "s": 6.0} and k.last_touch(0) == 5_000


def test_cold_ttl_never_applies_to_global_tables():
    k = kernel([("n", col("count", "n", None), 0)], key_fields=(), cold_after=10)
    k.apply({}, 0)
    k.apply({}, 1_000_000)
    assert k.read(0, 1_000_000) == {"n": 2} and k.cold_evictions == 0


def test_cold_after_change_uses_existing_touch_times():
    k = kernel([("n", col("count", "n", None), 0)])
    k.apply({"u": "a"}, 1_000)
    k.set_cold_after(500)
    k.apply({"u": "a"}, 2_000)
    assert k.read(0, 2_000) == {"n": 1} and k.cold_evictions == 1


def test_read_projection_and_clear():
    k = kernel([("b", col("count", "b", None), 0), ("a", col("max", "a"), 0),
                ("c", col("mean", "c", window=W), 0)])
    k.apply({"u": "k", "x": "t"}, 1_000)
    assert list(k.read(0, 1_000)) == ["a", "b", "c"]
    assert k.read(0, 1_000, ["c", "a"]) == {"c": None, "a": "t"}
    assert k.read(0, 1_000, []) == {}
    k.clear(0)
    assert k.read(0, 1_000) == {"a": None, "b": 0, "c": None}


def test_growth_keeps_every_entity():
    k = kernel([("n", col("count", "n", None), 0), ("w", col("count", "w", None, W), 0)],
               cold_after=10**9)
    for i in range(5_000):
        k.apply({"u": f"k{i}"}, 1_000 + i)
    for i in range(0, 5_000, 7):
        k.apply({"u": f"k{i}"}, 6_000)
    assert k.capacity >= 5_000 and k.entity_count == 5_000
    assert k.read(k.keys.get("k7"), 6_000) == {"n": 2, "w": 2}
    assert k.read(k.keys.get("k8"), 6_000) == {"n": 1, "w": 1}
    assert k.last_touch(k.keys.get("k4999")) == 5_999


def test_windowed_core_columns_share_one_arena_per_window():
    k = kernel([("a", col("count", "a", None, W), 0), ("b", col("sum", "b", window=W), 0),
                ("c", col("count", "c", None, 2 * W), 0), ("d", col("count", "d", None), 0)])
    assert [arena.window for arena in k.arenas] == [W, 2 * W]
    assert [m.name for m in k.arenas[0].members] == ["a", "b"]
    k.apply({"u": "z", "x": 1}, 1_000)
    k.apply({"u": "z", "x": 2}, 2_500)
    assert k.arenas[0].bucket_count(0) == 2
    assert k.read(0, 65_500) == {"a": 1, "b": 2.0, "c": 2, "d": 2}  # epoch 1 000 expired
    assert k.bucket_reclaims == 0
    assert k.nbytes() > 0


def test_update_of_a_slot_beyond_capacity_grows():
    k = kernel([("n", col("count", "n", None), 0)])
    k.update(40, {"x": 1}, 5)
    assert k.capacity >= 41 and k.read(40, 5) == {"n": 1}


def test_rejects_non_columns_and_bad_where_index():
    with pytest.raises(TypeError):
        kernel([("n", object(), 0)])
    with pytest.raises(ValueError):
        kernel([("n", col("count", "n", None), 2)], predicates=[lambda r: True])


# --- transitions and snapshots --------------------------------------------------------------


def test_adopt_keeps_entities_and_kept_columns():
    n, w = col("count", "n", None), col("sum", "w", window=W)
    old = kernel([("n", n, 0), ("w", w, 0)], cold_after=100)
    old.apply({"u": "a", "x": 4}, 1_000)
    old.apply({"u": "b", "x": 6}, 1_050)
    new = kernel([("n", n, 0), ("w", w, 0), ("fresh", col("max", "fresh", window=W), 0)],
                 cold_after=100)
    new.adopt(old)
    assert new.keys.names == ["a", "b"] and new.last_touch(1) == 1_050
    assert new.read(1, 1_050) == {"fresh": None, "n": 1, "w": 6.0}
    new.apply({"u": "b", "x": 9}, 1_100)
    assert new.read(1, 1_100) == {"fresh": 9, "n": 2, "w": 15.0}


def test_dump_load_round_trip():
    def build():
        return kernel([("n", col("count", "n", None), 0), ("lo", col("min", "lo"), 0),
                       ("w", col("max", "w", window=W), 1), ("r", col("ratio", "r", None, W), 1)],
                      predicates=[lambda row: row["x"] != "skip"], cold_after=10**6)

    k = build()
    for now, u, x in [(1_000, "a", 5), (2_000, "b", "s"), (3_000, "a", "skip"), (70_000, "a", 2.5)]:
        k.apply({"u": u, "x": x}, now)
    state = msgspec.msgpack.decode(msgspec.msgpack.encode(k.dump()))
    fresh = build()
    fresh.load(state)
    assert fresh.keys.names == k.keys.names
    for T in (3_000, 66_000, 70_000):
        for slot in (0, 1):
            assert fresh.read(slot, T) == k.read(slot, T)
    assert fresh.last_touch(0) == 70_000
    fresh.apply({"u": "c", "x": 1}, 70_001)
    assert fresh.keys.get("c") == 2


def test_load_rejects_state_of_another_layout():
    k = kernel([("n", col("count", "n", None), 0)])
    k.apply({"u": "a"}, 1)
    state = k.dump()
    other = kernel([("m", col("count", "m", None), 0)])
    with pytest.raises(ValueError):
        other.load(state)
