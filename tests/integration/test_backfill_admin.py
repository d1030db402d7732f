"""The backfill admin operation (docs/wire.md, an extension): staged upload of a table
state, then an atomic, durable install with the WAL tail after ``until_ms`` on top."""

from __future__ import annotations

import base64
import json
import socket
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
from beava_client.opcodes import CT_MSGPACK, OP_BACKFILL, OP_ERROR, OP_PING
from tests.support import BeavaProcess, FrameConn, frame, http_request

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


def backfill_call(client: Any, body: dict[str, Any]) -> dict[str, Any]:
    """One backfill action: OP_BACKFILL in MessagePack over framed TCP, or POST
    /admin/backfill over HTTP (``data`` in base64)."""
    if hasattr(client, "encode_request"):
        reply: dict[str, Any] = client.request(OP_BACKFILL, body, ct=CT_MSGPACK)
        return reply
    if isinstance(body.get("data"), bytes):
        body = {**body, "data": base64.b64encode(body["data"]).decode()}
    reply = client.request("POST", "/admin/backfill", body, safe=False)
    return reply


def backfill(client: Any, data: bytes, until_ms: int, nodes: list[Any] = NODES,
             chunk: int = 100, **commit: Any) -> dict[str, Any]:
    def call(body: dict[str, Any]) -> dict[str, Any]:
        return backfill_call(client, body)

    upload = call({"action": "begin", "table": "Visits", "until_ms": until_ms,
                   "size": len(data), "nodes": nodes})["upload"]
    for offset in range(0, len(data), chunk):
        call({"action": "chunk", "upload": upload, "offset": offset,
              "data": data[offset:offset + chunk]})
    return call({"action": "commit", "upload": upload, **commit})


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


@pytest.mark.parametrize("transport", ["tcp", "http"])
def test_counts_dry_run_and_a_drop_refused(durable: BeavaProcess, transport: str) -> None:
    """A live entity the history does not hold ("gone", pushed before UNTIL) would read
    empty after the install: the commit is refused naming it unless drop_missing; a dry
    run counts without installing; u3, which only the tail feeds, is kept."""
    url = f"tcp://{durable.addrs['tcp']}" if transport == "tcp" else durable.http_url
    with client_for_url(url) as c:
        c.register({"nodes": NODES})
        c.test_clock(T0 + MIN)
        c.push("Visit", {"user_id": "gone", "ms": 5.0})
        for at, user, ms in LIVE:
            c.test_clock(at)
            c.push("Visit", {"user_id": user, "ms": ms})
        c.test_clock(T0 + 70 * MIN)
        before = rows(c, ["gone", "u0", "h9"])
        history = state_of([*HISTORY, (T0 + 2 * MIN, "h9", 1.0)])
        counts = {"kept": 1, "changed": 3, "created": 1, "dropped": 1}  # u3; u0-u2; h9; gone
        preview = backfill(c, history, UNTIL, dry_run=True)
        assert {k: preview[k] for k in counts} == counts
        assert preview["dry_run"] is True and "lsn" not in preview
        assert preview["entities"] == 5 and preview["tail_events"] > 0
        error = error_of(lambda: backfill(c, history, UNTIL))
        assert (error["code"], error["dropped"], error["keys"]) == (
            "backfill_would_drop", 1, [{"user_id": "gone"}])
        assert "would drop 1 entities of table Visits" in error["message"]
        assert "user_id='gone'" in error["message"] and "drop_missing" in error["message"]
        assert rows(c, ["gone", "u0", "h9"]) == before  # neither changed the server
        assert before["gone"]["visits"] == 1 and before["h9"] == {}
        done = backfill(c, history, UNTIL, drop_missing=True)
        assert {k: done[k] for k in counts} == counts and done["dry_run"] is False
        after = rows(c, ["gone", "u0", "h9"])
        assert after["gone"] == {} and after["h9"]["visits"] == 1
        assert after["u0"]["visits"] > before["u0"]["visits"]
        error = error_of(lambda: backfill(c, history, UNTIL, dry_run="yes"))
        assert (error["code"], error["path"]) == ("invalid_backfill", "dry_run")


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
            done = backfill(c, state_of(HISTORY), T0 + 7 * MIN, drop_missing=True)
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


