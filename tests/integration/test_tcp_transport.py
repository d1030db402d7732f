"""Framed TCP on a live server: framing, opcodes, content types, malformed input
(spec/wire.md §2)."""

from __future__ import annotations

import json
import struct
import time

import msgspec
import pytest

from beava import __version__
from tests.support import FrameConn, codes_only, frame

OP_ERROR = 0xFFFF
PING = frame(0x0000)


def body(payload: bytes) -> dict:
    return json.loads(payload)


@pytest.fixture
def conn(clean_server):
    c = FrameConn(clean_server.tcp)
    yield c
    c.close()


def assert_alive(conn: FrameConn) -> None:
    op, ct, payload = conn.request(0x0000)
    assert (op, ct) == (0x0000, 1)
    assert set(body(payload)) == {"registry_version", "server_version"}


def test_ping_reports_version_and_ignores_ct_and_payload(conn):
    for ct, payload in ((1, b""), (2, b"\x80"), (9, b"garbage"), (0, b"{}")):
        op, reply_ct, reply = conn.request(0x0000, ct, payload)
        assert (op, reply_ct) == (0x0000, 1)
        doc = body(reply)
        assert doc["server_version"] == __version__
        assert isinstance(doc["registry_version"], int)


@pytest.mark.parametrize("op", [0x0003, 0x000F, 0x0013, 0x0023, 0x0027, 0x0030, 0x0031,
                                0x0045, 0x1234, 0xFFFE, 0xFFFF])
def test_unknown_and_reserved_ops_keep_connection_open(conn, op):
    reply_op, ct, payload = conn.request(op, 1, b'{"x":1}')
    assert (reply_op, ct) == (OP_ERROR, 1)
    assert body(payload) == {"error": {
        "code": "unknown_op", "op": op,
        "message": f"opcode 0x{op:04x} is not recognised by this server"}}
    assert_alive(conn)


def test_push_sync_is_not_implemented(conn):
    op, _, payload = conn.request(0x0011, 1, b"{}")
    assert op == OP_ERROR
    assert body(payload) == {"error": {
        "code": "op_not_implemented", "op": 17,
        "message": "opcode 0x0011 (push_sync) is not yet implemented"}}
    assert_alive(conn)


@pytest.mark.parametrize("request_op", [0x0010, 0x0012, 0x0020, 0x0024, 0x0040, 0x0001])
def test_unsupported_content_type(conn, request_op):
    op, _, payload = conn.request(request_op, 0x07, b"{}")
    assert op == OP_ERROR
    assert body(payload) == {"error": {"code": "unsupported_content_type",
                                       "message": "unsupported content_type: 0x07"}}
    assert_alive(conn)


def test_register_rejects_msgpack(conn):
    op, _, payload = conn.request(0x0001, 2, msgspec.msgpack.encode({"nodes": []}))
    assert op == OP_ERROR
    assert body(payload)["error"]["code"] == "unsupported_content_type"
    assert body(payload)["error"]["message"] == "unsupported content_type for register: 0x02"
    assert_alive(conn)


@pytest.mark.parametrize("ct,payload", [
    (1, b"not json"),
    (1, b"[1,2]"),
    (1, b'{"body":{}}'),
    (1, b'{"event":"E"}'),
    (1, b'{"event":5,"body":{}}'),
    (1, b'{"event":"E","data":{}}'),
    (1, b'{"event":"E","body":{}} x'),
    (2, msgspec.msgpack.encode({"event": "E", "body": {}, "extra": 1})),
    (2, msgspec.msgpack.encode({"event": "E"})),
    (2, msgspec.msgpack.encode(["E", {}])),
    (2, msgspec.msgpack.encode({"event": 1, "body": {}})),
    (2, msgspec.msgpack.encode({"event": "E", "body": {}}) + b"\x01"),
])
def test_malformed_push_envelope_is_flat_unsupported(conn, ct, payload):
    op, reply_ct, reply = conn.request(0x0010, ct, payload)
    assert (op, reply_ct) == (OP_ERROR, 1)
    assert reply == b'{"code":"unsupported"}'
    assert_alive(conn)


@pytest.mark.parametrize("ct", [1, 2])
def test_push_errors_carry_registry_version(conn, ct):
    encode = msgspec.json.encode if ct == 1 else msgspec.msgpack.encode
    op, reply_ct, reply = conn.request(0x0010, ct, encode({"event": "Nope", "body": {}}))
    assert (op, reply_ct) == (OP_ERROR, 1)
    doc = codes_only(body(reply))
    assert doc["error"] == {"code": "event_not_found"}
    assert isinstance(doc["registry_version"], int)
    op, _, reply = conn.request(0x0010, ct, encode({"event": "Nope", "body": [1]}))
    assert codes_only(body(reply))["error"] == {"code": "invalid_event"}
    op, _, reply = conn.request(0x0010, ct, encode({"event": "N\u0085", "body": {}}))
    assert codes_only(body(reply))["error"] == {"code": "control_character_in_string"}
    assert_alive(conn)


def test_frame_too_large_answers_then_closes(clean_server):
    conn = FrameConn(clean_server.tcp)
    limit = 4 * 1024 * 1024 + 3
    # Only the length prefix is sent: the error must come before any payload arrives.
    conn.send(struct.pack(">I", limit + 1))
    op, ct, payload = conn.recv_frame()
    assert (op, ct) == (OP_ERROR, 1)
    assert body(payload) == {"error": {
        "code": "frame_too_large", "declared": limit + 1, "limit": limit,
        "message": f"declared frame length {limit + 1} exceeds limit {limit}"}}
    assert conn.is_closed()


