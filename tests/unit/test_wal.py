"""WAL writer: segments, batches, registry rollback, rotation, reset, reclamation, crash points
(spec/durability.md §4, §6.6, §7, §11, §15)."""

from __future__ import annotations

import errno
import os
import signal
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from beava.durability import wal_format as wf
from beava.durability.crash_points import POINTS, CrashPoints
from beava.durability.wal import SegmentFile, WalFatal, WalUnavailable, WalWriter, list_segments


class RecordingLog:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict]] = []

    def _add(self, level: str, kind: str, message: str, **fields) -> None:
        self.lines.append((level, kind, fields))

    def info(self, kind: str, message: str, **fields) -> None:
        self._add("INFO", kind, message, **fields)

    def warn(self, kind: str, message: str, **fields) -> None:
        self._add("WARN", kind, message, **fields)

    def error(self, kind: str, message: str, **fields) -> None:
        self._add("ERROR", kind, message, **fields)

    def kinds(self) -> list[str]:
        return [kind for _, kind, _ in self.lines]


def event(lsn: int, body: bytes = b'{"user":"u1","amount":1}') -> bytes:
    return wf.encode_record(lsn, wf.RECORD_EVENT, wf.BODY_JSON, 1000 + lsn, 1, b"txn", body)


def registry(lsn: int, version: int = 2) -> bytes:
    return wf.encode_record(lsn, wf.RECORD_REGISTRY, wf.BODY_JSON, 1000 + lsn, version, b"",
                            b'{"force":false,"new_version":%d}' % version)


def dirs(tmp_path: Path) -> tuple[str, str]:
    wal, snaps = tmp_path / "wal", tmp_path / "snaps"
    wal.mkdir()
    snaps.mkdir()
    return str(wal), str(snaps)


def segment_files(wal_dir: str) -> list[str]:
    return [name for _, name in list_segments(wal_dir)]


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def in_child(fn: Callable[[], None]) -> int:
    """Run ``fn`` in a forked child; return its raw wait status."""
    pid = os.fork()
    if pid == 0:
        try:
            fn()
        finally:
            os._exit(0)
    return os.waitpid(pid, 0)[1]


# -- segments and batches ----------------------------------------------------------------------


def test_start_creates_segment_with_header(tmp_path: Path) -> None:
    wal_dir, snap_dir = dirs(tmp_path)
    writer = WalWriter(wal_dir, snap_dir)
    writer.start(1)
    path = os.path.join(wal_dir, "seg-0000000000000001.bwal")
    assert writer.active_path == path
    data = read(path)
    assert len(data) == 32 and writer.active_size == 32
    header = wf.decode_segment_header(data)
    assert header.base_lsn == 1 and header.flags == 0
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644 & ~_umask()
    assert writer.fsyncs_total == 1
    writer.close()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_start_refuses_existing_segment(tmp_path: Path) -> None:
    wal_dir, snap_dir = dirs(tmp_path)
    Path(wal_dir, wf.segment_name(5)).write_bytes(b"keep me")
    writer = WalWriter(wal_dir, snap_dir)
    with pytest.raises(WalFatal) as info:
        writer.start(5)
    assert info.value.op == "create"
    assert Path(wal_dir, wf.segment_name(5)).read_bytes() == b"keep me"


def test_write_and_sync_appends_batches_and_counts(tmp_path: Path) -> None:
    wal_dir, snap_dir = dirs(tmp_path)
    writer = WalWriter(wal_dir, snap_dir)
    writer.start(1)
    batch1 = event(1) + event(2)
    batch2 = event(3)
    writer.write_and_sync(batch1)
    writer.write_and_sync(memoryview(batch2))
    data = read(writer.active_path)
    assert data[32:] == batch1 + batch2
    assert writer.active_size == len(data)
    assert writer.bytes_written_total == len(batch1) + len(batch2)
    assert writer.fsyncs_total == 3  # header + two batches
    assert writer.last_fsync_seconds >= 0.0
    writer.close()