@bv.event
class Tag:
    user_id: str
    tag: str


@bv.table(key="user_id")
def Tags(t: Tag) -> bv.Table:
    return t.group_by("user_id").agg(top=bv.max("tag"))


TAG_NODES: list[dict[str, Any]] = compile_register_payload(Tag, Tags)["nodes"]


def upload(conn: FrameConn, table: str, nodes: list[Any], data: bytes,
           until_ms: int = 0) -> str:
    """Stage ``data`` for ``table`` over a framed-TCP connection; the upload id."""
    def call(body: dict[str, Any]) -> dict[str, Any]:
        op, _, reply = conn.request(OP_BACKFILL, CT_MSGPACK, msgspec.msgpack.encode(body))
        assert op == OP_BACKFILL, reply
        answer: dict[str, Any] = json.loads(reply)
        return answer

    upload_id: str = call({"action": "begin", "table": table, "until_ms": until_ms,
                           "size": len(data), "nodes": nodes})["upload"]
    step = 1 << 21
    for offset in range(0, len(data), step):
        call({"action": "chunk", "upload": upload_id, "offset": offset,
              "data": data[offset:offset + step]})
    return upload_id


def commit_frame(upload_id: str, **options: Any) -> bytes:
    return frame(OP_BACKFILL, CT_MSGPACK,
                 msgspec.msgpack.encode({"action": "commit", "upload": upload_id, **options}))


def test_a_planted_value_no_push_could_hold_is_refused(durable: BeavaProcess) -> None:
    """A dump of max(tag) with its value replaced by a map with an integer key used to
    commit, and every read of the entity and scan of the table answered 500 after it."""
    with client_for_url(f"tcp://{durable.addrs['tcp']}") as c:
        c.register({"nodes": TAG_NODES})
        c.push("Tag", {"user_id": "u1", "tag": "a"})
        store = FeatureStore(memory_governance_enforce=False)
        assert store.register(json.dumps({"nodes": TAG_NODES}).encode())[0] == 200
        store.push("Tag", {"user_id": "u1", "tag": "b"})
        state = store.table("Tags").dump()
        state["columns"]["top"]["objs"][0] = {1: "x"}
        conn = FrameConn(durable.tcp)
        try:
            conn.send(commit_frame(upload(conn, "Tags", TAG_NODES,
                                          msgspec.msgpack.encode(state))))
            reply = conn.recv_frame()
        finally:
            conn.close()
        assert reply is not None and reply[0] == OP_ERROR
        error = json.loads(reply[2])["error"]
        assert (error["code"], error["path"]) == ("invalid_backfill", "state.columns.top")
        assert "table Tags, feature top" in error["message"]
        assert c.get("Tags", "u1") == {"top": "a"}
    status, _, body = http_request(durable.http, "POST", "/scan", b'{"table": "Tags"}',
                                   {"Content-Type": "application/json"})
    assert status == 200 and json.loads(body)["rows"] == [{"top": "a", "user_id": "u1"}]


def _peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_an_upload_of_the_wrong_shape_builds_nothing(durable: BeavaProcess) -> None:
    """4 MiB of one array of 4M empty maps: decoded whole, it used to take +286 MB and
    block the loop for about a second before it was refused."""
    n = 4_000_000
    data = b"\xdd" + n.to_bytes(4, "big") + b"\x80" * n
    conn = FrameConn(durable.tcp)
    try:
        with client_for_url(f"tcp://{durable.addrs['tcp']}") as c:
            c.register({"nodes": NODES})
        upload_id = upload(conn, "Visits", NODES, data)
        before = _peak_rss_mb(durable.proc.pid)
        conn.send(commit_frame(upload_id))
        reply = conn.recv_frame()
        assert reply is not None and reply[0] == OP_ERROR
        error = json.loads(reply[2])["error"]
        assert (error["code"], error["path"]) == ("invalid_backfill", "state")
        assert _peak_rss_mb(durable.proc.pid) - before < 64
    finally:
        conn.close()


