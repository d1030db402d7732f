"""The metrics that look inside a running server (docs/operations.md, metrics): accepted
pushes per event through every path that accepts a push, and the request, WAL fsync and
snapshot duration histograms, read from the admin sidecar's /metrics."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from prometheus_client.parser import text_string_to_metric_families

import beava as bv
from beava_client.tcp import TcpClient
from tests.support import BeavaProcess, FrameConn, frame, http_request

OP_PUSH = 0x0010
OP_GET = 0x0020
OP_ERROR = 0xFFFF
JSON = {"Content-Type": "application/json"}

NODES: list[dict[str, Any]] = [
    {"kind": "event", "name": "Txn", "schema": {"fields": {"user": "str", "amount": "f64"}}},
    {"kind": "event", "name": "Pay", "dedupe_key": "id", "dedupe_window_ms": 600000,
     "schema": {"fields": {"id": "str", "user": "str"}}},
    {"kind": "derivation", "name": "Spend", "upstreams": ["Txn"], "key": ["user"],
     "agg": {"n": {"op": "count"}, "total": {"op": "sum", "params": {"field": "amount"}}}},
]
GOOD = {"user": "u1", "amount": 2.5}
BAD = {"user": "u1"}  # amount missing: refused


def push_msgpack(event: str, body: object) -> bytes:
    return frame(OP_PUSH, 2, msgspec.msgpack.encode({"event": event, "body": body}))


def push_json(event: str, body: object) -> bytes:
    return frame(OP_PUSH, 1, json.dumps({"event": event, "body": body}).encode())


def register(proc: BeavaProcess, nodes: list[dict[str, Any]]) -> None:
    status, _, payload = http_request(proc.http, "POST", "/register",
                                      json.dumps({"nodes": nodes}).encode(), JSON)
    assert status == 200, payload


def scrape(proc: BeavaProcess) -> dict[str, Any]:
    """/metrics parsed: family name -> {(sample name, sorted labels): value}."""
    status, _, payload = http_request(proc.admin, "GET", "/metrics")
    assert status == 200
    out: dict[str, Any] = {}
    for family in text_string_to_metric_families(payload.decode()):
        out[family.name] = {(s.name, tuple(sorted(s.labels.items()))): s.value
                            for s in family.samples}
    return out


def labelled(metrics: dict[str, Any], family: str, sample: str, label: str) -> dict[str, float]:
    """``{label value: value}`` of the samples named ``sample`` of ``family``."""
    return {dict(labels)[label]: value for (name, labels), value in metrics[family].items()
            if name == sample}


def replies(conn: FrameConn, count: int) -> list[tuple[int, int, bytes]]:
    out = []
    for _ in range(count):
        reply = conn.recv_frame()
        assert reply is not None
        out.append(reply)
    return out


@pytest.fixture(params=["memory", "strict"])
def any_mode_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BeavaProcess]:
    if request.param == "memory":
        proc = BeavaProcess()
    else:
        proc = BeavaProcess("--data-dir", str(tmp_path / "data"), memory_only=False)
    yield proc
    proc.terminate()


def test_pushes_by_event_count_every_accepted_push_once(any_mode_server: BeavaProcess
                                                         ) -> None:
    server = any_mode_server
    register(server, NODES)
    accepted = {"Txn": 0, "Pay": 0}

    # framed TCP, one pipelined read: pushes through the push pass (MessagePack and JSON),
    # a refused body and a dedupe-keyed event (the store's Python path) with a replay
    conn = FrameConn(server.tcp)
    conn.send(push_msgpack("Txn", GOOD) * 4 + push_msgpack("Txn", BAD) + push_json("Txn", GOOD)
              + push_msgpack("Pay", {"id": "p1", "user": "u1"})
              + push_msgpack("Pay", {"id": "p1", "user": "u1"})  # a replay: not counted
              + push_msgpack("Nope", GOOD))  # not registered: refused
    ops = [op for op, _, _ in replies(conn, 9)]
    assert ops == [OP_PUSH] * 4 + [OP_ERROR, OP_PUSH, OP_PUSH, OP_PUSH, OP_ERROR]
    conn.close()
    accepted["Txn"] += 5
    accepted["Pay"] += 1

    # framed-TCP PUSH_MANY (the client's), through the pass and the store's fallback
    host, port = server.tcp
    with TcpClient(host, port) as client:
        result = client.push_many("Txn", [GOOD, GOOD, BAD, GOOD])
        assert result["acks"] == 3 and len(result["errors"]) == 1
        result = client.push_many("Pay", [{"id": "p2", "user": "u"}, {"id": "p2", "user": "u"}])
        assert result["acks"] == 2
    accepted["Txn"] += 3
    accepted["Pay"] += 1  # the second body is a replay

    # HTTP /push, the legacy /push/<event> and /push_many
    for body, status in ((GOOD, 200), (BAD, 400), (GOOD, 200)):
        envelope = json.dumps({"event": "Txn", "data": body}).encode()
        assert http_request(server.http, "POST", "/push", envelope)[0] == status
    assert http_request(server.http, "POST", "/push/Txn", json.dumps(GOOD).encode())[0] == 200
    status, _, payload = http_request(server.http, "POST", "/push_many", json.dumps(
        {"event": "Txn", "bodies": [GOOD, BAD, GOOD]}).encode(), JSON)
    assert status == 200 and json.loads(payload)["acks"] == 2
    accepted["Txn"] += 5

    # a compatible re-register (one more event): earlier counts stay with their names
    register(server, [*NODES, {"kind": "event", "name": "Click",
                               "schema": {"fields": {"user": "str"}}}])
    # the SDK over framed TCP and over HTTP
    for url in (f"tcp://{server.addrs['tcp']}", server.http_url):
        with bv.App(url) as app:
            app.push("Txn", GOOD)
            app.push("Click", {"user": "u2"})
            assert app.push_many("Txn", [GOOD, GOOD])["acks"] == 2
    accepted["Txn"] += 6
    accepted["Click"] = 2

    metrics = scrape(server)
    by_event = labelled(metrics, "beava_pushes_by_event", "beava_pushes_by_event_total",
                        "event")
    assert by_event == accepted
    assert metrics["beava_pushes"][("beava_pushes_total", ())] == sum(accepted.values())
    assert metrics["beava_push_replays"][("beava_push_replays_total", ())] == 2
    # the refused pushes, none of them counted above: one refused body on each path but
    # the SDK's, and the unregistered name
    rejected = {(dict(labels)["event"], dict(labels)["code"]): value
                for (_, labels), value in metrics["beava_push_rejections"].items()}
    assert rejected == {("Txn", "invalid_event"): 4, ("<unregistered>", "event_not_found"): 1}


def histogram(metrics: dict[str, Any], family: str, **labels: str) -> dict[str, Any]:
    """One histogram of the scrape: its cumulative buckets by le, sum and count."""
    want = tuple(sorted(labels.items()))
    samples = metrics[family]
    buckets = {dict(lbl)["le"]: value for (name, lbl), value in samples.items()
               if name == family + "_bucket"
               and tuple(sorted((k, v) for k, v in lbl if k != "le")) == want}
    return {"buckets": buckets, "sum": samples[(family + "_sum", want)],
            "count": samples[(family + "_count", want)]}


def check_shape(hist: dict[str, Any]) -> None:
    counts = list(hist["buckets"].values())
    assert list(hist["buckets"])[-1] == "+Inf" and len(counts) == 18
    assert counts == sorted(counts)  # cumulative
    assert counts[-1] == hist["count"]


def test_histograms_in_strict_mode(tmp_path: Path) -> None:
    proc = BeavaProcess("--data-dir", str(tmp_path / "data"), memory_only=False,
                        env={"BEAVA_SNAPSHOT_INTERVAL_MS": "200"})
    try:
        register(proc, NODES)
        conn = FrameConn(proc.tcp)
        # 40 pushes (one refused) and 3 GETs pipelined in one write, then 2 GETs alone
        get = frame(OP_GET, 1, json.dumps({"table": "Spend", "key": "u1"}).encode())
        conn.send(push_msgpack("Txn", GOOD) * 39 + push_msgpack("Txn", BAD) + get * 3)
        got = replies(conn, 43)
        assert [op for op, _, _ in got[38:40]] == [OP_PUSH, OP_ERROR]
        assert json.loads(got[-1][2]) == {"n": 39, "total": 97.5}
        for _ in range(2):
            conn.send(get)
            replies(conn, 1)
        conn.close()
        for _ in range(2):  # HTTP: 2 pushes, 1 GET
            envelope = json.dumps({"event": "Txn", "data": GOOD}).encode()
            assert http_request(proc.http, "POST", "/push", envelope)[0] == 200
        body = json.dumps({"table": "Spend", "key": "u1"}).encode()
        assert http_request(proc.http, "POST", "/get", body)[0] == 200
        last_lsn = 1 + 39 + 2  # the REGISTRY record, then the accepted pushes

        def snapshot_of_everything() -> bool:
            return any(line.get("kind") == "snapshot.written"
                       and line.get("snapshot_lsn") == last_lsn for line in list(proc.lines))

        assert proc.server.wait_until(snapshot_of_everything, 10.0)
        metrics = scrape(proc)
        family = "beava_request_duration_seconds"
        ops = {op: histogram(metrics, family, op=op) for op in ("push", "get", "register")}
        assert {op: h["count"] for op, h in ops.items()} == {"push": 42, "get": 6,
                                                            "register": 1}
        for hist in ops.values():
            check_shape(hist)
            assert hist["sum"] > 0
        # only commands that ran have series
        assert set(labelled(metrics, family, family + "_count", "op")) == set(ops)

        fsyncs = histogram(metrics, "beava_wal_fsync_duration_seconds")
        check_shape(fsyncs)
        assert fsyncs["count"] > 0
        assert fsyncs["count"] == metrics["beava_wal_fsyncs"][("beava_wal_fsyncs_total", ())]

        snapshots = histogram(metrics, "beava_snapshot_duration_seconds")
        check_shape(snapshots)
        written = [line for line in list(proc.lines) if line.get("kind") == "snapshot.written"]
        assert snapshots["count"] == len(written) >= 1
        last = metrics["beava_snapshot_last_duration_seconds"][
            ("beava_snapshot_last_duration_seconds", ())]
        assert 0 < last <= snapshots["sum"]
    finally:
        proc.terminate()


def test_memory_only_server_has_empty_durability_histograms(clean_server: BeavaProcess
                                                             ) -> None:
    metrics = scrape(clean_server)
    for family in ("beava_wal_fsync_duration_seconds", "beava_snapshot_duration_seconds"):
        hist = histogram(metrics, family)
        check_shape(hist)
        assert hist["count"] == 0 and hist["sum"] == 0