class FlakyFile(SegmentFile):
    """A segment file whose next write / sync / truncate can be made to fail."""

    fail_write_after: int | None = None  # bytes written before the write fails
    fail_errno = errno.ENOSPC  # ... with this error
    fail_sync = False
    fail_truncate = False

    def write_at(self, data, offset: int) -> None:
        limit = FlakyFile.fail_write_after
        if limit is not None:
            FlakyFile.fail_write_after = None
            super().write_at(bytes(data)[:limit], offset)
            raise OSError(FlakyFile.fail_errno, os.strerror(FlakyFile.fail_errno))
        super().write_at(data, offset)

    def sync(self) -> None:
        if FlakyFile.fail_sync:
            raise OSError(errno.EIO, "Input/output error")
        super().sync()

    def truncate(self, size: int) -> None:
        if FlakyFile.fail_truncate:
            raise OSError(errno.EIO, "Input/output error")
        super().truncate(size)


@pytest.fixture
def flaky(tmp_path: Path):
    FlakyFile.fail_write_after = None
    FlakyFile.fail_sync = False
    FlakyFile.fail_truncate = False
    wal_dir, snap_dir = dirs(tmp_path)
    writer = WalWriter(wal_dir, snap_dir, file_factory=FlakyFile.create)
    writer.start(1)
    writer.write_and_sync(event(1))
    yield writer
    FlakyFile.fail_write_after = None
    FlakyFile.fail_errno = errno.ENOSPC
    FlakyFile.fail_sync = False
    FlakyFile.fail_truncate = False
    writer.close()


def test_registry_write_failure_rolls_back(flaky: WalWriter) -> None:
    before = read(flaky.active_path)
    size_before = flaky.active_size
    written_before = flaky.bytes_written_total
    FlakyFile.fail_write_after = 10  # a partial record reaches the file, then ENOSPC
    with pytest.raises(WalUnavailable) as info:
        flaky.write_registry_record(registry(2))
    assert info.value.op == "write" and "No space left" in info.value.error
    assert read(flaky.active_path) == before
    assert flaky.active_size == size_before
    assert flaky.bytes_written_total == written_before
    # The LSN is reused by the next record, which lands where the failed one started.
    flaky.write_registry_record(registry(2))
    data = read(flaky.active_path)
    assert data == before + registry(2)
    assert [r.lsn for r in _records(data)] == [1, 2]


def _records(data: bytes) -> list[wf.Record]:
    out, offset = [], 32
    while offset < len(data):
        record = wf.parse_record(data, offset)
        out.append(record)
        offset += record.size
    return out


def test_registry_rollback_failure_is_fatal(flaky: WalWriter) -> None:
    FlakyFile.fail_write_after = 10
    FlakyFile.fail_truncate = True
    with pytest.raises(WalFatal) as info:
        flaky.write_registry_record(registry(2))
    assert info.value.op == "truncate"


def test_registry_rollback_fsync_failure_is_fatal(flaky: WalWriter) -> None:
    FlakyFile.fail_write_after = 0
    FlakyFile.fail_sync = True
    with pytest.raises(WalFatal) as info:
        flaky.write_registry_record(registry(2))
    assert info.value.op == "truncate"


def test_registry_fsync_failure_is_fatal(flaky: WalWriter) -> None:
    FlakyFile.fail_sync = True
    with pytest.raises(WalFatal) as info:
        flaky.write_registry_record(registry(2))
    assert info.value.op == "fsync" and "Input/output error" in info.value.error


def test_batch_write_on_a_full_disk_is_rolled_back(flaky: WalWriter) -> None:
    """ENOSPC while writing an event batch (§6.6): back to the previous length, 503."""
    before = read(flaky.active_path)
    size_before, written_before = flaky.active_size, flaky.bytes_written_total
    FlakyFile.fail_write_after = 30  # part of the batch reaches the file first
    with pytest.raises(WalUnavailable) as info:
        flaky.write_and_sync(event(2) + event(3))
    assert not isinstance(info.value, WalFatal) and info.value.op == "write"
    assert read(flaky.active_path) == before
    assert (flaky.active_size, flaky.bytes_written_total) == (size_before, written_before)
    flaky.write_and_sync(event(2))
    assert [r.lsn for r in _records(read(flaky.active_path))] == [1, 2]