@bv.event
class Note:
    user_id: str
    body: str


@bv.table(key="user_id")
def Notes(n: Note) -> bv.Table:
    return n.group_by("user_id").agg(last_body=bv.last("body"), n_notes=bv.count())


NOTE_NODES: list[dict[str, Any]] = compile_register_payload(Note, Notes)["nodes"]


def notes_state(users: int) -> bytes:
    """The dumped state of Notes holding one note for each of ``users`` users."""
    store = FeatureStore(memory_governance_enforce=False)
    assert store.register(json.dumps({"nodes": NOTE_NODES}).encode())[0] == 200
    for i in range(users):
        store.push("Note", {"user_id": f"user-{i}", "body": f"note {i}"})
    return msgspec.msgpack.encode(store.table("Notes").dump())


def test_a_large_commit_is_served_in_slices(durable: BeavaProcess) -> None:
    """Another client's PING is answered while a commit of 300,000 entities is still being
    decoded (it used to wait for the whole commit)."""
    users = 300_000
    data = notes_state(users)
    with client_for_url(f"tcp://{durable.addrs['tcp']}") as c:
        c.register({"nodes": NOTE_NODES})
        committer = FrameConn(durable.tcp, timeout=60)
        pinger = FrameConn(durable.tcp)
        try:
            committer.send(commit_frame(upload(committer, "Notes", NOTE_NODES, data)))
            time.sleep(0.01)  # the commit is read first
            assert pinger.request(OP_PING)[0] == OP_PING
            committer.sock.settimeout(0)
            with pytest.raises(BlockingIOError):  # the commit is not answered yet
                committer.sock.recv(1, socket.MSG_PEEK)
            committer.sock.settimeout(60)
            reply = committer.recv_frame()
        finally:
            committer.close()
            pinger.close()
        assert reply is not None and reply[0] == OP_BACKFILL
        assert json.loads(reply[2])["entities"] == users
        assert c.get("Notes", "user-7") == {"last_body": "note 7", "n_notes": 1}


def test_pushes_during_a_sliced_commit_reach_the_installed_table(
        durable: BeavaProcess) -> None:
    """Pushes accepted while the commit compares entities a slice at a time are applied to
    the new state before it is swapped in (and counted), whichever step they fall in."""
    users = 200_000
    data = notes_state(users)
    with client_for_url(f"tcp://{durable.addrs['tcp']}") as c:
        c.register({"nodes": NOTE_NODES})
        committer = FrameConn(durable.tcp, timeout=60)
        pushed = 0
        try:
            committer.send(commit_frame(upload(committer, "Notes", NOTE_NODES, data),
                                        drop_missing=False))
            committer.sock.settimeout(0)
            while True:
                c.push("Note", {"user_id": "user-7", "body": "live"})
                c.push("Note", {"user_id": "late", "body": "live"})
                pushed += 1
                try:
                    committer.sock.recv(1, socket.MSG_PEEK)
                    break
                except BlockingIOError:
                    pass
            committer.sock.settimeout(60)
            reply = committer.recv_frame()
        finally:
            committer.close()
        assert reply is not None and reply[0] == OP_BACKFILL, reply
        done = json.loads(reply[2])
        # the pushes before the swap are the tail; at most the last two came after it
        assert 2 * pushed - 2 <= done["tail_events"] <= 2 * pushed
        assert done["dropped"] == 0 and done["entities"] == users + 1
        assert done["kept"] + done["changed"] + done["created"] == users + 1
        assert c.get("Notes", "user-7") == {"last_body": "live", "n_notes": 1 + pushed}
        assert c.get("Notes", "late") == {"last_body": "live", "n_notes": pushed}


@bv.table
def AllVisits(v: Visit) -> bv.Table:
    return v.agg(visits=bv.count())


