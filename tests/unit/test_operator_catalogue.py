"""The operator catalogue against spec/operators.md §2, §5, §9 and registry.md §3.4, §7.3, §13."""

from __future__ import annotations

import pytest

from beava.catalogue.operators import (
    CATALOGUE,
    OPERATOR_NAMES,
    RECOGNISED_PARAMS,
    FieldUse,
    MemoryClass,
    WindowMode,
    canonical_op,
    lookup,
    normalise_params,
    parse_duration,
    resolve_params,
)


def words(text: str) -> list[str]:
    return text.split()


# registry.md §3.4, in that order
SPEC_OPS = words(
    "count sum mean min max var std ratio n_unique first last quantile top_k bloom_member "
    "entropy histogram hour_of_day_histogram dow_hour_histogram event_type_mix most_recent_n "
    "reservoir_sample first_n last_n lag first_seen last_seen age has_seen time_since "
    "time_since_last_n streak max_streak negative_streak first_seen_in_window ewma ewvar "
    "ew_zscore decayed_sum decayed_count twa rate_of_change inter_arrival_stats burst_count "
    "delta_from_prev trend trend_residual outlier_count value_change_count z_score "
    "geo_velocity geo_distance geo_spread distance_from_home seasonal_deviation"
)


def ops_where(predicate) -> set[str]:
    return {name for name, spec in CATALOGUE.items() if predicate(spec)}


def test_catalogue_has_exactly_the_54_operators() -> None:
    assert len(OPERATOR_NAMES) == 54
    assert set(OPERATOR_NAMES) == set(SPEC_OPS)
    assert list(CATALOGUE) == list(OPERATOR_NAMES)


def test_ema_is_an_alias_of_ewma_and_deprecated_sdk_names_are_unknown() -> None:
    assert lookup("ema") is CATALOGUE["ewma"]
    assert canonical_op("ema") == "ewma"
    assert canonical_op("count") == "count"
    assert "ema" not in CATALOGUE
    for name in ("avg", "variance", "stddev", "count_distinct", "percentile", "Count", ""):
        assert lookup(name) is None


def test_window_modes_follow_operators_md_section_5() -> None:
    assert ops_where(lambda s: s.window is WindowMode.WINDOWED) == set(words(
        "count sum mean min max var std ratio n_unique quantile top_k entropy")
    )
    assert ops_where(lambda s: s.window is WindowMode.REQUIRED) == {"first_seen_in_window"}
    assert ops_where(lambda s: s.window is WindowMode.UNSUPPORTED) == {"bloom_member"}
    assert ops_where(lambda s: s.window is WindowMode.IGNORED) == set(words(
        "ewma ewvar ew_zscore decayed_sum decayed_count twa rate_of_change inter_arrival_stats "
        "burst_count delta_from_prev trend trend_residual outlier_count value_change_count "
        "z_score")
    )
    # registry.md R11.9 list of lifetime-only ops
    assert ops_where(lambda s: s.window is WindowMode.LIFETIME_ONLY) == set(words(
        "first last first_n last_n lag first_seen last_seen age has_seen time_since "
        "time_since_last_n streak max_streak negative_streak histogram hour_of_day_histogram "
        "dow_hour_histogram seasonal_deviation event_type_mix most_recent_n reservoir_sample "
        "geo_velocity geo_distance geo_spread distance_from_home")
    )


def test_memory_classes_follow_registry_md_section_13() -> None:
    assert ops_where(lambda s: s.memory is MemoryClass.BOUNDED_SKETCH) == {
        "n_unique", "quantile", "bloom_member",
    }
    by_config = {
        (n, s.memory_param, s.memory_default)
        for n, s in CATALOGUE.items() if s.memory is MemoryClass.BOUNDED_BY_CONFIG
    }
    assert by_config == {
        ("entropy", "max_categories", 256), ("event_type_mix", "max_categories", 256),
        ("top_k", "k", 10), ("distance_from_home", "samples", 100),
    }
    by_param = {
        (n, s.memory_param) for n, s in CATALOGUE.items()
        if s.memory is MemoryClass.BOUNDED_BY_PARAM
    }
    assert by_param == {
        ("first_n", "n"), ("last_n", "n"), ("lag", "n"), ("time_since_last_n", "n"),
        ("most_recent_n", "n"), ("reservoir_sample", "samples"), ("histogram", "buckets"),
    }
    assert len(ops_where(lambda s: s.memory is MemoryClass.O1)) == 54 - 3 - 4 - 7
    assert {n for n, s in CATALOGUE.items() if s.lifetime_bound() is not None} == {
        n for n, _ in by_param
    }
    assert CATALOGUE["histogram"].lifetime_bound().name == "buckets"
    assert CATALOGUE["top_k"].lifetime_bound() is None


