"""Snapshot file format, retention and the fork / in-process runner (spec/durability.md §8)."""

from __future__ import annotations

import os
import struct
import threading
import time
import zlib
from pathlib import Path

import msgspec
import pytest

from beava.durability import snapshots as sn
from beava.durability.crash_points import CrashPoints


def body_for(lsn: int, version: int = 3, state: object = None) -> bytes:
    return sn.encode_snapshot_body(lsn, version, [{"kind": "event", "name": "txn"}],
                                   state if state is not None else {"t": {"u1": [1, 2.5]}},
                                   [["txn", "k1", lsn, 1234, version]])


def poll_until_done(runner: sn.SnapshotRunner, timeout: float = 20.0) -> sn.SnapshotOutcome:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        outcome = runner.poll()
        if outcome is not None:
            return outcome
        time.sleep(0.01)
    raise AssertionError("snapshot did not finish")


# -- format ------------------------------------------------------------------------------------


def test_header_layout() -> None:
    body = b"\x80"
    header = sn.encode_snapshot_header(0x186A0, 1_700_000_000_000, 1_699_999_999_000, 4, body)
    assert len(header) == 64
    assert header[0:8] == b"BVSNAP01"
    assert struct.unpack_from("<IIQQQIQII", header, 8) == (
        1, 0, 0x186A0, 1_700_000_000_000, 1_699_999_999_000, 4, 1, zlib.crc32(body), 0)
    assert struct.unpack_from("<I", header, 60)[0] == zlib.crc32(header[:60])
    assert sn.decode_snapshot_header(header) == sn.SnapshotHeader(
        0x186A0, 1_700_000_000_000, 1_699_999_999_000, 4, 1, zlib.crc32(body))


def test_body_shape() -> None:
    decoded = msgspec.msgpack.decode(body_for(20))
    assert decoded == {"registry": {"version": 3, "nodes": [{"kind": "event", "name": "txn"}]},
                       "next_lsn": 21, "state_format": 1, "state": {"t": {"u1": [1, 2.5]}},
                       "dedupe": [["txn", "k1", 20, 1234, 3]]}


def test_write_and_read_round_trip(tmp_path: Path) -> None:
    state = {"t": {"u1": b"\x00\x01raw column bytes", "f": 0.1 + 0.2}}
    body = body_for(20, state=state)
    written = sn.write_snapshot_file(str(tmp_path), 20, 777, 3, body)
    assert written.path == str(tmp_path / "snap-0000000000000014.bsnap")
    assert written.bytes == 64 + len(body) == os.path.getsize(written.path)
    assert written.fsync_seconds >= 0
    assert os.listdir(tmp_path) == ["snap-0000000000000014.bsnap"]
    loaded = sn.read_snapshot(written.path)
    assert loaded.path == written.path
    assert (loaded.header.snapshot_lsn, loaded.header.watermark_ms,
            loaded.header.registry_version, loaded.header.body_len) == (20, 777, 3, len(body))
    assert loaded.body["state"] == state  # floats and bytes exact
    assert sn.read_snapshot_header(written.path, 20).snapshot_lsn == 20


def _rewrite(path: str, mutate) -> None:
    data = bytearray(Path(path).read_bytes())
    Path(path).write_bytes(bytes(mutate(data)))


def _fix_header_crc(data: bytearray) -> bytearray:
    struct.pack_into("<I", data, 60, zlib.crc32(bytes(data[:60])))
    return data


def _set(fmt: str, offset: int, value: int):
    def mutate(data: bytearray) -> bytearray:
        struct.pack_into(fmt, data, offset, value)
        return _fix_header_crc(data)
    return mutate


def _flip(offset: int):
    def mutate(data: bytearray) -> bytearray:
        data[offset] ^= 0x01
        return data
    return mutate


@pytest.mark.parametrize("mutate, reason", [
    (lambda d: d[:40], "short header"),
    (lambda d: b"BVSNAP02" + d[8:], "bad magic"),
    (_flip(20), "header CRC mismatch"),
    (_set("<I", 8, 2), "unsupported format_version 2"),
    (_set("<I", 12, 1), "unknown flags"),
    (_flip(70), "body CRC mismatch"),
    (lambda d: d[:-1], "header says"),
    (lambda d: d + b"\x00", "header says"),
    (_set("<Q", 16, 21), "does not match the name"),
])
def test_read_rejects_damage(tmp_path: Path, mutate, reason) -> None:
    written = sn.write_snapshot_file(str(tmp_path), 20, 0, 3, body_for(20))
    _rewrite(written.path, mutate)
    with pytest.raises(sn.SnapshotInvalid, match=reason):
        sn.read_snapshot(written.path)


