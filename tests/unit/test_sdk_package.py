"""Package surface (spec/sdk.md §1), lazy loading, exceptions (§10) and bv.demo."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import beava as bv

REPO = Path(__file__).resolve().parents[2]

OPERATORS = [
    "count", "sum", "mean", "min", "max", "var", "std", "ratio", "n_unique", "quantile", "top_k",
    "bloom_member", "entropy", "first", "last", "first_n", "last_n", "lag", "first_seen",
    "last_seen", "age", "has_seen", "time_since", "time_since_last_n", "streak", "max_streak",
    "negative_streak", "first_seen_in_window", "ewma", "ewvar", "ew_zscore", "decayed_sum",
    "decayed_count", "twa", "rate_of_change", "inter_arrival_stats", "burst_count",
    "delta_from_prev", "trend", "trend_residual", "outlier_count", "value_change_count", "z_score",
    "histogram", "hour_of_day_histogram", "dow_hour_histogram", "seasonal_deviation",
    "event_type_mix", "most_recent_n", "reservoir_sample", "geo_velocity", "geo_distance",
    "geo_spread", "distance_from_home",
]


def test_all_is_exactly_the_spec_list() -> None:
    expected = {
        "event", "table", "col", "lit", "App", "AsyncApp", *OPERATORS, "ema",
        "avg", "variance", "stddev", "count_distinct", "percentile",
        "RegistrationError", "ValidationError", "BinaryNotFoundError", "TransportError",
        "DescriptorError", "Event", "Table", "session", "union", "demo",
        "compile_register_payload",
    }
    assert len(OPERATORS) == 54
    assert set(bv.__all__) == expected
    assert len(bv.__all__) == len(expected)
    for name in bv.__all__:
        assert getattr(bv, name) is not None
    assert "VALIDATION_ERROR_KINDS" not in bv.__all__


def test_version() -> None:
    assert bv.__version__ == "0.1.0"


@pytest.mark.parametrize("name", ["fork", "upsert", "Session", "join", "_missing"])
def test_unknown_names(name: str) -> None:
    with pytest.raises(AttributeError):
        getattr(bv, name)


def test_builtins_are_shadowed_only_in_the_namespace() -> None:
    assert bv.sum is not sum and bv.min is not min and bv.max is not max
    assert sum([1, 2]) == 3


def test_star_import_and_dir() -> None:
    namespace: dict[str, object] = {}
    exec("from beava import *", namespace)
    assert set(bv.__all__) <= set(namespace)
    assert set(bv.__all__) <= set(dir(bv))


def test_importing_beava_loads_no_sdk_module() -> None:
    code = (
        "import sys, beava\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('beava.', 'beava_client', "
        "'msgspec')))\n"
        "print(loaded)\n"
        "beava.col\n"
        "print('beava.dsl.expressions' in sys.modules, 'beava.app' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out == ["[]", "True False"]


def test_the_dsl_does_not_load_the_wire_client() -> None:
    code = (
        "import sys, beava as bv\n"
        "@bv.event\n"
        "class E:\n"
        "    a: int\n"
        "bv.compile_register_payload(E)\n"
        "print('beava_client' in sys.modules, 'socket' in sys.modules)\n"
        "bv.TransportError\n"
        "print('beava_client' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out == ["False False", "True"]


def test_validation_error_kinds() -> None:
    expected = {"cycle", "missing_upstream", "schema_mismatch", "bad_return_type",
                "unknown_field_type", "table_key_invalid", "registration_conflict",
                "duplicate_name"}
    assert isinstance(bv.VALIDATION_ERROR_KINDS, frozenset)
    assert expected == bv.VALIDATION_ERROR_KINDS


def test_registration_error() -> None:
    e = bv.RegistrationError(code="force_required", path="nodes[0]", message="needs force")
    assert (e.code, e.path, e.message, e.errors, e.details) == (
        "force_required", "nodes[0]", "needs force", [], {})
    assert str(e) == "[force_required] nodes[0]: needs force"
    assert str(bv.RegistrationError(code="x", message="m")) == "[x] m"
    assert isinstance(e, Exception) and not isinstance(e, TypeError)
    with pytest.raises(TypeError):
        bv.RegistrationError("positional")  # type: ignore[misc]
    v = bv.ValidationError("cycle", "a.b", "loop")
    e2 = bv.RegistrationError(code="c", errors=[v], details={"k": 1})
    assert e2.errors == [v] and e2.details == {"k": 1}
    copy = pickle.loads(pickle.dumps(e2))
    assert (type(copy), copy.code, copy.errors, copy.details) == (
        bv.RegistrationError, "c", [v], {"k": 1})


def test_descriptor_error_is_also_a_type_error() -> None:
    e = bv.DescriptorError(code="bad_return_type", path="F", message="m")
    assert isinstance(e, bv.RegistrationError) and isinstance(e, TypeError)
    assert str(e) == "[bad_return_type] F: m"
    assert type(pickle.loads(pickle.dumps(e))) is bv.DescriptorError


def test_validation_error_dataclass() -> None:
    v = bv.ValidationError("cycle", "nodes[1]", "A -> B -> A")
    assert str(v) == "[cycle] nodes[1]: A -> B -> A"
    with pytest.raises(AttributeError):
        v.kind = "x"  # type: ignore[misc]
    assert not isinstance(v, BaseException)


def test_other_error_classes() -> None:
    assert issubclass(bv.BinaryNotFoundError, Exception)
    assert issubclass(bv.TransportError, ConnectionError)


def test_markers() -> None:
    assert isinstance(bv.Event, type) and isinstance(bv.Table, type)


# -- demo ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["adtech", "fraud", "ecommerce"])
def test_demo_datasets(name: str) -> None:
    data = bv.demo(name)
    assert set(data) == {"name", "schema", "events"}
    assert data["name"] == name
    assert data == bv.demo(name)  # deterministic
    assert len(data["events"]) >= 500
    wire_types = {"str", "i64", "f64", "bool"}
    for event in data["events"]:
        fields = data["schema"][event["_event"]]
        assert set(event) - {"_event"} == set(fields)
        for field, typ in fields.items():
            assert typ in wire_types
            value = event[field]
            expected = {"str": str, "i64": int, "f64": float, "bool": bool}[typ]
            assert type(value) is expected, (field, value)


def test_demo_returns_fresh_data() -> None:
    first = bv.demo("fraud")
    first["events"].clear()
    assert bv.demo("fraud")["events"]


def test_demo_fraud_content() -> None:
    events = bv.demo("fraud")["events"]
    assert events[0]["_event"] == "Txn"
    assert sum(e["is_fraud"] for e in events) > 10
    assert len({e["user_id"] for e in events}) == 40


@pytest.mark.parametrize("name", ["nope", "", "Fraud", None])
def test_demo_unknown_name(name: object) -> None:
    with pytest.raises(ValueError, match="adtech, ecommerce, fraud"):
        bv.demo(name)  # type: ignore[arg-type]
