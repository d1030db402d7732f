"""The push property against a real server with a data directory: arbitrary values pushed
over framed TCP (JSON and MessagePack) and HTTP, as field values and as whole bodies, are
refused with a client error or acknowledged; every read path answers the acknowledged ones
without an error, and answers the same after a restart (WAL replay) and after a restart from
a snapshot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from beava_client.opcodes import CT_JSON, CT_MSGPACK, OP_ERROR, OP_GET, OP_PUSH, OP_SCAN
from tests.fuzz.strategies import encode_json, encode_msgpack, fuzz_settings, values
from tests.fuzz.test_fuzz_engine import REGISTER, TABLES
from tests.support import BeavaProcess, FrameConn, http_request

TRANSPORTS = ("tcp-json", "tcp-msgpack", "http")


def push(server: BeavaProcess, conn: FrameConn, transport: str, event: str, body: Any) -> bool:
    if transport == "http":
        status, _, raw = http_request(server.http, "POST", f"/push/{event}", encode_json(body),
                                      {"Content-Type": "application/json"})
        assert status < 500, (status, raw)
        return status == 200
    msgpack = transport == "tcp-msgpack"
    envelope = {"event": event, "body": body}
    op, _, raw = conn.request(OP_PUSH, CT_MSGPACK if msgpack else CT_JSON,
                              encode_msgpack(envelope) if msgpack else encode_json(envelope))
    if op == OP_ERROR:
        reply = json.loads(raw)
        assert reply.get("error", reply).get("code") != "internal_error", reply
    return op == OP_PUSH


def reads(server: BeavaProcess, users: list[str]) -> dict[str, Any]:
    """Every user's rows (JSON and MessagePack) and every table's rows through the scan."""
    conn = FrameConn(server.tcp)
    out: dict[str, Any] = {}
    try:
        for user in users:
            for table in ("T", "ST"):
                for ct in (CT_JSON, CT_MSGPACK):
                    body = {"table": table, "key": user}
                    op, _, raw = conn.request(OP_GET, ct, encode_msgpack(body)
                                              if ct == CT_MSGPACK else encode_json(body))
                    if op == OP_ERROR:
                        assert json.loads(raw)["error"]["code"] == "key_not_found", raw
                    out[f"{table} {user} {ct}"] = raw
        for table in TABLES:
            rows: list[bytes] = []
            cursor = None
            while True:
                op, _, raw = conn.request(OP_SCAN, CT_MSGPACK, encode_msgpack(
                    {"table": table, "cursor": cursor}))
                assert op != OP_ERROR, raw
                page = msgspec.msgpack.decode(raw)
                rows += [encode_msgpack(row) for row in page["rows"]]
                cursor = page["cursor"]
                if cursor is None:
                    break
            out[f"scan {table}"] = sorted(rows)
        status, _, raw = http_request(server.http, "POST", "/batch_get", encode_json(
            {"requests": [{"table": "T", "key": user} for user in users]}))
        assert status == 200, raw
        out["batch"] = raw
    finally:
        conn.close()
    return out


def test_pushed_values_survive_restarts_and_snapshots_on_a_real_server(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    server = BeavaProcess("--data-dir", data, memory_only=False,
                          env={"BEAVA_SNAPSHOT_INTERVAL_MS": "0"})
    users: list[str] = []
    try:
        status, _, raw = http_request(server.http, "POST", "/register",
                                      json.dumps(REGISTER).encode(),
                                      {"Content-Type": "application/json"})
        assert status == 200, raw
        conn = FrameConn(server.tcp)

        @fuzz_settings(80)
        @given(transport=st.sampled_from(TRANSPORTS), place=st.sampled_from(["j", "x", "s",
                                                                             "body"]),
               data=st.data())
        def push_one(transport: str, place: str, data: st.DataObject) -> None:
            value = data.draw(values(msgpack=transport == "tcp-msgpack"))
            user = f"u{len(users)}"
            users.append(user)
            if place == "body":
                event, body = "E", value
            elif place == "s":
                event, body = "S", {"user": user, "s": value}
            else:
                event, body = "E", {"user": user, place: value}
            push(server, conn, transport, event, body)

        push_one()
        conn.close()
        live = reads(server, users)
    finally:
        assert server.terminate() == 0
    replayed = BeavaProcess("--data-dir", data, memory_only=False,
                            env={"BEAVA_SNAPSHOT_INTERVAL_MS": "100"})
    try:
        assert reads(replayed, users) == live
        status, _, raw = http_request(replayed.http, "POST", "/push/S",
                                      b'{"user": "after", "s": "x"}',
                                      {"Content-Type": "application/json"})
        assert status == 200, raw
        assert replayed.server.wait_until(lambda: "snapshot.written" in replayed.kinds(), 20)
        users.append("after")
        baseline = reads(replayed, users)
    finally:
        assert replayed.terminate() == 0
    from_snapshot = BeavaProcess("--data-dir", data, memory_only=False)
    try:
        assert "recovery.snapshot_loaded" in from_snapshot.kinds()
        assert reads(from_snapshot, users) == baseline
    finally:
        assert from_snapshot.terminate() == 0
