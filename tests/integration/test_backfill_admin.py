"""The backfill admin operation (docs/wire.md, an extension): staged upload of a table
state, then an atomic, durable install with the WAL tail after ``until_ms`` on top."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

import beava as bv
from beava.dsl.compiler import compile_register_payload
from beava.engine.store import FeatureStore
from beava_client import client_for_url
from beava_client.errors import ServerError
from beava_client.opcodes import CT_MSGPACK, OP_BACKFILL
from tests.support import BeavaProcess, http_request

T0 = 1_700_000_000_000
MIN = 60_000


@bv.event
class Visit:
    user_id: str
    ms: float


@bv.table(key="user_id")
def Visits(v: Visit) -> bv.Table:
    return v.group_by("user_id").agg(visits=bv.count(), visits_1h=bv.count(window="1h"),
                                     ms_sum=bv.sum("ms"), last_ms=bv.last("ms"))


NODES: list[dict[str, Any]] = compile_register_payload(Visit, Visits)["nodes"]


def state_of(pushes: list[tuple[int, str, float]]) -> bytes:
    """The Visits state (MessagePack dump) after ``pushes`` (time, user, ms), computed by a
    local store: what the Spark connector uploads."""
    clock = [0]
    store = FeatureStore(clock=lambda: clock[0], memory_governance_enforce=False)
    assert store.register(json.dumps({"nodes": NODES}).encode())[0] == 200
    for at, user, ms in pushes:
        clock[0] = at
        store.push("Visit", {"user_id": user, "ms": ms})
    return bytes(msgspec.msgpack.encode(store.table("Visits").dump()))


def backfill(client: Any, data: bytes, until_ms: int, nodes: list[Any] = NODES,
             chunk: int = 100) -> dict[str, Any]:
    def call(body: dict[str, Any]) -> dict[str, Any]:
        if hasattr(client, "encode_request"):
            reply: dict[str, Any] = client.request(OP_BACKFILL, body, ct=CT_MSGPACK)
            return reply
        if isinstance(body.get("data"), bytes):
            body = {**body, "data": base64.b64encode(body["data"]).decode()}
        reply = client.request("POST", "/admin/backfill", body, safe=False)
        return reply

    upload = call({"action": "begin", "table": "Visits", "until_ms": until_ms,
                   "size": len(data), "nodes": nodes})["upload"]
    for offset in range(0, len(data), chunk):
        call({"action": "chunk", "upload": upload, "offset": offset,
              "data": data[offset:offset + chunk]})
    return call({"action": "commit", "upload": upload})


@pytest.fixture
def durable(tmp_path: Path) -> Iterator[BeavaProcess]:
    server = BeavaProcess("--data-dir", str(tmp_path), memory_only=False)
    yield server
    server.terminate()


def rows(client: Any, users: list[str]) -> dict[str, Any]:
    return {u: client.get("Visits", u) for u in users}


HISTORY = [(T0 + i * MIN, f"u{i % 3}", float(i)) for i in range(30)]
LIVE = [(T0 + 25 * MIN + i * 2 * MIN, f"u{i % 4}", 100.0 + i) for i in range(12)]
UNTIL = T0 + 29 * MIN


@pytest.mark.parametrize("transport", ["tcp", "http"])
def test_install_applies_the_wal_tail_and_survives_a_restart(tmp_path: Path,
                                                             transport: str) -> None:
    """History up to UNTIL plus the live pushes after it equals one server fed all of it
    in time order; the live pushes at or before UNTIL are the history's business."""
    reference = BeavaProcess()
    server = BeavaProcess("--data-dir", str(tmp_path), memory_only=False)
    users = ["u0", "u1", "u2", "u3", "nobody"]
    try:
        with client_for_url(f"tcp://{reference.addrs['tcp']}") as ref:
            ref.register({"nodes": NODES})
            for at, user, ms in sorted([*HISTORY, *[p for p in LIVE if p[0] > UNTIL]]):
                ref.test_clock(at)
                ref.push("Visit", {"user_id": user, "ms": ms})
            ref.test_clock(T0 + 70 * MIN)
            expected = rows(ref, users)
        url = (f"tcp://{server.addrs['tcp']}" if transport == "tcp"
               else server.http_url)
        with client_for_url(url) as live:
            live.register({"nodes": NODES})
            for at, user, ms in LIVE:
                live.test_clock(at)
                live.push("Visit", {"user_id": user, "ms": ms})
            done = backfill(live, state_of(HISTORY), UNTIL)
            assert done["table"] == "Visits" and done["until_ms"] == UNTIL
            assert done["tail_events"] == sum(1 for p in LIVE if p[0] > UNTIL) > 0
            assert done["entities"] == 4
            live.test_clock(T0 + 70 * MIN)
            got = rows(live, users)
        assert got == expected
        assert got["u0"]["visits"] > 10 and got["u3"]["visits"] > 0
        server.terminate()
        server = BeavaProcess("--data-dir", str(tmp_path), memory_only=False)
        with client_for_url(f"tcp://{server.addrs['tcp']}") as again:
            again.test_clock(T0 + 70 * MIN)
            assert rows(again, users) == expected
    finally:
        reference.terminate()
        server.terminate()


def error_of(call: Any) -> dict[str, Any]:
    with pytest.raises(ServerError) as info:
        call()
    return info.value.error or {}


