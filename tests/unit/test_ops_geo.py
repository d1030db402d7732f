"""Family H geo columns (spec/operators.md §17), driven with explicit `now` values.

Hand values: along the equator (or a meridian) one degree is R·π/180 km of haversine
distance, R = 6371; geo_spread of two points one degree apart either side of their mean
is 111.32 km when the mean latitude is 0.
"""

from __future__ import annotations

import math

import pytest

from beava._fast.ops.ops_geo import COLUMNS
from tests.op_columns import through_snapshot

KM_PER_DEGREE = 6371.0 * math.pi / 180  # haversine km of one degree on a great circle
HOUR = 3_600_000
EMPTY = {"geo_velocity": None, "geo_distance": 0.0, "geo_spread": None,
         "distance_from_home": None}
PARAMS = {"lat_field": "lat", "lon_field": "lon"}


def column(op: str, params: dict | None = None, slots: int = 2):
    col = COLUMNS[op](op, None, None, dict(PARAMS if params is None else params), None)
    col.py_ensure(slots)
    return col


def feed(col, points, slot: int = 0) -> None:
    """points: (now, lat, lon) or (now, lat, lon, matched); Ellipsis leaves a field out."""
    for now, lat, lon, *matched in points:
        row = {k: v for k, v in (("lat", lat), ("lon", lon)) if v is not ...}
        col.py_update(slot, row, matched[0] if matched else True, now)


def test_columns_are_the_geo_ops():
    assert set(COLUMNS) == set(EMPTY)


@pytest.mark.parametrize("op", sorted(EMPTY))
def test_empty_value(op):
    col = column(op)
    value = col.py_read(1, 10**13)
    assert value == EMPTY[op] and type(value) is type(EMPTY[op])


@pytest.mark.parametrize("op", sorted(EMPTY))
def test_geo_ops_are_lifetime_only(op):
    with pytest.raises(ValueError, match="lifetime-only"):
        COLUMNS[op](op, None, None, dict(PARAMS), 3_600_000)


@pytest.mark.parametrize("op", sorted(EMPTY))
@pytest.mark.parametrize("bad", [None, "1.0", True, ...])
def test_both_coordinates_must_be_numeric(op, bad):
    col, ref = column(op), column(op)
    feed(col, [(0, 0.0, 0.0), (HOUR, bad, 5.0), (HOUR, 5.0, bad), (2 * HOUR, 1.0, 0)])
    feed(ref, [(0, 0.0, 0.0), (2 * HOUR, 1.0, 0)])
    assert col.py_read(0, 0) == ref.py_read(0, 0)
    assert col.py_read(0, 0) not in (None, 0.0)


@pytest.mark.parametrize("op", sorted(EMPTY))
def test_unmatched_events_change_nothing(op):
    col = column(op)
    feed(col, [(0, 0.0, 0.0, False), (HOUR, 1.0, 1.0, False)])
    assert col.py_read(0, 0) == EMPTY[op]


@pytest.mark.parametrize("op", sorted(EMPTY))
def test_custom_fields_and_defaults(op):
    custom = column(op, params={"lat_field": "la", "lon_field": "lo"})
    default = column(op, params={})
    for col, (lat, lon), (decoy_lat, decoy_lon) in ((custom, ("la", "lo"), ("lat", "lon")),
                                                     (default, ("lat", "lon"), ("la", "lo"))):
        col.py_update(0, {lat: 0.0, lon: 0.0, decoy_lat: 50.0, decoy_lon: 9.0}, True, 0)
        col.py_update(0, {lat: 0.0, lon: 1.0, decoy_lat: 9.0, decoy_lon: 50.0}, True, HOUR)
    expected = {"geo_velocity": KM_PER_DEGREE, "geo_distance": KM_PER_DEGREE,
                "geo_spread": 111.32 / 2, "distance_from_home": KM_PER_DEGREE / 2}[op]
    assert custom.py_read(0, 0) == pytest.approx(expected, rel=1e-12)
    assert default.py_read(0, 0) == custom.py_read(0, 0)
    assert (custom.lat_field, custom.lon_field) == ("la", "lo")
    assert (default.lat_field, default.lon_field) == ("lat", "lon")


# ---- geo_velocity -----------------------------------------------------------------------------


