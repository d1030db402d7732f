"""Operator functions: exact ``to_dict()`` of every helper and its validation (spec/sdk.md §6)."""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import pytest

import beava as bv
from beava.catalogue.operators import CATALOGUE, OPERATOR_NAMES
from beava.dsl.operators import AggDescriptor

ok = bv.col("ok")

CASES: list[tuple[AggDescriptor, dict[str, Any]]] = [
    (bv.count(), {"op": "count"}),
    (bv.count(window="1h", where=ok), {"op": "count", "window": "1h", "where": "ok"}),
    (bv.count(window="forever"), {"op": "count", "window": "forever"}),
    (bv.sum("a"), {"op": "sum", "field": "a"}),
    (bv.sum("a", window="5m"), {"op": "sum", "field": "a", "window": "5m"}),
    (bv.mean("a", window="1d"), {"op": "mean", "field": "a", "window": "1d"}),
    (bv.min("a"), {"op": "min", "field": "a"}),
    (bv.max("a", where=ok), {"op": "max", "field": "a", "where": "ok"}),
    (bv.var("a", window="100ms"), {"op": "var", "field": "a", "window": "100ms"}),
    (bv.std("a", window="30s"), {"op": "std", "field": "a", "window": "30s"}),
    (bv.ratio(where=bv.col("x") > 1),
     {"op": "ratio", "where": "(x > 1)"}),
    (bv.n_unique("m", window="1h"), {"op": "n_unique", "field": "m", "window": "1h"}),
    (bv.quantile("a", q=0.99, window="1h"),
     {"op": "quantile", "field": "a", "window": "1h", "q": 0.99}),
    (bv.top_k("merchant", k=3, window="1d", where=ok),
     {"op": "top_k", "field": "merchant", "window": "1d", "where": "ok", "k": 3}),
    (bv.bloom_member("ip"), {"op": "bloom_member", "field": "ip"}),
    (bv.bloom_member("ip", expected_n=5000, target_fpr=0.001),
     {"op": "bloom_member", "field": "ip", "expected_n": 5000, "target_fpr": 0.001}),
    (bv.bloom_member("ip", target_fpr=0.05),
     {"op": "bloom_member", "field": "ip", "target_fpr": 0.05}),
    (bv.entropy("m", window="1h"), {"op": "entropy", "field": "m", "window": "1h"}),
    (bv.first("a"), {"op": "first", "field": "a"}),
    (bv.first("a", where=ok), {"op": "first", "field": "a", "where": "ok"}),
    (bv.last("a", where=ok), {"op": "last", "field": "a", "where": "ok"}),
    (bv.first_n("a", n=5), {"op": "first_n", "field": "a", "n": 5}),
    (bv.last_n("a", n=1024), {"op": "last_n", "field": "a", "n": 1024}),
    (bv.lag("amount", n=1), {"op": "lag", "field": "amount", "n": 1}),
    (bv.lag("amount", n=2, where=ok), {"op": "lag", "field": "amount", "where": "ok", "n": 2}),
    (bv.first_seen(), {"op": "first_seen"}),
    (bv.first_seen(where=ok), {"op": "first_seen", "where": "ok"}),
    (bv.last_seen(where=ok), {"op": "last_seen", "where": "ok"}),
    (bv.age(), {"op": "age"}),
    (bv.has_seen(where=ok), {"op": "has_seen", "where": "ok"}),
    (bv.time_since(), {"op": "time_since"}),
    (bv.time_since_last_n(n=3), {"op": "time_since_last_n", "n": 3}),
    (bv.streak(where=ok), {"op": "streak", "where": "ok"}),
    (bv.max_streak(where=ok), {"op": "max_streak", "where": "ok"}),
    (bv.negative_streak(where=ok), {"op": "negative_streak", "where": "ok"}),
    (bv.first_seen_in_window(window="7d"), {"op": "first_seen_in_window", "window": "7d"}),
    (bv.ewma("a", half_life="10m"), {"op": "ewma", "field": "a", "half_life": "10m"}),
    (bv.ema("a", half_life="10m"), {"op": "ewma", "field": "a", "half_life": "10m"}),
    (bv.ewvar("a", half_life="1h", where=ok),
     {"op": "ewvar", "field": "a", "half_life": "1h", "where": "ok"}),
    (bv.ew_zscore("a", half_life="1h"), {"op": "ew_zscore", "field": "a", "half_life": "1h"}),
    (bv.decayed_sum("a", half_life="1d"), {"op": "decayed_sum", "field": "a", "half_life": "1d"}),
    (bv.decayed_count(half_life="1d"), {"op": "decayed_count", "half_life": "1d"}),
    (bv.twa("a", window="1h"), {"op": "twa", "field": "a", "window": "1h"}),
    (bv.rate_of_change("a", window="1h"), {"op": "rate_of_change", "field": "a", "window": "1h"}),
    (bv.inter_arrival_stats(window="1h"), {"op": "inter_arrival_stats", "window": "1h"}),
    (bv.burst_count(window="1h", sub_window="1m"),
     {"op": "burst_count", "window": "1h", "sub_window": "1m"}),
    (bv.delta_from_prev("a"), {"op": "delta_from_prev", "field": "a"}),
    (bv.trend("a", window="1h"), {"op": "trend", "field": "a", "window": "1h"}),
    (bv.trend_residual("a", window="1h"), {"op": "trend_residual", "field": "a", "window": "1h"}),
    (bv.outlier_count("a", window="1h"),
     {"op": "outlier_count", "field": "a", "window": "1h", "sigma": 3.0}),
    (bv.outlier_count("a", window="1h", sigma=2),
     {"op": "outlier_count", "field": "a", "window": "1h", "sigma": 2}),
    (bv.value_change_count("a", window="1h"),
     {"op": "value_change_count", "field": "a", "window": "1h"}),
    (bv.z_score("a", baseline_window="1d"),
     {"op": "z_score", "field": "a", "baseline_window": "1d"}),
    (bv.z_score("a", baseline_window="forever", where=ok),
     {"op": "z_score", "field": "a", "where": "ok", "baseline_window": "forever"}),
    (bv.histogram("a", buckets=(0, 10.5, 100)),
     {"op": "histogram", "field": "a", "buckets": [0, 10.5, 100]}),
    (bv.hour_of_day_histogram(), {"op": "hour_of_day_histogram"}),
    (bv.dow_hour_histogram(where=ok), {"op": "dow_hour_histogram", "where": "ok"}),
    (bv.seasonal_deviation("a"), {"op": "seasonal_deviation", "field": "a"}),
    (bv.event_type_mix("kind"), {"op": "event_type_mix", "field": "kind", "max_categories": 256}),
    (bv.event_type_mix("kind", categories=["a", "b"], max_categories=8),
     {"op": "event_type_mix", "field": "kind", "max_categories": 8, "categories": ["a", "b"]}),
    (bv.most_recent_n("a", n=4), {"op": "most_recent_n", "field": "a", "n": 4}),
    (bv.reservoir_sample("a", samples=16), {"op": "reservoir_sample", "field": "a", "samples": 16}),
    (bv.geo_velocity(lat="lat", lon="lng"),
     {"op": "geo_velocity", "lat_field": "lat", "lon_field": "lng"}),
    (bv.geo_distance(lat="la", lon="lo", where=ok),
     {"op": "geo_distance", "where": "ok", "lat_field": "la", "lon_field": "lo"}),
    (bv.geo_spread(lat="la", lon="lo"), {"op": "geo_spread", "lat_field": "la", "lon_field": "lo"}),
    (bv.distance_from_home(lat="la", lon="lo"),
     {"op": "distance_from_home", "lat_field": "la", "lon_field": "lo", "samples": 100}),
    (bv.distance_from_home(lat="la", lon="lo", samples=7),
     {"op": "distance_from_home", "lat_field": "la", "lon_field": "lo", "samples": 7}),
]


