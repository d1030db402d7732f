"""Crash and durability test support: disk servers restarted on one data directory, waiting
on stdout log lines, and an independent reader of the WAL file format (spec/durability.md
§3-§5), used to pick the exact bytes a test truncates or flips.
"""

from __future__ import annotations

import os
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest

from beava_client import ServerError, TcpClient
from tests.support import BeavaProcess, http_request

SEGMENT_HEADER_SIZE = 32
SEGMENT_HEADER = struct.Struct("<8sHHQQI")
RECORD_HEAD = struct.Struct("<IIQBBHQIH")  # record_len .. name_len
RECORD_EVENT, RECORD_REGISTRY, RECORD_RESET = 1, 2, 3

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
    magic, version, flags, base, _created, crc = SEGMENT_HEADER.unpack_from(data, 0)
    assert magic == b"BVWALSEG" and version == 1, path
    assert crc == zlib.crc32(data[:28]), f"segment header CRC mismatch in {path}"
    assert path.name == f"seg-{base:016x}.bwal"
    records = []
    offset = SEGMENT_HEADER_SIZE
    while len(data) - offset >= 38:
        record_len, crc, lsn, rtype, fmt, _flags, ts, version, name_len = \
            RECORD_HEAD.unpack_from(data, offset)
        size = 4 + record_len
        if record_len < 34 or offset + size > len(data):
            break
        if zlib.crc32(data[offset + 8:offset + size]) != crc:
            break
        name_end = offset + 34 + name_len
        (body_len,) = struct.unpack_from("<I", data, name_end)
        assert record_len == 34 + name_len + body_len
        records.append(WalRecord(offset, size, lsn, rtype, fmt, ts, version,
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


def wait_dead(proc: BeavaProcess, timeout: float = 15.0) -> int:
    """Wait for a process that is expected to kill itself (crash point); its return code."""
    code = proc.proc.wait(timeout)
    proc._reader.join(5)
    return code


def sigkill(proc: BeavaProcess) -> None:
    """SIGKILL the server (no cleanup), then wait for it and for its stdout to drain."""
    proc.kill()
    proc._reader.join(5)


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
            if ready:
                assert "server.ready" in proc.kinds(), (proc.proc.poll(), proc.raw_lines)
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
