"""Every crash-injection point of spec/durability.md §15: the process dies exactly there, and
after a restart on the same data directory G1-G4 hold (acked pushes present, none applied
twice, the registry consistent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from beava_client import ServerError, TcpClient, TransportError
from tests.crash.conftest import (
    RECORD_RESET,
    Servers,
    assert_clean_recovery,
    check_bitset,
    lines_of,
    sigkill,
    snapshot_files,
    table_error,
    wait_dead,
    wait_line,
    wait_snapshot,
    wal_segments,
)

EVENT = {"kind": "event", "name": "E",
         "schema": {"fields": {"user": "str", "v": "i64"}, "optional_fields": ["pad"]}}
TABLE = {"kind": "derivation", "name": "T", "upstreams": ["E"], "key": ["user"],
         "agg": {"n": {"op": "count"}, "s": {"op": "sum", "params": {"field": "v"}}}}
EXTRA = {"kind": "derivation", "name": "T2", "upstreams": ["E"], "key": ["user"],
         "agg": {"n2": {"op": "count"}}}
NODES = [EVENT, TABLE]


def push_until_crash(client: TcpClient, count: int, pad: str = "") -> tuple[int, int]:
    """Synchronous pushes ``v = 2**i`` for user ``u`` until one fails; (sent, acked)."""
    acked = 0
    for i in range(count):
        body = {"user": "u", "v": 1 << i}
        if pad:
            body["pad"] = pad
        try:
            client.push("E", body)
        except TransportError:
            return i + 1, acked
        acked += 1
    return count, acked


@pytest.mark.parametrize("point,durable", [
    ("wal_after_write", False),  # written, not fsynced: may or may not survive
    ("wal_after_fsync", True),  # durable before the crash: must be replayed
    ("wal_after_apply", True),
])
def test_event_batch_points(servers: Servers, point: str, durable: bool) -> None:
    proc = servers.start({"BEAVA_CRASH_AT": f"{point}:3"})
    with TcpClient(*proc.tcp, timeout=10) as client:
        assert client.register({"nodes": NODES})["registry_version"] == 1
        sent, acked = push_until_crash(client, 10)
    assert wait_dead(proc) == -9
    assert (sent, acked) == (3, 2)  # the third batch is the third push: its ack never came
    proc = servers.start()
    assert_clean_recovery(proc, servers.data_dir)
    with TcpClient(*proc.tcp, timeout=10) as client:
        assert client.ping()["registry_version"] == 1
        n = check_bitset(client.get("T", "u"), acked, sent, point)
        if durable:
            assert n == 3
        after = client.push("E", {"user": "u", "v": 1 << n})
        assert after["ack_lsn"] == 1 + n + 1  # LSN 1 is the register; no gap, no reuse
        assert check_bitset(client.get("T", "u"), n + 1, n + 1, point) == n + 1


def test_registry_after_fsync(servers: Servers) -> None:
    proc = servers.start({"BEAVA_CRASH_AT": "registry_after_fsync:2"})
    with TcpClient(*proc.tcp, timeout=10) as client:
        client.register({"nodes": NODES})
        assert push_until_crash(client, 2) == (2, 2)
        with pytest.raises(TransportError):
            client.register({"nodes": [*NODES, EXTRA]})
    assert wait_dead(proc) == -9
    proc = servers.start()
    assert_clean_recovery(proc, servers.data_dir)
    with TcpClient(*proc.tcp, timeout=10) as client:
        # The record was durable: the register is applied as a whole (G4).
        assert client.ping()["registry_version"] == 2
        assert client.get("T2", "u") == {}
        assert client.get("T", "u") == {"n": 2, "s": 3}
        client.push("E", {"user": "u", "v": 4})
        assert client.get("T2", "u") == {"n2": 1}
        assert client.get("T", "u") == {"n": 3, "s": 7}
        # Registering the same payload again is a no-op: the recovered registry is identical.
        assert client.register({"nodes": [*NODES, EXTRA]})["registry_version"] == 2


def test_registry_after_fsync_first_register(servers: Servers) -> None:
    proc = servers.start({"BEAVA_CRASH_AT": "registry_after_fsync"})
    with TcpClient(*proc.tcp, timeout=10) as client, pytest.raises(TransportError):
        client.register({"nodes": NODES})
    assert wait_dead(proc) == -9
    proc = servers.start()
    with TcpClient(*proc.tcp, timeout=10) as client:
        assert client.ping()["registry_version"] == 1
        assert client.push("E", {"user": "u", "v": 1})["ack_lsn"] == 2
        assert client.get("T", "u") == {"n": 1, "s": 1}


def test_reset_after_boundary(servers: Servers, data_dir: Path) -> None:
    proc = servers.start({"BEAVA_CRASH_AT": "reset_after_boundary",
                          "BEAVA_SNAPSHOT_INTERVAL_MS": "100"})
    with TcpClient(*proc.tcp, timeout=10) as client:
        client.register({"nodes": NODES})
        assert push_until_crash(client, 3) == (3, 3)
        wait_line(proc, "snapshot.written")
        with pytest.raises(TransportError):
            client.reset()
    assert wait_dead(proc) == -9
    # The boundary segment is durable; the older files are still there.
    segments = wal_segments(data_dir)
    boundary = segments[-1]
    assert boundary.flags & 1 and [r.type for r in boundary.records] == [RECORD_RESET]
    assert boundary.records[0].lsn == boundary.base_lsn == 5
    assert len(segments) >= 2 and snapshot_files(data_dir)
    proc = servers.start()
    assert_clean_recovery(proc, servers.data_dir)
    # Recovery finished the reset: older segments and every snapshot are gone (§9.1 step 3).
    assert [s.base_lsn for s in wal_segments(data_dir)][0] == 5
    assert snapshot_files(data_dir) == []
    with TcpClient(*proc.tcp, timeout=10) as client:
        assert client.ping()["registry_version"] == 2  # 1 register + 1 reset (G8)
        assert table_error(client, "T", "u") == "unknown_table"
        with pytest.raises(ServerError) as info:
            client.push("E", {"user": "u", "v": 1})
        assert info.value.code == "event_not_found"
        assert client.register({"nodes": NODES})["registry_version"] == 3
        assert client.push("E", {"user": "u", "v": 1})["ack_lsn"] == 7
        assert client.get("T", "u") == {"n": 1, "s": 1}


def test_rotation_after_create(servers: Servers, data_dir: Path) -> None:
    env = {"BEAVA_CRASH_AT": "rotation_after_create", "BEAVA_WAL_SEGMENT_BYTES": "1048576"}
    proc = servers.start(env)
    with TcpClient(*proc.tcp, timeout=10) as client:
        client.register({"nodes": NODES})
        sent, acked = push_until_crash(client, 40, pad="x" * 65536)
    assert wait_dead(proc) == -9
    assert sent == acked + 1 and acked >= 15  # ~16 records of 64 KiB fill 1 MiB
    proc = servers.start()
    assert_clean_recovery(proc, servers.data_dir)
    for segment in wal_segments(data_dir):
        # Every segment's name is the LSN of its first record.
        assert not segment.records or segment.records[0].lsn == segment.base_lsn
    with TcpClient(*proc.tcp, timeout=10) as client:
        n = check_bitset(client.get("T", "u"), acked, sent, "rotation")
        # Rotation comes as soon as the batch that filled the segment is durable, before it
        # is applied and acknowledged: that push is recovered unacknowledged; the next one
        # was never read.
        assert n == acked + 1 == sent
        assert client.push("E", {"user": "u", "v": 1 << n})["ack_lsn"] == n + 2


def test_snapshot_before_rename(servers: Servers, data_dir: Path) -> None:
    """Only the snapshot child dies; the server notices, removes the temp file, retries."""
    proc = servers.start({"BEAVA_CRASH_AT": "snapshot_before_rename",
                          "BEAVA_SNAPSHOT_INTERVAL_MS": "100"})
    with TcpClient(*proc.tcp, timeout=10) as client:
        client.register({"nodes": NODES})
        assert push_until_crash(client, 5) == (5, 5)
        failed = wait_line(proc, "snapshot.failed")
        assert "signal 9" in failed["reason"]
        client.push("E", {"user": "u", "v": 1 << 5})  # LSN 7
        wait_snapshot(proc, 7)  # retried at a later interval; the server never stopped
        assert proc.proc.poll() is None
        files = snapshot_files(data_dir)
        assert "snap-0000000000000007.bsnap" in files and not any(
            n.endswith(".tmp") for n in files)
        assert client.push("E", {"user": "u", "v": 1 << 6})["ack_lsn"] == 8
    sigkill(proc)
    proc = servers.start()
    assert_clean_recovery(proc, servers.data_dir)
    loaded = wait_line(proc, "recovery.snapshot_loaded")
    assert loaded["snapshot_lsn"] == 7
    assert wait_line(proc, "recovery.complete")["records_replayed"] == 1
    with TcpClient(*proc.tcp, timeout=10) as client:
        assert client.get("T", "u") == {"n": 7, "s": 127}


def test_recovery_mid_replay(servers: Servers) -> None:
    proc = servers.start()
    with TcpClient(*proc.tcp, timeout=10) as client:
        client.register({"nodes": NODES})
        assert push_until_crash(client, 20) == (20, 20)
    sigkill(proc)
    proc = servers.start({"BEAVA_CRASH_AT": "recovery_mid_replay:8"}, ready=False)
    assert wait_dead(proc) == -9
    assert "server.ready" not in proc.kinds() and "recovery.complete" not in proc.kinds()
    # Recovery writes nothing that a second recovery could trip over.
    proc = servers.start()
    assert_clean_recovery(proc, servers.data_dir)
    complete = wait_line(proc, "recovery.complete")
    assert (complete["records_replayed"], complete["last_lsn"]) == (21, 21)
    assert lines_of(proc, "recovery.wal_tail_truncated") == []
    with TcpClient(*proc.tcp, timeout=10) as client:
        assert client.get("T", "u") == {"n": 20, "s": (1 << 20) - 1}
        assert client.ping()["registry_version"] == 1
