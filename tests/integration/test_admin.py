"""Admin sidecar on a live server (spec/wire.md §4, spec/server.md §8)."""

from __future__ import annotations

import json

import pytest

from tests.support import http_request


def test_health_ready_registry(clean_server):
    for path, doc in (("/health", {"status": "ok"}), ("/ready", {"status": "ready"})):
        status, headers, payload = http_request(clean_server.admin, "GET", path)
        assert status == 200 and json.loads(payload) == doc
        assert headers["x-runtime"] == "tokio"
        assert headers["content-type"] == "application/json"
    ping = json.loads(http_request(clean_server.http, "POST", "/ping")[2])
    status, _, payload = http_request(clean_server.admin, "GET", "/registry")
    assert json.loads(payload) == {"node_count": 0, "version": ping["registry_version"]}


def test_registry_is_current_after_reset(clean_server):
    before = json.loads(http_request(clean_server.admin, "GET", "/registry")[2])["version"]
    http_request(clean_server.http, "POST", "/reset")
    after = json.loads(http_request(clean_server.admin, "GET", "/registry")[2])["version"]
    assert after == before + 1


def test_metrics_exposition(clean_server):
    status, headers, payload = http_request(clean_server.admin, "GET", "/metrics")
    assert status == 200
    assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = payload.decode()
    for name in ("beava_registry_version", "beava_node_count", "beava_entity_count_resident",
                 "beava_cold_entity_evictions_total", "beava_bucket_reclaim_total",
                 "beava_bytes_per_entity_p99", "beava_pushes_total", "beava_push_replays_total",
                 "beava_wal_fsyncs_total", "beava_snapshot_last_bytes"):
        assert f"# HELP {name.removesuffix('_total')}" in text, name
        assert f"\n{name} " in text, name
    assert 'beava_runtime_kind{runtime="uvloop"} 1.0' in text
    assert 'beava_wal_sync_mode{mode="memory"} 1.0' in text


def test_head_has_headers_without_body(clean_server):
    import socket

    sock = socket.create_connection(clean_server.admin, timeout=5)
    sock.sendall(b"HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    sock.close()
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert b"Content-Length: 15" in head
    assert rest == b""


@pytest.mark.parametrize("method,path,status", [
    ("POST", "/health", 405), ("DELETE", "/metrics", 405), ("GET", "/nope", 404),
    ("GET", "/ping", 404),
])
def test_admin_errors_have_empty_bodies(clean_server, method, path, status):
    got, headers, payload = http_request(clean_server.admin, method, path)
    assert got == status and payload == b""
    if status == 405:
        assert headers["allow"] == "GET,HEAD"
