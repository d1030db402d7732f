"""Pushes the store could not keep are refused at the door (docs/limits.md): a value nested
past 64 containers, a map key inside a value that is not a string. Once refused, nothing of
them reaches the WAL, so the server restarts and every read of the entity keeps working."""

from __future__ import annotations

import datetime
import json
import math
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from beava_client.opcodes import (
    CT_JSON,
    CT_MSGPACK,
    OP_ERROR,
    OP_GET,
    OP_GET_RESPONSE,
    OP_PING,
    OP_PUSH,
    OP_PUSH_MANY,
)
from tests.register_payloads import table_node
from tests.support import BeavaProcess, FrameConn, frame, http_request

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


def test_unstorable_numbers_timestamps_and_non_finite_floats_are_refused(
        tmp_path: Path) -> None:
    """An integer no double holds answered 500 (its widening raised OverflowError); a
    MessagePack timestamp extension was stored (msgspec decodes it to a datetime) and read
    back as a string; a NaN or ±Infinity was acked and turned `sum` into null for the rest of
    its window (spec/wire.md §6.3 refuses them). The sums hold the accepted pushes only, the
    same after WAL replay and after a snapshot."""
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
                        ("ninf", 4.0)):
            envelope = msgspec.msgpack.encode({"event": "Pay", "body": {"user": user, "x": x}})
            op, _, payload = conn.request(OP_PUSH, CT_MSGPACK, envelope)
            if math.isfinite(x):
                assert op == OP_PUSH, payload  # an ack echoes the opcode
            else:
                assert op == OP_ERROR, payload
                assert json.loads(payload)["error"]["field"] == "x"
        conn.close()
        live = read_pays(server, users)
        assert live["ok"]["total"] == live["ok"]["hour"] == 2.0 + 2.0**64
        assert live["ok"]["last_j"] is None and live["ok"]["n"] == 2
        for user, x in (("nan", 1.0), ("inf", 1.0), ("ninf", 4.0)):
            assert live[user]["n"] == 1
            assert live[user]["total"] == live[user]["hour"] == live[user]["avg"] == x
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


# NaN and ±Infinity in pushed fields (spec/wire.md §6.3) ------------------------------------

FINITE = {"nodes": [
    {"kind": "event", "name": "Obs",
     "schema": {"fields": {"user": "str", "x": "f64", "q": "i64", "d": "json", "o": "f64"},
                "optional_fields": ["o", "u"]}},
    table_node({"n": {"op": "count"}, "total": {"op": "sum", "params": {"field": "x"}},
                "hour": {"op": "sum", "params": {"field": "x", "window": "1h"}},
                "qs": {"op": "sum", "params": {"field": "q"}},
                "ds": {"op": "sum", "params": {"field": "d", "window": "1h"}},
                "os": {"op": "sum", "params": {"field": "o", "window": "1h"}},
                "us": {"op": "sum", "params": {"field": "u"}}},
               name="Obs1h", up="Obs"),
]}
GOOD = {"user": "u1", "x": 1.5, "q": 2, "d": 3, "o": 4.0, "u": 5}
FIELDS = ("x", "q", "d", "o", "u")
NAMES = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def msgpack_float(value: float, width: int) -> bytes:
    return (b"\xca" + struct.pack(">f", value) if width == 32
            else b"\xcb" + struct.pack(">d", value))


def bad_msgpack_body(field: str, value: float, width: int) -> bytes:
    """GOOD as a MessagePack map, ``field`` holding ``value`` as a float 32 or 64."""
    pack = msgspec.msgpack.encode
    return bytes([0x80 | len(GOOD)]) + b"".join(
        pack(k) + (msgpack_float(value, width) if k == field else pack(v))
        for k, v in GOOD.items())


def bad_json_body(field: str, text: str) -> bytes:
    """GOOD as JSON, ``field`` holding the number ``text`` (1e999: beyond a double)."""
    return ("{" + ", ".join(f'"{k}": {text if k == field else json.dumps(v)}'
                            for k, v in GOOD.items()) + "}").encode()


def assert_refused(error: dict[str, Any], field: str, got: str) -> None:
    assert error == {"code": "invalid_event", "field": field, "expected": "finite number",
                     "got": got, "message": f"field {field!r}: expected a finite number, "
                                            f"got {got}"}


