"""Crash and durability test support: disk servers restarted on one data directory, waiting
on stdout log lines, and an independent reader of the WAL file format (spec/durability.md
§3-§5), used to pick the exact bytes a test truncates or flips.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest

from beava_client import ServerError, TcpClient
from beava_client.frames import FrameDecoder, encode_frame
from beava_client.opcodes import CT_JSON, OP_PUSH, OP_PUSH_MANY
from tests.support import BeavaProcess, http_request

SEGMENT_HEADER_SIZE = 32
SEGMENT_HEADER = struct.Struct("<8sHHQQI")
RECORD_HEAD = struct.Struct("<IIQBBHQIH")  # record_len .. name_len
RECORD_EVENT, RECORD_REGISTRY, RECORD_RESET = 1, 2, 3

# Sums of distinct powers of two below 2**52 stay exact in a float64.
BITS = 52

# Damage lines a plain crash must never cause (a torn tail of the newest segment is allowed).
DAMAGE_KINDS = ("recovery.wal_corruption", "recovery.wal_record_quarantined",
                "recovery.snapshot_invalid")


@dataclass
class WalRecord:
    offset: int
    size: int
    lsn: int
    type: int
    body_format: int
    timestamp_ms: int
    registry_version: int
    name: str
    body: bytes

    def fields(self) -> dict:
        """The decoded body (JSON or MessagePack)."""
        if self.body_format == 1:
            return msgspec.json.decode(self.body)
        return msgspec.msgpack.decode(self.body)


@dataclass
class Segment:
    path: Path
    base_lsn: int
    flags: int
    records: list[WalRecord]
    valid_end: int
    """Offset just after the last structurally valid record read in order."""
    size: int


def read_segment(path: Path) -> Segment:
    """Parse one segment file, stopping at the first record that is not valid."""
    data = path.read_bytes()
    if len(data) < SEGMENT_HEADER_SIZE:  # being created by a running server
        return Segment(path, int(path.name[4:20], 16), 0, [], len(data), len(data))
    magic, version, flags, base, _created, crc = SEGMENT_HEADER.unpack_from(data, 0)
    assert magic == b"BVWALSEG" and version == 1, path
    assert crc == zlib.crc32(data[:28]), f"segment header CRC mismatch in {path}"
    assert path.name == f"seg-{base:016x}.bwal"
    records = []
    offset = SEGMENT_HEADER_SIZE
    while len(data) - offset >= 38:
        record_len, crc, lsn, rtype, fmt, _flags, ts, reg_version, name_len = \
            RECORD_HEAD.unpack_from(data, offset)
        size = 4 + record_len
        if record_len < 34 or offset + size > len(data):
            break
        if zlib.crc32(data[offset + 8:offset + size]) != crc:
            break
        name_end = offset + 34 + name_len
        (body_len,) = struct.unpack_from("<I", data, name_end)
        assert record_len == 34 + name_len + body_len
        records.append(WalRecord(offset, size, lsn, rtype, fmt, ts, reg_version,
                                 data[offset + 34:name_end].decode(),
                                 data[name_end + 4:offset + size]))
        offset += size
    return Segment(path, base, flags, records, offset, len(data))


def wal_segments(data_dir: Path) -> list[Segment]:
    """Every segment of ``data_dir/wal``, oldest first."""
    wal = data_dir / "wal"
    return [read_segment(wal / name) for name in sorted(os.listdir(wal))
            if name.startswith("seg-") and name.endswith(".bwal")]


def snapshot_files(data_dir: Path) -> list[str]:
    return sorted(os.listdir(data_dir / "snapshots"))


def wait_for(predicate: Callable[[], object], timeout: float = 10.0, what: str = "") -> object:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        time.sleep(0.002)


def lines_of(proc: BeavaProcess, kind: str) -> list[dict]:
    return [line for line in list(proc.lines) if line.get("kind") == kind]


def wait_line(proc: BeavaProcess, kind: str, timeout: float = 10.0, after: int = 0) -> dict:
    """The first ``kind`` line at index >= ``after`` of the process's parsed stdout."""
    def find() -> dict | None:
        for line in list(proc.lines)[after:]:
            if line.get("kind") == kind:
                return line
        return None
    return wait_for(find, timeout, f"{kind} log line")  # type: ignore[return-value]


