"""beava_client.errors: decoding every error envelope family of spec/wire.md §5.1."""

from __future__ import annotations

import msgspec
import pytest

from beava_client.errors import (
    BeavaError,
    ConnectionClosed,
    ServerError,
    Timeout,
    TransportError,
    error_from_reply,
    unexpected_reply,
)
from beava_client.results import decode_reply


def test_flat_unsupported_envelope() -> None:
    err = error_from_reply(b'{"code":"unsupported"}', op=0xFFFF)
    assert err.code == "unsupported"
    assert err.error == {"code": "unsupported"}
    assert err.body == {"code": "unsupported"}
    assert err.op == 0xFFFF
    assert err.status is None
    assert str(err) == "[unsupported]"


def test_push_error_keeps_registry_version_in_body() -> None:
    err = error_from_reply(b'{"error":{"code":"invalid_event"},"registry_version":3}')
    assert err.code == "invalid_event"
    assert err.error == {"code": "invalid_event"}
    assert err.body["registry_version"] == 3
    assert (err.path, err.message, err.reason) == ("", "", "")


def test_register_error_path_and_reason() -> None:
    raw = (b'{"error":{"code":"aggregation_unknown_field","path":"nodes[1].agg.x",'
           b'"reason":"unknown field y"},"registry_version":0}')
    err = error_from_reply(raw, status=400)
    assert err.code == "aggregation_unknown_field"
    assert err.path == "nodes[1].agg.x"
    assert err.reason == "unknown field y"
    assert err.text == "unknown field y"
    assert err.status == 400
    assert err.raw == raw
    assert str(err) == "[aggregation_unknown_field] nodes[1].agg.x: unknown field y"


def test_protocol_error_message_and_extras() -> None:
    raw = (b'{"error":{"code":"unknown_op","message":"opcode 0x0013 is not recognised by '
           b'this server","op":19}}')
    err = error_from_reply(raw, op=0xFFFF)
    assert err.code == "unknown_op"
    assert err.message == "opcode 0x0013 is not recognised by this server"
    assert err.error["op"] == 19
    assert str(err) == "[unknown_op] opcode 0x0013 is not recognised by this server"


def test_force_required_diff_is_reachable() -> None:
    raw = msgspec.json.encode({
        "added": [], "changed": [], "removed": ["Txn"], "status": "conflict",
        "error": {"code": "force_required", "diff": {"destructive": [1]}, "reason": "r"},
        "registry_version": 2,
    })
    err = error_from_reply(raw, status=409)
    assert err.code == "force_required"
    assert err.error["diff"] == {"destructive": [1]}
    assert err.body["removed"] == ["Txn"]


def test_http_routing_error() -> None:
    err = error_from_reply(b'{"error":{"code":"not_found","path":"/nope/?x=1"}}', status=404)
    assert (err.code, err.path, err.status) == ("not_found", "/nope/?x=1", 404)


def test_error_object_without_code_is_unknown() -> None:
    err = error_from_reply(b'{"error":{"message":"m"}}')
    assert err.code == "unknown"
    assert err.message == "m"


def test_unparseable_body() -> None:
    body = b"<html>" + b"x" * 500
    err = error_from_reply(body, status=502)
    assert err.code == "unparseable_error"
    assert err.message == ("<html>" + "x" * 500)[:200]
    assert err.body == {}
    assert err.raw == body
    assert err.status == 502


def test_json_that_is_not_an_object_is_unparseable() -> None:
    assert error_from_reply(b"[1,2]").code == "unparseable_error"


def test_msgpack_error_body() -> None:
    err = error_from_reply(msgspec.msgpack.encode({"error": {"code": "x"}}), ct=2)
    assert err.code == "x"


def test_unexpected_reply_opcode() -> None:
    err = unexpected_reply(0x0010, 0x0023, b'{"ack_lsn":1}', 1)
    assert err.code == "unexpected_frame"
    assert err.op == 0x0010
    coded = unexpected_reply(0x0099, 0x0023, b'{"error":{"code":"weird"}}', 1)
    assert coded.code == "weird"


def test_decode_reply_checks_the_opcode() -> None:
    assert decode_reply((0x0023, 1, b'{"reset":true}'), 0x0023) == {"reset": True}
    assert decode_reply((0x0023, 2, msgspec.msgpack.encode({"a": 1})), 0x0023) == {"a": 1}
    with pytest.raises(ServerError) as info:
        decode_reply((0xFFFF, 1, b'{"error":{"code":"unknown_table"}}'), 0x0023)
    assert info.value.code == "unknown_table"
    with pytest.raises(ServerError) as info:
        decode_reply((0x0000, 1, b"{}"), 0x0023)
    assert info.value.code == "unexpected_frame"
    with pytest.raises(ServerError) as info:
        decode_reply((0x0023, 1, b"nope"), 0x0023)
    assert info.value.code == "unparseable_reply"
    assert decode_reply((0x0042, 1, b"7"), None) == 7


def test_hierarchy() -> None:
    timeout = Timeout("timeout", "slow")
    assert isinstance(timeout, TimeoutError)
    assert isinstance(timeout, TransportError)
    assert isinstance(timeout, BeavaError)
    closed = ConnectionClosed("connection_closed", "bye")
    assert isinstance(closed, ConnectionError)
    assert not isinstance(ServerError("x"), ConnectionError)
    assert str(closed) == "[connection_closed] bye"