@pytest.fixture(params=["memory", "strict"])
def finite_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BeavaProcess]:
    """A server of each push-pass path: memory-only builds the row from a MessagePack body's
    bytes (row_msgpack), strict checks the bytes at intake (check_msgpack)."""
    if request.param == "memory":
        server = BeavaProcess()
    else:
        server = BeavaProcess("--data-dir", str(tmp_path / "data"), memory_only=False,
                              env={"BEAVA_WAL_SYNC_MODE": "strict"})
    status, _, raw = http_request(server.http, "POST", "/register",
                                  json.dumps(FINITE).encode(),
                                  {"Content-Type": "application/json"})
    assert status == 200, raw
    yield server
    server.terminate()


def test_non_finite_floats_are_refused_on_every_transport(finite_server: BeavaProcess) -> None:
    """NaN, Infinity and -Infinity in a required f64, i64 or json field or an optional one
    (typed or not): invalid_event naming the field over framed TCP (MessagePack float 32 and
    float 64, pipelined between good pushes; JSON), HTTP (POST /push, /push/<event>) and
    PUSH_MANY (that body in `errors`, the others acked); nothing of them is applied."""
    server = finite_server
    conn = FrameConn(server.tcp)
    version = json.loads(conn.request(OP_PING)[2])["registry_version"]
    good = frame(OP_PUSH, CT_MSGPACK, msgspec.msgpack.encode({"event": "Obs", "body": GOOD}))
    head = b"\x82\xa5event\xa3Obs\xa4body"  # the envelope as clients lay it out
    goods = 0
    for field in FIELDS:
        for value in (math.nan, math.inf, -math.inf):
            got = NAMES[repr(value)]
            for width in (32, 64):
                bad = frame(OP_PUSH, CT_MSGPACK, head + bad_msgpack_body(field, value, width))
                conn.send(good + bad + good)  # one read: the push pass takes the run
                replies = [conn.recv_frame() for _ in range(3)]
                assert [r[0] for r in replies if r] == [OP_PUSH, OP_ERROR, OP_PUSH], replies
                reply = json.loads(replies[1][2])  # type: ignore[index]
                assert reply["registry_version"] == version
                assert_refused(reply["error"], field, got)
                goods += 2
            if math.isnan(value):
                continue  # JSON has no NaN; a number beyond a double reads as ±Infinity
            text = "1e999" if value > 0 else "-1e999"
            body = bad_json_body(field, text)
            op, _, payload = conn.request(OP_PUSH, CT_JSON,
                                          b'{"event": "Obs", "body": ' + body + b"}")
            assert op == OP_ERROR
            assert_refused(json.loads(payload)["error"], field, got)
            for path, sent in (("/push", b'{"event": "Obs", "data": ' + body + b"}"),
                               ("/push/Obs", body)):
                status, _, raw = http_request(server.http, "POST", path, sent,
                                              {"Content-Type": "application/json"})
                assert status == 400, raw
                assert_refused(json.loads(raw)["error"], field, got)
    # PUSH_MANY: the bad body refused by index, the good ones around it acked
    many = {"event": "Obs", "bodies": [GOOD, {**GOOD, "q": math.nan}, GOOD]}
    op, _, payload = conn.request(OP_PUSH_MANY, CT_MSGPACK, msgspec.msgpack.encode(many))
    assert op == OP_PUSH_MANY, payload
    outcome = json.loads(payload)
    assert outcome["acks"] == 2 and [e["index"] for e in outcome["errors"]] == [1]
    assert_refused(outcome["errors"][0]["error"], "q", "NaN")
    goods += 2
    text = (b'{"event": "Obs", "bodies": [' + json.dumps(GOOD).encode() + b", "
            + bad_json_body("o", "-1e999") + b", " + json.dumps(GOOD).encode() + b"]}")
    op, _, payload = conn.request(OP_PUSH_MANY, CT_JSON, text)
    assert op == OP_PUSH_MANY, payload
    for raw in (payload, http_request(server.http, "POST", "/push_many", text,
                                      {"Content-Type": "application/json"})[2]):
        outcome = json.loads(raw)
        assert outcome["acks"] == 2 and [e["index"] for e in outcome["errors"]] == [1]
        assert_refused(outcome["errors"][0]["error"], "o", "-Infinity")
        goods += 2
    op, _, payload = conn.request(OP_GET, CT_JSON, b'{"table": "Obs1h", "key": "u1"}')
    conn.close()
    assert op == OP_GET_RESPONSE, payload
    assert json.loads(payload) == {"n": goods, "total": 1.5 * goods, "hour": 1.5 * goods,
                                   "qs": 2 * goods, "ds": 3.0 * goods, "os": 4.0 * goods,
                                   "us": 5 * goods}