def test_a_table_without_keys_names_its_row_when_it_would_drop(
        durable: BeavaProcess) -> None:
    nodes = compile_register_payload(Visit, AllVisits)["nodes"]
    store = FeatureStore(memory_governance_enforce=False)
    assert store.register(json.dumps({"nodes": nodes}).encode())[0] == 200
    empty = bytes(msgspec.msgpack.encode(store.table("AllVisits").dump()))
    with client_for_url(f"tcp://{durable.addrs['tcp']}") as c:
        c.register({"nodes": nodes})
        c.test_clock(T0)
        c.push("Visit", {"user_id": "u1", "ms": 1.0})
        conn = FrameConn(durable.tcp)
        try:
            conn.send(commit_frame(upload(conn, "AllVisits", nodes, empty, until_ms=T0)))
            reply = conn.recv_frame()
        finally:
            conn.close()
        assert reply is not None and reply[0] == OP_ERROR
        error = json.loads(reply[2])["error"]
        assert (error["code"], error["keys"]) == ("backfill_would_drop", [{}])
        assert "would drop 1 entities of table AllVisits that hold state now and would " \
               "hold none after it (its row)" in error["message"]
        assert c.get("AllVisits") == {"visits": 1}


def backfill_parts(client: Any, parts: list[bytes], until_ms: int) -> dict[str, Any]:
    """One upload of key-disjoint parts, each opened and sent on its own, then a commit."""
    def call(body: dict[str, Any]) -> dict[str, Any]:
        return backfill_call(client, body)

    upload = call({"action": "begin", "table": "Visits", "until_ms": until_ms,
                   "parts": len(parts), "nodes": NODES})["upload"]
    for index, data in enumerate(parts):
        call({"action": "part", "upload": upload, "part": index, "size": len(data)})
        for offset in range(0, len(data), 100):
            call({"action": "chunk", "upload": upload, "part": index, "offset": offset,
                  "data": data[offset:offset + 100]})
    return call({"action": "commit", "upload": upload})


@pytest.mark.parametrize("transport", ["tcp", "http"])
def test_a_table_installed_from_key_disjoint_parts(tmp_path: Path, transport: str) -> None:
    """The history split by user into parts, each state computed alone, installs as the
    whole history's state does (the WAL tail on top, across a restart); parts sharing a
    user are refused, naming it, and change nothing."""
    server = BeavaProcess("--data-dir", str(tmp_path), memory_only=False)
    users = ["u0", "u1", "u2", "u3", "nobody"]
    by_part = [["u0", "u2"], ["nobody"], ["u1"]]  # the second part holds no history
    try:
        url = f"tcp://{server.addrs['tcp']}" if transport == "tcp" else server.http_url
        with client_for_url(url) as live:
            live.register({"nodes": NODES})
            for at, user, ms in LIVE:
                live.test_clock(at)
                live.push("Visit", {"user_id": user, "ms": ms})
            overlapping = [state_of([p for p in HISTORY if p[1] in ("u0", "u1")]),
                           state_of([p for p in HISTORY if p[1] in ("u1", "u2")])]
            error = error_of(lambda: backfill_parts(live, overlapping, UNTIL))
            assert (error["code"], error["key"], error["parts"]) == (
                "backfill_parts_overlap", {"user_id": "u1"}, [0, 1])
            live.test_clock(T0 + 70 * MIN)
            before = rows(live, users)
            assert backfill(live, state_of(HISTORY), UNTIL, dry_run=True)["changed"] == 3
            assert rows(live, users) == before  # the refusal changed nothing
            done = backfill_parts(live, [state_of([p for p in HISTORY if p[1] in part])
                                         for part in by_part], UNTIL)
            assert done["entities"] == 4 and done["lsn"] > 0
            assert done["tail_events"] == sum(1 for p in LIVE if p[0] > UNTIL)
            live.test_clock(T0 + 70 * MIN)
            got = rows(live, users)
            backfill(live, state_of(HISTORY), UNTIL)  # one part: the same rows
            assert rows(live, users) == got and got["u0"]["visits"] > 10
        server.terminate()
        server = BeavaProcess("--data-dir", str(tmp_path), memory_only=False)
        with client_for_url(f"tcp://{server.addrs['tcp']}") as again:
            again.test_clock(T0 + 70 * MIN)
            assert rows(again, users) == got
    finally:
        server.terminate()