@pytest.mark.parametrize("body, reason", [
    (msgspec.msgpack.encode([1, 2]), "not a map"),
    (b"\xc1", "not MessagePack"),
    (msgspec.msgpack.encode({"registry": {"version": 3}}), "lacks next_lsn, state_format"),
    (sn.encode_snapshot_body(20, 3, [], {}, [], state_format=2), "unsupported state_format 2"),
    (sn.encode_snapshot_body(19, 3, [], {}, []), "next_lsn 20 is not snapshot_lsn"),
    (sn.encode_snapshot_body(20, 4, [], {}, []), "registry version does not match"),
])
def test_read_rejects_bad_bodies(tmp_path: Path, body: bytes, reason: str) -> None:
    written = sn.write_snapshot_file(str(tmp_path), 20, 0, 3, body)
    with pytest.raises(sn.SnapshotInvalid, match=reason):
        sn.read_snapshot(written.path)


def test_read_accepts_extra_state_formats(tmp_path: Path) -> None:
    written = sn.write_snapshot_file(str(tmp_path), 20, 0, 3,
                                     sn.encode_snapshot_body(20, 3, [], {}, [], state_format=2))
    assert sn.read_snapshot(written.path, frozenset({1, 2})).body["state_format"] == 2


def test_write_failure_before_rename_removes_temp(tmp_path: Path) -> None:
    def boom() -> None:
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError):
        sn.write_snapshot_file(str(tmp_path), 5, 0, 3, body_for(5), before_rename=boom)
    assert os.listdir(tmp_path) == []


# -- retention ---------------------------------------------------------------------------------


def test_retention_keeps_newest(tmp_path: Path) -> None:
    for lsn in (5, 40, 12, 100):
        sn.write_snapshot_file(str(tmp_path), lsn, 0, 3, body_for(lsn))
    (tmp_path / "snap-0000000000000200.bsnap.tmp").write_bytes(b"partial")
    (tmp_path / "notes.txt").write_bytes(b"mine")
    assert sn.apply_retention(str(tmp_path), 2) == [40, 100]
    assert sorted(os.listdir(tmp_path)) == ["notes.txt", "snap-0000000000000028.bsnap",
                                            "snap-0000000000000064.bsnap"]
    assert sn.apply_retention(str(tmp_path), 5) == [40, 100]
    assert [lsn for lsn, _ in sn.list_snapshots(str(tmp_path))] == [40, 100]


# -- runner: fork mode -------------------------------------------------------------------------


def test_fork_mode_writes_valid_snapshot_in_child(tmp_path: Path) -> None:
    parent = os.getpid()
    runner = sn.SnapshotRunner(str(tmp_path), retain_count=2)
    assert runner.fork

    def serialise() -> bytes:
        return body_for(30, state={"pid": os.getpid()})

    runner.start(serialise, 30, 5555, 3)
    assert runner.running
    outcome = poll_until_done(runner)
    assert not runner.running
    assert outcome.ok, outcome.reason
    assert outcome.path == str(tmp_path / "snap-000000000000001e.bsnap")
    assert outcome.bytes == os.path.getsize(outcome.path)
    assert outcome.duration_seconds > 0 and outcome.fsync_seconds > 0
    assert outcome.retained == [30] and outcome.oldest_retained_lsn == 30
    loaded = sn.read_snapshot(outcome.path)
    assert loaded.header.watermark_ms == 5555
    child = loaded.body["state"]["pid"]
    assert child != parent  # serialised in a forked child
    with pytest.raises(ChildProcessError):
        os.waitpid(child, os.WNOHANG)  # already reaped
    assert runner.poll() is None


def test_fork_mode_sees_state_as_of_fork(tmp_path: Path) -> None:
    state = {"n": 1}
    runner = sn.SnapshotRunner(str(tmp_path))

    def serialise() -> bytes:
        time.sleep(0.3)  # the parent mutates meanwhile; the child keeps its own copy
        return body_for(7, state=dict(state))

    runner.start(serialise, 7, 0, 3)
    state["n"] = 2
    outcome = poll_until_done(runner)
    assert outcome.ok
    assert sn.read_snapshot(outcome.path).body["state"] == {"n": 1}


def test_fork_mode_child_error_is_reported(tmp_path: Path) -> None:
    runner = sn.SnapshotRunner(str(tmp_path))

    def serialise() -> bytes:
        raise ValueError("cannot encode column")

    runner.start(serialise, 9, 0, 3)
    outcome = poll_until_done(runner)
    assert not outcome.ok
    assert outcome.reason == "ValueError: cannot encode column"
    assert outcome.oldest_retained_lsn is None
    assert os.listdir(tmp_path) == []