@pytest.mark.parametrize(("descriptor", "wire"), CASES, ids=[c[1]["op"] for c in CASES])
def test_to_dict_exact(descriptor: AggDescriptor, wire: dict[str, Any]) -> None:
    got = descriptor.to_dict()
    assert got == wire
    assert list(got) == list(wire)  # key order: op, field, window, half_life, where, extras


def test_every_catalogue_operator_has_a_function() -> None:
    covered = {wire["op"] for _, wire in CASES}
    assert covered == set(OPERATOR_NAMES)
    for name in OPERATOR_NAMES:
        assert callable(getattr(bv, name))
        assert getattr(bv, name).__name__ == name
    assert len(OPERATOR_NAMES) == 54


def test_field_presence_matches_the_catalogue() -> None:
    # an op has a positional `field` exactly when the catalogue says it reads one
    for name in OPERATOR_NAMES:
        params = inspect.signature(getattr(bv, name)).parameters
        has_field = "field" in params
        assert has_field == (CATALOGUE[name].field.value != "none"), name


def test_descriptor_is_frozen() -> None:
    d = bv.count()
    with pytest.raises(AttributeError):
        d.op = "sum"  # type: ignore[misc]
    assert AggDescriptor("count") == bv.count()


@pytest.mark.parametrize(
    "call",
    [
        lambda: bv.sum(bv.col("amount") * 2),
        lambda: bv.sum(bv.col("flag").cast("int")),
        lambda: bv.mean(bv.col("x")),
        lambda: bv.sum(""),
        lambda: bv.max(3),
        lambda: bv.lag(bv.col("x"), n=1),
        lambda: bv.top_k(None, k=2),
        lambda: bv.histogram(bv.col("x"), buckets=[1]),
    ],
)
def test_field_must_be_a_column_name(call: Any) -> None:
    with pytest.raises(bv.RegistrationError) as info:
        call()
    assert info.value.code == "schema_mismatch"
    assert "with_columns" in info.value.message


