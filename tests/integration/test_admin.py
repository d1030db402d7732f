"""Admin sidecar on a live server (spec/wire.md §4, spec/server.md §8)."""

from __future__ import annotations

import base64
import hashlib
import json
import re

import pytest

from beava import __version__
from tests.support import BeavaProcess, http_request


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


def test_server_names_the_process_its_listeners_and_data(clean_server, tmp_path):
    status, headers, payload = http_request(clean_server.admin, "GET", "/server")
    assert status == 200 and headers["content-type"] == "application/json"
    assert json.loads(payload) == {
        "pid": clean_server.proc.pid, "version": __version__,
        "listeners": {"http": clean_server.addrs["http"], "tcp": clean_server.addrs["tcp"],
                      "admin": clean_server.addrs["admin"]},
        "wal_dir": None, "snapshot_dir": None}  # memory-only
    durable = BeavaProcess("--data-dir", str(tmp_path), memory_only=False)
    try:
        doc = json.loads(http_request(durable.admin, "GET", "/server")[2])
        assert doc["pid"] == durable.proc.pid
        assert (doc["wal_dir"], doc["snapshot_dir"]) == (
            str(tmp_path / "wal"), str(tmp_path / "snapshots"))
    finally:
        durable.terminate()


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
                 "beava_pushes_total", "beava_push_replays_total",
                 "beava_wal_fsyncs_total", "beava_snapshot_last_bytes"):
        assert f"# HELP {name.removesuffix('_total')}" in text, name
        assert f"\n{name} " in text, name
    assert 'beava_runtime_kind{runtime="uvloop"} 1.0' in text
    assert 'beava_wal_sync_mode{mode="memory"} 1.0' in text
    # beava 0.0.6's constant 7000 is not passed off as a measurement
    assert "beava_bytes_per_entity_p99" not in text


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
    ("GET", "/ping", 404), ("POST", "/", 405), ("POST", "/entity", 405),
    ("GET", "/index.html", 404),
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


def test_status_page_is_one_self_contained_document(clean_server):
    status, headers, payload = http_request(clean_server.admin, "GET", "/")
    assert status == 200
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert headers["x-runtime"] == "tokio"
    assert headers["x-content-type-options"] == "nosniff"
    page = payload.decode()
    assert page.startswith("<!doctype html>")
    # nothing loaded from elsewhere: no src/href attribute, no URL, only the inline blocks
    assert not re.search(r"\b(src|href)=", page)
    assert "http://" not in page and "https://" not in page
    policy = dict(part.split(" ", 1) for part in headers["content-security-policy"].split("; "))
    assert policy["default-src"] == "'none'" and policy["connect-src"] == "'self'"
    for kind in ("script", "style"):
        blocks = re.findall(rf"<{kind}>(.*?)</{kind}>", page, re.DOTALL)
        assert len(blocks) == 1
        digest = base64.b64encode(hashlib.sha256(blocks[0].encode()).digest()).decode()
        assert policy[f"{kind}-src"] == f"'sha256-{digest}'"
    status, head_headers, body = http_request(clean_server.admin, "HEAD", "/")
    assert status == 200 and body == b""
    assert head_headers["content-length"] == str(len(payload))


def _register_cards(server) -> None:
    nodes = {"nodes": [
        {"kind": "event", "name": "C", "schema": {"fields": {"u": "str", "m": "str"}}},
        {"kind": "derivation", "name": "ByUser", "output_kind": "table", "upstreams": ["C"],
         "table_primary_key": ["u"],
         "ops": [{"op": "group_by", "keys": ["u"], "agg": {"n": {"op": "count"}}}]},
        {"kind": "derivation", "name": "ByPair", "output_kind": "table", "upstreams": ["C"],
         "table_primary_key": ["u", "m"],
         "ops": [{"op": "group_by", "keys": ["u", "m"], "agg": {"pairs": {"op": "count"}}}]},
        {"kind": "derivation", "name": "All", "output_kind": "table", "upstreams": ["C"],
         "table_primary_key": [],
         "ops": [{"op": "group_by", "keys": [], "agg": {"all": {"op": "count"}}}]}]}
    status, _, raw = http_request(server.http, "POST", "/register",
                                  json.dumps(nodes).encode(),
                                  {"Content-Type": "application/json"})
    assert status == 200, raw
    for u, m in (("a b", "x|y"), ("a b", "z"), ("c", "z")):
        body = json.dumps({"event": "C", "data": {"u": u, "m": m}}).encode()
        assert http_request(server.http, "POST", "/push", body)[0] == 200


def _entity(server, query: str) -> tuple[int, object]:
    status, headers, payload = http_request(server.admin, "GET", "/entity?" + query)
    assert headers["content-type"] == "application/json"
    return status, json.loads(payload)


def test_entity_reads_like_get(clean_server):
    _register_cards(clean_server)
    for query, table, key in (("table=ByUser&key=a+b", "ByUser", "a b"),
                              ("table=ByUser&key=a%20b", "ByUser", "a b"),
                              ("table=ByPair&key=a+b%7Cx%257Cy", "ByPair", "a b|x%7Cy"),
                              ("table=All", "All", ""), ("table=All&key=", "All", ""),
                              ("table=ByUser&key=nobody", "ByUser", "nobody")):
        got = _entity(clean_server, query)
        body = json.dumps({"table": table, "key": key}).encode()
        status, _, raw = http_request(clean_server.http, "POST", "/get", body)
        assert got == (status, json.loads(raw)), query
    assert _entity(clean_server, "table=ByUser&key=a+b") == (200, {"n": 2})
    assert _entity(clean_server, "table=ByPair&key=a+b%7Cx%257Cy") == (200, {"pairs": 1})
    assert _entity(clean_server, "table=All") == (200, {"all": 3})
    assert _entity(clean_server, "table=ByUser&key=nobody") == (200, {})


def test_entity_errors(clean_server):
    _register_cards(clean_server)
    status, body = _entity(clean_server, "table=ByUsr&key=a")
    assert status == 404 and body["error"]["code"] == "unknown_table"
    assert body["error"]["hint"] == "did you mean 'ByUser'?"
    status, body = _entity(clean_server, "table=C&key=a")  # an event, not a table
    assert status == 404 and body["error"]["code"] == "unknown_table"
    status, body = _entity(clean_server, "key=a")
    assert status == 404 and body["error"]["got"] == ""
    for query, fields in (("table=ByPair&key=a", ["u", "m"]), ("table=ByUser&key=a%7Cb", ["u"]),
                          ("table=All&key=a", [])):
        status, body = _entity(clean_server, query)
        assert (status, body["error"]["code"], body["error"]["expected"]) == (
            404, "key_parse_failure", fields)
