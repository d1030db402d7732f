"""Recovery cases of spec/durability.md §16 on real processes and real files: registry and
force-replaced schemas across restarts, windowed and decay state, torn tails, damaged
segments, snapshot + tail, reset, periodic mode, graceful shutdown, dedupe after restart,
LSN monotonicity, memory-only mode and the data-directory lock."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgspec
import pytest

from beava.durability.snapshots import (
    encode_snapshot_body,
    read_snapshot_header,
    write_snapshot_file,
)
from beava.launcher import installed_server_command
from beava_client import ServerError, TcpClient
from beava_client.opcodes import CT_JSON, CT_MSGPACK, OP_PUSH
from tests.crash.conftest import (
    RECORD_EVENT,
    RECORD_REGISTRY,
    Pusher,
    Servers,
    assert_clean_recovery,
    check_bitset,
    lines_of,
    metric,
    sigkill,
    snapshot_files,
    table_error,
    wait_for,
    wait_line,
    wait_snapshot,
    wal_segments,
)
from tests.support import REPO, BeavaProcess, http_request
from tests.unit.test_recovery import pickle_payload, rewrite_snapshot

TXN_NODES = [
    {"kind": "event", "name": "Txn", "schema": {"fields": {"k": "str", "c": "str", "v": "i64"}}},
    {"kind": "derivation", "name": "U", "upstreams": ["Txn"], "key": ["k"],
     "agg": {"n": {"op": "count"}, "s": {"op": "sum", "params": {"field": "v"}}}},
]


def run_pushers(proc: BeavaProcess, keys_per_conn: int, *, kill_after: float | None = None,
                kill_when_acked: int | None = None, prefix: str = "") -> list[Pusher]:
    """Two pipelined connections (JSON, MessagePack) pushing Txn; with ``kill_after`` the
    server is SIGKILLed that many seconds after they start (and, with ``kill_when_acked``,
    not before each connection has that many pushes acknowledged), else they run to their
    limit."""
    go = threading.Event()
    pushers = [Pusher(proc.tcp, "Txn", [f"{prefix}c{c}k{j}" for j in range(keys_per_conn)],
                      f"{prefix}c{c}", ct, OP_PUSH, go)
               for c, ct in enumerate((CT_JSON, CT_MSGPACK))]
    for p in pushers:
        p.start()
    go.set()
    if kill_after is not None:
        time.sleep(kill_after)
        if kill_when_acked is not None:
            wait_for(lambda: all(p.acked >= kill_when_acked or p.errors for p in pushers), 30,
                     f"{kill_when_acked} acknowledged pushes on each connection")
        sigkill(proc)
    for p in pushers:
        p.join(60)
        assert not p.is_alive() and not p.errors, p.errors[:3]
    return pushers


def check_pushers(client: TcpClient, pushers: list[Pusher], *, acked_promise: bool) -> int:
    """Exact per-key check of what the pushers sent; returns the number of applied pushes."""
    total = 0
    for p in pushers:
        rows = client.batch_get([("U", k) for k in p.keys])
        for j, (key, row) in enumerate(zip(p.keys, rows, strict=True)):
            acked = p.per_key(p.acked, j) if acked_promise else 0
            total += check_bitset(row, acked, p.per_key(p.sent, j), key)
    return total


# -- registry and schemas --------------------------------------------------------------------

V1 = [
    {"kind": "event", "name": "E", "schema": {"fields": {"user": "str", "amount": "i64"}}},
    {"kind": "derivation", "name": "T", "upstreams": ["E"], "key": ["user"],
     "agg": {"n": {"op": "count"}, "s": {"op": "sum", "params": {"field": "amount"}}}},
    {"kind": "event", "name": "F", "schema": {"fields": {"user": "str", "x": "f64"}}},
    {"kind": "derivation", "name": "TF", "upstreams": ["F"], "key": ["user"],
     "agg": {"fn": {"op": "count"}, "fs": {"op": "sum", "params": {"field": "x"}},
             "fw": {"op": "count", "params": {"window": "1h"}},
             "fx": {"op": "max", "params": {"field": "x"}}}},
    {"kind": "derivation", "name": "Gone", "upstreams": ["E"], "key": ["user"],
     "agg": {"gn": {"op": "count"}}},
]
# E's amount becomes a string (type change: E replaced, T cascades), T gets other features,
# TF's fw changes window (that feature resets), fx is removed, Gone is dropped.
V2 = [
    {"kind": "event", "name": "E", "schema": {"fields": {"user": "str", "amount": "str"}}},
    {"kind": "derivation", "name": "T", "upstreams": ["E"], "key": ["user"],
     "agg": {"n": {"op": "count"}, "l": {"op": "last", "params": {"field": "amount"}}}},
    V1[2],
    {"kind": "derivation", "name": "TF", "upstreams": ["F"], "key": ["user"],
     "agg": {"fn": {"op": "count"}, "fs": {"op": "sum", "params": {"field": "x"}},
             "fw": {"op": "count", "params": {"window": "2h"}}}},
]


def test_registry_and_force_replaced_schema_survive_restart(servers: Servers) -> None:
    """Events are replayed against the registry version they were written under (§9.2)."""
    proc = servers.start()
    with TcpClient(*proc.tcp, timeout=10) as client:
        assert client.register({"nodes": V1})["registry_version"] == 1
        for amount in range(1, 6):
            client.push("E", {"user": "a", "amount": amount})
        for x in (0.5, 1.5, 2.5, 3.5):
            client.push("F", {"user": "a", "x": x})
        assert client.get("T", "a") == {"n": 5, "s": 15}
        with pytest.raises(ServerError) as info:
            client.register({"nodes": V2})
        assert info.value.code == "force_required"
        reply = client.register({"nodes": V2}, force=True)
        assert reply["registry_version"] == 2 and reply["removed"] == ["Gone"]
        for amount in ("p", "q", "r"):
            client.push("E", {"user": "a", "amount": amount})
        for x in (4.5, 5.5):
            client.push("F", {"user": "a", "x": x})
        with pytest.raises(ServerError) as info:
            client.push("E", {"user": "a", "amount": 7})
        assert info.value.code == "invalid_event"
        before = {t: client.get(t, "a") for t in ("T", "TF")}
    assert before == {"T": {"n": 3, "l": "r"}, "TF": {"fn": 6, "fs": 18.0, "fw": 2}}
    records = [r for seg in wal_segments(servers.data_dir) for r in seg.records]
    registry = [r for r in records if r.type == RECORD_REGISTRY]
    assert [r.registry_version for r in registry] == [1, 2]
    body = registry[1].fields()
    assert (body["force"], body["new_version"], body["plan"]["drop"]) == (True, 2, ["Gone"])
    assert {"E", "T"} <= set(body["plan"]["replace"])
    assert ["TF", "fx"] in body["plan"]["remove_features"]
    assert ["TF", "fw"] in body["plan"]["reset_features"]
    # Every event record carries the version it was validated against (§5, §6.4).
    assert [r.registry_version for r in records if r.type == RECORD_EVENT] == [1] * 9 + [2] * 5
    for _ in range(2):
        sigkill(proc)
        proc = servers.start()
        assert_clean_recovery(proc, servers.data_dir)
        assert wait_line(proc, "recovery.complete")["records_replayed"] == 16
        with TcpClient(*proc.tcp, timeout=10) as client:
            assert client.ping()["registry_version"] == 2
            assert {t: client.get(t, "a") for t in ("T", "TF")} == before
            assert table_error(client, "Gone", "a") == "unknown_table"
            # The recovered registry is exactly V2: registering it again changes nothing.
            assert client.register({"nodes": V2})["registry_version"] == 2


# -- windowed and decay state -----------------------------------------------------------------

TIME_NODES = [
    {"kind": "event", "name": "M", "schema": {"fields": {"user": "str", "x": "f64", "cat": "str"}}},
    {"kind": "derivation", "name": "W", "upstreams": ["M"], "key": ["user"], "agg": {
        "n1h": {"op": "count", "params": {"window": "1h"}},
        "s10m": {"op": "sum", "params": {"field": "x", "window": "10m"}},
        "mx1h": {"op": "max", "params": {"field": "x", "window": "1h"}},
        "avg1h": {"op": "mean", "params": {"field": "x", "window": "1h"}},
        "sd1h": {"op": "std", "params": {"field": "x", "window": "1h"}},
        "nu1h": {"op": "n_unique", "params": {"field": "cat", "window": "1h"}},
        "q1h": {"op": "quantile", "params": {"field": "x", "q": 0.9, "window": "1h"}},
        "top": {"op": "top_k", "params": {"field": "cat", "k": 3, "window": "1h"}},
        "ew": {"op": "ewma", "params": {"field": "x", "half_life": "2s"}},
        "ewv": {"op": "ewvar", "params": {"field": "x", "half_life": "2s"}},
        "ds": {"op": "decayed_sum", "params": {"field": "x", "half_life": "1s"}},
        "dc": {"op": "decayed_count", "params": {"half_life": "500ms"}},
        "twa": {"op": "twa", "params": {"field": "x"}},
        "roc": {"op": "rate_of_change", "params": {"field": "x"}},
        "ln": {"op": "last_n", "params": {"field": "x", "n": 4}}}},
]


def test_windowed_and_decay_features_equal_after_restart(servers: Servers) -> None:
    """Values that depend only on event times and window contents are bit-for-bit equal
    after WAL replay and after snapshot load (G5); the 10m/1h windows do not move here."""
    proc = servers.start()  # no snapshots: the first restart replays the WAL
    with TcpClient(*proc.tcp, timeout=10) as client:
        client.register({"nodes": TIME_NODES})
        for i in range(40):
            client.push("M", {"user": f"u{i % 3}", "x": i * 1.25 - 7.0, "cat": f"c{i % 7}"})
            time.sleep(0.005 * (i % 4))  # uneven gaps make the decay state non-trivial
        before = client.batch_get([("W", f"u{u}") for u in range(3)])
    assert before[0]["n1h"] == 14 and before[0]["ew"] is not None
    sigkill(proc)
    proc = servers.start({"BEAVA_SNAPSHOT_INTERVAL_MS": "100"})
    assert wait_line(proc, "recovery.complete")["records_replayed"] == 41
    with TcpClient(*proc.tcp, timeout=10) as client:
        assert client.batch_get([("W", f"u{u}") for u in range(3)]) == before
        # Another entity's event makes the next interval take a snapshot.
        client.push("M", {"user": "other", "x": 1.0, "cat": "c"})
    assert wait_line(proc, "snapshot.written")["snapshot_lsn"] == 42
    sigkill(proc)
    proc = servers.start()
    assert wait_line(proc, "recovery.snapshot_loaded")["snapshot_lsn"] == 42
    assert wait_line(proc, "recovery.complete")["records_replayed"] == 0
    with TcpClient(*proc.tcp, timeout=10) as client:
        assert client.batch_get([("W", f"u{u}") for u in range(3)]) == before


# -- torn tails and damaged segments ------------------------------------------------------------

def push_numbered(client: TcpClient, count: int, start: int = 0, pad: int = 0) -> None:
    """Synchronous pushes of E2 with v = start .. start+count-1 for user u."""
    for v in range(start, start + count):
        client.push("E2", {"user": "u", "v": v, "pad": "p" * pad})


HEAVY_NODES = [  # keeps each entity's pad, so a snapshot has tens of megabytes to write
    {"kind": "event", "name": "E2",
     "schema": {"fields": {"user": "str", "v": "i64", "pad": "str"}}},
    {"kind": "derivation", "name": "T", "upstreams": ["E2"], "key": ["user"],
     "agg": {"n": {"op": "count"}, "pad": {"op": "last", "params": {"field": "pad"}}}},
]

PAD_NODES = [
    {"kind": "event", "name": "E2",
     "schema": {"fields": {"user": "str", "v": "i64", "pad": "str"}}},
    {"kind": "derivation", "name": "T", "upstreams": ["E2"], "key": ["user"],
     "agg": {"n": {"op": "count"}, "s": {"op": "sum", "params": {"field": "v"}}}},
]


@pytest.mark.parametrize("cut,policy", [
    *((cut, "replay") for cut in ("length", "header", "half", "last_byte", "zeros")),
    ("half", "point-in-time"), ("half", "refuse"), ("zeros", "refuse")])
def test_torn_final_record(servers: Servers, data_dir: Path, cut: str, policy: str) -> None:
    """G10: a partial final record is cut off and quarantined; every earlier one applies,
    with every corruption policy (a torn tail is not corruption)."""
    proc = servers.start()
    with TcpClient(*proc.tcp, timeout=10) as client:
        client.register({"nodes": PAD_NODES})
        push_numbered(client, 20)
    sigkill(proc)
    segment = wal_segments(data_dir)[-1]
    last = segment.records[-1]
    assert last.lsn == 21 and segment.valid_end == segment.size
    data = segment.path.read_bytes()
    if cut == "zeros":  # e.g. space preallocated by the filesystem: all records survive
        torn_at, tail = segment.size, b"\0" * 100
        expected_n = 20
    else:
        keep = {"length": 2, "header": 30, "half": last.size // 2,
                "last_byte": last.size - 1}[cut]
        torn_at, tail = last.offset, data[last.offset:last.offset + keep]
        expected_n = 19
    segment.path.write_bytes(data[:torn_at] + tail)
    proc = servers.start({"BEAVA_WAL_ON_CORRUPTION": policy})
    truncated = wait_line(proc, "recovery.wal_tail_truncated")
    assert truncated["level"] == "WARN"
    assert (truncated["segment"], truncated["offset"], truncated["bytes"]) == (
        segment.path.name, torn_at, len(tail))
    assert Path(truncated["quarantine_path"]).read_bytes() == tail
    assert segment.path.stat().st_size == torn_at
    assert lines_of(proc, "recovery.wal_corruption") == []
    with TcpClient(*proc.tcp, timeout=10) as client:
        assert client.get("T", "u") == {"n": expected_n, "s": sum(range(expected_n))}
        ack = client.push("E2", {"user": "u", "v": 100, "pad": ""})
        assert ack["ack_lsn"] == 2 + expected_n


def fill_segments(data_dir: Path, client: TcpClient) -> int:
    """Pushes 16 KiB records until there are three segments and the newest holds at least
    three records; returns how many were pushed (v = 0 .. n-1)."""
    pushed = 0
    while True:
        segments = wal_segments(data_dir)
        if len(segments) >= 3 and len(segments[-1].records) >= 3:
            return pushed
        push_numbered(client, 10, pushed, pad=16384)
        pushed += 10
        assert pushed < 1000


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_flipped_byte_in_sealed_segment(servers: Servers, data_dir: Path) -> None:
    """G11: the damaged record is quarantined, logged and counted; later records apply."""
    env = {"BEAVA_WAL_SEGMENT_BYTES": "1048576"}
    proc = servers.start(env)
    with TcpClient(*proc.tcp, timeout=10) as client:
        client.register({"nodes": PAD_NODES})
        pushed = fill_segments(data_dir, client)
    sigkill(proc)
    sealed = wal_segments(data_dir)[1]
    victim = sealed.records[len(sealed.records) // 2]
    assert victim.type == RECORD_EVENT
    lost_v = victim.fields()["v"]
    flip(sealed.path, victim.offset + victim.size // 2)
    damaged = sealed.path.read_bytes()
    proc = servers.start(env)
    corruption = wait_line(proc, "recovery.wal_corruption")
    assert corruption["level"] == "ERROR"
    assert (corruption["segment"], corruption["offset"], corruption["bytes"],
            corruption["resumed_at_lsn"]) == (sealed.path.name, victim.offset, victim.size,
                                              victim.lsn + 1)
    assert Path(corruption["quarantine_path"]).read_bytes() == \
        damaged[victim.offset:victim.offset + victim.size]
    assert sealed.path.read_bytes() == damaged  # the segment itself is left unchanged
    assert lines_of(proc, "recovery.wal_tail_truncated") == []
    assert metric(proc, "beava_wal_quarantined_records_total") == 1
    with TcpClient(*proc.tcp, timeout=10) as client:
        assert client.get("T", "u") == {"n": pushed - 1, "s": sum(range(pushed)) - lost_v}
        client.push("E2", {"user": "u", "v": 0, "pad": ""})
        assert client.get("T", "u")["n"] == pushed


def push_acked(client: TcpClient, count: int) -> None:
    """``count`` pushes of E2 (v = 0 .. count-1, user u), every one acknowledged."""
    for start in range(0, count, 500):
        bodies = [{"user": "u", "v": v, "pad": ""} for v in range(start, start + 500)]
        result = client.push_many("E2", bodies)
        assert result["acks"] == 500 and not result["errors"], result


def damaged_newest_segment(servers: Servers, data_dir: Path) -> tuple[Path, int, int]:
    """3,000 acknowledged pushes (LSN 2-3001), SIGKILL, one byte flipped in the record of
    push 899 (LSN 901) of the newest segment. Returns the segment, the record's offset and
    its size."""
    proc = servers.start()
    with TcpClient(*proc.tcp, timeout=10) as client:
        client.register({"nodes": PAD_NODES})
        push_acked(client, 3000)
    sigkill(proc)
    newest = wal_segments(data_dir)[-1]
    assert [r.lsn for r in newest.records] == list(range(1, 3002))
    victim = newest.records[900]
    assert victim.lsn == 901 and victim.fields()["v"] == 899
    flip(newest.path, victim.offset + 40)
    return newest.path, victim.offset, victim.size


def wal_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*installed_server_command(), "wal", *args], capture_output=True,
                          text=True, timeout=60, check=False)


def tree(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() if path.is_file() else b""
            for path in sorted(root.rglob("*"))}


# Every acknowledged push but the damaged one (v = 899).
ALL_BUT_899 = {"n": 2999, "s": sum(range(3000)) - 899}


def test_flipped_byte_in_newest_segment_keeps_every_other_acked_push(servers: Servers,
                                                                     data_dir: Path) -> None:
    """G11: damage in the middle of the newest segment is not a torn tail: the damaged
    record's bytes are quarantined (ERROR, counted once) and the 2,100 acknowledged pushes
    after it are applied. The segment is left as it is."""
    segment, offset, size = damaged_newest_segment(servers, data_dir)
    damaged = segment.read_bytes()
    proc = servers.start()
    corruption = wait_line(proc, "recovery.wal_corruption")
    assert corruption["level"] == "ERROR"
    assert (corruption["segment"], corruption["offset"], corruption["bytes"],
            corruption["last_good_lsn"], corruption["resumed_at_lsn"],
            corruption["policy"]) == (segment.name, offset, size, 900, 902, "replay")
    assert Path(corruption["quarantine_path"]).read_bytes() == damaged[offset:offset + size]
    assert segment.read_bytes() == damaged
    assert lines_of(proc, "recovery.wal_tail_truncated") == []
    assert metric(proc, "beava_wal_quarantined_records_total") == 1
    with TcpClient(*proc.tcp, timeout=10) as client:
        assert client.get("T", "u") == ALL_BUT_899
        assert client.push("E2", {"user": "u", "v": 0, "pad": ""})["ack_lsn"] == 3002


def test_flipped_byte_in_segment_header_hides_no_record(servers: Servers,
                                                        data_dir: Path) -> None:
    """G11: a damaged header of the (only, newest) segment: the base LSN comes from the
    file name and all 1,000 acknowledged pushes are applied."""
    proc = servers.start()
    with TcpClient(*proc.tcp, timeout=10) as client:
        client.register({"nodes": PAD_NODES})
        push_acked(client, 1000)
    sigkill(proc)
    (segment,) = wal_segments(data_dir)
    flip(segment.path, 9)  # format_version
    proc = servers.start()
    corruption = wait_line(proc, "recovery.wal_corruption")
    assert (corruption["offset"], corruption["bytes"], corruption["resumed_at_lsn"]) == (
        0, 32, 1)
    with TcpClient(*proc.tcp, timeout=10) as client:
        assert client.get("T", "u") == {"n": 1000, "s": sum(range(1000))}


def test_point_in_time_policy_keeps_the_prefix(servers: Servers, data_dir: Path) -> None:
    """``--wal-on-corruption point-in-time``: the 899 pushes before the damage, no hole;
    everything from the damage on is cut off to quarantine."""
    segment, offset, _size = damaged_newest_segment(servers, data_dir)
    tail = segment.read_bytes()[offset:]
    proc = servers.start({"BEAVA_WAL_ON_CORRUPTION": "point-in-time"})
    corruption = wait_line(proc, "recovery.wal_corruption")
    assert (corruption["offset"], corruption["bytes"], corruption["valid_records_discarded"],
            corruption["policy"]) == (offset, len(tail), 2100, "point-in-time")
    assert Path(corruption["quarantine_path"]).read_bytes() == tail
    assert segment.stat().st_size == offset
    assert metric(proc, "beava_wal_quarantined_records_total") == 2101
    with TcpClient(*proc.tcp, timeout=10) as client:
        assert client.get("T", "u") == {"n": 899, "s": sum(range(899))}


def test_refuse_policy_exits_3_then_wal_check_and_repair(servers: Servers,
                                                         data_dir: Path) -> None:
    """``--wal-on-corruption refuse``: exit 3 with one line naming segment, offset and the
    repair command, nothing on disk changed; ``beava wal check`` reports the corruption,
    ``beava wal repair --yes`` quarantines the damaged bytes, keeping every intact record,
    and the server starts again."""
    segment, offset, size = damaged_newest_segment(servers, data_dir)
    before = tree(data_dir)
    refused = servers.start({"BEAVA_WAL_ON_CORRUPTION": "refuse"}, wait=False)
    assert refused.proc.wait(20) == 3
    refused.join_output()
    error = refused.stderr_text()
    assert error.startswith("Error: WAL corruption in ") and error.count("\n") == 0
    assert f"{segment.name} at offset {offset}: {size} damaged bytes after LSN 900; 2100 " \
        "valid records (LSN 902-3001)" in error
    assert f"beava wal repair {data_dir} --yes" in error
    fatal = wait_line(refused, "server.fatal")
    assert fatal["exit_code"] == 3
    assert wait_line(refused, "recovery.wal_corruption")["policy"] == "refuse"
    assert tree(data_dir) == before

    checked = wal_command("check", str(data_dir))
    assert checked.returncode == 3, checked.stderr
    assert f"CORRUPTION at offset {offset}: {size} damaged bytes after LSN 900; replay " \
        "resumes at LSN 902" in checked.stdout
    dry = wal_command("repair", str(data_dir))
    assert dry.returncode == 0 and "would rewrite" in dry.stdout and tree(data_dir) == before
    repaired = wal_command("repair", str(data_dir), "--yes")
    assert repaired.returncode == 0, repaired.stderr
    original = before[f"wal/{segment.name}"]
    assert segment.read_bytes()[32:] == original[32:offset] + original[offset + size:]
    quarantined = data_dir / "wal" / "quarantine" / f"{segment.name[:20]}-off-{offset}.bin"
    assert quarantined.read_bytes() == original[offset:offset + size]
    assert wal_command("check", str(data_dir)).returncode == 0

    proc = servers.start({"BEAVA_WAL_ON_CORRUPTION": "refuse"})
    assert lines_of(proc, "recovery.wal_corruption") == []
    with TcpClient(*proc.tcp, timeout=10) as client:
        assert client.get("T", "u") == ALL_BUT_899
        held = wal_command("repair", str(data_dir), "--yes")  # the server holds the lock
        assert held.returncode == 3 and "locked" in held.stderr


# -- hostile data directories -------------------------------------------------------------


def unusable(servers: Servers) -> str:
    """Start a server expected to refuse its data directory; its error line."""
    proc = servers.start(wait=False)
    assert proc.proc.wait(20) == 3
    proc.join_output()
    fatal = wait_line(proc, "server.fatal")
    assert fatal["exit_code"] == 3
    error = proc.stderr_text()
    assert error.startswith("Error: data directory unusable: ") and error.count("\n") == 0
    return error


def test_fifo_named_like_a_segment_is_refused(servers: Servers, data_dir: Path) -> None:
    proc = servers.start()
    sigkill(proc)
    fifo = data_dir / "wal" / "seg-00000000000000ff.bwal"
    os.mkfifo(fifo)
    assert f"{fifo} is a FIFO, not a regular file" in unusable(servers)
    fifo.unlink()
    fifo.mkdir()
    assert f"{fifo} is a directory, not a regular file" in unusable(servers)


def test_symlinked_segment_is_refused_and_its_target_untouched(servers: Servers,
                                                               data_dir: Path,
                                                               tmp_path: Path) -> None:
    proc = servers.start()
    with TcpClient(*proc.tcp, timeout=10) as client:
        client.register({"nodes": PAD_NODES})
        push_numbered(client, 5)
    sigkill(proc)
    (segment,) = wal_segments(data_dir)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(segment.path.read_bytes()[:segment.size - 3])  # a torn tail
    before = outside.read_bytes()
    segment.path.unlink()
    segment.path.symlink_to(outside)
    assert f"{segment.path} is a symbolic link, not a regular file" in unusable(servers)
    assert outside.read_bytes() == before
    repaired = wal_command("repair", str(data_dir), "--yes")
    assert repaired.returncode == 4 and str(segment.path) in repaired.stderr
    assert outside.read_bytes() == before


def test_symlinked_quarantine_directory_is_refused(servers: Servers, data_dir: Path,
                                                   tmp_path: Path) -> None:
    segment, _offset, _size = damaged_newest_segment(servers, data_dir)
    outside = tmp_path / "outside"
    outside.mkdir()
    (data_dir / "wal" / "quarantine").symlink_to(outside)
    before = segment.read_bytes()
    error = unusable(servers)
    assert f"{data_dir / 'wal' / 'quarantine'} is a symbolic link" in error
    assert list(outside.iterdir()) == [] and segment.read_bytes() == before


# -- snapshot + tail ----------------------------------------------------------------------

SHOP_NODES = [
    {"kind": "event", "name": "Buy",
     "schema": {"fields": {"user": "str", "shop": "str", "amount": "i64"}}},
    {"kind": "derivation", "name": "ByUser", "upstreams": ["Buy"], "key": ["user"], "agg": {
        "n": {"op": "count"}, "s": {"op": "sum", "params": {"field": "amount"}},
        "m": {"op": "mean", "params": {"field": "amount"}},
        "w": {"op": "sum", "params": {"field": "amount", "window": "1h"}},
        "ew": {"op": "ewma", "params": {"field": "amount", "half_life": "1s"}},
        "q": {"op": "quantile", "params": {"field": "amount", "q": 0.5}},
        "u": {"op": "n_unique", "params": {"field": "shop"}}}},
    {"kind": "derivation", "name": "ByShop", "upstreams": ["Buy"], "key": ["shop"], "agg": {
        "sn": {"op": "count"}, "top": {"op": "top_k", "params": {"field": "user", "k": 2}},
        "ds": {"op": "decayed_sum", "params": {"field": "amount", "half_life": "1s"}}}},
    {"kind": "derivation", "name": "All", "upstreams": ["Buy"],
     "agg": {"an": {"op": "count"}, "amax": {"op": "max", "params": {"field": "amount"}}}},
]


def shop_rows(client: TcpClient) -> list[dict]:
    return client.batch_get([("ByUser", f"u{i}") for i in range(10)]
                            + [("ByShop", f"s{i}") for i in range(5)] + [("All", "")])


def test_snapshot_plus_tail_equals_full_replay(servers: Servers, data_dir: Path,
                                              tmp_path: Path) -> None:
    """500 pushes, snapshot, 100 more, SIGKILL: snapshot + tail and a replay of the whole WAL
    both give the rows the server held (G5), for three tables fed by one source."""
    # Only a state with all 501 first records is worth a snapshot; the 100 after it are not.
    env = {"BEAVA_SNAPSHOT_INTERVAL_MS": "200", "BEAVA_SNAPSHOT_MIN_EVENTS": "501"}
    proc = servers.start(env)
    rows = [{"user": f"u{i % 10}", "shop": f"s{i % 5}", "amount": (i * 37) % 101}
            for i in range(600)]
    with TcpClient(*proc.tcp, timeout=10) as client:
        client.register({"nodes": SHOP_NODES})
        assert client.push_pipelined("Buy", rows[:500])["acks"] == 500
        assert wait_line(proc, "snapshot.written")["snapshot_lsn"] == 501
        assert client.push_pipelined("Buy", rows[500:])["acks"] == 100
        before = shop_rows(client)
    assert before[-1] == {"an": 600, "amax": 100}
    assert before[0]["n"] == 60 and before[0]["s"] == sum(r["amount"] for r in rows[::10])
    sigkill(proc)
    assert lines_of(proc, "snapshot.written") and len(snapshot_files(data_dir)) == 1
    wal_only = tmp_path / "wal_only"
    shutil.copytree(data_dir, wal_only, ignore=shutil.ignore_patterns("*.bsnap"))
    proc = servers.start(env)
    assert wait_line(proc, "recovery.snapshot_loaded")["snapshot_lsn"] == 501
    assert wait_line(proc, "recovery.complete")["records_replayed"] == 100
    full = servers.start(env, data_dir=wal_only)
    assert lines_of(full, "recovery.snapshot_loaded") == []
    assert wait_line(full, "recovery.complete")["records_replayed"] == 601
    with TcpClient(*proc.tcp) as a, TcpClient(*full.tcp) as b:
        assert shop_rows(a) == before
        assert shop_rows(b) == before


# -- reset ------------------------------------------------------------------------------------

@pytest.mark.parametrize("stop", ["sigkill", "sigterm"])
def test_reset_then_restart_is_empty(servers: Servers, data_dir: Path, stop: str) -> None:
    """G8: registry empty, version as returned by the reset, tables unknown, no snapshot."""
    proc = servers.start({"BEAVA_SNAPSHOT_INTERVAL_MS": "100"})
    with TcpClient(*proc.tcp, timeout=10) as client:
        client.register({"nodes": PAD_NODES})
        push_numbered(client, 5)
        wait_line(proc, "snapshot.written")
        client.register({"nodes": [*PAD_NODES, {**PAD_NODES[1], "name": "T2",
                                                "agg": {"n2": {"op": "count"}}}]})
        reset = client.reset()
        assert reset == {"registry_version": 3, "reset": True}
    if stop == "sigkill":
        sigkill(proc)
    else:
        assert proc.terminate() == 0
    proc = servers.start()
    assert_clean_recovery(proc, data_dir)
    assert snapshot_files(data_dir) == []
    assert all(s.base_lsn >= 8 for s in wal_segments(data_dir))  # the reset's LSN is 8
    with TcpClient(*proc.tcp, timeout=10) as client:
        assert client.ping()["registry_version"] == 3
        assert table_error(client, "T", "u") == "unknown_table"
        assert table_error(client, "T2", "u") == "unknown_table"
        with pytest.raises(ServerError) as info:
            client.push("E2", {"user": "u", "v": 1, "pad": ""})
        assert info.value.code == "event_not_found"
    status, _, body = http_request(proc.admin, "GET", "/registry")
    assert status == 200 and msgspec.json.decode(body) == {"node_count": 0, "nodes": [],
                                                           "version": 3}


# -- periodic mode and graceful shutdown ------------------------------------------------------

def test_periodic_sigkill_mid_stream(servers: Servers) -> None:
    """Periodic mode may lose acked pushes, but never applies one twice or out of order."""
    env = {"BEAVA_WAL_SYNC_MODE": "periodic", "BEAVA_WAL_TICK_MS": "20"}
    proc = servers.start(env)
    with TcpClient(*proc.tcp, timeout=10) as client:
        client.register({"nodes": TXN_NODES})
    # past a few WAL ticks and some acks, long before the 200k pushes of each connection
    pushers = run_pushers(proc, 4096, kill_after=0.2, kill_when_acked=2000)
    assert all(0 < p.acked < p.limit for p in pushers)  # killed mid-stream
    proc = servers.start(env)
    assert_clean_recovery(proc, servers.data_dir)
    with TcpClient(*proc.tcp, timeout=10) as client:
        applied = check_pushers(client, pushers, acked_promise=False)
        assert 0 < applied <= sum(p.sent for p in pushers)


@pytest.mark.parametrize("mode", ["strict", "periodic"])
def test_sigterm_after_pushes_keeps_every_ack(servers: Servers, mode: str) -> None:
    """G7: after SIGTERM (exit 0) every acknowledged push is durable, in both modes. The
    1 s periodic tick leaves the last pushes unwritten until the shutdown flush."""
    env = {"BEAVA_WAL_SYNC_MODE": mode, "BEAVA_WAL_TICK_MS": "1000"}
    proc = servers.start(env)
    with TcpClient(*proc.tcp, timeout=10) as client:
        client.register({"nodes": TXN_NODES})
    pushers = run_pushers(proc, 16)
    assert [p.acked for p in pushers] == [p.sent for p in pushers] == [16 * 52] * 2
    assert proc.terminate() == 0
    assert "server.shutdown_complete" in proc.kinds()
    proc = servers.start(env)
    assert_clean_recovery(proc, servers.data_dir)
    with TcpClient(*proc.tcp, timeout=10) as client:
        assert check_pushers(client, pushers, acked_promise=True) == 2 * 16 * 52


# -- dedupe, LSNs, memory-only, lock ----------------------------------------------------------

DEDUPE_NODES = [
    {"kind": "event", "name": "Pay", "dedupe_key": "id",
     "schema": {"fields": {"id": "str", "user": "str", "amount": "i64"}}},
    {"kind": "derivation", "name": "P", "upstreams": ["Pay"], "key": ["user"],
     "agg": {"n": {"op": "count"}, "s": {"op": "sum", "params": {"field": "amount"}}}},
]


def test_dedupe_replay_after_restart(servers: Servers) -> None:
    """G9: the dedupe cache is rebuilt from the WAL tail and from the snapshot."""
    env = {"BEAVA_SNAPSHOT_INTERVAL_MS": "100"}
    proc = servers.start(env)
    with TcpClient(*proc.tcp, timeout=10) as client:
        client.register({"nodes": DEDUPE_NODES})
        first = client.push("Pay", {"id": "a", "user": "u", "amount": 5})
        wait_snapshot(proc, first["ack_lsn"])
        second = client.push("Pay", {"id": "b", "user": "u", "amount": 7})
    sigkill(proc)
    proc = servers.start(env)
    assert wait_line(proc, "recovery.snapshot_loaded")["snapshot_lsn"] == first["ack_lsn"]
    with TcpClient(*proc.tcp, timeout=10) as client:
        for original, body in ((first, {"id": "a", "user": "u", "amount": 5}),
                               (second, {"id": "b", "user": "u", "amount": 7})):
            replay = client.push("Pay", body)
            assert replay == {"ack_lsn": original["ack_lsn"], "idempotent_replay": True,
                              "registry_version": 1}
        status, headers, raw = http_request(
            proc.http, "POST", "/push",
            msgspec.json.encode({"event": "Pay", "data": {"id": "b", "user": "u",
                                                          "amount": 7}}),
            {"Content-Type": "application/json"})
        assert status == 200 and headers.get("x-beava-idempotent-replay") == "1"
        assert msgspec.json.decode(raw)["ack_lsn"] == second["ack_lsn"]
        assert client.get("P", "u") == {"n": 2, "s": 12}
        third = client.push("Pay", {"id": "c", "user": "u", "amount": 1})
        assert third["ack_lsn"] == second["ack_lsn"] + 1 and not third["idempotent_replay"]


def test_ack_lsn_increases_across_restarts_and_resets(servers: Servers) -> None:
    """G12: every ack_lsn is greater than every earlier one, whatever happened in between."""
    seen: list[int] = []

    def push_some(client: TcpClient, count: int) -> None:
        for i in range(count):
            lsn = client.push("E2", {"user": "u", "v": i, "pad": ""})["ack_lsn"]
            assert not seen or lsn > max(seen), (lsn, seen[-3:])
            seen.append(lsn)

    proc = servers.start()
    with TcpClient(*proc.tcp, timeout=10) as client:
        client.register({"nodes": PAD_NODES})
        push_some(client, 3)
    for step in ("sigkill", "reset", "reset+sigkill", "sigterm", "reset+sigterm"):
        with TcpClient(*proc.tcp, timeout=10) as client:
            if step.startswith("reset"):
                client.reset()
                client.register({"nodes": PAD_NODES})
                push_some(client, 2)
        if step.endswith("sigkill"):
            sigkill(proc)
            proc = servers.start()
        elif step.endswith("sigterm"):
            assert proc.terminate() == 0
            proc = servers.start()
        with TcpClient(*proc.tcp, timeout=10) as client:
            if table_error(client, "T", "u") == "unknown_table":
                client.register({"nodes": PAD_NODES})
            push_some(client, 2)
    assert len(seen) == 3 + 5 * 2 + 3 * 2


def test_memory_only_restart_is_empty_and_creates_no_file(tmp_path: Path) -> None:
    """G13: no directory, lock, WAL or snapshot, even with every directory setting given."""
    env = {"BEAVA_WAL_DIR": str(tmp_path / "wal"), "BEAVA_SNAPSHOT_DIR": str(tmp_path / "snap"),
           "BEAVA_SNAPSHOT_INTERVAL_MS": "50", "PYTHONPATH": str(REPO)}
    for _ in range(2):
        proc = BeavaProcess("--data-dir", str(tmp_path / "data"), env=env, memory_only=True,
                            cwd=str(tmp_path))
        try:
            assert "recovery.skipped_memory_mode" in proc.kinds()
            with TcpClient(*proc.tcp, timeout=10) as client:
                assert client.ping()["registry_version"] == 0
                assert table_error(client, "T", "u") == "unknown_table"
                client.register({"nodes": PAD_NODES})
                assert client.push("E2", {"user": "u", "v": 1, "pad": ""})["ack_lsn"] == 2
                time.sleep(0.2)  # several snapshot intervals: still nothing on disk
        finally:
            proc.kill()
        assert os.listdir(tmp_path) == []


def test_second_server_on_same_data_dir_exits_3(servers: Servers) -> None:
    first = servers.start()
    second = servers.start(wait=False)
    assert second.proc.wait(20) == 3
    fatal = wait_line(second, "server.fatal")
    assert fatal["exit_code"] == 3 and "lock" in fatal["reason"]
    assert second.stderr_text().startswith("Error: ")
    with TcpClient(*first.tcp, timeout=10) as client:
        assert client.ping()["registry_version"] == 0


RING_NODES = [
    *PAD_NODES,
    {"kind": "derivation", "name": "R", "upstreams": ["E2"], "key": ["user"], "agg": {
        "recent": {"op": "last_n", "params": {"field": "v", "n": 3}},
        "hour": {"op": "count", "params": {"window": "1h"}},
        "pads": {"op": "top_k", "params": {"field": "pad", "k": 2}}}},
]


def stderr_after_stop(proc: BeavaProcess) -> str:
    assert proc.terminate() == 0
    return proc.proc.stderr.read().decode()


@pytest.mark.parametrize("state_format", [1, 2])
def test_crafted_pickle_snapshot_is_never_unpickled(servers: Servers, data_dir: Path,
                                                    tmp_path: Path, state_format: int) -> None:
    """A snapshot file with a valid header CRC and body CRC whose state is a pickle that
    creates a file when unpickled (as the old state_format 1, and under the current format):
    the server starts, logs the snapshot as invalid and rebuilds the state from the WAL."""
    proc = servers.start()
    with TcpClient(*proc.tcp, timeout=10) as client:
        client.register({"nodes": PAD_NODES})
        push_numbered(client, 5)  # LSNs 2..6 after the registry record
    sigkill(proc)
    marker = tmp_path / "unpickled"
    body = encode_snapshot_body(6, 1, [], pickle_payload(marker), [], state_format=state_format)
    path = write_snapshot_file(str(data_dir / "snapshots"), 6, 0, 1, body).path
    read_snapshot_header(path, 6)  # header, CRC and length are valid
    proc = servers.start()
    invalid = wait_line(proc, "recovery.snapshot_invalid")
    assert invalid["level"] == "WARN" and invalid["path"] == path
    assert invalid["reason"] == ("unsupported state_format 1" if state_format == 1 else
                                 "state does not load: ValueError: snapshot state is not a "
                                 "map of tables")
    assert wait_line(proc, "recovery.complete")["records_replayed"] == 6
    assert lines_of(proc, "recovery.snapshot_loaded") == []
    with TcpClient(*proc.tcp, timeout=10) as client:
        assert client.get("T", "u") == {"n": 5, "s": 10}
    assert not marker.exists()
    assert os.path.exists(path)  # left in place (§9.1 step 4)
    assert "Traceback" not in stderr_after_stop(proc)


def test_snapshot_with_wrong_state_shapes_falls_back(servers: Servers, data_dir: Path) -> None:
    """The newest snapshot's state is damaged (valid CRCs): recovery rejects it cleanly, loads
    the older one and replays the rest; without the older one, it replays the whole WAL."""
    proc = servers.start({"BEAVA_SNAPSHOT_INTERVAL_MS": "100"})
    with TcpClient(*proc.tcp, timeout=10) as client:
        client.register({"nodes": RING_NODES})
        push_numbered(client, 5, pad=1)
        wait_snapshot(proc, 6)
        push_numbered(client, 5, start=5, pad=2)
        wait_snapshot(proc, 11)
        before = [client.get("T", "u"), client.get("R", "u")]
    sigkill(proc)
    assert before == [{"n": 10, "s": 45}, {"hour": 10, "pads": [
        {"count": 5, "value": "p"}, {"count": 5, "value": "pp"}], "recent": [7, 8, 9]}]
    snaps = sorted(str(p) for p in (data_dir / "snapshots").glob("*.bsnap"))
    assert [os.path.basename(p) for p in snaps] == [
        "snap-0000000000000006.bsnap", "snap-000000000000000b.bsnap"]

    def wrong_shapes(body: dict) -> dict:
        table = body["state"]["tables"]["R"]
        table["keys"] = [7]  # an entity key that is not a string
        recent = table["columns"]["recent"]
        table["columns"]["recent"] = [recent[0][:-3], recent[1]]  # a ring cut short
        return body

    rewrite_snapshot(snaps[1], wrong_shapes)
    proc = servers.start()
    invalid = wait_line(proc, "recovery.snapshot_invalid")
    assert invalid["path"] == snaps[1]
    assert invalid["reason"].startswith("state does not load: ValueError: snapshot entity key 7")
    assert wait_line(proc, "recovery.snapshot_loaded")["snapshot_lsn"] == 6
    assert wait_line(proc, "recovery.complete")["records_replayed"] == 5
    with TcpClient(*proc.tcp, timeout=10) as client:
        assert [client.get("T", "u"), client.get("R", "u")] == before
    assert "Traceback" not in stderr_after_stop(proc)
    os.unlink(snaps[0])
    proc = servers.start()
    assert wait_line(proc, "recovery.snapshot_invalid")["path"] == snaps[1]
    assert wait_line(proc, "recovery.complete")["records_replayed"] == 11
    assert lines_of(proc, "recovery.snapshot_loaded") == []
    with TcpClient(*proc.tcp, timeout=10) as client:
        assert [client.get("T", "u"), client.get("R", "u")] == before
    assert "Traceback" not in stderr_after_stop(proc)


def test_stale_snapshot_temp_file_is_deleted(servers: Servers, data_dir: Path) -> None:
    """A temp file left by a crashed snapshot is never read and is deleted at start-up."""
    proc = servers.start()
    with TcpClient(*proc.tcp, timeout=10) as client:
        client.register({"nodes": PAD_NODES})
        push_numbered(client, 3)
    sigkill(proc)
    stale = data_dir / "snapshots" / "snap-0000000000000004.bsnap.tmp"
    stale.write_bytes(b"BVSNAP01 garbage")
    proc = servers.start()
    assert_clean_recovery(proc, data_dir)
    assert not stale.exists()
    with TcpClient(*proc.tcp, timeout=10) as client:
        assert client.get("T", "u") == {"n": 3, "s": 3}


def test_rotation_under_pipelined_load_restarts(servers: Servers, data_dir: Path) -> None:
    """Segments rotated while pushes are pending are named by their first record's LSN, so
    the WAL has no gap and a restart succeeds (both after SIGTERM and SIGKILL)."""
    env = {"BEAVA_WAL_SEGMENT_BYTES": "1048576"}
    proc = servers.start(env)
    with TcpClient(*proc.tcp, timeout=10) as client:
        client.register({"nodes": TXN_NODES})
    pushers = run_pushers(proc, 192)  # ~20k records of ~75 bytes: at least one rotation
    assert proc.terminate() == 0
    assert "wal.segment_rotated" in proc.kinds()
    segments = wal_segments(data_dir)
    assert len(segments) >= 2
    for segment in segments:
        assert not segment.records or segment.records[0].lsn == segment.base_lsn, (
            segment.path.name, segment.records[0].lsn)
    proc = servers.start(env)
    with TcpClient(*proc.tcp, timeout=10) as client:
        assert check_pushers(client, pushers, acked_promise=True) == sum(p.sent for p in pushers)
    pushers = run_pushers(proc, 192, kill_after=0.2, prefix="again")
    proc = servers.start(env)
    assert_clean_recovery(proc, data_dir)
    with TcpClient(*proc.tcp, timeout=10) as client:
        check_pushers(client, pushers, acked_promise=True)


# -- the snapshot child and a killed server -----------------------------------------------------

def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def detached(pid: int) -> bool:
    """Whether a snapshot child has dropped the descriptors it inherited (or is gone)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd")) <= 4
    except OSError:
        return False