def test_batch_write_failure_other_than_space_is_fatal(flaky: WalWriter) -> None:
    FlakyFile.fail_write_after = 3
    FlakyFile.fail_errno = errno.EIO
    with pytest.raises(WalFatal) as info:
        flaky.write_and_sync(event(2))
    assert info.value.op == "write"


def test_batch_rollback_failure_is_fatal(flaky: WalWriter) -> None:
    FlakyFile.fail_write_after = 3
    FlakyFile.fail_truncate = True
    with pytest.raises(WalFatal) as info:
        flaky.write_and_sync(event(2))
    assert info.value.op == "truncate"


def test_probe_writes_nothing_that_stays(flaky: WalWriter) -> None:
    before = read(flaky.active_path)
    FlakyFile.fail_write_after = 100
    assert flaky.probe() is False
    assert read(flaky.active_path) == before
    assert flaky.probe() is True
    assert read(flaky.active_path) == before
    FlakyFile.fail_write_after = 0
    FlakyFile.fail_errno = errno.EIO
    with pytest.raises(WalFatal):
        flaky.probe()


def test_batch_fsync_failure_is_fatal(flaky: WalWriter) -> None:
    FlakyFile.fail_sync = True
    with pytest.raises(WalFatal) as info:
        flaky.write_and_sync(event(2))
    assert info.value.op == "fsync"
    assert info.value.path == flaky.active_path


# -- rotation ----------------------------------------------------------------------------------


def test_rotation_with_small_segments(tmp_path: Path) -> None:
    wal_dir, snap_dir = dirs(tmp_path)
    log = RecordingLog()
    record_size = len(event(1))
    writer = WalWriter(wal_dir, snap_dir, segment_bytes=32 + 2 * record_size, log=log)
    writer.start(1)
    rotations = []
    lsn = 1
    for batch_size in (1, 1, 3, 1, 2):
        writer.write_and_sync(b"".join(event(lsn + i) for i in range(batch_size)))
        lsn += batch_size
        if writer.maybe_rotate(lsn):
            rotations.append(lsn)
    # seg-1: 1,2 (full) -> seg-3: 3,4,5 (one batch overfills it) -> seg-6: 6,7,8 -> seg-9
    assert rotations == [3, 6, 9]
    assert segment_files(wal_dir) == [wf.segment_name(n) for n in (1, 3, 6, 9)]
    assert [r.lsn for r in _records(read(os.path.join(wal_dir, wf.segment_name(3))))] == [3, 4,
                                                                                          5]
    assert [r.lsn for r in _records(read(os.path.join(wal_dir, wf.segment_name(6))))] == [6, 7,
                                                                                          8]
    assert writer.active_base_lsn == 9 and writer.active_size == 32
    rotated = [fields for _, kind, fields in log.lines if kind == "wal.segment_rotated"]
    assert rotated == [{"segment": wf.segment_name(n), "base_lsn": n} for n in (3, 6, 9)]
    writer.close()


def test_no_rotation_below_size_or_when_empty(tmp_path: Path) -> None:
    wal_dir, snap_dir = dirs(tmp_path)
    writer = WalWriter(wal_dir, snap_dir, segment_bytes=10)  # smaller than a header
    writer.start(4)
    assert not writer.maybe_rotate(4)  # no record yet: same name, nothing to seal
    writer = WalWriter(wal_dir, snap_dir, segment_bytes=1 << 20)
    writer.start(9)
    writer.write_and_sync(event(9))
    assert not writer.maybe_rotate(10)
    assert segment_files(wal_dir) == [wf.segment_name(4), wf.segment_name(9)]