def test_bad_requests_are_structured_errors(durable: BeavaProcess) -> None:
    with client_for_url(f"tcp://{durable.addrs['tcp']}") as c:
        c.register({"nodes": NODES})

        def send(body: Any) -> Any:
            return c.request(OP_BACKFILL, body, ct=CT_MSGPACK)

        assert error_of(lambda: send([1]))["code"] == "invalid_backfill"
        assert error_of(lambda: send({"action": "nope"}))["path"] == "action"
        assert error_of(lambda: send({"action": "begin", "table": "Visits", "until_ms": -1,
                                      "size": 1, "nodes": NODES}))["path"] == "until_ms"
        assert error_of(lambda: send({"action": "begin", "table": "Nope", "until_ms": 1,
                                      "size": 1, "nodes": NODES}))["path"] == "table"
        other = json.loads(json.dumps(NODES).replace('"1h"', '"2h"'))
        assert error_of(lambda: send({"action": "begin", "table": "Visits", "until_ms": 1,
                                      "size": 1, "nodes": other}))["code"] == \
            "backfill_registry_mismatch"
        assert error_of(lambda: send({"action": "commit", "upload": "x"}))["code"] == \
            "backfill_upload_not_found"
        upload = send({"action": "begin", "table": "Visits", "until_ms": 1, "size": 4,
                       "nodes": NODES})["upload"]
        error = error_of(lambda: send({"action": "chunk", "upload": upload, "offset": 2,
                                       "data": b"ab"}))
        assert (error["path"], error["expected"]) == ("offset", 0)
        assert error_of(lambda: send({"action": "commit", "upload": upload}))["path"] == \
            "upload"
        send({"action": "chunk", "upload": upload, "offset": 0, "data": b"\xc1abc"})
        assert error_of(lambda: send({"action": "commit", "upload": upload}))["path"] == \
            "state"
        # well-formed MessagePack that is not a table state
        assert error_of(lambda: backfill(c, msgspec.msgpack.encode({"keys": 5}), 1))[
            "path"] == "state"
        assert send({"action": "abort", "upload": "gone"}) == {"aborted": True}
        assert c.get("Visits", "u0") == {}
    status, _, body = http_request(durable.http, "POST", "/admin/backfill", b"{not json",
                                   {"Content-Type": "application/json"})
    assert status == 400 and json.loads(body)["error"]["code"] == "invalid_backfill"


def test_memory_only_server_refuses() -> None:
    server = BeavaProcess()
    try:
        with client_for_url(f"tcp://{server.addrs['tcp']}") as c:
            c.register({"nodes": NODES})
            assert error_of(lambda: backfill(c, state_of(HISTORY), UNTIL))["code"] == \
                "backfill_wal_required"
    finally:
        server.terminate()


def test_refused_when_the_wal_tail_was_reclaimed(tmp_path: Path) -> None:
    """Segments before a snapshot are deleted: a backfill until a time they may hold
    pushes after is refused, naming the earliest until_ms it can serve; that one works."""
    env = {"BEAVA_WAL_SEGMENT_BYTES": "1048576", "BEAVA_SNAPSHOT_INTERVAL_MS": "100",
           "BEAVA_SNAPSHOT_RETAIN_COUNT": "1"}
    server = BeavaProcess("--data-dir", str(tmp_path), memory_only=False, env=env)
    try:
        with client_for_url(f"tcp://{server.addrs['tcp']}") as c:
            c.register({"nodes": NODES})
            pad = "x" * 200
            for step in range(8):  # ~1.6 MB of WAL: at least one sealed segment
                c.test_clock(T0 + step * MIN)
                c.push_many("Visit", [{"user_id": f"p{i % 50}{pad}", "ms": 1.0}
                                      for i in range(1000)])
            deadline = time.monotonic() + 15
            while not any(line.get("kind") == "wal.segments_reclaimed" for line in server.lines):
                assert time.monotonic() < deadline, "no WAL segment was reclaimed"
                time.sleep(0.05)
            error = error_of(lambda: backfill(c, state_of(HISTORY), T0))
            assert error["code"] == "backfill_wal_reclaimed"
            earliest = error["earliest_until_ms"]
            assert T0 < earliest <= T0 + 7 * MIN
            assert f"until_ms >= {earliest}" in error["message"]
            done = backfill(c, state_of(HISTORY), T0 + 7 * MIN)
            assert done["tail_events"] == 0 and done["entities"] == 3
    finally:
        server.terminate()


def test_a_full_chunk_fits_an_http_body_as_base64(durable: BeavaProcess) -> None:
    with client_for_url(durable.http_url) as c:
        c.register({"nodes": NODES})
        begun = c.request("POST", "/admin/backfill", {
            "action": "begin", "table": "Visits", "until_ms": 1, "size": 1 << 30,
            "nodes": NODES})
        size = begun["chunk_bytes"]
        data = base64.b64encode(bytes(range(256)) * (size // 256)).decode()
        reply = c.request("POST", "/admin/backfill", {
            "action": "chunk", "upload": begun["upload"], "offset": 0, "data": data},
            safe=False)
        assert reply == {"received": size}
        error = error_of(lambda: c.request("POST", "/admin/backfill", {
            "action": "chunk", "upload": begun["upload"], "offset": size,
            "data": base64.b64encode(b"x" * (size + 1)).decode()}, safe=False))
        assert error["path"] == "data"
        # a new upload of the same table replaces the open one
        c.request("POST", "/admin/backfill", {"action": "begin", "table": "Visits",
                                              "until_ms": 1, "size": 1, "nodes": NODES})
        assert error_of(lambda: c.request("POST", "/admin/backfill", {
            "action": "commit", "upload": begun["upload"]}, safe=False))["code"] == \
            "backfill_upload_not_found"
        assert error_of(lambda: c.request("POST", "/admin/backfill", {
            "action": "begin", "table": "Visits", "until_ms": 1, "size": (1 << 30) + 1,
            "nodes": NODES}))["path"] == "size"