def running_detached_child(parent: int, timeout: float = 5.0) -> int | None:
    """The parent's child once it has dropped its inherited descriptors, frozen (SIGSTOP)
    while it still runs; None if no child is seen running detached within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kids = children_of(parent)
        if kids and detached(kids[0]):
            os.kill(kids[0], signal.SIGSTOP)
            if alive(kids[0]):
                return kids[0]
            return None  # it finished first
        time.sleep(0.001)
    return None


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")
def test_killed_server_releases_lock_and_connections_despite_snapshot_child(
        servers: Servers, data_dir: Path) -> None:
    """A server SIGKILLed while its snapshot child runs must not leave the data-directory
    lock or client connections held by that child: the supervisor restarts at once (§5) and
    clients see EOF (server.md §11.2 E7). The child drops every inherited descriptor right
    after the fork and dies with its parent; it is frozen (SIGSTOP) once it has done so,
    to hold the moment."""
    proc = servers.start({"BEAVA_SNAPSHOT_INTERVAL_MS": "50"})
    client = TcpClient(*proc.tcp, timeout=10)
    client.register({"nodes": HEAVY_NODES})
    pad = "x" * 2000  # ~40 MB of kept state: serialising it takes the child a while
    for start in range(0, 20000, 2000):
        client.push_many("E2", [{"user": f"u{i}", "v": i, "pad": pad}
                                for i in range(start, start + 2000)])
    watcher = socket.create_connection(proc.tcp, timeout=10)  # open before any fork
    assert client.ping()  # the connection is accepted (and inherited by the next child)
    child = None
    try:
        for v in range(50):
            mark = len(proc.lines)
            client.push("E2", {"user": "u", "v": v, "pad": ""})
            wait_line(proc, "snapshot.started", after=mark)
            child = running_detached_child(proc.proc.pid)
            if child is not None:
                break
        assert child is not None, "never caught a running snapshot child"
        held = os.listdir(f"/proc/{child}/fd")
        assert len(held) <= 4, held  # stdin/out/err on /dev/null + the report pipe
        proc.proc.kill()
        proc.proc.wait(10)
        wait_for(lambda: not alive(child), 10, "the snapshot child to die with its server")
        fd = os.open(data_dir / "wal" / "LOCK", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # fails while the child holds it
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        watcher.settimeout(2)
        assert watcher.recv(1) == b""  # EOF, not a hang
        restarted = servers.start()
        with TcpClient(*restarted.tcp, timeout=10) as fresh:
            assert fresh.get("T", "u")["n"] >= 1
    finally:
        watcher.close()
        client.close()
        if child is not None and alive(child):
            os.kill(child, signal.SIGKILL)
            wait_for(lambda: not alive(child), 10, "the snapshot child to exit")
