"""Bodies whose strings are not UTF-8 are bad input (4xx or the op's error frame), never an
internal error: the decoders raise UnicodeDecodeError for them, not a decode error."""

from __future__ import annotations

import json

from tests.support import FrameConn, frame, http_request

NODES = {"nodes": [
    {"kind": "event", "name": "Txn", "schema": {"fields": {"user": "str", "amount": "f64"}}},
    {"kind": "derivation", "name": "Spend", "upstreams": ["Txn"], "key": ["user"],
     "agg": {"n": {"op": "count"}}},
]}
JSON = {"Content-Type": "application/json"}
# a JSON string and a MessagePack str8 holding the byte 0xff
BAD_JSON_PUSH = b'{"event":"Txn","body":{"user":"\xff","amount":1.0}}'
BAD_MSGPACK_PUSH = (b"\x82\xa5event\xa3Txn\xa4body\x82\xa4user\xa1\xff"
                    b"\xa6amount\xcb?\xf0\x00\x00\x00\x00\x00\x00")


def test_register_with_invalid_utf8_is_invalid_registration(clean_server):
    status, _, body = http_request(clean_server.http, "POST", "/register",
                                   b'{"nodes":[{"kind":"\xc3"}]}', JSON)
    assert status == 400
    assert json.loads(body)["error"]["code"] == "invalid_registration"


def test_http_pushes_with_invalid_utf8_are_rejected(clean_server):
    http = clean_server.http
    assert http_request(http, "POST", "/register", json.dumps(NODES).encode(), JSON)[0] == 200
    status, _, body = http_request(http, "POST", "/push",
                                   b'{"event":"Txn","data":{"user":"\xff","amount":1}}', JSON)
    assert (status, json.loads(body)["error"]["code"]) == (400, "invalid_json_body")
    status, _, body = http_request(http, "POST", "/push/Txn",
                                   b'{"user":"\xff","amount":1}', JSON)
    assert (status, json.loads(body)["error"]["code"]) == (400, "invalid_event")
    status, _, body = http_request(http, "POST", "/push_many",
                                   b'{"event":"Txn","bodies":[{"user":"\xff"}]}', JSON)
    assert (status, json.loads(body)["error"]["code"]) == (400, "invalid_push_many")


def test_tcp_pushes_with_invalid_utf8_are_unsupported(clean_server):
    http = clean_server.http
    assert http_request(http, "POST", "/register", json.dumps(NODES).encode(), JSON)[0] == 200
    conn = FrameConn(clean_server.tcp)
    conn.send(frame(0x0010, 1, BAD_JSON_PUSH) + frame(0x0010, 2, BAD_MSGPACK_PUSH)
              + frame(0x0010, 1, b'{"event":"Txn","body":{"user":"ok","amount":1.0}}'))
    for _ in range(2):
        op, _, payload = conn.recv_frame()
        assert (op, json.loads(payload)) == (0xFFFF, {"code": "unsupported"})
    op, _, payload = conn.recv_frame()
    assert op == 0x0010 and json.loads(payload)["ack_lsn"] >= 1
    conn.close()
