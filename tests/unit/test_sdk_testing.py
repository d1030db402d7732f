"""beava.test: MockApp, replay, assert_features_eq (spec/sdk.md §11). ``fixture`` needs a
server and is tested in tests/integration/test_sdk_app.py."""

from __future__ import annotations

import inspect
import math
from typing import Any

import pytest

import beava as bv
from beava.test import MockApp, assert_features_eq, fixture, replay


@bv.event
class Click:
    user_id: str


def test_mock_app_records_every_call() -> None:
    app = MockApp("http://example", timeout=5.0, test_mode=True)
    assert app.register(Click, force=True) == {"status": "ok", "registry_version": 1}
    assert app.register(Click, dry_run=True) == {"status": "ok", "registry_version": 2}
    fields = {"user_id": "u1"}
    assert app.push("Click", fields) == {"ack_lsn": 3, "registry_version": 1}
    assert app.push_many("Click", iter([{"user_id": "a"}, {"user_id": "b"}])) == {
        "acks": 2, "ack_lsn": 4, "errors": [], "registry_version": 1}
    assert app.get("T", "u1") == {}
    assert app.batch_get([("T", "u1")]) == [{}]
    assert app.ping() == {"server_version": "0.0.0-mock", "registry_version": 2}
    app.reset()
    assert app._calls == [
        ("register", (Click,), {"force": True, "dry_run": False}),
        ("register", (Click,), {"force": False, "dry_run": True}),
        ("push", "Click", {"user_id": "u1"}),
        ("push_many", "Click", [{"user_id": "a"}, {"user_id": "b"}]),
        ("get", "T", "u1"),
        ("batch_get", [("T", "u1")]),
        ("ping",),
        ("reset",),
    ]
    assert app._registered == [(Click,), (Click,)]
    fields["user_id"] = "changed"
    assert app._calls[2][2] == {"user_id": "u1"}  # a copy was recorded


def test_mock_app_canned_rows() -> None:
    app = MockApp()
    app._set_get_response("T", "u1", {"a": 1, "b": 2.5})
    app._set_get_response("T", ["u1", 7], {"a": 3})
    app._set_get_response("G", None, {"total": 9})
    assert app.get("T", "u1") == {"a": 1, "b": 2.5}
    assert app.get("T", "u1", features=["b", "zz"]) == {"b": 2.5}
    assert app.get("T", ["u1", 7]) == {"a": 3}
    assert app.get("T", ("u1", 7)) == {"a": 3}
    assert app.get("G") == {"total": 9}
    assert app.get("T", "u2") == {}
    assert app.batch_get([("T", "u1", ["a"]), ("G", None), ("T", "nope")]) == [
        {"a": 1}, {"total": 9}, {}]
    with pytest.raises(TypeError):
        app.batch_get([["T", "u1"]])  # type: ignore[list-item]
    app.reset()
    assert app.get("T", "u1") == {}


def test_mock_app_context_manager() -> None:
    with MockApp() as app:
        assert app._closed is False
    assert app._closed is True


# Pinning the server's clock needs a server: a mock's canned rows do not depend on time.
SERVER_ONLY = {"set_time", "advance"}


def test_mock_app_has_the_app_method_set() -> None:
    public = {n for n in dir(bv.App) if not n.startswith("_")} - SERVER_ONLY
    assert public <= {n for n in dir(MockApp) if not n.startswith("_")}
    for name in public:
        app_params = list(inspect.signature(getattr(bv.App, name)).parameters)
        mock_params = list(inspect.signature(getattr(MockApp, name)).parameters)
        assert app_params == mock_params, name


def test_replay_pushes_in_order() -> None:
    app = MockApp()
    replay(app, [{"_event": "Click", "user_id": "a"}, {"_event": "Buy", "amount": 2.0}])
    assert app._calls == [("push", "Click", {"user_id": "a"}), ("push", "Buy", {"amount": 2.0})]


def test_replay_requires_the_event_key() -> None:
    app = MockApp()
    with pytest.raises(ValueError, match="replay event missing '_event' key: "):
        replay(app, [{"_event": "Click", "user_id": "a"}, {"user_id": "b"}])
    assert len(app._calls) == 1


def test_replay_demo_events() -> None:
    app = MockApp()
    events = bv.demo("adtech")["events"]
    replay(app, events)
    assert len(app._calls) == len(events)
    assert {c[1] for c in app._calls} == {"Impression", "Click"}


@pytest.mark.parametrize(("got", "want"), [
    ({}, {}),
    ({"a": 1, "b": "x", "c": None, "d": [1]}, {"a": 1, "b": "x", "c": None, "d": [1]}),
    ({"a": 0.1 + 0.2}, {"a": 0.3}),
    ({"a": 1}, {"a": 1.0}),
    ({"a": 1.0}, {"a": 1}),
    ({"a": 0.0}, {"a": 1e-13}),
    ({"a": True}, {"a": True}),
])
def test_assert_features_eq_passes(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert_features_eq(got, want)


@pytest.mark.parametrize(("got", "want", "text"), [
    ({"a": 1}, {"b": 1}, "missing ['b'], extra ['a']"),
    ({"a": 1, "c": 2}, {"a": 1}, "missing [], extra ['c']"),
    ({"a": 1.0}, {"a": 1.1}, "feature 'a': got 1.0, want 1.1"),
    ({"a": None}, {"a": 1.5}, "feature 'a': got None, want 1.5"),
    ({"a": 1.5}, {"a": None}, "feature 'a'"),
    ({"a": True}, {"a": 1.0}, "feature 'a'"),
    ({"a": "1.0"}, {"a": 1.0}, "feature 'a'"),
    ({"a": math.nan}, {"a": math.nan}, "feature 'a'"),
    ({"a": [1]}, {"a": [2]}, "feature 'a'"),
    ({"a": 1}, {"a": 2}, "got 1, want 2"),
])
def test_assert_features_eq_fails(got: dict[str, Any], want: dict[str, Any], text: str) -> None:
    with pytest.raises(AssertionError) as info:
        assert_features_eq(got, want)
    assert text in str(info.value)


def test_assert_features_eq_tolerances() -> None:
    assert_features_eq({"a": 100.0}, {"a": 101.0}, rel_tol=0.01)
    with pytest.raises(AssertionError):
        assert_features_eq({"a": 100.0}, {"a": 101.0}, rel_tol=0.001)
    assert_features_eq({"a": 0.0}, {"a": 0.5}, abs_tol=0.5)


def test_fixture_is_a_generator_function() -> None:
    assert inspect.isgeneratorfunction(fixture)
    params = inspect.signature(fixture).parameters
    assert list(params) == ["reset_each", "test_mode", "url", "timeout"]
    assert all(p.kind is p.KEYWORD_ONLY for p in params.values())


def test_mock_app_describe_lists_the_last_registration() -> None:
    @bv.table(key="user_id")
    def Clicks(c: Click) -> bv.Table:
        return c.group_by("user_id").agg(n=bv.count(window="1h"))

    app = MockApp()
    assert app.describe() == {"version": 0, "node_count": 0, "nodes": []}
    app.register(Clicks)
    doc = app.describe()
    assert doc["version"] == 1 and doc["node_count"] == 2
    event, table = doc["nodes"]
    assert event == {"kind": "event", "name": "Click", "fields": {"user_id": "str"},
                     "optional_fields": [], "defaults": {}}
    assert table["kind"] == "table" and table["keys"] == ["user_id"]
    assert table["features"] == {"n": {"op": "count", "params": {}, "window": "1h"}}
    assert app._calls[-1] == ("describe",)