def test_fork_mode_crash_before_rename_kills_only_the_child(tmp_path: Path) -> None:
    runner = sn.SnapshotRunner(str(tmp_path),
                               crash_points=CrashPoints("snapshot_before_rename:2"))
    runner.start(lambda: body_for(10), 10, 0, 3)
    assert poll_until_done(runner).ok
    runner.start(lambda: body_for(20), 20, 0, 3)
    outcome = poll_until_done(runner)
    assert not outcome.ok
    assert outcome.reason == "snapshot child killed by signal 9"
    assert os.listdir(tmp_path) == ["snap-000000000000000a.bsnap"]
    runner.start(lambda: body_for(30), 30, 0, 3)
    assert poll_until_done(runner).ok


def test_fork_mode_kill(tmp_path: Path) -> None:
    snap_dir = tmp_path / "snaps"
    snap_dir.mkdir()
    pid_file = tmp_path / "child.pid"
    runner = sn.SnapshotRunner(str(snap_dir))

    def serialise() -> bytes:
        (snap_dir / "snap-0000000000000008.bsnap.tmp").write_bytes(b"partial")
        pid_file.write_text(str(os.getpid()))
        time.sleep(30)
        return b""

    runner.start(serialise, 8, 0, 3)
    deadline = time.monotonic() + 10
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    started = time.monotonic()
    runner.kill()
    assert time.monotonic() - started < 5
    assert not runner.running
    assert runner.poll() is None
    assert os.listdir(snap_dir) == []
    with pytest.raises(ChildProcessError):
        os.waitpid(int(pid_file.read_text()), os.WNOHANG)  # killed and reaped


def test_start_while_running_is_refused(tmp_path: Path) -> None:
    runner = sn.SnapshotRunner(str(tmp_path))
    runner.start(lambda: body_for(1), 1, 0, 3)
    with pytest.raises(RuntimeError):
        runner.start(lambda: body_for(2), 2, 0, 3)
    assert poll_until_done(runner).ok


def test_runner_applies_retention(tmp_path: Path) -> None:
    runner = sn.SnapshotRunner(str(tmp_path), retain_count=2)
    retained = []
    for lsn in (10, 20, 30):
        runner.start(lambda lsn=lsn: body_for(lsn), lsn, 0, 3)
        outcome = poll_until_done(runner)
        assert outcome.ok
        retained.append(outcome.retained)
    assert retained == [[10], [10, 20], [20, 30]]
    assert [lsn for lsn, _ in sn.list_snapshots(str(tmp_path))] == [20, 30]


# -- runner: in-process mode -------------------------------------------------------------------


def test_in_process_mode(tmp_path: Path) -> None:
    runner = sn.SnapshotRunner(str(tmp_path), fork=False)
    caller = threading.get_ident()
    seen = []

    def serialise() -> bytes:
        seen.append((os.getpid(), threading.get_ident()))
        return body_for(12)

    runner.start(serialise, 12, 99, 3)
    assert seen == [(os.getpid(), caller)]  # serialised on the calling (loop) thread
    outcome = poll_until_done(runner)
    assert outcome.ok and outcome.retained == [12]
    assert outcome.bytes == os.path.getsize(outcome.path)
    assert sn.read_snapshot(outcome.path).header.watermark_ms == 99


def test_in_process_crash_point_fails_attempt(tmp_path: Path) -> None:
    runner = sn.SnapshotRunner(str(tmp_path), fork=False,
                               crash_points=CrashPoints("snapshot_before_rename"))
    runner.start(lambda: body_for(12), 12, 0, 3)
    outcome = poll_until_done(runner)
    assert not outcome.ok and "snapshot_before_rename" in outcome.reason
    assert os.listdir(tmp_path) == []


def test_in_process_serialise_error(tmp_path: Path) -> None:
    runner = sn.SnapshotRunner(str(tmp_path), fork=False)

    def serialise() -> bytes:
        raise KeyError("table")

    runner.start(serialise, 12, 0, 3)
    assert runner.running
    outcome = runner.poll()
    assert outcome is not None and not outcome.ok
    assert outcome.reason == "serialise failed: KeyError: 'table'"
    assert not runner.running


def test_in_process_kill_prevents_commit(tmp_path: Path, monkeypatch) -> None:
    release = threading.Event()
    in_fsync = threading.Event()
    real_sync = sn.sync_fd

    def slow_sync(fd: int) -> None:
        in_fsync.set()
        release.wait(10)
        real_sync(fd)

    monkeypatch.setattr(sn, "sync_fd", slow_sync)
    runner = sn.SnapshotRunner(str(tmp_path), fork=False)
    runner.start(lambda: body_for(12), 12, 0, 3)
    assert in_fsync.wait(10)
    assert os.listdir(tmp_path) == ["snap-000000000000000c.bsnap.tmp"]
    threading.Timer(0.2, release.set).start()
    runner.kill()  # waits for the writer, which must not rename
    assert not runner.running
    assert runner.poll() is None
    assert os.listdir(tmp_path) == []