def wait_snapshot(proc: BeavaProcess, lsn: int, timeout: float = 10.0) -> dict:
    """The ``snapshot.written`` line of the snapshot at ``lsn`` (earlier ones are skipped)."""
    def find() -> dict | None:
        for line in list(proc.lines):
            if line.get("kind") == "snapshot.written" and line["snapshot_lsn"] == lsn:
                return line
        return None
    return wait_for(find, timeout, f"a snapshot at LSN {lsn}")  # type: ignore[return-value]


def wait_dead(proc: BeavaProcess, timeout: float = 15.0) -> int:
    """Wait for a process that is expected to kill itself (crash point); its return code."""
    code = proc.proc.wait(timeout)
    proc.join_output(5)
    return code


def sigkill(proc: BeavaProcess) -> None:
    """SIGKILL the server (no cleanup), then wait for it and for its stdout to drain."""
    proc.kill()
    proc.join_output(5)


def assert_clean_recovery(proc: BeavaProcess, data_dir: Path) -> None:
    """A crash never damages sealed data and recovery leaves no snapshot temp file."""
    wait_line(proc, "recovery.complete")
    damage = [line for line in proc.lines if line.get("kind") in DAMAGE_KINDS]
    assert not damage, f"crash caused damage reports: {damage}"
    temps = [n for n in os.listdir(data_dir / "snapshots") if n.endswith(".tmp")]
    assert not temps, f"snapshot temp files left after recovery: {temps}"


def metric(proc: BeavaProcess, name: str) -> float:
    status, _, body = http_request(proc.admin, "GET", "/metrics")
    assert status == 200
    for line in body.decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"metric {name} not exposed")


def table_error(client: TcpClient, table: str, key: object = "") -> str | None:
    """The error code of a get on ``table`` (None when it succeeds)."""
    try:
        client.get(table, key)
    except ServerError as exc:
        return exc.code
    return None


