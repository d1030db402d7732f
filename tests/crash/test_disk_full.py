"""A full WAL disk (spec/durability.md §6.6) on a real 2 MiB tmpfs: writes are refused with
the retryable ``wal_unavailable`` (HTTP 503) while reads are served, writes resume once
space returns, and a restart recovers exactly the acknowledged pushes."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from beava_client import ServerError, TcpClient
from tests.crash.conftest import Servers, lines_of, metric, sigkill, wait_for, wait_line
from tests.crash.test_recovery_cases import PAD_NODES
from tests.support import http_request

PAD = 16384


@pytest.fixture
def small_wal_disk(data_dir: Path) -> Iterator[Path]:
    """``data_dir/wal`` on its own 2 MiB tmpfs (root only; skipped where mount is denied)."""
    wal = data_dir / "wal"
    wal.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(wal)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield wal
    finally:
        subprocess.run(["umount", "-l", str(wal)], check=False)


def fill(wal: Path, leave: int) -> Path:
    """A filler file taking all but ``leave`` bytes of the WAL disk."""
    stats = os.statvfs(wal)
    filler = wal / "filler"
    filler.write_bytes(bytes(max(0, stats.f_bavail * stats.f_frsize - leave)))
    return filler


def push_code(client: TcpClient, v: int) -> str | None:
    """Push E2 (user u, value v): None when acknowledged, else the error code."""
    try:
        client.push("E2", {"user": "u", "v": v, "pad": "p" * PAD})
    except ServerError as exc:
        return exc.code
    return None


@pytest.mark.parametrize("mode", ["strict", "periodic"])
def test_full_disk_refuses_writes_serves_reads_and_resumes(
        servers: Servers, data_dir: Path, small_wal_disk: Path, mode: str) -> None:
    """Periodic mode: the pushes acknowledged before the failed tick stay queued and are
    written once space returns, so the restart recovers them too."""
    env = {"BEAVA_WAL_SYNC_MODE": mode}
    proc = servers.start(env)
    acked: list[int] = []
    with TcpClient(*proc.tcp, timeout=10) as client:
        client.register({"nodes": PAD_NODES})
        filler = fill(small_wal_disk, 200_000)
        v = 0
        while True:  # until the disk is full: a few pushes of 16 KiB fit
            code = push_code(client, v)
            if code is not None:
                assert code == "wal_unavailable"
                break
            acked.append(v)
            v += 1
            assert v < 200, "the disk never filled up"
            if mode == "periodic":  # acknowledged before the write: give the tick a turn
                time.sleep(0.005)
        assert len(acked) >= 3
        refused = wait_line(proc, "wal.write_refused")
        assert refused["level"] == "ERROR" and "No space left" in refused["error"]
        # Refused at once while the disk is full, over TCP and HTTP; nothing is applied.
        assert push_code(client, 1000) == "wal_unavailable"
        with pytest.raises(ServerError) as caught:
            client.push_many("E2", [{"user": "u", "v": 1001, "pad": ""}])
        assert caught.value.code == "wal_unavailable"
        status, _, body = http_request(proc.http, "POST", "/push", json.dumps(
            {"event": "E2", "user": "u", "v": 1002, "pad": ""}).encode(),
            {"Content-Type": "application/json"})
        assert status == 503 and json.loads(body)["error"]["code"] == "wal_unavailable"
        with pytest.raises(ServerError) as caught:
            client.register({"nodes": [*PAD_NODES, {
                "kind": "event", "name": "Other", "schema": {"fields": {"x": "i64"}}}]})
        assert caught.value.code == "wal_unavailable"
        # Reads keep being served, and see exactly the acknowledged pushes.
        assert client.get("T", "u") == {"n": len(acked), "s": sum(acked)}
        assert client.ping()["registry_version"] == 1
        assert metric(proc, "beava_wal_writable") == 0
        # Space returns: within the probe interval pushes are accepted again.
        filler.unlink()
        wait_line(proc, "wal.write_resumed", timeout=5)
        assert metric(proc, "beava_wal_writable") == 1
        for v in range(2000, 2005):
            assert push_code(client, v) is None
            acked.append(v)
        assert client.get("T", "u") == {"n": len(acked), "s": sum(acked)}
    assert lines_of(proc, "wal.io_error") == []
    if mode == "periodic":  # let a tick make the last acknowledged pushes durable
        time.sleep(0.3)
    sigkill(proc)
    proc = servers.start(env)
    with TcpClient(*proc.tcp, timeout=10) as client:
        assert client.get("T", "u") == {"n": len(acked), "s": sum(acked)}


def test_pipelined_pushes_of_the_failed_batch_get_errors(
        servers: Servers, data_dir: Path, small_wal_disk: Path) -> None:
    """A batch the disk does not take: its pushes (acks already written in the reply run)
    are answered wal_unavailable, none is applied, and the connection stays usable."""
    proc = servers.start()
    with TcpClient(*proc.tcp, timeout=10) as client:
        client.register({"nodes": PAD_NODES})
        fill(small_wal_disk, 100_000)
        bodies = [{"user": "u", "v": v, "pad": "p" * PAD} for v in range(40)]
        result = client.push_pipelined("E2", bodies)
        codes = {entry["error"]["code"] for entry in result["errors"]}
        assert codes == {"wal_unavailable"}
        assert result["acks"] + len(result["errors"]) == 40
        assert client.get("T", "u")["n"] == result["acks"]
        wait_for(lambda: lines_of(proc, "wal.write_refused"), 5, "wal.write_refused")
        # the pushes never written are not counted, in total nor for their event
        accepted = metric(proc, "beava_pushes_total")
        assert metric(proc, 'beava_pushes_by_event_total{event="E2"}') == accepted