# -- reset -------------------------------------------------------------------------------------


def _populate(tmp_path: Path, segment_bytes: int = 200) -> tuple[WalWriter, str, str, int]:
    wal_dir, snap_dir = dirs(tmp_path)
    writer = WalWriter(wal_dir, snap_dir, segment_bytes=segment_bytes)
    writer.start(1)
    lsn = 1
    for _ in range(6):
        writer.write_and_sync(event(lsn) + event(lsn + 1))
        lsn += 2
        writer.maybe_rotate(lsn)
    return writer, wal_dir, snap_dir, lsn


def test_reset_writes_boundary_and_deletes_history(tmp_path: Path) -> None:
    writer, wal_dir, snap_dir, lsn = _populate(tmp_path)
    assert len(segment_files(wal_dir)) > 2
    for name in ("snap-0000000000000004.bsnap", "snap-0000000000000008.bsnap",
                 "snap-0000000000000009.bsnap.tmp", "notes.txt"):
        Path(snap_dir, name).write_bytes(b"x")
    Path(wal_dir, "quarantine").mkdir()
    Path(wal_dir, "quarantine", "lsn-0000000000000003.rec").write_bytes(b"q")
    Path(wal_dir, "README").write_bytes(b"foreign")
    record = wf.encode_reset_record(lsn, 5000, 7)
    writer.reset(lsn, record)
    assert segment_files(wal_dir) == [wf.segment_name(lsn)]
    data = read(os.path.join(wal_dir, wf.segment_name(lsn)))
    header = wf.decode_segment_header(data)
    assert header.history_boundary and header.base_lsn == lsn
    assert data[32:] == record
    assert writer.active_base_lsn == lsn and writer.active_size == len(data)
    assert sorted(os.listdir(snap_dir)) == ["notes.txt"]
    assert Path(wal_dir, "quarantine", "lsn-0000000000000003.rec").read_bytes() == b"q"
    assert Path(wal_dir, "README").exists()
    # Later batches append after the RESET record.
    writer.write_and_sync(event(lsn + 1))
    assert [r.lsn for r in _records(read(writer.active_path))] == [lsn, lsn + 1]
    writer.close()


def test_reset_replaces_empty_active_segment_with_same_name(tmp_path: Path) -> None:
    wal_dir, snap_dir = dirs(tmp_path)
    writer = WalWriter(wal_dir, snap_dir)
    writer.start(1)
    writer.write_and_sync(event(1))
    writer.maybe_rotate(2)
    writer = WalWriter(wal_dir, snap_dir)
    writer.start(2)  # as after a restart: empty active segment seg-2
    writer.reset(2, wf.encode_reset_record(2, 0, 3))
    assert segment_files(wal_dir) == [wf.segment_name(2)]
    data = read(writer.active_path)
    assert wf.decode_segment_header(data).history_boundary
    assert [r.type for r in _records(data)] == [wf.RECORD_RESET]


def test_reset_crash_after_boundary_leaves_old_files(tmp_path: Path) -> None:
    writer, wal_dir, snap_dir, lsn = _populate(tmp_path)
    writer.crash = CrashPoints("reset_after_boundary")
    Path(snap_dir, "snap-0000000000000004.bsnap").write_bytes(b"x")
    before = segment_files(wal_dir)
    status = in_child(lambda: writer.reset(lsn, wf.encode_reset_record(lsn, 0, 2)))
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert segment_files(wal_dir) == sorted(set(before) | {wf.segment_name(lsn)})
    assert len(before) > 2
    assert os.listdir(snap_dir) == ["snap-0000000000000004.bsnap"]
    boundary = read(os.path.join(wal_dir, wf.segment_name(lsn)))
    assert _records(boundary)[0].type == wf.RECORD_RESET


# -- reclamation -------------------------------------------------------------------------------