def test_field_use_follows_r11_7() -> None:
    assert ops_where(lambda s: s.field is FieldUse.REQUIRED) == {
        "first", "last", "first_n", "last_n", "lag",
    }
    assert ops_where(lambda s: s.field is FieldUse.CHECKED) == set(words(
        "sum mean min max var std ewma ewvar ew_zscore decayed_sum twa rate_of_change "
        "delta_from_prev trend trend_residual outlier_count value_change_count z_score "
        "n_unique quantile top_k bloom_member entropy")
    )
    assert ops_where(lambda s: s.field is FieldUse.UNCHECKED) == {
        "histogram", "event_type_mix", "most_recent_n", "reservoir_sample", "seasonal_deviation",
    }


def test_required_params_and_bounds() -> None:
    for name in ("ewma", "ewvar", "ew_zscore", "decayed_sum", "decayed_count"):
        assert CATALOGUE[name].param("half_life").required
    assert CATALOGUE["burst_count"].param("sub_window").required
    for name in ("first_n", "last_n", "lag", "time_since_last_n"):
        n = CATALOGUE[name].param("n")
        assert n.required and n.bounds.code == "aggregation_unknown_field"
        assert n.bounds.contains(1) and n.bounds.contains(1024)
        assert not n.bounds.contains(0) and not n.bounds.contains(1025)
    assert not CATALOGUE["most_recent_n"].param("n").required
    q = CATALOGUE["quantile"].param("q").bounds
    assert q.code == "invalid_percentile_q"
    assert q.contains(0.5) and not q.contains(0) and not q.contains(1) and not q.contains(1.5)
    k = CATALOGUE["top_k"].param("k").bounds
    assert k.code == "invalid_top_k_k" and k.contains(1024) and not k.contains(0)
    fpr = CATALOGUE["bloom_member"].param("target_fpr").bounds
    assert fpr.code == "invalid_bloom_fpr" and fpr.contains(0.01) and not fpr.contains(1.0)


def test_output_types() -> None:
    assert CATALOGUE["count"].output == "i64" and CATALOGUE["count"].wire_type == "i64"
    assert CATALOGUE["sum"].output == "f64"
    assert CATALOGUE["min"].output == "inherits" and CATALOGUE["min"].wire_type is None
    assert CATALOGUE["top_k"].output == "top_k" and CATALOGUE["top_k"].wire_type == "str"
    assert CATALOGUE["first_seen"].output == "epoch_ms"
    assert CATALOGUE["bloom_member"].output == "bool"
    assert CATALOGUE["hour_of_day_histogram"].output == "i64_list"
    assert CATALOGUE["event_type_mix"].output == "map"


@pytest.mark.parametrize("text, ms", [
    ("1ms", 1), ("5s", 5_000), ("05s", 5_000), ("2m", 120_000), ("1h", 3_600_000),
    ("7d", 604_800_000), ("9223372036854775807ms", (1 << 63) - 1), ("forever", None),
])
def test_parse_duration_accepts(text: str, ms: int | None) -> None:
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", [
    "", "0ms", "0s", "1w", "1.5h", " 1h", "1h ", "1 h", "1H", "h", "1", "-1h", "+1h",
    "Forever", "1h\n", "\u0661h", "9223372036854775808ms", "106751991167301d",
])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_recognised_params_are_the_registry_md_list() -> None:
    assert list(RECOGNISED_PARAMS) == [
        "field", "window", "where", "n", "half_life", "sub_window", "sigma", "q", "k",
        "expected_n", "target_fpr", "buckets", "precision", "lat_field", "lon_field",
        "samples", "categories", "max_categories",
    ]