class Pusher(threading.Thread):
    """One pipelined framed-TCP connection pushing until ``limit`` or until the server dies.

    Push ``i`` goes to key ``keys[i % K]`` with ``v = 2 ** (i // K)`` (``K = len(keys)``) and
    ``c = conn_key``, so a key's ``sum(v)`` is the bit set of its applied pushes (see
    :func:`check_bitset`). Up to ``window`` pushes are in flight, written ``write_batch`` at
    a time; with ``OP_PUSH_MANY`` each frame carries ``many_rows`` bodies.
    """

    def __init__(self, addr: tuple[str, int], event: str, keys: list[str], conn_key: str,
                 ct: int, op: int, go: threading.Event, *, window: int = 192,
                 write_batch: int = 32, many_rows: int = 8) -> None:
        super().__init__(daemon=True)
        self.addr, self.event, self.keys, self.conn_key = addr, event, keys, conn_key
        self.ct, self.op, self.go = ct, op, go
        self.window, self.write_batch, self.many_rows = window, write_batch, many_rows
        self.limit = len(keys) * BITS
        self.sent = 0  # pushes handed to the socket (an upper bound of what may be applied)
        self.acked = 0  # pushes acknowledged, in order
        self.lsns: list[int] = []
        self.errors: list[object] = []
        self.encode = msgspec.json.encode if ct == CT_JSON else msgspec.msgpack.encode

    def per_key(self, total: int, j: int) -> int:
        """How many of the first ``total`` pushes went to key ``j``."""
        k = len(self.keys)
        return max(0, (total - j + k - 1) // k)

    def body(self, i: int) -> dict:
        k = len(self.keys)
        return {"k": self.keys[i % k], "c": self.conn_key, "v": 1 << (i // k)}

    def frames(self, start: int, count: int) -> tuple[bytes, list[int]]:
        """``count`` pushes from ``start`` as frames, and the number of rows of each frame."""
        if self.op == OP_PUSH:
            return (b"".join(encode_frame(OP_PUSH, self.ct, self.encode(
                {"event": self.event, "body": self.body(i)}))
                for i in range(start, start + count)), [1] * count)
        out, rows = [], []
        for first in range(start, start + count, self.many_rows):
            stop = min(first + self.many_rows, start + count)
            bodies = [self.body(i) for i in range(first, stop)]
            out.append(encode_frame(OP_PUSH_MANY, self.ct,
                                    self.encode({"event": self.event, "bodies": bodies})))
            rows.append(len(bodies))
        return b"".join(out), rows

    def run(self) -> None:
        try:
            sock = socket.create_connection(self.addr, timeout=30)
        except OSError:
            return
        self.go.wait()
        decoder = FrameDecoder()
        in_flight: deque[int] = deque()
        pending = 0
        try:
            while True:
                if self.sent < self.limit and pending + self.write_batch <= self.window:
                    count = min(self.write_batch, self.limit - self.sent)
                    data, rows = self.frames(self.sent, count)
                    in_flight.extend(rows)
                    pending += count
                    self.sent += count  # counted before the write: it may land partially
                    sock.sendall(data)
                    continue
                if not in_flight:
                    return
                chunk = sock.recv(1 << 16)
                if not chunk:
                    return
                for op, ct, payload in decoder.feed(chunk):
                    rows = in_flight.popleft()
                    pending -= rows
                    reply = (msgspec.json.decode(payload) if ct == CT_JSON
                             else msgspec.msgpack.decode(payload))
                    if op != self.op or (op == OP_PUSH_MANY and (
                            reply["acks"] != rows or reply["errors"])):
                        self.errors.append((op, reply))
                        continue
                    self.acked += rows
                    self.lsns.append(reply["ack_lsn"])
        except OSError:
            return
        finally:
            sock.close()


def check_bitset(row: dict, acked: int, sent: int, where: str) -> int:
    """Check one key's ``{"n": count, "s": sum(v)}`` written by a :class:`Pusher`; returns n.

    ``count == popcount(sum)`` proves no push was applied twice (G2); one connection's pushes
    have increasing LSNs, so the applied ones are a prefix of what was sent to the key (G3):
    ``sum == 2**count - 1``; ``acked <= count <= sent`` (G1; ``acked=0`` where acks promise
    nothing).
    """
    n = row.get("n", 0)
    total = row.get("s", 0)
    bits = int(total)
    assert bits == total, f"{where}: inexact sum {row}"
    assert bits.bit_count() == n, f"{where}: a push was applied twice: {row} (G2)"
    assert bits == (1 << n) - 1, f"{where}: applied pushes are not a prefix: {row} (G3)"
    assert acked <= n, f"{where}: acknowledged push lost: {row}, acked {acked} (G1)"
    assert n <= sent, f"{where}: more pushes applied than sent: {row}, sent {sent}"
    return n


class Servers:
    """Starts beava processes on disk; everything still running is killed at teardown."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.procs: list[BeavaProcess] = []

    def start(self, env: dict[str, str] | None = None, *, data_dir: Path | None = None,
              wait: bool = True, ready: bool = True) -> BeavaProcess:
        """Start a server on ``data_dir`` (default: the test's). With ``ready`` (and
        ``wait``) the server must reach ``server.ready`` with no damage reported unless the
        caller checks for it."""
        base = {"BEAVA_SNAPSHOT_INTERVAL_MS": "0"}
        base.update(env or {})
        proc = BeavaProcess("--data-dir", str(data_dir or self.data_dir), env=base,
                            memory_only=False, wait=False)
        self.procs.append(proc)
        if wait:
            proc.wait_bound(20)
            if ready and "server.ready" not in proc.kinds():
                try:
                    code = proc.proc.wait(5)
                except subprocess.TimeoutExpired:
                    code = None
                err = proc.stderr_text() if code is not None else ""
                raise AssertionError(f"server not ready (exit {code}): {proc.raw_lines} {err}")
        return proc

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    path.mkdir()
    return path


@pytest.fixture
def servers(data_dir: Path) -> Iterator[Servers]:
    group = Servers(data_dir)
    yield group
    group.close()
