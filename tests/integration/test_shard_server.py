"""One shard of a sharded deployment (docs/sharding.md): a push applies only the tables
whose key slot this shard owns; a push none of whose tables it owns, and a read of a key it
does not own, answer wrong_shard (HTTP 421, TCP 0xFFFF) with the slot, owner and epoch; the
map is served on both transports; a fenced shard refuses pushes and serves reads; after a
restart the recovered state is what the shard held (the WAL replay skips the same
tables)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from beava_client.opcodes import (
    OP_BATCH_GET,
    OP_CLUSTER_FENCE,
    OP_CLUSTER_MAP,
    OP_ERROR,
    OP_GET,
    OP_GET_RESPONSE,
    OP_PUSH,
)
from beava_client.slots import SLOTS, ShardMap, slot
from tests.register_payloads import table_node
from tests.support import BeavaProcess, FrameConn, http_request

HALF = SLOTS // 2
EPOCH = 7


def _owned_by(shard: int, prefix: str, count: int = 1) -> list[str]:
    """Key strings whose slot shard ``shard`` (0: below HALF, 1: the rest) owns."""
    out = []
    i = 0
    while len(out) < count:
        text = f"{prefix}{i}"
        if (slot(text) >= HALF) == bool(shard):
            out.append(text)
        i += 1
    return out


GLOBAL = _owned_by(1, "Totals")[0]  # a global table placed on the other shard
U0, U0B = _owned_by(0, "u", 2)  # users of this shard
U1 = _owned_by(1, "u")[0]
C0 = _owned_by(0, "c")[0]
C1 = _owned_by(1, "c")[0]
REGISTER = json.dumps({"nodes": [
    {"kind": "event", "name": "Txn",
     "schema": {"fields": {"user": "str", "card": "str", "amount": "f64"}}},
    table_node({"n_user": {"op": "count"}}, name="ByUser", keys=["user"]),
    table_node({"n_card": {"op": "count"}}, name="ByCard", keys=["card"]),
    table_node({"total": {"op": "sum", "params": {"field": "amount"}}}, name=GLOBAL, keys=[]),
]}).encode()
JSON = {"Content-Type": "application/json"}


def _map_doc() -> dict[str, Any]:
    return {"version": 1, "epoch": EPOCH, "slots": SLOTS, "shards": [
        {"id": "s0", "ranges": [[0, HALF]], "tcp": "127.0.0.1:7101",
         "http": "http://127.0.0.1:7102"},
        {"id": "s1", "ranges": [[HALF, SLOTS]], "tcp": "127.0.0.1:7201",
         "http": "http://127.0.0.1:7202"}]}


def _start(tmp_path: Path, *extra: str, memory_only: bool = True) -> BeavaProcess:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(_map_doc()), encoding="utf-8")
    server = BeavaProcess("--shard-map", str(path), "--shard-id", "s0", *extra,
                          memory_only=memory_only)
    return server


@pytest.fixture()
def shard(tmp_path: Path) -> Iterator[BeavaProcess]:
    server = _start(tmp_path)
    status, _, raw = http_request(server.http, "POST", "/register", REGISTER, JSON)
    assert status == 200, raw
    yield server
    server.terminate()


def _push_tcp(conn: FrameConn, body: dict[str, Any]) -> tuple[int, Any]:
    """A MessagePack push laid out as clients write it (the compiled push pass's path)."""
    payload = msgspec.msgpack.encode({"event": "Txn", "body": body})
    op, _, raw = conn.request(OP_PUSH, 2, payload)
    return op, json.loads(raw)


def _get(server: BeavaProcess, table: str, key: str) -> tuple[int, Any]:
    status, _, raw = http_request(server.http, "POST", "/get",
                                  json.dumps({"table": table, "key": key}).encode(), JSON)
    return status, json.loads(raw)


def _metrics(server: BeavaProcess) -> str:
    return http_request(server.admin, "GET", "/metrics")[2].decode()


def test_a_push_applies_only_the_tables_this_shard_owns(shard: BeavaProcess) -> None:
    conn = FrameConn(shard.tcp)
    for user, card in ((U0, C1), (U0, C1), (U0B, C0)):
        op, body = _push_tcp(conn, {"user": user, "card": card, "amount": 2.0})
        assert op == OP_PUSH, body
    assert _get(shard, "ByUser", U0) == (200, {"n_user": 2})
    assert _get(shard, "ByCard", C0) == (200, {"n_card": 1})
    status, body = _get(shard, "ByCard", C1)  # skipped here: s1 applied it
    assert status == 421
    assert body["error"] | {"message": ""} == {
        "code": "wrong_shard", "message": "", "slot": slot(C1), "owner": "s1",
        "epoch": EPOCH, "tcp": "127.0.0.1:7201", "http": "http://127.0.0.1:7202"}
    metrics = _metrics(shard)
    # three pushes: ByCard skipped twice, the global table (s1's) three times
    assert "beava_shard_skipped_table_updates_total 5.0" in metrics
    assert 'beava_shard_wrong_shard_total{kind="read"} 1.0' in metrics
    conn.close()


def test_a_push_owned_nowhere_here_answers_wrong_shard(shard: BeavaProcess) -> None:
    conn = FrameConn(shard.tcp)
    op, body = _push_tcp(conn, {"user": U1, "card": C1, "amount": 1.0})
    assert op == OP_ERROR
    assert body["error"]["code"] == "wrong_shard"
    assert body["error"]["slot"] == slot(U1) and body["error"]["owner"] == "s1"
    status, _, raw = http_request(shard.http, "POST", "/push", json.dumps(
        {"event": "Txn", "data": {"user": U1, "card": C1, "amount": 1.0}}).encode(), JSON)
    assert status == 421 and json.loads(raw)["error"]["code"] == "wrong_shard"
    metrics = _metrics(shard)
    assert 'beava_shard_wrong_shard_total{kind="push"} 2.0' in metrics
    assert "beava_pushes_total 0.0" in metrics  # nothing was accepted
    conn.close()


def test_batch_get_answers_wrong_shard_per_entry(shard: BeavaProcess) -> None:
    conn = FrameConn(shard.tcp)
    _push_tcp(conn, {"user": U0, "card": C0, "amount": 1.0})
    request = {"requests": [{"table": "ByUser", "key": U0}, {"table": "ByUser", "key": U1},
                            {"table": GLOBAL, "key": ""}]}
    op, _, raw = conn.request(OP_BATCH_GET, 1, json.dumps(request).encode())
    assert op == OP_GET_RESPONSE, raw
    results = json.loads(raw)["results"]
    assert results[0] == {"n_user": 1}
    assert [r["error"]["code"] for r in results[1:]] == ["wrong_shard", "wrong_shard"]
    assert results[2]["error"]["slot"] == slot(GLOBAL)
    op, _, raw = conn.request(OP_GET, 1, json.dumps({"table": "ByUser", "key": U1}).encode())
    assert op == OP_ERROR and json.loads(raw)["error"]["code"] == "wrong_shard"
    conn.close()


def test_the_map_is_served_on_both_transports(shard: BeavaProcess, tmp_path: Path) -> None:
    status, _, raw = http_request(shard.http, "GET", "/cluster/map")
    assert status == 200 and json.loads(raw) == _map_doc()
    conn = FrameConn(shard.tcp)
    op, _, raw = conn.request(OP_CLUSTER_MAP, 1, b"")
    assert op == OP_CLUSTER_MAP and ShardMap.from_json(raw) == ShardMap.from_dict(_map_doc())
    conn.close()
    plain = BeavaProcess()
    try:
        status, _, raw = http_request(plain.http, "GET", "/cluster/map")
        assert status == 404 and json.loads(raw)["error"]["code"] == "not_sharded"
        conn = FrameConn(plain.tcp)
        op, _, raw = conn.request(OP_CLUSTER_MAP, 1, b"")
        assert op == OP_ERROR and json.loads(raw)["error"]["code"] == "not_sharded"
        conn.close()
    finally:
        plain.terminate()


def test_a_fenced_shard_refuses_pushes_and_serves_reads(shard: BeavaProcess) -> None:
    conn = FrameConn(shard.tcp)
    _push_tcp(conn, {"user": U0, "card": C0, "amount": 1.0})
    status, _, raw = http_request(shard.http, "POST", "/cluster/fence",
                                  b'{"fenced": true, "epoch": 6}', JSON)
    assert status == 400 and json.loads(raw)["error"]["path"] == "epoch"
    op, _, raw = conn.request(OP_CLUSTER_FENCE, 1, b'{"fenced": true, "epoch": 7}')
    assert op == OP_CLUSTER_FENCE and json.loads(raw)["fenced"] is True
    op, body = _push_tcp(conn, {"user": U0, "card": C0, "amount": 1.0})
    assert op == OP_ERROR and body["error"]["code"] == "shard_fenced"
    assert body["error"]["retryable"] is True
    status, _, raw = http_request(shard.http, "POST", "/push", json.dumps(
        {"event": "Txn", "data": {"user": U0, "card": C0, "amount": 1.0}}).encode(), JSON)
    assert status == 503 and json.loads(raw)["error"]["code"] == "shard_fenced"
    assert _get(shard, "ByUser", U0) == (200, {"n_user": 1})  # reads are served
    status, _, raw = http_request(shard.http, "POST", "/cluster/fence",
                                  b'{"fenced": false, "epoch": 7}', JSON)
    assert status == 200 and json.loads(raw)["fenced"] is False
    op, body = _push_tcp(conn, {"user": U0, "card": C0, "amount": 1.0})
    assert op == OP_PUSH, body
    assert _get(shard, "ByUser", U0) == (200, {"n_user": 2})
    conn.close()


def test_recovery_replays_the_same_tables(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = _start(tmp_path, "--data-dir", str(data), memory_only=False)
    try:
        status, _, raw = http_request(server.http, "POST", "/register", REGISTER, JSON)
        assert status == 200, raw
        conn = FrameConn(server.tcp)
        for user, card in ((U0, C1), (U0B, C0), (U0, C0)):
            op, body = _push_tcp(conn, {"user": user, "card": card, "amount": 1.0})
            assert op == OP_PUSH, body
        conn.close()
        before = [_get(server, t, k) for t, k in (("ByUser", U0), ("ByCard", C0))]
        assert before == [(200, {"n_user": 2}), (200, {"n_card": 2})]
    finally:
        server.kill()
    again = _start(tmp_path, "--data-dir", str(data), memory_only=False)
    try:
        assert [_get(again, t, k) for t, k in (("ByUser", U0), ("ByCard", C0))] == before
        assert "beava_table_entities{table=\"ByCard\"} 1.0" in _metrics(again)
    finally:
        again.terminate()
