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
    version = ping["registry_version"]
    assert json.loads(payload) == {"node_count": 0, "nodes": [], "version": version}


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


def _metric(text: str, name: str) -> float:
    line = next(x for x in text.splitlines() if x.startswith(name + " "))
    return float(line.split()[1])


def test_metrics_follow_pushes_replays_and_entities(clean_server):
    nodes = {"nodes": [
        {"kind": "event", "name": "E", "schema": {"fields": {"k": "str", "id": "str"}},
         "dedupe_key": "id"},
        {"kind": "derivation", "name": "T", "output_kind": "table", "upstreams": ["E"],
         "table_primary_key": ["k"],
         "ops": [{"op": "group_by", "keys": ["k"], "agg": {"n": {"op": "count"}}}]}]}
    status, _, _ = http_request(clean_server.http, "POST", "/register",
                                json.dumps(nodes).encode(),
                                {"Content-Type": "application/json"})
    assert status == 200
    before = http_request(clean_server.admin, "GET", "/metrics")[2].decode()
    for k, ident in (("a", "1"), ("b", "2"), ("a", "1")):  # the third is a replay
        body = json.dumps({"event": "E", "data": {"k": k, "id": ident}}).encode()
        assert http_request(clean_server.http, "POST", "/push", body)[0] == 200
    after = http_request(clean_server.admin, "GET", "/metrics")[2].decode()
    delta = {name: _metric(after, name) - _metric(before, name)
             for name in ("beava_pushes_total", "beava_push_replays_total")}
    assert delta == {"beava_pushes_total": 2.0, "beava_push_replays_total": 1.0}
    assert _metric(after, "beava_entity_count_resident") == 2.0
    assert _metric(after, "beava_registry_version") == _metric(before, "beava_registry_version")
    assert _metric(after, "beava_node_count") == 2.0