def test_schema_mismatch_path_is_the_op() -> None:
    with pytest.raises(bv.RegistrationError) as info:
        bv.quantile(bv.col("a"), q=0.5)
    assert info.value.path == "quantile"
    assert str(info.value).startswith("[schema_mismatch] quantile: ")


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: bv.quantile("a", q=0), ValueError),
        (lambda: bv.quantile("a", q=1), ValueError),
        (lambda: bv.quantile("a", q=None), ValueError),
        (lambda: bv.quantile("a", q=float("nan")), ValueError),
        (lambda: bv.quantile("a", q="0.5"), TypeError),
        (lambda: bv.quantile("a", q=True), TypeError),
        (lambda: bv.top_k("a", k=0), ValueError),
        (lambda: bv.top_k("a", k=1025), ValueError),
        (lambda: bv.top_k("a", k=2.0), TypeError),
        (lambda: bv.top_k("a", k=True), TypeError),
        (lambda: bv.bloom_member("a", expected_n=0), ValueError),
        (lambda: bv.bloom_member("a", target_fpr=0), ValueError),
        (lambda: bv.bloom_member("a", target_fpr=1.0), ValueError),
        (lambda: bv.bloom_member("a", expected_n=1.5), TypeError),
        (lambda: bv.first_n("a", n=0), ValueError),
        (lambda: bv.last_n("a", n=1025), ValueError),
        (lambda: bv.lag("a", n=0), ValueError),
        (lambda: bv.lag("a", n=2000), ValueError),
        (lambda: bv.lag("a", n=False), TypeError),
        (lambda: bv.time_since_last_n(n=0), ValueError),
        (lambda: bv.outlier_count("a", window="1h", sigma=0), ValueError),
        (lambda: bv.outlier_count("a", window="1h", sigma=-1.0), ValueError),
        (lambda: bv.outlier_count("a", window="1h", sigma=float("inf")), ValueError),
        (lambda: bv.outlier_count("a", window="1h", sigma=True), TypeError),
        (lambda: bv.histogram("a", buckets=[]), ValueError),
        (lambda: bv.histogram("a", buckets=[1, 1]), ValueError),
        (lambda: bv.histogram("a", buckets=[2, 1]), ValueError),
        (lambda: bv.histogram("a", buckets=[1, float("nan")]), ValueError),
        (lambda: bv.histogram("a", buckets=[True, 2]), ValueError),
        (lambda: bv.histogram("a", buckets=["1"]), ValueError),
        (lambda: bv.histogram("a", buckets=5), ValueError),
        (lambda: bv.event_type_mix("a", max_categories=0), ValueError),
        (lambda: bv.event_type_mix("a", categories=[1]), ValueError),
        (lambda: bv.event_type_mix("a", categories="ab"), ValueError),
        (lambda: bv.most_recent_n("a", n=0), ValueError),
        (lambda: bv.reservoir_sample("a", samples=0), ValueError),
        (lambda: bv.distance_from_home(lat="a", lon="b", samples=0), ValueError),
        # the server's own limits (docs/limits.md), refused before anything is sent
        (lambda: bv.most_recent_n("a", n=2**64), ValueError),
        (lambda: bv.reservoir_sample("a", samples=4097), ValueError),
        (lambda: bv.distance_from_home(lat="a", lon="b", samples=2**64), ValueError),
        (lambda: bv.event_type_mix("a", max_categories=2**64), ValueError),
        (lambda: bv.event_type_mix("a", categories=[str(i) for i in range(4097)]), ValueError),
        (lambda: bv.histogram("a", buckets=list(range(4097))), ValueError),
        (lambda: bv.outlier_count("a", window="1h", sigma=1e7), ValueError),
        (lambda: bv.bloom_member("a", expected_n=10**12), ValueError),
        (lambda: bv.bloom_member("a", expected_n=10**6, target_fpr=1e-300), ValueError),
        (lambda: bv.bloom_member("a", target_fpr=1e-10), ValueError),
        (lambda: bv.count(window=5), TypeError),
        (lambda: bv.count(window="0ms"), ValueError),
        (lambda: bv.count(window="05m"), ValueError),
        (lambda: bv.count(window="1w"), ValueError),
        (lambda: bv.count(window="1 h"), ValueError),
        (lambda: bv.count(window="Forever"), ValueError),
        (lambda: bv.count(window="99999999999999999999d"), ValueError),
        (lambda: bv.ewma("a", half_life="forever"), ValueError),
        (lambda: bv.ewma("a", half_life=None), ValueError),
        (lambda: bv.ewma("a", half_life="0s"), ValueError),
        (lambda: bv.ewma("a", half_life=60), TypeError),
        (lambda: bv.decayed_count(half_life="forever"), ValueError),
        (lambda: bv.burst_count(window="1h", sub_window="forever"), ValueError),
        (lambda: bv.burst_count(window="1h", sub_window=None), ValueError),
        (lambda: bv.burst_count(window=None, sub_window="1m"), ValueError),
        (lambda: bv.twa("a", window=None), ValueError),
        (lambda: bv.trend("a", window=None), ValueError),
        (lambda: bv.first_seen_in_window(window="forever"), ValueError),
        (lambda: bv.first_seen_in_window(window=None), ValueError),
        (lambda: bv.z_score("a", baseline_window=None), ValueError),
        (lambda: bv.z_score("a", baseline_window="1x"), ValueError),
        (lambda: bv.count(where="x > 1"), TypeError),
        (lambda: bv.sum("a", where=True), TypeError),
        (lambda: bv.lag("a"), TypeError),
        (lambda: bv.quantile("a"), TypeError),
        (lambda: bv.bloom_member("a", window="1h"), TypeError),
        (lambda: bv.first("a", window="1h"), TypeError),
        (lambda: bv.ewma("a", window="1h", half_life="1m"), TypeError),
    ],
)
def test_parameter_validation(call: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        call()


def test_lag_without_n_names_the_keyword() -> None:
    with pytest.raises(TypeError, match="'n'"):
        bv.lag("x")  # type: ignore[call-arg]


@pytest.mark.parametrize("call", [
    lambda: bv.geo_velocity(lat="", lon="lon"),
    lambda: bv.geo_distance(lat="lat", lon=bv.col("lon")),
    lambda: bv.geo_spread(lat=1, lon="lon"),
    lambda: bv.distance_from_home(lat="lat", lon=None),
])
def test_geo_fields_must_be_column_names(call: Any) -> None:
    with pytest.raises(bv.RegistrationError) as info:
        call()
    assert info.value.code == "schema_mismatch"


def test_validation_order_field_first() -> None:
    # field (1) is checked before op-specific params (2), durations (3) and where (4)
    with pytest.raises(bv.RegistrationError):
        bv.top_k(5, k=0, window="bad", where="bad")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k=0"):
        bv.top_k("a", k=0, window="bad", where="bad")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="window"):
        bv.top_k("a", k=1, window="bad", where="bad")  # type: ignore[arg-type]


