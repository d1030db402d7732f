"""HTTP data plane on a live server: routing, errors, keep-alive, pipelining, limits
(spec/wire.md §3)."""

from __future__ import annotations

import json
import socket

import pytest

from tests.support import codes_only, http_request


def raw_exchange(addr, data: bytes, timeout: float = 5.0) -> bytes:
    """Send raw bytes, read until the server closes (or the timeout)."""
    sock = socket.create_connection(addr, timeout=timeout)
    sock.sendall(data)
    chunks = []
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    except TimeoutError:
        pass
    sock.close()
    return b"".join(chunks)


def split_responses(data: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        n = int(headers.get("content-length", "0"))
        out.append((status, headers, rest[:n]))
        data = rest[n:]
    return out


def test_ping_health_ready(clean_server):
    status, headers, payload = http_request(clean_server.http, "POST", "/ping")
    assert status == 200
    assert json.loads(payload) == {"pong": True, "registry_version": json.loads(payload)[
        "registry_version"]}
    assert headers["content-type"] == "application/json"
    assert headers["x-runtime"] == "hand-rolled"
    assert headers["connection"] == "keep-alive"
    assert http_request(clean_server.http, "GET", "/health")[2] == b'{"status":"ok"}'
    assert http_request(clean_server.http, "GET", "/ready")[2] == b'{"status":"ready"}'


@pytest.mark.parametrize("method,target", [
    ("GET", "/nope"), ("POST", "/nope/?x=1"), ("GET", "/registry"), ("GET", "/metrics"),
    ("POST", "/get/onlyone"), ("POST", "/push-batch"), ("POST", "/push-batch/"),
    ("POST", "//ping"), ("POST", "/Ping"), ("GET", "/"),
])
def test_unknown_paths_are_404_with_raw_path(clean_server, method, target):
    status, _, payload = http_request(clean_server.http, method, target)
    assert status == 404
    assert json.loads(payload) == {"error": {"code": "not_found", "path": target}}


@pytest.mark.parametrize("method,target", [
    ("GET", "/ping"), ("GET", "/register"), ("PUT", "/push"), ("GET", "/push/E"),
    ("DELETE", "/push-sync/E"), ("GET", "/push-batch/E"), ("GET", "/push_many"),
    ("GET", "/get"), ("GET", "/batch_get"), ("GET", "/reset"), ("POST", "/health"),
    ("POST", "/ready"), ("POST", "/get/a/b"), ("HEAD", "/ping"), ("GET", "/ping/?q=1"),
])
def test_wrong_method_is_405(clean_server, method, target):
    status, _, payload = http_request(clean_server.http, method, target)
    assert status == 405
    if method != "HEAD":
        assert json.loads(payload) == {"error": {"code": "method_not_allowed",
                                                 "method": method, "path": target}}


def test_trailing_slash_and_query_are_normalised(clean_server):
    assert http_request(clean_server.http, "POST", "/ping/")[0] == 200
    assert http_request(clean_server.http, "POST", "/ping?x=1")[0] == 200
    assert http_request(clean_server.http, "GET", "/health//")[0] == 200


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/jsonx"])
def test_register_requires_json_media_type(clean_server, content_type):
    headers = {"Content-Type": content_type} if content_type else {}
    status, _, payload = http_request(clean_server.http, "POST", "/register",
                                      b'{"nodes":[]}', headers)
    assert status == 415
    doc = json.loads(payload)
    ping = json.loads(http_request(clean_server.http, "POST", "/ping")[2])
    assert doc == {"error": {"code": "unsupported_media_type", "path": "/register",
                             "reason": "expected application/json"},
                   "registry_version": ping["registry_version"]}


def test_push_envelope_errors(clean_server):
    cases = [(b"", "invalid_json_body"), (b"{", "invalid_json_body"),
             (b'{"event":"E"} x', "invalid_json_body"), (b"[1]", "missing_event_name_in_body"),
             (b'{"data":{}}', "missing_event_name_in_body"),
             (b'{"event":3}', "missing_event_name_in_body")]
    for payload, code in cases:
        status, _, reply = http_request(clean_server.http, "POST", "/push", payload)
        assert (status, codes_only(json.loads(reply))) == (400, {"error": {"code": code}}), \
            payload
    status, _, reply = http_request(clean_server.http, "POST", "/push/E", b"[1]")
    assert (status, codes_only(json.loads(reply))) == (400, {"error": {"code": "invalid_event"}})
    status, _, reply = http_request(clean_server.http, "POST", "/push/Unknown", b"{}")
    assert (status, codes_only(json.loads(reply))) == (404, {"error": {"code": "event_not_found"}})


def test_keep_alive_and_pipelining_answer_in_order(clean_server):
    reqs = (b"POST /ping HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
            b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
            b"POST /ping HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"2\r\n{}\r\n0\r\n\r\n"
            b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    responses = split_responses(raw_exchange(clean_server.http, reqs))
    assert [r[0] for r in responses] == [200, 404, 200, 200]
    assert [r[1]["connection"] for r in responses] == ["keep-alive"] * 3 + ["close"]
    assert responses[3][2] == b'{"status":"ok"}'


def test_http10_without_keep_alive_closes(clean_server):
    responses = split_responses(raw_exchange(
        clean_server.http, b"POST /ping HTTP/1.0\r\nContent-Length: 0\r\n\r\n"))
    assert len(responses) == 1
    assert responses[0][1]["connection"] == "close"


def test_expect_continue(clean_server):
    data = raw_exchange(clean_server.http,
                        b"POST /ping HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                        b"Content-Length: 2\r\nConnection: close\r\n\r\n{}")
    assert data.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n")


@pytest.mark.parametrize("request_bytes", [
    b"NOT A REQUEST\r\n\r\n",
    b"POST /ping HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
    b"POST /ping HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"POST /ping HTTP/1.1\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(65)) + b"\r\n",
    b"POST /ping HTTP/1.1\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n",
    b"POST /ping HTTP/1.1\r\nContent-Length: 4194305\r\n\r\n",
])
def test_protocol_errors_answer_400_and_close(clean_server, request_bytes):
    responses = split_responses(raw_exchange(clean_server.http, request_bytes))
    assert len(responses) == 1
    status, headers, payload = responses[0]
    assert status == 400
    assert headers["connection"] == "close"
    assert json.loads(payload) == {"error": {"code": "http_protocol_error"}}


def test_body_at_the_limit_is_read(clean_server):
    body = b" " * (4 * 1024 * 1024 - 2) + b"{}"
    status, _, _ = http_request(clean_server.http, "POST", "/ping", body)
    assert status == 200


def test_reset_over_http(clean_server):
    status, _, payload = http_request(clean_server.http, "POST", "/reset", b"ignored")
    doc = json.loads(payload)
    assert status == 200 and doc["reset"] is True
    ping = json.loads(http_request(clean_server.http, "POST", "/ping")[2])
    assert ping["registry_version"] == doc["registry_version"]