def test_frame_too_large_reply_survives_a_slow_sender(clean_server):
    # A client still sending the frame it announced when the error comes back (a 4 MiB
    # push on a busy machine): the server keeps draining its input, so closing does not
    # reset the connection and destroy the error frame before the client reads it.
    conn = FrameConn(clean_server.tcp)
    conn.send(struct.pack(">IHB", 4 * 1024 * 1024 + 4, 0x0010, 1))
    for _ in range(8):
        time.sleep(0.1)
        conn.send(b"x" * 65536)
    op, _, payload = conn.recv_frame()
    assert op == OP_ERROR and body(payload)["error"]["code"] == "frame_too_large"
    conn.close()


def test_payload_of_exactly_the_limit_is_accepted():
    from tests.support import BeavaProcess

    proc = BeavaProcess(env={"BEAVA_TCP_MAX_FRAME_BYTES": "16"})
    try:
        conn = FrameConn(proc.tcp)
        op, _, _ = conn.request(0x0000, 1, b"x" * 16)
        assert op == 0x0000
        conn.send(frame(0x0000, 1, b"x" * 17))
        op, _, payload = conn.recv_frame()
        assert op == OP_ERROR
        assert body(payload)["error"]["limit"] == 19
        assert body(payload)["error"]["declared"] == 20
        assert conn.is_closed()
    finally:
        proc.terminate()


@pytest.mark.parametrize("declared", [0, 1, 2])
def test_short_frame_length_answers_frame_error_and_closes(clean_server, declared):
    conn = FrameConn(clean_server.tcp)
    conn.send(struct.pack(">I", declared) + b"\x00\x00\x01")
    op, _, payload = conn.recv_frame()
    assert op == OP_ERROR
    doc = body(payload)
    assert doc["error"]["code"] == "frame_error"
    assert f"declared frame length {declared} is below the minimum 3" == doc["error"]["message"]
    assert conn.is_closed()


def test_frames_before_a_fatal_error_are_answered_in_order(clean_server):
    conn = FrameConn(clean_server.tcp)
    conn.send(PING + frame(0x0099) + struct.pack(">I", 1))
    assert conn.recv_frame()[0] == 0x0000
    assert body(conn.recv_frame()[2])["error"]["code"] == "unknown_op"
    assert body(conn.recv_frame()[2])["error"]["code"] == "frame_error"
    assert conn.is_closed()


def test_peer_closing_mid_frame_leaves_server_healthy(clean_server):
    conn = FrameConn(clean_server.tcp)
    conn.send(frame(0x0010, 1, b'{"event":"E","body":{}}')[:10])
    conn.close()
    other = FrameConn(clean_server.tcp)
    assert_alive(other)


def test_thousand_pipelined_frames_in_one_write(conn):
    ops = [0x0000 if i % 2 == 0 else 0x0099 for i in range(1000)]
    conn.send(b"".join(frame(op, 1, b"{}") for op in ops))
    for op in ops:
        reply_op, _, payload = conn.recv_frame()
        if op == 0x0000:
            assert reply_op == 0x0000
        else:
            assert reply_op == OP_ERROR
            assert body(payload)["error"]["op"] == 0x0099


def test_frame_split_into_single_byte_writes(conn):
    conn.sock.setsockopt(6, 1, 1)  # TCP_NODELAY: each byte its own segment
    data = frame(0x0099, 1, b'{"k":"v"}') + PING
    for i in range(len(data)):
        conn.send(data[i:i + 1])
    assert body(conn.recv_frame()[2])["error"]["code"] == "unknown_op"
    assert conn.recv_frame()[0] == 0x0000


def test_reset_over_tcp(conn):
    op, ct, payload = conn.request(0x0040, 1, b"{}")
    assert (op, ct) == (0x0023, 1)
    doc = body(payload)
    assert doc["reset"] is True
    ping = body(conn.request(0x0000)[2])
    assert ping["registry_version"] == doc["registry_version"]
    op, _, payload = conn.request(0x0040, 2, b"\x80")
    assert op == 0x0023
    assert body(payload)["registry_version"] == doc["registry_version"] + 1


def test_reset_forbidden_without_test_mode():
    from tests.support import BeavaProcess

    proc = BeavaProcess(test_mode=False)
    try:
        conn = FrameConn(proc.tcp)
        op, _, payload = conn.request(0x0040, 1, b"{}")
        assert op == OP_ERROR
        doc = body(payload)
        assert doc["error"]["code"] == "reset_disabled_in_production"
        assert isinstance(doc["error"]["reason"], str)
        assert_alive(conn)
    finally:
        proc.terminate()


@pytest.mark.parametrize("op", [0x0020, 0x0021, 0x0022, 0x0024])
@pytest.mark.parametrize("ct,payload", [(1, b"{not json"), (2, b"\xc1"), (1, b"[1,2]")])
def test_malformed_read_body_is_internal_error(conn, op, ct, payload):
    reply_op, _, reply = conn.request(op, ct, payload)
    assert reply_op == OP_ERROR
    doc = body(reply)
    assert doc["error"]["code"] == "internal_error"
    assert isinstance(doc["error"]["reason"], str)
    assert_alive(conn)


@pytest.mark.parametrize("payload", [b"{", b"[]", b'{"descriptors":[]}', b'{"nodes":5}'])
def test_malformed_register_body_is_invalid_registration(conn, payload):
    reply_op, _, reply = conn.request(0x0001, 1, payload)
    assert reply_op == OP_ERROR
    doc = body(reply)
    assert doc["error"]["code"] == "invalid_registration"
    assert doc["error"]["path"] == "<body>"
    assert isinstance(doc["registry_version"], int)
    assert_alive(conn)