def test_bounds_come_from_the_catalogue() -> None:
    k = CATALOGUE["top_k"].param("k")
    assert k is not None and k.bounds is not None
    hi = int(k.bounds.hi or 0)
    assert bv.top_k("a", k=hi).to_dict()["k"] == hi
    with pytest.raises(ValueError):
        bv.top_k("a", k=hi + 1)
    n = CATALOGUE["lag"].param("n")
    assert n is not None and n.bounds is not None
    assert bv.lag("a", n=int(n.bounds.hi or 0)).extras == {"n": 1024}


@pytest.mark.parametrize(
    ("alias", "call", "canonical", "message"),
    [
        ("avg", lambda: bv.avg("a", window="1h"), bv.mean("a", window="1h"),
         "bv.avg is deprecated; use bv.mean"),
        ("variance", lambda: bv.variance("a"), bv.var("a"),
         "bv.variance is deprecated; use bv.var"),
        ("stddev", lambda: bv.stddev("a", where=ok), bv.std("a", where=ok),
         "bv.stddev is deprecated; use bv.std"),
        ("count_distinct", lambda: bv.count_distinct("a"), bv.n_unique("a"),
         "bv.count_distinct is deprecated; use bv.n_unique"),
        ("percentile", lambda: bv.percentile("a", p=0.9, window="1h"),
         bv.quantile("a", q=0.9, window="1h"),
         "bv.percentile is deprecated; use bv.quantile(q=...)"),
    ],
)
def test_deprecated_aliases(alias: str, call: Any, canonical: AggDescriptor, message: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = call()
    assert got == canonical
    assert got.to_dict()["op"] != alias
    assert len(caught) == 1
    assert caught[0].category is DeprecationWarning
    assert str(caught[0].message) == message
    assert caught[0].filename == __file__  # stacklevel=2: the caller's line


def test_percentile_takes_a_fraction() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError):
            bv.percentile("a", p=99)
