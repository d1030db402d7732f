"""Pushes the store could not keep are refused at the door (docs/limits.md): a value nested
past 64 containers, a map key inside a value that is not a string. Once refused, nothing of
them reaches the WAL, so the server restarts and every read of the entity keeps working."""

from __future__ import annotations

import datetime
import json
import math
from pathlib import Path
from typing import Any

import msgspec

from beava_client.opcodes import (
    CT_MSGPACK,
    OP_ERROR,
    OP_GET,
    OP_GET_RESPONSE,
    OP_PUSH,
)
from tests.register_payloads import table_node
from tests.support import BeavaProcess, FrameConn, http_request

REGISTER = {"nodes": [
    {"kind": "event", "name": "Note",
     "schema": {"fields": {"user": "str"}, "optional_fields": ["j"]}},
    table_node({"n": {"op": "count"}, "last_j": {"op": "last", "params": {"field": "j"}}},
               name="Notes", up="Note"),
]}


def deep(levels: int) -> str:
    return "[" * levels + "1" + "]" * levels


def push_j(server: BeavaProcess, j: str) -> tuple[int, dict[str, Any]]:
    """Push user u1 with ``j`` (JSON text) over HTTP; ``(status, reply)``."""
    body = '{"user": "u1", "j": ' + j + "}"
    status, _, raw = http_request(server.http, "POST", "/push/Note", body.encode(),
                                  {"Content-Type": "application/json"})
    return status, json.loads(raw)


