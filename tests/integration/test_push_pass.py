"""Runs of pushes in one socket read go through the compiled push pass
(beava._fast.intake.push_pass); frames it does not take go to the Python handler in their place.
Pipelined mixes must be answered in order with the LSNs, errors and replays a push at a time
would give, in every durability mode, and what was acked must be what a restart recovers."""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from beava.durability.wal_format import (
    RECORD_EVENT,
    SEGMENT_HEADER_SIZE,
    SEGMENT_SUFFIX,
    Record,
    parse_record,
    parse_segment_name,
)
from beava_client.opcodes import OP_GET_RESPONSE, OP_PUSH_MANY
from tests.support import BeavaProcess, FrameConn, frame, http_request, thread_nices

OP_PUSH = 0x0010
OP_GET = 0x0020
OP_ERROR = 0xFFFF

NODES = [
    {"kind": "event", "name": "Txn",
     "schema": {"fields": {"user": "str", "amount": "f64", "note": "str"},
                "optional_fields": ["note"], "defaults": {"note": "none"}}},
    {"kind": "event", "name": "Pay", "dedupe_key": "id", "dedupe_window_ms": 600000,
     "schema": {"fields": {"id": "str", "user": "str", "amount": "f64"}}},
    {"kind": "derivation", "name": "Spend", "upstreams": ["Txn"], "key": ["user"],
     "agg": {"n": {"op": "count"}, "total": {"op": "sum", "params": {"field": "amount"}},
             "notes": {"op": "last", "params": {"field": "note"}}}},
    {"kind": "derivation", "name": "Paid", "upstreams": ["Pay"], "key": ["user"],
     "agg": {"paid": {"op": "sum", "params": {"field": "amount"}}}},
]


def push_msgpack(event: str, body: object) -> bytes:
    return frame(OP_PUSH, 2, msgspec.msgpack.encode({"event": event, "body": body}))


def push_json(event: str, body: object) -> bytes:
    return frame(OP_PUSH, 1, json.dumps({"event": event, "body": body}).encode())


def get(table: str, key: str) -> bytes:
    return frame(OP_GET, 1, json.dumps({"table": table, "key": key}).encode())


