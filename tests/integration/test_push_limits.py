"""Pushes the store could not keep are refused at the door (docs/limits.md): a value nested
past 64 containers, a map key inside a value that is not a string. Once refused, nothing of
them reaches the WAL, so the server restarts and every read of the entity keeps working."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from beava_client.opcodes import CT_MSGPACK, OP_ERROR, OP_GET, OP_GET_RESPONSE, OP_PUSH
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