def test_refused_values_leave_a_server_that_restarts(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    server = BeavaProcess("--data-dir", data, memory_only=False)
    try:
        status, _, raw = http_request(server.http, "POST", "/register",
                                      json.dumps(REGISTER).encode(),
                                      {"Content-Type": "application/json"})
        assert status == 200, raw
        # 985 levels: acknowledged once, it made every later start fail in WAL replay
        status, body = push_j(server, deep(985))
        assert (status, body["error"]["code"]) == (400, "invalid_event")
        # deeper than the JSON decoder recurses: a client error too, not a 500
        status, body = push_j(server, deep(5000))
        assert (status, body["error"]["code"]) == (400, "invalid_event")
        status, _ = push_j(server, deep(63))
        assert status == 200
        conn = FrameConn(server.tcp)
        envelope = msgspec.msgpack.encode({"event": "Note", "body": {"user": "u1", "j": {7: "x"}}})
        op, _, payload = conn.request(OP_PUSH, CT_MSGPACK, envelope)
        assert op == OP_ERROR and json.loads(payload)["error"]["code"] == "invalid_event"
        conn.close()
    finally:
        assert server.terminate() == 0
    restarted = BeavaProcess("--data-dir", data, memory_only=False)
    try:
        conn = FrameConn(restarted.tcp)
        op, _, payload = conn.request(OP_GET, 1, b'{"table": "Notes", "key": "u1"}')
        conn.close()
        assert op == OP_GET_RESPONSE
        row = json.loads(payload)
        assert row["n"] == 1
        assert row["last_j"] == json.loads(deep(63))
    finally:
        assert restarted.terminate() == 0


SUMS = {"nodes": [
    {"kind": "event", "name": "Pay",
     "schema": {"fields": {"user": "str", "x": "f64"}, "optional_fields": ["j"]}},
    table_node({"n": {"op": "count"}, "total": {"op": "sum", "params": {"field": "x"}},
                "hour": {"op": "sum", "params": {"field": "x", "window": "1h"}},
                "avg": {"op": "mean", "params": {"field": "x", "window": "1h"}},
                "last_j": {"op": "last", "params": {"field": "j"}}},
               name="Pays", up="Pay"),
]}


def read_pays(server: BeavaProcess, users: list[str]) -> dict[str, Any]:
    conn = FrameConn(server.tcp)
    try:
        rows = {}
        for user in users:
            op, _, payload = conn.request(OP_GET, 1, json.dumps({"table": "Pays",
                                                                 "key": user}).encode())
            assert op == OP_GET_RESPONSE, payload
            rows[user] = json.loads(payload)
        return rows
    finally:
        conn.close()


def test_unstorable_numbers_and_timestamps_are_refused_non_finite_floats_kept(
        tmp_path: Path) -> None:
    """An integer no double holds answered 500 (its widening raised OverflowError); a
    MessagePack timestamp extension was stored (msgspec decodes it to a datetime) and read
    back as a string. Non-finite floats over MessagePack are numbers (spec/wire.md §7.3):
    `sum` adds them (NaN stays NaN) and every read renders them as null, the same after WAL
    replay and after a snapshot."""
    data = str(tmp_path / "data")
    server = BeavaProcess("--data-dir", data, memory_only=False,
                          env={"BEAVA_SNAPSHOT_INTERVAL_MS": "0"})
    users = ["ok", "nan", "inf", "ninf"]
    try:
        status, _, raw = http_request(server.http, "POST", "/register",
                                      json.dumps(SUMS).encode(),
                                      {"Content-Type": "application/json"})
        assert status == 200, raw
        huge = "1" + "0" * 400
        for body in ('{"user": "ok", "x": ' + huge + "}",
                     '{"user": "ok", "x": 1, "j": [' + huge + "]}",
                     '{"user": "ok", "x": -' + huge + "}"):
            status, _, raw = http_request(server.http, "POST", "/push/Pay", body.encode(),
                                          {"Content-Type": "application/json"})
            assert (status, json.loads(raw)["error"]["code"]) == (400, "invalid_event"), raw
        stamp = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
        conn = FrameConn(server.tcp)
        for body in ({"user": "ok", "x": 1.0, "j": stamp}, {"user": "ok", "x": stamp},
                     {"user": "ok", "x": 1.0, "j": {"at": [stamp]}}):
            envelope = msgspec.msgpack.encode({"event": "Pay", "body": body})
            op, _, payload = conn.request(OP_PUSH, CT_MSGPACK, envelope)
            assert op == OP_ERROR, payload
            assert json.loads(payload)["error"]["code"] == "invalid_event"
        for user, x in (("ok", 2.0), ("ok", 2**64 - 1), ("nan", 1.0), ("nan", math.nan),
                        ("inf", math.inf), ("inf", 1.0), ("ninf", -math.inf),
                        ("ninf", math.inf)):
            envelope = msgspec.msgpack.encode({"event": "Pay", "body": {"user": user, "x": x}})
            op, _, payload = conn.request(OP_PUSH, CT_MSGPACK, envelope)
            assert op == OP_PUSH, payload  # an ack echoes the opcode
        conn.close()
        live = read_pays(server, users)
        assert live["ok"]["total"] == live["ok"]["hour"] == 2.0 + 2.0**64
        assert live["ok"]["last_j"] is None and live["ok"]["n"] == 2
        for user in ("nan", "inf", "ninf"):  # NaN, inf and inf + -inf = NaN all read null
            assert live[user]["n"] == 2
            assert live[user]["total"] is live[user]["hour"] is live[user]["avg"] is None
    finally:
        assert server.terminate() == 0
    replayed = BeavaProcess("--data-dir", data, memory_only=False,
                            env={"BEAVA_SNAPSHOT_INTERVAL_MS": "100"})
    try:
        assert read_pays(replayed, users) == live
        # a snapshot is taken once a record follows the recovered ones
        status, _, raw = http_request(replayed.http, "POST", "/push/Pay",
                                      b'{"user": "other", "x": 1}',
                                      {"Content-Type": "application/json"})
        assert status == 200, raw
        assert replayed.server.wait_until(lambda: "snapshot.written" in replayed.kinds(), 20)
    finally:
        assert replayed.terminate() == 0
    from_snapshot = BeavaProcess("--data-dir", data, memory_only=False)
    try:
        assert "recovery.snapshot_loaded" in from_snapshot.kinds()
        assert read_pays(from_snapshot, users) == live
    finally:
        assert from_snapshot.terminate() == 0
