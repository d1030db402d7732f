"""Simple commands: one call each, served on both transports by one adapter per transport
(beava.protocol.dispatch). The call is given what the command table's ``takes`` names; its
value is the reply: JSON over HTTP, JSON or the request's content type over framed TCP."""

from __future__ import annotations

import json
import math
from typing import Any

import msgspec
import pytest

from beava.catalogue.errors import BeavaError
from beava.protocol.commands import ROUTE_PARAMS, SIMPLE, HandlerTableError
from beava.protocol.dispatch import Call, simple_frame_handlers, simple_http_handlers
from beava.protocol.http import HttpRequest
from beava_client.opcodes import CT_JSON, CT_MSGPACK, OP_GET_RESPONSE, OP_TEST_CLOCK
from tests.unit.fake_transport import split_frames

BY_NAME = {c.name: c for c in SIMPLE}


def recording_calls(given: list[tuple[str, tuple[Any, ...]]]) -> dict[str, Call]:
    """A call per simple command: records its arguments, answers a row with a NaN."""

    def call_for(name: str) -> Call:
        def call(*args: Any) -> dict[str, Any]:
            given.append((name, args))
            return {"command": name, "x": math.nan}
        return call

    return {name: call_for(name) for name in BY_NAME}


def test_the_simple_commands_and_what_their_calls_take() -> None:
    assert {c.name: c.takes for c in SIMPLE} == {
        "describe": "nothing", "mget": "body", "get_multi": "body", "legacy_get": "route params",
        "reset": "nothing", "test_clock": "raw body", "cluster_map": "nothing",
        "cluster_fence": "raw body", "health": "nothing", "ready": "nothing"}
    for command in SIMPLE:
        # route parameters exist on HTTP prefix routes only
        assert (command.takes == ROUTE_PARAMS) <= (command.http_params > 0 and not command.framed)


def test_framed_replies_in_kind_or_in_json() -> None:
    given: list[tuple[str, tuple[Any, ...]]] = []
    handlers = simple_frame_handlers(recording_calls(given))
    assert set(handlers) == {c.name for c in SIMPLE if c.framed}

    body = {"table": "T", "keys": ["a"]}
    ((op, ct, payload),) = split_frames(handlers["mget"](CT_MSGPACK, msgspec.msgpack.encode(body)))
    assert (op, ct) == (OP_GET_RESPONSE, CT_MSGPACK)
    assert msgspec.msgpack.decode(payload) == {"command": "mget", "x": None}
    assert given.pop() == ("mget", (body,))

    ((op, ct, payload),) = split_frames(handlers["get_multi"](CT_JSON, json.dumps(body).encode()))
    assert (op, ct, payload) == (OP_GET_RESPONSE, CT_JSON, b'{"command":"get_multi","x":null}')
    assert given.pop() == ("get_multi", (body,))

    # describe and reset take nothing and answer JSON whatever the request's content type
    ((op, ct, payload),) = split_frames(handlers["reset"](CT_MSGPACK, b"\xc1"))
    assert (op, ct, payload) == (OP_GET_RESPONSE, CT_JSON, b'{"command":"reset","x":null}')
    assert given.pop() == ("reset", ())

    # test_clock's call decodes its body itself
    ((op, ct, _),) = split_frames(handlers["test_clock"](CT_JSON, b'{"now_ms": '))
    assert (op, ct) == (OP_TEST_CLOCK, CT_JSON)
    assert given.pop() == ("test_clock", (b'{"now_ms": ',))


@pytest.mark.parametrize(("ct", "payload"), [(CT_JSON, b"{"), (CT_MSGPACK, b"\xc1"),
                                             (CT_JSON, b"[" * 100_000)])
def test_an_undecodable_body_is_internal_error_before_any_call(ct: int, payload: bytes) -> None:
    given: list[tuple[str, tuple[Any, ...]]] = []
    handlers = simple_frame_handlers(recording_calls(given))
    with pytest.raises(BeavaError) as caught:
        handlers["mget"](ct, payload)
    assert caught.value.code == "internal_error"
    assert given == []


def test_http_answers_200_with_the_call_s_value() -> None:
    given: list[tuple[str, tuple[Any, ...]]] = []
    handlers = simple_http_handlers(recording_calls(given))
    assert set(handlers) == {c.name for c in SIMPLE if c.routed}

    response = handlers["legacy_get"](HttpRequest("GET", "/get/n/k", {}, b"", False), ("n", "k"))
    head, body = response.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"Connection: close" in head
    assert body == b'{"command":"legacy_get","x":null}'
    assert given.pop() == ("legacy_get", ("n", "k"))

    handlers["test_clock"](HttpRequest("POST", "/test/clock", {}, b'{"now_ms":1}', True), ())
    assert given.pop() == ("test_clock", (b'{"now_ms":1}',))
    handlers["health"](HttpRequest("GET", "/health", {}, b"ignored", True), ())
    assert given.pop() == ("health", ())


def test_a_missing_or_extra_call_stops_the_server_at_start() -> None:
    calls = recording_calls([])
    del calls["ready"]
    with pytest.raises(HandlerTableError, match="ready"):
        simple_http_handlers(calls)
    with pytest.raises(HandlerTableError, match="push"):
        simple_frame_handlers({**recording_calls([]), "push": lambda: None})