def test_normalise_params_drops_unknown_and_wrong_types() -> None:
    raw = {
        "field": 5, "window": 3600, "n": "5", "k": -1, "q": True, "samples": 2.0,
        "sigma": 2, "where": "(x > 1)", "baseline_window": "1h", "half_life": "1m",
        "expected_n": False,
    }
    assert normalise_params(raw) == {"sigma": 2, "where": "(x > 1)", "half_life": "1m"}
    assert normalise_params(None) == {}


def test_normalise_params_folds_aliases_primary_wins() -> None:
    assert normalise_params({"fpr": 0.1, "capacity": 10, "lat": "a", "lon": "b"}) == {
        "target_fpr": 0.1, "expected_n": 10, "lat_field": "a", "lon_field": "b",
    }
    assert normalise_params({"fpr": 0.1, "target_fpr": 0.2}) == {"target_fpr": 0.2}
    assert normalise_params({"target_fpr": 0.2, "fpr": 0.1}) == {"target_fpr": 0.2}
    # a wrong-typed primary counts as absent, so the alias is used
    assert normalise_params({"target_fpr": "x", "fpr": 0.1}) == {"target_fpr": 0.1}


def test_normalise_params_filters_array_entries() -> None:
    assert normalise_params({"buckets": [1, "a", 2.5, True, None]}) == {"buckets": [1, 2.5]}
    assert normalise_params({"categories": ["a", 1, "b"]}) == {"categories": ["a", "b"]}
    assert normalise_params({"buckets": "1,2"}) == {}


def test_resolve_params_fills_defaults() -> None:
    def resolve(op: str, params: dict) -> dict:
        return resolve_params(CATALOGUE[op], normalise_params(params))

    assert resolve("quantile", {"field": "x"}) == {"field": "x", "q": 0.5, "where": None}
    assert resolve("top_k", {"field": "x", "k": -1}) == {"field": "x", "k": 10, "where": None}
    assert resolve("bloom_member", {"field": "x", "fpr": 0.1}) == {
        "field": "x", "expected_n": 1024, "target_fpr": 0.1, "where": None,
    }
    assert resolve("outlier_count", {"field": "x"})["sigma"] == 3.0
    assert resolve("event_type_mix", {"field": "s"}) == {
        "field": "s", "max_categories": 256, "categories": None, "where": None,
    }
    assert resolve("event_type_mix", {"categories": ["b", 2, "zz"]})["categories"] == ("b", "zz")
    assert resolve("most_recent_n", {"field": "x"})["n"] == 10
    assert resolve("reservoir_sample", {"field": "x", "k": 3})["samples"] == 3
    assert resolve("reservoir_sample", {"field": "x", "k": 3, "samples": 2})["samples"] == 2
    assert resolve("distance_from_home", {"lat": "la"}) == {
        "lat_field": "la", "lon_field": "lon", "samples": 100, "where": None,
    }
    assert resolve("histogram", {"field": "a", "buckets": [0.5, 10, 100]})["buckets"] == (
        0.5, 10, 100,
    )
    assert resolve("histogram", {"field": "a"})["buckets"] == ()
    assert resolve("count", {"field": "x", "sigma": 1.0, "where": "ok"}) == {"where": "ok"}


def test_resolve_params_converts_durations() -> None:
    assert resolve_params(CATALOGUE["ewma"], {"field": "x", "half_life": "10m"}) == {
        "field": "x", "half_life": 600_000, "where": None,
    }
    assert resolve_params(CATALOGUE["burst_count"], {"sub_window": "5s"})["sub_window"] == 5_000
    fsw = CATALOGUE["first_seen_in_window"]
    assert resolve_params(fsw, {"window": "1h"}) == {"where": None, "window": 3_600_000}
    assert resolve_params(fsw, {"window": "forever"})["window"] == 0
