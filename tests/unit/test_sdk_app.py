"""bv.App / bv.AsyncApp without a server: arguments, client-side checks, key encoding and
error mapping (spec/sdk.md §8-§9)."""

from __future__ import annotations

import socket
import warnings
from typing import Any

import pytest

import beava as bv
from beava.app import App
from beava_client import ServerError, error_from_reply


def dead_port() -> int:
    """A local port with nothing listening."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Recorder:
    """A stand-in backend: records calls, answers canned values or raises."""

    def __init__(self, answer: Any = None, error: Exception | None = None) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.closed = 0
        self.answer = {} if answer is None else answer
        self.error = error

    def _do(self, *call: Any) -> Any:
        self.calls.append(call)
        if self.error is not None:
            raise self.error
        return self.answer

    def register(self, payload: Any, **kw: Any) -> Any:
        return self._do("register", payload, kw)

    def push(self, event: str, body: Any) -> Any:
        return self._do("push", event, body)

    def push_many(self, event: str, rows: Any, *, chunk_size: int = 1000) -> Any:
        return self._do("push_many", event, rows, chunk_size)

    def get(self, table: str, key: Any = None, features: Any = None) -> Any:
        return self._do("get", table, key, features)

    def batch_get(self, requests: Any) -> Any:
        return self._do("batch_get", list(requests))

    def ping(self) -> Any:
        return self._do("ping")

    def reset(self) -> Any:
        return self._do("reset")

    def close(self) -> None:
        self.closed += 1


def app_with(recorder: Recorder) -> App:
    app = bv.App("tcp://127.0.0.1:1")
    app._backend = recorder  # type: ignore[assignment]
    return app


# -- constructor -----------------------------------------------------------------------------


def test_constructor_does_no_io() -> None:
    app = bv.App(f"tcp://127.0.0.1:{dead_port()}")
    app.close()
    bv.App()  # embed mode: nothing is spawned by the constructor
    bv.App("http://127.0.0.1:1")


@pytest.mark.parametrize("url", ["ws://x", "ftp://h:1", "localhost:8080"])
def test_unsupported_scheme(url: str) -> None:
    scheme = url.split("://")[0] if "://" in url else "localhost"
    with pytest.raises(ValueError, match=f"unsupported URL scheme: '{scheme}'"):
        bv.App(url)


def test_ws_message_exactly() -> None:
    with pytest.raises(ValueError) as info:
        bv.App("ws://host:1")
    assert str(info.value) == "unsupported URL scheme: 'ws'"


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"pool_size": 0}, ValueError), ({"pool_size": 1.5}, TypeError), ({"timeout": 0}, ValueError),
    ({"timeout": -1}, ValueError), ({"timeout": "1"}, TypeError),
])
def test_bad_options(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        bv.App("tcp://127.0.0.1:1", **kwargs)
    with pytest.raises(error):
        bv.AsyncApp("tcp://127.0.0.1:1", **kwargs)


def test_async_max_in_flight() -> None:
    with pytest.raises(ValueError):
        bv.AsyncApp("tcp://127.0.0.1:1", max_in_flight=0)


def test_test_mode_with_url_warns() -> None:
    with pytest.warns(UserWarning, match="test_mode") as sync_caught:
        bv.App("http://127.0.0.1:1", test_mode=True)
    with pytest.warns(UserWarning) as async_caught:
        bv.AsyncApp("tcp://127.0.0.1:1", test_mode=True)
    # the warning points at the line that built the App
    assert [w.filename for w in (*sync_caught, *async_caught)] == [__file__, __file__]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bv.App(test_mode=True)
        bv.App("http://127.0.0.1:1")


async def test_repr_names_the_class_the_endpoint_and_closed() -> None:
    app = bv.App("tcp://127.0.0.1:1")
    assert repr(app) == "<bv.App tcp://127.0.0.1:1>"
    app.close()
    assert repr(app) == "<bv.App tcp://127.0.0.1:1 closed>"
    assert repr(bv.App()) == "<bv.App embed>"
    async_app = bv.AsyncApp("http://127.0.0.1:1")
    assert repr(async_app) == "<bv.AsyncApp http://127.0.0.1:1>"
    await async_app.close()
    assert repr(async_app) == "<bv.AsyncApp http://127.0.0.1:1 closed>"


def test_embed_mode_requires_with() -> None:
    app = bv.App()
    with pytest.raises(RuntimeError) as info:
        app.ping()
    assert str(info.value).startswith("Embed mode requires use as a context manager")


def test_close_is_idempotent_and_final() -> None:
    recorder = Recorder()
    app = app_with(recorder)
    app.close()
    app.close()
    assert recorder.closed == 1
    for call in (app.ping, app.reset, lambda: app.get("T", "k"), lambda: app.push("E", {}),
                 lambda: app.register()):
        with pytest.raises(RuntimeError, match="App is closed"):
            call()
    with pytest.raises(RuntimeError, match="App is closed"), app:
        pass


def test_transport_failure_is_a_connection_error() -> None:
    with pytest.raises(bv.TransportError) as info:
        bv.App(f"tcp://127.0.0.1:{dead_port()}", timeout=2).ping()
    assert isinstance(info.value, ConnectionError)
    with pytest.raises(ConnectionError):
        bv.App(f"http://127.0.0.1:{dead_port()}", timeout=2).ping()


def test_binary_not_found(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("BEAVA_BINARY", str(tmp_path / "missing"))
    with pytest.raises(bv.BinaryNotFoundError, match="BEAVA_BINARY"), bv.App():
        pass
    plain = tmp_path / "not-executable"
    plain.write_text("#!/bin/sh\n")
    monkeypatch.setenv("BEAVA_BINARY", str(plain))
    with pytest.raises(bv.BinaryNotFoundError), bv.App():
        pass


# -- push checks -------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "fields", "error"), [
    (1, {}, TypeError),
    (None, {}, TypeError),
    ("E", [("a", 1)], TypeError),
    ("E", None, TypeError),
    ("E", {1: "a"}, TypeError),
    ("E", {"a": float("nan")}, ValueError),
    ("E", {"a": float("inf")}, ValueError),
    ("E", {"a": -float("inf")}, ValueError),
    ("E", {"a": [1.0, float("nan")]}, ValueError),
    ("E", {"a": {"b": float("inf")}}, ValueError),
    ("E", {"a": object()}, TypeError),
    ("E", {"a": {1, 2}}, TypeError),
    ("E", {"a": b"bytes"}, TypeError),
    ("E", {"a": {1: "x"}}, TypeError),
])
def test_push_checks_before_sending(name: Any, fields: Any, error: type[Exception]) -> None:
    recorder = Recorder()
    app = app_with(recorder)
    with pytest.raises(error):
        app.push(name, fields)
    with pytest.raises(error):
        app.push_many(name, [fields])
    assert recorder.calls == []


def test_push_sends_plain_dicts() -> None:
    from types import MappingProxyType

    recorder = Recorder(answer={"ack_lsn": 1})
    app = app_with(recorder)
    assert app.push("E", MappingProxyType({"a": 1.5, "b": None, "c": [1, "x"]})) == {"ack_lsn": 1}
    assert recorder.calls == [("push", "E", {"a": 1.5, "b": None, "c": [1, "x"]})]
    assert type(recorder.calls[0][2]) is dict


@pytest.mark.parametrize("size", [0, 10_001, -1, 1.5, True, "10"])
def test_push_many_chunk_size(size: Any) -> None:
    recorder = Recorder()
    with pytest.raises(ValueError, match="chunk_size"):
        app_with(recorder).push_many("E", [{"a": 1}], chunk_size=size)
    assert recorder.calls == []


def test_push_many_materialises_rows() -> None:
    recorder = Recorder(answer={"acks": 2})
    rows = ({"i": i} for i in range(2))
    app_with(recorder).push_many("E", rows, chunk_size=10_000)
    assert recorder.calls == [("push_many", "E", [{"i": 0}, {"i": 1}], 10_000)]


# -- keys --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "sent"), [
    (None, ""), ("alice", "alice"), ("alice|m1", "alice|m1"), (7, "7"), (-3, "-3"),
    (True, "true"), (False, "false"), (["alice", 7], "alice|7"), (("a", True), "a|true"),
    (["a|b", "c"], ["a|b", "c"]), (["x"], "x"), ([], ""),
])
def test_key_encoding(key: Any, sent: Any) -> None:
    recorder = Recorder()
    app = app_with(recorder)
    app.get("T", key)
    app.batch_get([("T", key), ("T", key, ["f"])])
    assert recorder.calls[0] == ("get", "T", sent, None)
    assert recorder.calls[1] == ("batch_get", [("T", sent, None), ("T", sent, ["f"])])


def test_global_get_default() -> None:
    recorder = Recorder()
    app_with(recorder).get("G")
    assert recorder.calls == [("get", "G", "", None)]


@pytest.mark.parametrize("key", [1.5, ["a", 1.5], {"a": 1}, object(), [["a"]]])
def test_bad_keys(key: Any) -> None:
    recorder = Recorder()
    app = app_with(recorder)
    with pytest.raises(TypeError):
        app.get("T", key)
    with pytest.raises(TypeError):
        app.batch_get([("T", key)])
    assert recorder.calls == []


def test_features_argument() -> None:
    recorder = Recorder()
    app = app_with(recorder)
    app.get("T", "k", features=("a", "b"))
    app.get("T", "k", features=[])
    assert recorder.calls == [("get", "T", "k", ["a", "b"]), ("get", "T", "k", [])]
    with pytest.raises(TypeError):
        app.get("T", "k", features="a")
    with pytest.raises(TypeError):
        app.get("T", "k", features=[1])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        app.get(1, "k")  # type: ignore[arg-type]


@pytest.mark.parametrize("entry", [["T", "k"], ("T",), ("T", "k", None, 1), "T", {"table": "T"}])
def test_batch_get_entries(entry: Any) -> None:
    with pytest.raises(TypeError):
        app_with(Recorder()).batch_get([entry])


# -- error mapping -----------------------------------------------------------------------------


def test_server_errors_become_registration_errors() -> None:
    body = (b'{"error":{"code":"force_required","path":"nodes[0]","reason":"needs force",'
            b'"diff":{"destructive":[1]}},"registry_version":3,"changed":[]}')
    recorder = Recorder(error=error_from_reply(body, status=409))
    app = app_with(recorder)
    with pytest.raises(bv.RegistrationError) as info:
        app.register()
    e = info.value
    assert (e.code, e.path, e.message) == ("force_required", "nodes[0]", "needs force")
    assert e.details == {"error": {"code": "force_required", "path": "nodes[0]",
                                   "reason": "needs force", "diff": {"destructive": [1]}},
                         "registry_version": 3, "changed": []}
    assert e.details["error"]["diff"] == {"destructive": [1]}
    assert str(e) == "[force_required] nodes[0]: needs force"
    assert not hasattr(e, "status")
    assert isinstance(e.__cause__, ServerError)


@pytest.mark.parametrize("method", ["push", "get", "batch_get", "ping", "reset", "push_many"])
def test_every_method_maps_server_errors(method: str) -> None:
    recorder = Recorder(error=error_from_reply(b'{"code":"unsupported"}'))
    app = app_with(recorder)
    calls = {"push": lambda: app.push("E", {}), "get": lambda: app.get("T"),
             "batch_get": lambda: app.batch_get([("T", "k")]), "ping": app.ping,
             "reset": app.reset, "push_many": lambda: app.push_many("E", [{}])}
    with pytest.raises(bv.RegistrationError) as info:
        calls[method]()
    assert info.value.code == "unsupported"
    assert info.value.details == {"code": "unsupported"}


def test_message_falls_back_to_message_field() -> None:
    err = error_from_reply(b'{"error":{"code":"unknown_table","message":"no such table"}}')
    with pytest.raises(bv.RegistrationError) as info:
        app_with(Recorder(error=err)).get("T")
    assert (info.value.message, info.value.path) == ("no such table", "")
    assert str(info.value) == "[unknown_table] no such table"


def test_unparseable_error_body() -> None:
    err = error_from_reply(b"<html>" + b"x" * 500, status=502)
    with pytest.raises(bv.RegistrationError) as info:
        app_with(Recorder(error=err)).ping()
    assert info.value.code == "unparseable_error"
    assert info.value.details == {}
    assert len(info.value.message) == 200 and info.value.message.startswith("<html>")


def test_missing_code_is_unknown() -> None:
    err = error_from_reply(b'{"error":{"reason":"?"}}')
    with pytest.raises(bv.RegistrationError) as info:
        app_with(Recorder(error=err)).ping()
    assert info.value.code == "unknown"


def test_push_many_chunk_rejection_carries_acked_before() -> None:
    err = error_from_reply(b'{"error":{"code":"batch_too_large"},"registry_version":1}')
    err.acked_before = 2000
    with pytest.raises(bv.RegistrationError) as info:
        app_with(Recorder(error=err)).push_many("E", [{"a": 1}])
    assert info.value.details["acked_before"] == 2000
    assert info.value.details["error"] == {"code": "batch_too_large"}


def test_reset_returns_none() -> None:
    recorder = Recorder(answer={"reset": True, "registry_version": 0})
    assert app_with(recorder).reset() is None


def test_register_compiles_before_io() -> None:
    @bv.event
    class Ev:
        a: int

    recorder = Recorder(answer={"status": "ok"})
    app = app_with(recorder)
    assert app.register(Ev, force=True) == {"status": "ok"}
    assert recorder.calls == [("register", {"nodes": [
        {"kind": "event", "name": "Ev", "schema": {"fields": {"a": "i64"},
                                                    "optional_fields": []}}],
        "force": True}, {})]
    with pytest.raises(bv.RegistrationError):
        app.register(Ev.filter(bv.col("a") > 1))
    assert len(recorder.calls) == 1