def test_reclaim_deletes_only_segments_covered_by_oldest_snapshot(tmp_path: Path) -> None:
    wal_dir, snap_dir = dirs(tmp_path)
    log = RecordingLog()
    writer = WalWriter(wal_dir, snap_dir, segment_bytes=32 + len(event(1)) * 5, log=log)
    writer.start(1)
    for lsn in range(1, 21):
        writer.write_and_sync(event(lsn))
        writer.maybe_rotate(lsn + 1)
    assert segment_files(wal_dir) == [wf.segment_name(b) for b in (1, 6, 11, 16, 21)]
    assert writer.reclaim(4) == 0  # seg-1 still holds record 5
    assert writer.reclaim(10) == 2  # seg-1 (1-5) and seg-6 (6-10) are covered
    assert segment_files(wal_dir) == [wf.segment_name(b) for b in (11, 16, 21)]
    assert ("INFO", "wal.segments_reclaimed", {"count": 2, "up_to_lsn": 10}) in log.lines
    assert writer.reclaim(1000) == 2  # never the active segment
    assert segment_files(wal_dir) == [wf.segment_name(21)]
    assert writer.reclaim(1000) == 0
    writer.close()


# -- crash points ------------------------------------------------------------------------------


def test_crash_points_parsing() -> None:
    assert CrashPoints(None).point is None
    cp = CrashPoints("wal_after_fsync:3")
    assert (cp.point, cp.n) == ("wal_after_fsync", 3)
    assert CrashPoints("recovery_mid_replay").n == 1
    assert len(POINTS) == 8
    for bad in ("nope", "wal_after_write:0", "wal_after_write:x", "wal_after_write:-1"):
        with pytest.raises(ValueError):
            CrashPoints(bad)


def test_crash_points_due_counts_only_its_point() -> None:
    cp = CrashPoints("snapshot_before_rename:2")
    assert not cp.due("wal_after_write")
    assert not cp.due("snapshot_before_rename")
    assert cp.due("snapshot_before_rename")
    assert not cp.due("snapshot_before_rename")  # only the n-th arrival
    inert = CrashPoints(None)
    inert.hit("wal_after_write")
    assert not inert.due("wal_after_write")


def test_crash_point_kills_on_nth_hit(tmp_path: Path) -> None:
    marker = tmp_path / "hits"

    def child() -> None:
        cp = CrashPoints("wal_after_apply:3")
        for i in range(5):
            cp.hit("wal_after_apply")
            marker.write_text(str(i + 1))

    status = in_child(child)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert marker.read_text() == "2"


def test_wal_after_write_crash_leaves_written_batch(tmp_path: Path) -> None:
    wal_dir, snap_dir = dirs(tmp_path)
    writer = WalWriter(wal_dir, snap_dir, crash_points=CrashPoints("wal_after_write:2"))
    writer.start(1)
    status = in_child(lambda: [writer.write_and_sync(event(n)) for n in (1, 2, 3)])
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert [r.lsn for r in _records(read(writer.active_path))] == [1, 2]


def test_rotation_after_create_crash_leaves_unsynced_new_segment(tmp_path: Path) -> None:
    wal_dir, snap_dir = dirs(tmp_path)
    writer = WalWriter(wal_dir, snap_dir, segment_bytes=40,
                       crash_points=CrashPoints("rotation_after_create"))
    writer.start(1)
    writer.write_and_sync(event(1))
    status = in_child(lambda: writer.maybe_rotate(2))
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert segment_files(wal_dir) == [wf.segment_name(1), wf.segment_name(2)]
    assert wf.decode_segment_header(read(os.path.join(wal_dir, wf.segment_name(2)))).base_lsn == 2