def test_geo_velocity_max_speed_between_consecutive_points():
    col = column("geo_velocity")
    feed(col, [(0, 0.0, 0.0)])
    assert col.py_read(0, 0) == 0.0
    feed(col, [(HOUR, 0.0, 1.0)])
    assert col.py_read(0, 0) == pytest.approx(KM_PER_DEGREE, rel=1e-12)
    feed(col, [(HOUR + HOUR // 2, 0.0, 0.0)])  # 1 degree in half an hour
    assert col.py_read(0, 0) == pytest.approx(2 * KM_PER_DEGREE, rel=1e-12)
    feed(col, [(10 * HOUR, 0.0, 1)])  # slower: the max stays
    assert col.py_read(0, 0) == pytest.approx(2 * KM_PER_DEGREE, rel=1e-12)


def test_geo_velocity_dt_not_positive_replaces_the_point():
    col = column("geo_velocity")
    feed(col, [(HOUR, 0.0, 0.0), (HOUR, 10.0, 10.0), (0, 0.0, 3.0)])
    assert col.py_read(0, 0) == 0.0  # no pair with dt > 0 yet
    feed(col, [(HOUR, 0.0, 4.0)])  # from (0, 3) at t=0: one degree per hour
    assert col.py_read(0, 0) == pytest.approx(KM_PER_DEGREE, rel=1e-12)


def test_geo_velocity_nan_speed_never_wins():
    col = column("geo_velocity")
    feed(col, [(0, 0.0, 0.0), (HOUR, 0.0, 1.0), (2 * HOUR, math.nan, 1.0)])
    assert col.py_read(0, 0) == pytest.approx(KM_PER_DEGREE, rel=1e-12)


# ---- geo_distance -----------------------------------------------------------------------------


def test_geo_distance_vector_17():
    col = column("geo_distance")
    feed(col, [(0, 1, 1), (0, 2, 2), (0, 3, 3)])
    assert col.py_read(0, 0) == 314.4029838527136


def test_geo_distance_sums_legs_regardless_of_time():
    col = column("geo_distance")
    feed(col, [(5, 0.0, 0.0)])
    assert col.py_read(0, 0) == 0.0
    feed(col, [(5, 1.0, 0.0), (1, 1.0, 0.0), (2, 0.0, 0.0)])
    assert col.py_read(0, 0) == pytest.approx(2 * KM_PER_DEGREE, rel=1e-12)


# ---- geo_spread -------------------------------------------------------------------------------


def test_geo_spread_latitude_and_longitude():
    col = column("geo_spread", slots=3)
    feed(col, [(0, 0.0, 0.0)], slot=0)
    feed(col, [(0, -1.0, 5.0), (1, 1.0, 5.0)], slot=1)  # var_lat 1, var_lon 0
    feed(col, [(0, 0.0, 4), (1, 0.0, 6)], slot=2)  # var_lon 1 at mean latitude 0
    assert col.py_read(0, 0) is None
    assert col.py_read(1, 0) == pytest.approx(111.32, rel=1e-15)
    assert col.py_read(2, 0) == pytest.approx(111.32, rel=1e-15)


def test_geo_spread_longitude_shrinks_with_latitude():
    col = column("geo_spread")
    feed(col, [(0, 60.0, -1.0), (1, 60.0, 1.0)])  # cos 60° = 0.5
    assert col.py_read(0, 0) == pytest.approx(111.32 * 0.5, rel=1e-12)


# ---- distance_from_home -------------------------------------------------------------------------


def test_distance_from_home_vector_17():
    col = column("distance_from_home")
    feed(col, [(0, 1, 1), (0, 2, 2), (0, 3, 3)])
    assert col.py_read(0, 0) == 157.1775518146407


def test_distance_from_home_ring_of_last_samples():
    col = column("distance_from_home", params={**PARAMS, "samples": 2})
    feed(col, [(0, 0.0, 0.0)])
    assert col.py_read(0, 0) == 0.0  # the latest point is home
    feed(col, [(1, 0.0, 2.0)])
    assert col.py_read(0, 0) == pytest.approx(KM_PER_DEGREE, rel=1e-12)
    feed(col, [(2, 0.0, 4.0)])  # (0, 0) drops out: home (0, 3)
    assert col.py_read(0, 0) == pytest.approx(KM_PER_DEGREE, rel=1e-12)
    feed(col, [(3, 0.0, 3.0)])  # ring (0, 3), (0, 4): home (0, 3.5)
    assert col.py_read(0, 0) == pytest.approx(KM_PER_DEGREE / 2, rel=1e-12)


def test_distance_from_home_samples_zero_is_one_and_default_is_100():
    one = column("distance_from_home", params={**PARAMS, "samples": 0})
    feed(one, [(0, 0.0, 0.0), (1, 5.0, 5.0)])
    assert one.py_read(0, 0) == 0.0
    assert (one.samples, column("distance_from_home").samples) == (1, 100)
    default = column("distance_from_home")
    feed(default, [(i, 0.0, float(i)) for i in range(101)])  # lons 1..100 held: home 50.5
    assert default.py_read(0, 0) == pytest.approx(49.5 * KM_PER_DEGREE, rel=1e-12)


# ---- conformance scenario ops.geo (tests/conformance/vectors/ops_geo.json), hand-translated ------


def test_conformance_geo():
    cols = {"dist": column("geo_distance"), "spread": column("geo_spread"),
            "home": column("distance_from_home", params={**PARAMS, "samples": 10}),
            "vel": column("geo_velocity"), "dist_default": column("geo_distance", params={})}
    fixes = [(40.7128, -74.006), (40.7306, -73.9352), (40.6782, -73.9442), (40.758, -73.9855)]
    t0 = 1_700_000_000_000
    for i, (lat, lon) in enumerate(fixes):
        for col in cols.values():
            col.py_update(0, {"dev": "d", "lat": lat, "lon": lon}, True, t0 + 20 * i)
    for col in cols.values():
        col.py_update(1, {"dev": "one", "lat": 40.7128, "lon": -74.006}, True, t0 + 60)
    got = {name: col.py_read(0, 0) for name, col in cols.items()}
    assert got.pop("vel") >= 0.0
    assert got == {"dist": 21.69366992494284, "dist_default": 21.69366992494284,
                   "home": 4.493425083874491, "spread": 4.053629451465067}
    assert {name: col.py_read(1, 0) for name, col in cols.items()} == {
        "dist": 0.0, "dist_default": 0.0, "home": 0.0, "spread": None, "vel": 0.0}


# ---- snapshots and slot management ------------------------------------------------------------


@pytest.mark.parametrize("op", sorted(EMPTY))
def test_dump_load_round_trip(op):
    params = {**PARAMS, "samples": 3}
    col = column(op, params=params, slots=4)
    path = [(i * HOUR, float(i % 3), float(i)) for i in range(7)]
    feed(col, path, slot=0)  # ring wrapped twice
    feed(col, path[:2], slot=1)  # ring partly filled
    feed(col, path[:1], slot=3)
    restored = column(op, params=params, slots=0)
    restored.load(through_snapshot(col.dump(4)), 4)
    for slot in range(4):
        assert restored.py_read(slot, 0) == col.py_read(slot, 0)
    for c in (col, restored):
        feed(c, [(10 * HOUR, 7.0, -3.0), (11 * HOUR, 8.0, -2.0)], slot=1)
        feed(c, [(10 * HOUR, 7.0, -3.0)], slot=0)
    assert restored.py_read(0, 0) == col.py_read(0, 0)
    assert restored.py_read(1, 0) == col.py_read(1, 0)


def test_distance_from_home_snapshot_is_checked():
    col = column("distance_from_home", params={**PARAMS, "samples": 3})
    feed(col, [(0, 1.0, 1.0), (1, 2.0, 2.0)])
    structs, records = col.dump(2)
    restored = column("distance_from_home", params={**PARAMS, "samples": 3})
    with pytest.raises(ValueError):
        restored.load([structs, records[:-16]], 2)
    with pytest.raises(ValueError):
        restored.load([structs, b""], 2)
    assert restored.py_read(0, 0) is None  # a failed load leaves empty slots
    restored.load([structs, records], 2)
    assert restored.py_read(0, 0) == col.py_read(0, 0)


@pytest.mark.parametrize("op", sorted(EMPTY))
def test_clear_and_growth(op):
    path = [(0, 1.0, 1.0), (HOUR, 2.0, 3.0), (2 * HOUR, 0.5, 2.0)]
    col, ref = column(op, slots=1), column(op, slots=1)
    feed(col, path)
    feed(ref, path)
    col.py_ensure(300)
    assert col.py_read(0, 0) == ref.py_read(0, 0)
    assert col.py_read(299, 0) == EMPTY[op]
    feed(col, path, slot=299)
    col.py_clear(0)
    assert col.py_read(0, 0) == EMPTY[op]
    assert col.py_read(299, 0) == ref.py_read(0, 0)