@pytest.fixture(params=["memory", "strict", "periodic"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BeavaProcess]:
    mode = request.param
    if mode == "memory":
        proc = BeavaProcess()
    else:
        proc = BeavaProcess("--data-dir", str(tmp_path / "data"), memory_only=False,
                            env={"BEAVA_WAL_SYNC_MODE": mode})
    status, _, _ = http_request(proc.http, "POST", "/register",
                                json.dumps({"nodes": NODES}).encode(),
                                {"Content-Type": "application/json"})
    assert status == 200
    yield proc
    proc.terminate()


def test_only_the_strict_writer_thread_gives_way(server: BeavaProcess,
                                                request: pytest.FixtureRequest) -> None:
    """Strict mode's WAL writer thread runs at nice +10 (its batches grow while the loop
    goes first); periodic mode's and every other thread keep the process's value."""
    mode = request.node.callspec.params["server"]
    pid = server.proc.pid
    base = thread_nices(pid)[str(pid)]
    expected = [min(19, base + 10) - base] if mode == "strict" else []
    deadline = time.monotonic() + 5.0
    while True:
        raised = [nice - base for nice in thread_nices(pid).values() if nice != base]
        if raised == expected or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert raised == expected


def replies(conn: FrameConn, count: int) -> list[tuple[int, dict]]:
    out = []
    for _ in range(count):
        got = conn.recv_frame()
        assert got is not None
        out.append((got[0], json.loads(got[2])))
    return out


def test_mixed_pipeline_in_one_write(server: BeavaProcess) -> None:
    conn = FrameConn(server.tcp)
    ping = frame(0x0000)
    frames = [
        push_msgpack("Txn", {"user": "u1", "amount": 1.5}),           # 1
        push_json("Txn", {"user": "u1", "amount": 2, "note": "x"}),  # 2
        push_msgpack("Txn", {"user": "u1", "amount": "3"}),           # invalid_event
        push_msgpack("Nope", {"user": "u1"}),                        # event_not_found
        push_msgpack("Txn", {"user": "u2", "amount": 4.0, "z": 1}),  # unknown field
        frame(OP_PUSH, 2, b"\xc1"),                                  # undecodable
        push_msgpack("Pay", {"id": "p1", "user": "u1", "amount": 5.0}),  # 3 (dedupe path)
        push_msgpack("Txn", {"user": "u2", "amount": 6.0}),           # 4
        push_msgpack("Pay", {"id": "p1", "user": "u1", "amount": 5.0}),  # replay of 3
        ping,
        push_json("Txn", {"user": "u2", "amount": 2 ** 70}),          # 5 (widened)
        frame(OP_PUSH, 9, b"{}"),                                    # content type
        get("Spend", "u2"),
        get("Paid", "u1"),
    ]
    conn.send(b"".join(frames))
    got = replies(conn, len(frames))
    base = got[0][1]["ack_lsn"]
    version = got[0][1]["registry_version"]

    def ack(offset: int, replay: bool = False) -> tuple[int, dict]:
        return OP_PUSH, {"ack_lsn": base + offset, "idempotent_replay": replay,
                         "registry_version": version}

    # a push error names the registry version (spec/wire.md §5.1); a refused frame does not
    expected = [ack(0), ack(1), "invalid_event", "event_not_found", "unknown_field_v0", None,
                ack(2), ack(3), ack(2, replay=True), None, ack(4), None, None, None]
    for index, (want, have) in enumerate(zip(expected, got, strict=True)):
        if isinstance(want, tuple):
            assert have == want, index
        elif isinstance(want, str):
            assert have[0] == OP_ERROR and have[1]["error"]["code"] == want, (index, have)
            assert have[1]["registry_version"] == version
    assert got[5] == (OP_ERROR, {"code": "unsupported"})
    assert got[11][1]["error"]["code"] == "unsupported_content_type"
    assert got[9][0] == 0x0000
    spend = got[12][1]
    assert spend["n"] == 2 and spend["total"] == 6.0 + 2.0 ** 70 and spend["notes"] == "none"
    assert got[13][1] == {"paid": 5.0}
    conn.close()


def test_many_events_are_split_by_name(server: BeavaProcess) -> None:
    """Pushes of many events (names sharing prefixes, of 1-40 bytes, many of one length)
    in one pipeline each reach their own event; a name that differs from a registered one
    in a byte, or is one byte short or long, is no event."""
    names = ["E", "Ev", "Evt", "Event1", "Event2", "EventNumber10", "EventNumber11",
             "Payment", "A" * 16, "A" * 17, "B" * 40, *[f"Load{i:02}" for i in range(40)]]
    nodes = [{"kind": "event", "name": name, "schema": {"fields": {"user": "str"}}}
             for name in names]
    nodes += [{"kind": "derivation", "name": f"N{i}", "upstreams": [name], "key": ["user"],
               "agg": {f"n{i}": {"op": "count"}}} for i, name in enumerate(names)]
    status, _, body = http_request(server.http, "POST", "/register",
                                   json.dumps({"nodes": NODES + nodes}).encode(),
                                   {"Content-Type": "application/json"})
    assert status == 200, body
    conn = FrameConn(server.tcp)
    frames = [push_msgpack(name, {"user": "u"}) for i, name in enumerate(names)
              for _ in range(i + 1)]
    wrong = ["e", "Evu", "Event", "Event12", "Paymen", "A" * 15, "A" * 18, "B" * 39 + "C",
             *[f"Load{i}" for i in range(40, 100)]]  # names of one length: compared
    frames += [push_msgpack(name, {"user": "u"}) for name in wrong]
    conn.send(b"".join(frames))
    got = replies(conn, len(frames))
    assert all(op == OP_PUSH for op, _ in got[:-len(wrong)])
    assert [reply["error"]["code"] for _, reply in got[-len(wrong):]] == (
        ["event_not_found"] * len(wrong))
    conn.send(b"".join(get(f"N{i}", "u") for i in range(len(names))))
    assert [reply[f"n{i}"] for i, (_, reply) in enumerate(replies(conn, len(names)))] == list(
        range(1, len(names) + 1))
    conn.close()


def test_run_ending_with_a_refused_push_is_acked(server: BeavaProcess) -> None:
    """The refused push goes to the Python handler, which does not tell the durability
    log of anything; the accepted pushes before it still reach the WAL (strict: their
    acks and the GET behind them are not held for ever)."""
    conn = FrameConn(server.tcp, timeout=5)
    conn.send(push_msgpack("Txn", {"user": "u9", "amount": 1.0}) * 3
              + push_msgpack("Txn", {"user": "u9"}) + get("Spend", "u9"))
    got = replies(conn, 5)
    assert [op for op, _ in got] == [OP_PUSH] * 3 + [OP_ERROR, OP_GET_RESPONSE]
    assert [body.get("ack_lsn") for _, body in got[:3]] == [2, 3, 4]
    assert got[4][1]["n"] == 3
    # the same for a PUSH_MANY whose last body is refused, and a push after it
    conn.send(frame(OP_PUSH_MANY, 2, msgspec.msgpack.encode(
        {"event": "Txn", "bodies": [{"user": "u9", "amount": 1.0}, {"user": "u9"}]}))
        + get("Spend", "u9"))
    many, read = replies(conn, 2)
    assert many[1]["acks"] == 1 and read[1]["n"] == 4
    conn.close()


def test_acked_runs_are_what_a_restart_recovers(server: BeavaProcess,
                                               tmp_path: Path) -> None:
    """Long runs cross turn and WAL batch boundaries; every ack's LSN is the next one, and
    after a restart of a durable server the table holds every acknowledged push."""
    conn = FrameConn(server.tcp)
    count = 5000
    conn.send(b"".join(push_msgpack("Txn", {"user": f"u{i % 7}", "amount": 1.0})
                       for i in range(count)))
    lsns = [body["ack_lsn"] for op, body in replies(conn, count) if op == OP_PUSH]
    assert lsns == list(range(lsns[0], lsns[0] + count))
    conn.close()
    if not (tmp_path / "data").exists():
        return
    server.terminate()
    restarted = BeavaProcess("--data-dir", str(tmp_path / "data"), memory_only=False)
    try:
        fresh = FrameConn(restarted.tcp)
        fresh.send(b"".join(get("Spend", f"u{k}") for k in range(7)))
        total = sum(body["n"] for _, body in replies(fresh, 7))
        assert total == count
        fresh.close()
    finally:
        restarted.terminate()


def push_many(event: str, bodies: list[object]) -> bytes:
    return frame(0x0012, 2, msgspec.msgpack.encode({"event": event, "bodies": bodies}))


def test_push_many_bodies_mixed_with_errors_and_replays(server: BeavaProcess) -> None:
    """PUSH_MANY bodies go through the pass in order; the ones it does not take (errors,
    dedupe-keyed events) through the store, with the same LSN order and error indices."""
    conn = FrameConn(server.tcp)
    conn.send(push_msgpack("Txn", {"user": "m", "amount": 1.0}))
    (_, first), = replies(conn, 1)
    base = first["ack_lsn"]
    conn.send(push_many("Txn", [{"user": "m", "amount": 2.0}, {"user": "m", "amount": "x"},
                                7, {"user": "m", "amount": 3.0, "bad": 1},
                                {"user": "m", "amount": 4.0}]))
    (op, many), = replies(conn, 1)
    assert op == 0x0012
    assert (many["acks"], many["ack_lsn"], many["replays"]) == (2, base + 2, 0)
    assert [(e["index"], e["error"]["code"]) for e in many["errors"]] == [
        (1, "invalid_event"), (2, "invalid_event"), (3, "unknown_field_v0")]
    conn.send(push_many("Pay", [{"id": "a", "user": "m", "amount": 1.0},
                                {"id": "b", "user": "m", "amount": 2.0},
                                {"id": "a", "user": "m", "amount": 1.0}]))
    (_, paid), = replies(conn, 1)
    assert (paid["acks"], paid["ack_lsn"], paid["errors"]) == (3, base + 4, [])
    assert paid["replays"] == 1  # the third body repeats the first's dedupe key
    conn.send(get("Spend", "m") + get("Paid", "m"))
    (_, spend), (_, pay) = replies(conn, 2)
    assert (spend["n"], spend["total"]) == (3, 7.0)
    assert pay == {"paid": 3.0}
    conn.close()


def event_records(data_dir: Path) -> list[Record]:
    """Every event record in the WAL segments under ``data_dir``, in LSN order."""
    out = []
    for path in sorted(data_dir.rglob(f"*{SEGMENT_SUFFIX}")):
        if parse_segment_name(path.name) is None:
            continue
        buf = path.read_bytes()
        offset = SEGMENT_HEADER_SIZE
        while offset < len(buf):
            record = parse_record(buf, offset)
            offset += record.size
            if record.type == RECORD_EVENT:
                out.append(record)
    return sorted(out, key=lambda record: record.lsn)


def test_envelope_layouts(server: BeavaProcess, tmp_path: Path) -> None:
    """The pass splits a MessagePack envelope written event first (every client's layout);
    any other layout is decoded whole, with the same result. A durable record's body is the
    pushed body's bytes when the checks changed nothing (a float32 stays as pushed), else
    the checked row (a default filled in); a restart recovers the same state either way."""
    body32 = (b"\x83\xa4user\xa2u5\xa4note\xa1n\xa6amount\xca"  # a float 32
              + struct.pack(">f", 1.5))
    plain = msgspec.msgpack.encode({"user": "u5", "amount": 2.0, "note": "n"})
    defaulted = msgspec.msgpack.encode({"user": "u5", "amount": 4.0})
    frames = [
        frame(OP_PUSH, 2, b"\x82\xa5event\xa3Txn\xa4body" + body32),          # split
        frame(OP_PUSH, 2, b"\x82\xa4body" + plain + b"\xa5event\xa3Txn"),      # body first
        frame(OP_PUSH, 2, b"\x82\xa5event\xd9\x03Txn\xa4body" + defaulted),   # str 8 name
        frame(OP_PUSH, 2, b"\x82\xa5event\xa3T\xffn\xa4body" + plain),         # not UTF-8
        frame(OP_PUSH, 2, b"\x82\xa5event\xa3Txn\xa4body" + plain + b"\xc0"),  # trailing
        frame(OP_PUSH, 2, b"\x82\xa5event\xa3Txx\xa4body" + plain),            # no such event
        frame(OP_PUSH, 2, b"\x82\xa5event\xa3Txn\xa4body"),                    # no body
        get("Spend", "u5"),
    ]
    conn = FrameConn(server.tcp)
    conn.send(b"".join(frames))
    got = replies(conn, len(frames))
    conn.close()
    assert [op for op, _ in got[:3]] == [OP_PUSH] * 3
    assert [body["ack_lsn"] for _, body in got[:3]] == [2, 3, 4]
    # an envelope that does not decode is refused as in any layout (as the \xc1 above)
    assert [got[i][1] for i in (3, 4, 6)] == [{"code": "unsupported"}] * 3
    assert got[5][1]["error"]["code"] == "event_not_found"
    want = {"n": 3, "total": 7.5, "notes": "none"}  # the last push's note: the default
    assert got[7][1] == want
    data_dir = tmp_path / "data"
    if not data_dir.exists():
        return
    server.terminate()
    records = event_records(data_dir)
    assert [record.lsn for record in records] == [2, 3, 4]
    assert records[0].body == body32
    assert msgspec.msgpack.decode(records[1].body) == {"user": "u5", "amount": 2.0, "note": "n"}
    assert msgspec.msgpack.decode(records[2].body) == {"user": "u5", "amount": 4.0,
                                                        "note": "none"}
    restarted = BeavaProcess("--data-dir", str(data_dir), memory_only=False)
    try:
        fresh = FrameConn(restarted.tcp)
        fresh.send(get("Spend", "u5"))
        assert replies(fresh, 1)[0][1] == want
        fresh.close()
    finally:
        restarted.terminate()


def test_a_widened_integer_is_recorded_as_applied(server: BeavaProcess, tmp_path: Path) -> None:
    """An integer beyond 64-bit signed (a MessagePack uint 64) is widened to float by the
    checks: the record holds the row as applied, not the pushed bytes (spec/durability.md
    §5: the record is the field map exactly as it was applied)."""
    body = msgspec.msgpack.encode({"user": "w", "amount": 2 ** 64 - 1, "note": "n"})
    assert b"\xcf" in body  # sent as a uint 64
    conn = FrameConn(server.tcp)
    conn.send(frame(OP_PUSH, 2, b"\x82\xa5event\xa3Txn\xa4body" + body) + get("Spend", "w"))
    (op, ack), (_, spend) = replies(conn, 2)
    conn.close()
    assert op == OP_PUSH and spend["total"] == float(2 ** 64 - 1)
    data_dir = tmp_path / "data"
    if not data_dir.exists():
        return
    server.terminate()
    (record,) = event_records(data_dir)
    assert record.lsn == ack["ack_lsn"] and record.body != body
    row = msgspec.msgpack.decode(record.body)
    assert row == {"user": "w", "amount": float(2 ** 64 - 1), "note": "n"}
    assert type(row["amount"]) is float