def test_events_after_an_lsn_reads_only_the_segments_that_may_hold_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A backfill's second read of the tail (the pushes accepted while it compared) starts
    from the segment holding the LSN after the last one applied; a reclaimed segment
    that held some of them is refused."""
    from beava.durability.wal_scan import SegmentReader
    from beava.durability.wal_tail import WalTailLost, events_after

    writer, wal_dir, snap_dir, lsn = _populate(tmp_path)
    segments = list_segments(wal_dir)
    assert len(segments) > 3
    every = [r for r in events_after(wal_dir, snap_dir, {"txn"}, 0, lsn - 1) if r is not None]
    assert [r.lsn for r in every] == list(range(1, lsn))
    after = segments[2][0] + 1  # within the third segment
    read: list[str] = []
    real = SegmentReader.__init__

    def spy(self: SegmentReader, path: str) -> None:
        read.append(os.path.basename(path))
        real(self, path)

    monkeypatch.setattr(SegmentReader, "__init__", spy)
    later = [r for r in events_after(wal_dir, snap_dir, {"txn"}, 0, lsn - 1, after_lsn=after)
             if r is not None]
    assert [r.lsn for r in later] == list(range(after + 1, lsn))
    assert read == [name for _, name in segments[2:]]
    for _, name in segments[:3]:
        os.unlink(os.path.join(wal_dir, name))
    with pytest.raises(WalTailLost):
        list(events_after(wal_dir, snap_dir, {"txn"}, 0, lsn - 1, after_lsn=after))
    writer.close()


def test_a_segment_reclaimed_while_the_tail_read_pauses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first read of a backfill's tail pauses every SCAN_STEP records; a segment
    deleted meanwhile is a reclaimed one: refused when it may have held records after
    until_ms (with no snapshot to bound them, it may)."""
    from beava.durability import wal_tail
    from beava.durability.wal_tail import WalTailLost, events_after

    writer, wal_dir, snap_dir, lsn = _populate(tmp_path)
    segments = list_segments(wal_dir)
    monkeypatch.setattr(wal_tail, "SCAN_STEP", 1)
    tail = events_after(wal_dir, snap_dir, {"txn"}, 0, lsn - 1)
    first = [next(tail), next(tail)]  # the first segment's first record, then a pause
    assert first[0] is not None and first[0].lsn == 1 and first[1] is None
    for _, name in segments[:2]:
        os.unlink(os.path.join(wal_dir, name))
    with pytest.raises(WalTailLost) as info:
        list(tail)
    assert info.value.first_lsn == segments[2][0]
    writer.close()


def test_the_tail_read_skips_a_table_state_record_unread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A backfill installs its tables one after another, each reading the WAL tail: the
    table state records of the installs before it (a table's whole state each) are passed
    by their fixed fields, their bodies not read, while every push is still read and
    CRC-checked (a damaged one is refused)."""
    from beava.durability.wal_scan import SegmentReader
    from beava.durability.wal_tail import events_after

    wal_dir, snap_dir = dirs(tmp_path)
    writer = WalWriter(wal_dir, snap_dir)
    writer.start(1)
    state = bytes(8 << 20)  # a table's state of 8 MiB
    writer.write_and_sync(event(1))
    writer.write_registry_record(wf.encode_record(2, wf.RECORD_TABLE_STATE, wf.BODY_MSGPACK,
                                                  1002, 1, b"ByUser", state))
    writer.write_and_sync(event(3) + event(4))
    read: list[int] = []
    real = SegmentReader.read

    def counted(self: SegmentReader, offset: int, size: int) -> bytes:
        data = real(self, offset, size)
        read.append(len(data))
        return data

    monkeypatch.setattr(SegmentReader, "read", counted)
    tail = [r for r in events_after(wal_dir, snap_dir, {"txn"}, 1001, 4) if r is not None]
    assert [(r.lsn, r.name) for r in tail] == [(3, "txn"), (4, "txn")]
    assert sum(read) < len(state)  # the reader's window of 4 MiB at most
    writer.close()
    segment = os.path.join(wal_dir, segment_files(wal_dir)[0])
    with open(segment, "r+b") as f:  # the last push's last byte
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 1]))
    with pytest.raises(wf.FormatError):
        list(events_after(wal_dir, snap_dir, {"txn"}, 1001, 4))
