"""Recovery over real WAL and snapshot directories (spec/durability.md §9, §11, §15)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from beava.durability import wal_format as wf
from beava.durability.crash_points import CrashPoints
from beava.durability.recovery import (
    RecoveryFatal,
    RecoveryResult,
    Unapplicable,
    filesystem_type,
    is_network_fstype,
    recover,
)
from beava.durability.snapshots import (
    LoadedSnapshot,
    SnapshotInvalid,
    encode_snapshot_body,
    read_snapshot,
    write_snapshot_file,
)
from beava.durability.wal import WalWriter, list_segments
from beava.engine.store import FeatureStore
from tests.unit.test_snapshots import EVERY_OP_NODES, T0, Clock, all_rows, push_row
from tests.unit.test_wal import RecordingLog, in_child


def event(lsn: int, ts: int | None = None, version: int = 1) -> bytes:
    return wf.encode_record(lsn, wf.RECORD_EVENT, wf.BODY_JSON,
                            ts if ts is not None else 1000 + lsn, version, b"txn",
                            b'{"user":"u%d","amount":%d}' % (lsn % 3, lsn))


def registry(lsn: int, version: int) -> bytes:
    return wf.encode_record(lsn, wf.RECORD_REGISTRY, wf.BODY_JSON, 1000 + lsn, version, b"",
                            b'{"new_version":%d}' % version)


class Replayer:
    """Stands in for the server state: records what recovery hands it."""

    def __init__(self, reject: dict[int, str] | None = None,
                 reject_snapshots: set[int] | None = None) -> None:
        self.applied: list[wf.Record] = []
        self.snapshots: list[int] = []
        self.reject = reject or {}
        self.reject_snapshots = reject_snapshots or set()

    def load_snapshot(self, snapshot: LoadedSnapshot) -> None:
        lsn = snapshot.header.snapshot_lsn
        if lsn in self.reject_snapshots:
            raise SnapshotInvalid("state cannot be installed")
        self.snapshots.append(lsn)

    def apply(self, record: wf.Record) -> None:
        if record.lsn in self.reject:
            raise Unapplicable(self.reject[record.lsn])
        self.applied.append(record)

    @property
    def lsns(self) -> list[int]:
        return [r.lsn for r in self.applied]


class Dirs:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.wal = root / "wal"
        self.snaps = root / "snaps"
        self.wal.mkdir(parents=True, exist_ok=True)
        self.snaps.mkdir(parents=True, exist_ok=True)

    def writer(self, segment_bytes: int = 1 << 20, **kw) -> WalWriter:
        return WalWriter(str(self.wal), str(self.snaps), segment_bytes=segment_bytes, **kw)

    def recover(self, replayer: Replayer | None = None, log: RecordingLog | None = None,
                **kw) -> tuple[RecoveryResult, Replayer, RecordingLog]:
        replayer = replayer or Replayer()
        log = log or RecordingLog()
        kw.setdefault("mounts_path", str(self.root / "no-mounts"))
        result = recover(str(self.wal), str(self.snaps), load_snapshot=replayer.load_snapshot,
                         apply=replayer.apply, log=log, **kw)
        return result, replayer, log

    def segments(self) -> list[int]:
        return [base for base, _ in list_segments(str(self.wal))]

    def seg(self, base: int) -> Path:
        return self.wal / wf.segment_name(base)

    def quarantine(self) -> list[str]:
        q = self.wal / "quarantine"
        return sorted(os.listdir(q)) if q.exists() else []

    def snapshot(self, lsn: int, version: int = 1, watermark: int = 0) -> str:
        body = encode_snapshot_body(lsn, version, [], {"upto": lsn}, [])
        return write_snapshot_file(str(self.snaps), lsn, watermark, version, body).path


def build(dirs: Dirs, last_lsn: int, per_segment: int | None = None) -> WalWriter:
    """Records 1..last_lsn, one batch each; ``per_segment`` records per segment."""
    size = 32 + len(event(1)) * per_segment if per_segment else 1 << 20
    writer = dirs.writer(segment_bytes=size)
    writer.start(1)
    for lsn in range(1, last_lsn + 1):
        writer.write_and_sync(event(lsn))
        writer.maybe_rotate(lsn + 1)
    writer.close()
    return writer


def offsets(path: Path) -> list[int]:
    """Start offset of every record in a segment, plus the end offset."""
    data = path.read_bytes()
    out, offset = [], 32
    while offset < len(data):
        out.append(offset)
        offset += wf.parse_record(data, offset).size
    return out + [offset]


def lines(log: RecordingLog, kind: str) -> list[dict]:
    return [fields for _, k, fields in log.lines if k == kind]


# -- basics ------------------------------------------------------------------------------------


def test_fresh_directories(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    result, replayer, log = dirs.recover()
    assert (result.next_lsn, result.snapshot_lsn, result.records_replayed, result.last_lsn,
            result.registry_version, result.watermark_ms, result.quarantined) == (
        1, 0, 0, 0, 0, 0, 0)
    assert result.last_record is None and result.snapshot_path is None
    assert replayer.applied == [] and replayer.snapshots == []
    assert log.kinds() == ["recovery.started"]
    assert lines(log, "recovery.started") == [{"wal_dir": str(dirs.wal),
                                               "snapshot_dir": str(dirs.snaps)}]


def test_replays_every_segment_in_order(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    build(dirs, 25, per_segment=5)
    assert dirs.segments() == [1, 6, 11, 16, 21, 26]
    result, replayer, log = dirs.recover()
    assert replayer.lsns == list(range(1, 26))
    assert replayer.applied[4] == wf.parse_record(event(5))
    assert result.next_lsn == 26 and result.last_lsn == 25
    assert result.last_record is not None and result.last_record.lsn == 25
    assert result.watermark_ms == 1025 and result.registry_version == 0
    assert result.segments_read == 6 and result.quarantined == 0
    # The empty newest segment (created by the last rotation) is gone, so step 8 can reuse it.
    assert dirs.segments() == [1, 6, 11, 16, 21]
    writer = dirs.writer()
    writer.start(result.next_lsn)
    writer.write_and_sync(event(26))
    writer.close()
    assert dirs.recover()[1].lsns == list(range(1, 27))
    assert log.kinds() == ["recovery.started"]


def test_registry_and_reset_records_set_version_and_watermark(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    writer = dirs.writer()
    writer.start(1)
    writer.write_registry_record(registry(1, 1))
    writer.write_and_sync(event(2, ts=500) + event(3, ts=700))
    writer.write_registry_record(registry(4, 2))
    writer.close()
    result = dirs.recover()[0]
    assert (result.registry_version, result.watermark_ms) == (2, 700)
    writer = dirs.writer()
    writer.start(result.next_lsn)
    writer.reset(5, wf.encode_reset_record(5, 900, 3))
    writer.close()
    result, replayer, _ = dirs.recover()
    assert replayer.lsns == [5]
    assert (result.registry_version, result.watermark_ms, result.next_lsn) == (3, 0, 6)


# -- torn tail (§9.4) --------------------------------------------------------------------------


def test_torn_tail_at_every_byte_offset_of_last_record(tmp_path: Path) -> None:
    template = Dirs(tmp_path / "template")
    build(template, 4)
    seg = template.seg(1)
    starts = offsets(seg)
    last_start, end = starts[-2], starts[-1]
    data = seg.read_bytes()
    for cut in range(last_start, end):
        dirs = Dirs(tmp_path / f"cut{cut}")
        shutil.rmtree(dirs.root)
        shutil.copytree(template.root, dirs.root)
        with open(dirs.seg(1), "r+b") as f:
            f.truncate(cut)
        result, replayer, log = dirs.recover()
        assert replayer.lsns == [1, 2, 3], cut
        assert result.next_lsn == 4
        assert os.path.getsize(dirs.seg(1)) == last_start
        torn = lines(log, "recovery.wal_tail_truncated")
        if cut == last_start:
            assert torn == [] and dirs.quarantine() == []  # a clean end
            continue
        name = f"seg-0000000000000001-off-{last_start}.bin"
        assert torn == [{"segment": wf.segment_name(1), "offset": last_start,
                         "bytes": cut - last_start,
                         "quarantine_path": str(dirs.wal / "quarantine" / name)}]
        assert (dirs.wal / "quarantine" / name).read_bytes() == data[last_start:cut]
        assert result.quarantined == 0


def test_corrupt_last_record_is_a_torn_tail(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    build(dirs, 4)
    starts = offsets(dirs.seg(1))
    data = bytearray(dirs.seg(1).read_bytes())
    data[starts[-2] + 20] ^= 0xFF
    dirs.seg(1).write_bytes(bytes(data))
    result, replayer, log = dirs.recover()
    assert replayer.lsns == [1, 2, 3]
    assert lines(log, "recovery.wal_tail_truncated")[0]["bytes"] == starts[-1] - starts[-2]


def test_damage_mid_newest_segment_replays_every_intact_record(tmp_path: Path) -> None:
    """Valid records after damage in the newest segment are not a torn tail (§9.4): only the
    damaged bytes are quarantined and every record after them is applied (G11)."""
    dirs = Dirs(tmp_path)
    build(dirs, 6)
    starts = offsets(dirs.seg(1))
    data = bytearray(dirs.seg(1).read_bytes())
    data[starts[2] + 9] ^= 0x01  # record 3
    dirs.seg(1).write_bytes(bytes(data))
    result, replayer, log = dirs.recover()
    assert replayer.lsns == [1, 2, 4, 5, 6]
    assert result.next_lsn == 7
    assert dirs.seg(1).read_bytes() == bytes(data)  # nothing cut off
    assert lines(log, "recovery.wal_tail_truncated") == []
    name = f"seg-0000000000000001-off-{starts[2]}.bin"
    assert lines(log, "recovery.wal_corruption") == [{
        "segment": wf.segment_name(1), "offset": starts[2], "bytes": starts[3] - starts[2],
        "last_good_lsn": 2, "resumed_at_lsn": 4,
        "quarantine_path": str(dirs.wal / "quarantine" / name), "policy": "replay"}]
    assert (dirs.wal / "quarantine" / name).read_bytes() == bytes(data[starts[2]:starts[3]])
    assert result.quarantined == 1


def test_damage_then_torn_tail_in_newest_segment(tmp_path: Path) -> None:
    """Damage with valid records after it, then a torn last record: the damage is skipped,
    the tail after the last valid record is cut."""
    dirs = Dirs(tmp_path)
    build(dirs, 6)
    starts = offsets(dirs.seg(1))
    data = bytearray(dirs.seg(1).read_bytes()[:starts[5] + 9])  # record 6 torn
    data[starts[1] + 30] ^= 0x01  # record 2
    dirs.seg(1).write_bytes(bytes(data))
    result, replayer, log = dirs.recover()
    assert replayer.lsns == [1, 3, 4, 5] and result.next_lsn == 6
    assert [(c["offset"], c["resumed_at_lsn"]) for c in lines(log, "recovery.wal_corruption")
            ] == [(starts[1], 3)]
    assert [(t["offset"], t["bytes"]) for t in lines(log, "recovery.wal_tail_truncated")] == [
        (starts[5], 9)]
    assert dirs.seg(1).read_bytes() == bytes(data[:starts[5]])


def test_point_in_time_stops_at_the_damage(tmp_path: Path) -> None:
    """``point-in-time``: the prefix before the first damage, no hole; the rest of that
    segment is cut off to quarantine and every later segment moved there."""
    dirs = Dirs(tmp_path)
    build(dirs, 12, per_segment=4)  # seg-1: 1-4, seg-5: 5-8, seg-9: 9-12, seg-13 empty
    starts = offsets(dirs.seg(5))
    original = dirs.seg(5).read_bytes()
    data = bytearray(original)
    data[starts[1] + 30] ^= 0x01  # record 6
    dirs.seg(5).write_bytes(bytes(data))
    later = dirs.seg(9).read_bytes()
    result, replayer, log = dirs.recover(on_corruption="point-in-time")
    assert replayer.lsns == [1, 2, 3, 4, 5] and result.next_lsn == 6
    assert dirs.segments() == [1, 5]
    assert dirs.seg(5).read_bytes() == original[:starts[1]]
    (corruption,) = lines(log, "recovery.wal_corruption")
    assert (corruption["offset"], corruption["bytes"], corruption["last_good_lsn"],
            corruption["valid_records_discarded"], corruption["policy"]) == (
        starts[1], len(data) - starts[1], 5, 2, "point-in-time")
    assert dirs.quarantine() == [f"seg-0000000000000005-off-{starts[1]}.bin",
                                 "seg-0000000000000009-off-0.bin",
                                 "seg-000000000000000d-off-0.bin"]
    assert (dirs.wal / "quarantine" / "seg-0000000000000009-off-0.bin").read_bytes() == later
    assert result.quarantined == 1 + 2 + 4
    writer = dirs.writer()
    writer.start(result.next_lsn)  # the history continues right after the prefix
    writer.write_and_sync(event(6))
    writer.close()
    result, replayer, log = dirs.recover(on_corruption="point-in-time")
    assert replayer.lsns == [1, 2, 3, 4, 5, 6] and lines(log, "recovery.wal_corruption") == []


def test_point_in_time_passes_over_damage_the_snapshot_covers(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    build(dirs, 8)
    starts = offsets(dirs.seg(1))
    data = bytearray(dirs.seg(1).read_bytes())
    data[starts[2] + 30] ^= 0x01  # record 3, older than the snapshot
    dirs.seg(1).write_bytes(bytes(data))
    dirs.snapshot(5)
    result, replayer, log = dirs.recover(on_corruption="point-in-time")
    assert replayer.snapshots == [5] and replayer.lsns == [6, 7, 8]
    assert [c["resumed_at_lsn"] for c in lines(log, "recovery.wal_corruption")] == [4]


def test_torn_first_record_empties_and_removes_newest_segment(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    build(dirs, 7, per_segment=3)  # seg-1: 1-3, seg-4: 4-6, seg-7: 7
    with open(dirs.seg(7), "r+b") as f:
        f.truncate(40)
    result, replayer, log = dirs.recover()
    assert replayer.lsns == [1, 2, 3, 4, 5, 6]
    assert result.next_lsn == 7
    assert dirs.segments() == [1, 4]
    assert lines(log, "recovery.wal_tail_truncated")[0]["offset"] == 32
    writer = dirs.writer()
    writer.start(7)  # the name is free again
    writer.close()


# -- sealed-segment damage (§9.5) --------------------------------------------------------------


def test_flipped_byte_in_sealed_segment(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    build(dirs, 12, per_segment=6)  # seg-1: 1-6, seg-7: 7-12, seg-13 empty
    seg = dirs.seg(1)
    original = seg.read_bytes()
    starts = offsets(seg)
    damaged = bytearray(original)
    damaged[starts[3] + 30] ^= 0x10  # inside record 4
    seg.write_bytes(bytes(damaged))
    result, replayer, log = dirs.recover()
    assert replayer.lsns == [1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12]  # gap at 4 allowed
    assert result.quarantined == 1 and result.next_lsn == 13
    name = f"seg-0000000000000001-off-{starts[3]}.bin"
    assert lines(log, "recovery.wal_corruption") == [{
        "segment": wf.segment_name(1), "offset": starts[3], "bytes": starts[4] - starts[3],
        "last_good_lsn": 3, "resumed_at_lsn": 5,
        "quarantine_path": str(dirs.wal / "quarantine" / name), "policy": "replay"}]
    assert [level for level, kind, _ in log.lines if kind == "recovery.wal_corruption"] == [
        "ERROR"]
    assert (dirs.wal / "quarantine" / name).read_bytes() == bytes(damaged[starts[3]:starts[4]])
    assert seg.read_bytes() == bytes(damaged)  # a sealed segment is left unchanged


def test_long_damaged_run_in_sealed_segment(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    build(dirs, 40, per_segment=20)  # seg-1: 1-20, seg-21: 21-40
    seg = dirs.seg(1)
    starts = offsets(seg)
    data = bytearray(seg.read_bytes())
    # Records 3-7 overwritten: zeros, then bytes that look like type/format pairs.
    junk = bytes(100) + b"\x01\x01\x02\x02\x03\x01" * 20
    data[starts[2]:starts[7]] = junk + bytes(starts[7] - starts[2] - len(junk))
    seg.write_bytes(bytes(data))
    result, replayer, log = dirs.recover()
    assert replayer.lsns == [1, 2] + list(range(8, 41))
    corruption = lines(log, "recovery.wal_corruption")
    assert [(c["offset"], c["bytes"], c["resumed_at_lsn"]) for c in corruption] == [
        (starts[2], starts[7] - starts[2], 8)]


def test_resync_needs_a_higher_lsn(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    writer = dirs.writer()
    writer.start(1)
    writer.write_and_sync(event(1) + event(2) + event(3) + event(2) + event(4))
    writer.maybe_rotate(5)
    writer.close()
    data = bytearray(dirs.seg(1).read_bytes())
    starts = offsets(dirs.seg(1))
    data[starts[2] + 12] ^= 0x01  # damage record 3; the stale copy of 2 must be skipped too
    dirs.seg(1).write_bytes(bytes(data))
    writer = dirs.writer()
    writer.start(5)
    writer.write_and_sync(event(5))
    writer.close()
    result, replayer, log = dirs.recover()
    assert replayer.lsns == [1, 2, 4, 5]
    corruption = lines(log, "recovery.wal_corruption")
    assert [(c["offset"], c["bytes"], c["resumed_at_lsn"]) for c in corruption] == [
        (starts[2], starts[4] - starts[2], 4)]


def test_damage_to_end_of_sealed_segment_allows_gap(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    build(dirs, 12, per_segment=6)
    seg = dirs.seg(1)
    starts = offsets(seg)
    with open(seg, "r+b") as f:
        f.truncate(starts[4] + 10)  # record 5 cut short, record 6 missing
    result, replayer, log = dirs.recover()
    assert replayer.lsns == [1, 2, 3, 4, 7, 8, 9, 10, 11, 12]
    corruption = lines(log, "recovery.wal_corruption")
    assert len(corruption) == 1
    assert corruption[0]["offset"] == starts[4] and corruption[0]["bytes"] == 10
    assert corruption[0]["resumed_at_lsn"] == 7
    assert result.quarantined == 1


def test_invalid_header_on_sealed_segment_hides_no_record(tmp_path: Path) -> None:
    """A damaged header: the base LSN comes from the file name, the header's bytes are
    quarantined and the segment's records replayed (§9.1 step 2)."""
    dirs = Dirs(tmp_path)
    build(dirs, 12, per_segment=4)  # seg-1, seg-5, seg-9, seg-13
    data = bytearray(dirs.seg(5).read_bytes())
    data[3] ^= 0xFF
    dirs.seg(5).write_bytes(bytes(data))
    result, replayer, log = dirs.recover()
    assert replayer.lsns == list(range(1, 13))
    assert result.quarantined == 1
    corruption = lines(log, "recovery.wal_corruption")
    assert [(c["segment"], c["offset"], c["bytes"], c["resumed_at_lsn"]) for c in corruption] == [
        (wf.segment_name(5), 0, 32, 5)]
    assert (dirs.wal / "quarantine" / "seg-0000000000000005-off-0.bin").read_bytes() == data[:32]
    assert dirs.seg(5).read_bytes() == bytes(data)


def test_header_base_must_match_name(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    build(dirs, 8, per_segment=4)  # seg-1, seg-5, seg-9
    data = dirs.seg(5).read_bytes()
    dirs.seg(5).write_bytes(wf.encode_segment_header(6, 0, 0) + data[32:])
    result, replayer, log = dirs.recover()
    assert replayer.lsns == list(range(1, 9))
    (corruption,) = lines(log, "recovery.wal_corruption")
    assert (corruption["segment"], corruption["offset"], corruption["bytes"]) == (
        wf.segment_name(5), 0, 32)


def test_invalid_newest_header_is_moved_to_quarantine(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    build(dirs, 4)
    dirs.seg(5).write_bytes(wf.encode_segment_header(5, 0, 0)[:20])  # creation interrupted
    result, replayer, log = dirs.recover()
    assert replayer.lsns == [1, 2, 3, 4]
    assert result.next_lsn == 5
    assert dirs.segments() == [1]
    assert dirs.quarantine() == ["seg-0000000000000005-off-0.bin"]
    assert lines(log, "recovery.wal_tail_truncated") == [{
        "segment": wf.segment_name(5), "offset": 0, "bytes": 20,
        "quarantine_path": str(dirs.wal / "quarantine" / "seg-0000000000000005-off-0.bin")}]


def test_unapplicable_record_is_quarantined(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    build(dirs, 5)
    result, replayer, log = dirs.recover(Replayer(reject={3: "unknown event 'txn'"}))
    assert replayer.lsns == [1, 2, 4, 5]
    assert result.quarantined == 1 and result.next_lsn == 6
    assert (dirs.wal / "quarantine" / "lsn-0000000000000003.rec").read_bytes() == event(3)
    assert lines(log, "recovery.wal_record_quarantined") == [{
        "lsn": 3, "reason": "unknown event 'txn'",
        "quarantine_path": str(dirs.wal / "quarantine" / "lsn-0000000000000003.rec")}]


def test_non_increasing_lsn_and_bad_name_are_quarantined(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    writer = dirs.writer()
    writer.start(1)
    bad_name = wf.encode_record(4, wf.RECORD_EVENT, wf.BODY_JSON, 0, 1, b"\xff", b"{}")
    writer.write_and_sync(event(1) + event(2) + event(2) + event(1) + event(3) + bad_name
                          + event(5))
    writer.close()
    result, replayer, log = dirs.recover()
    assert replayer.lsns == [1, 2, 3, 5]
    assert [(q["lsn"], q["reason"]) for q in lines(log, "recovery.wal_record_quarantined")] == [
        (2, "LSN 2 is not greater than 2"), (1, "LSN 1 is not greater than 2"),
        (4, "event name is not valid UTF-8")]
    assert result.quarantined == 3


# -- history boundary (§9.1 step 3, §11) -------------------------------------------------------


def test_history_boundary_after_completed_reset(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    writer = build(dirs, 10, per_segment=4)
    dirs.snapshot(8)
    writer = dirs.writer()
    writer.start(11)
    writer.reset(11, wf.encode_reset_record(11, 0, 5))
    writer.write_and_sync(event(12, version=5))
    writer.close()
    result, replayer, _ = dirs.recover()
    assert replayer.lsns == [11, 12] and replayer.snapshots == []
    assert (result.next_lsn, result.registry_version) == (13, 5)


def test_crash_between_boundary_and_deletion_is_completed(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    build(dirs, 10, per_segment=4)  # seg-1, seg-5, seg-9 (9-10)
    old_snapshot = dirs.snapshot(8)
    writer = dirs.writer(crash_points=CrashPoints("reset_after_boundary"))
    writer.start(11)
    status = in_child(lambda: writer.reset(11, wf.encode_reset_record(11, 0, 4)))
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert dirs.segments() == [1, 5, 9, 11] and os.path.exists(old_snapshot)
    later = dirs.snapshot(11, version=4)  # a snapshot at/after the boundary stays valid
    result, replayer, _ = dirs.recover()
    assert dirs.segments() == [11]
    assert os.listdir(dirs.snaps) == [os.path.basename(later)]
    assert replayer.snapshots == [11] and replayer.lsns == []
    assert (result.next_lsn, result.registry_version, result.snapshot_lsn) == (12, 4, 11)


def test_boundary_without_durable_reset_record_is_not_a_boundary(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    build(dirs, 6)  # seg-1 (1-6)
    torn_reset = wf.encode_reset_record(7, 0, 2)[:-3]
    dirs.seg(7).write_bytes(wf.encode_segment_header(7, 1, 0) + torn_reset)
    result, replayer, log = dirs.recover()
    assert replayer.lsns == [1, 2, 3, 4, 5, 6]  # history kept
    assert result.next_lsn == 7 and dirs.segments() == [1]
    assert lines(log, "recovery.wal_tail_truncated")[0]["bytes"] == len(torn_reset)


# -- snapshots (§9.1 step 4-5) -----------------------------------------------------------------


def test_snapshot_plus_tail(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    writer = build(dirs, 30, per_segment=8)
    path = dirs.snapshot(20, version=1, watermark=4242)
    writer.reclaim(20)  # seg-1, seg-9 deleted; seg-17 (17-24) keeps 21-24
    assert dirs.segments() == [17, 25]
    result, replayer, log = dirs.recover()
    assert replayer.snapshots == [20]
    assert replayer.lsns == list(range(21, 31))
    assert (result.snapshot_lsn, result.snapshot_path, result.records_replayed,
            result.next_lsn, result.last_lsn, result.watermark_ms) == (
        20, path, 10, 31, 30, 1030)
    assert lines(log, "recovery.snapshot_loaded") == [
        {"path": path, "snapshot_lsn": 20, "registry_version": 1}]


def test_snapshot_without_tail_keeps_its_watermark_and_version(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    build(dirs, 20, per_segment=5)
    dirs.snapshot(20, version=6, watermark=4242)
    result, replayer, _ = dirs.recover()
    assert replayer.lsns == []
    assert (result.next_lsn, result.watermark_ms, result.registry_version, result.last_lsn) == (
        21, 4242, 6, 20)


def test_invalid_newest_snapshot_falls_back_to_older(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    build(dirs, 30, per_segment=8)
    dirs.snapshot(10)
    newest = dirs.snapshot(20)
    data = bytearray(Path(newest).read_bytes())
    data[-1] ^= 0xFF
    Path(newest).write_bytes(bytes(data))
    result, replayer, log = dirs.recover()
    assert replayer.snapshots == [10]
    assert replayer.lsns == list(range(11, 31))
    assert lines(log, "recovery.snapshot_invalid") == [
        {"path": newest, "reason": "body CRC mismatch"}]
    assert os.path.exists(newest)  # left in place


def test_snapshot_rejected_by_loader_falls_back(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    build(dirs, 30)
    dirs.snapshot(10)
    newest = dirs.snapshot(20)
    result, replayer, log = dirs.recover(Replayer(reject_snapshots={20}))
    assert replayer.snapshots == [10] and replayer.lsns == list(range(11, 31))
    assert lines(log, "recovery.snapshot_invalid") == [
        {"path": newest, "reason": "state cannot be installed"}]


# -- snapshots of a real store that do not load ----------------------------------------------------


def pickle_payload(marker: Path) -> bytes:
    """A protocol-0 pickle that creates ``marker`` when unpickled: ``open(marker, "w")``
    (hand-assembled: GLOBAL builtins.open, MARK, two strings, TUPLE, REDUCE, STOP)."""
    return b"cbuiltins\nopen\n(V" + str(marker).encode("raw_unicode_escape") + b"\nVw\ntR."


def test_pickle_payload_is_live(tmp_path: Path) -> None:
    """The payload the tests below plant really runs code when unpickled: a throwaway
    interpreter (never the server) unpickles it and the marker appears."""
    probe = tmp_path / "probe"
    subprocess.run([sys.executable, "-c",
                    "import pickle, sys; pickle.loads(sys.stdin.buffer.read())"],
                   input=pickle_payload(probe), check=True, timeout=30)
    assert probe.exists()


class _RegistryCapture:
    """The WAL as FeatureStore.register sees it: keeps the REGISTRY record."""

    def __init__(self) -> None:
        self.records: list[bytes] = []

    def write_registry_record(self, record: bytes) -> None:
        self.records.append(record)


def store_history(dirs: Dirs, pushes: int, snapshot_at: tuple[int, ...]
                  ) -> tuple[FeatureStore, dict[int, str]]:
    """A live store fed ``pushes`` events (REGISTRY at LSN 1, EVENT j at LSN j + 2), the WAL
    it writes, and its snapshots taken when ``applied_lsn`` is in ``snapshot_at``."""
    capture = _RegistryCapture()
    clock = Clock()
    live = FeatureStore(clock=clock, wal=capture)
    status, body = live.register(msgspec.json.encode({"nodes": EVERY_OP_NODES}))
    assert status == 200, body
    writer = dirs.writer()
    writer.start(1)
    writer.write_and_sync(capture.records[0])
    paths = {}
    for j in range(pushes):
        clock.now = T0 + j * 1_500
        row = push_row(j)
        live.push("Ev", row)
        writer.write_and_sync(wf.encode_record(live.applied_lsn, wf.RECORD_EVENT,
                                               wf.BODY_MSGPACK, clock.now, 1, b"Ev",
                                               msgspec.msgpack.encode(row)))
        if live.applied_lsn in snapshot_at:
            paths[live.applied_lsn] = write_snapshot_file(
                str(dirs.snaps), live.applied_lsn, live.watermark_ms, live.registry_version,
                live.snapshot_body()).path
    writer.close()
    return live, paths


def rewrite_snapshot(path: str, mutate) -> None:
    """Replace a snapshot by one whose body is ``mutate(decoded body)``, with valid CRCs."""
    loaded = read_snapshot(path)
    body = mutate(dict(loaded.body))
    os.unlink(path)
    header = loaded.header
    write_snapshot_file(os.path.dirname(path), header.snapshot_lsn, header.watermark_ms,
                        header.registry_version, msgspec.msgpack.encode(body))


def recover_store(dirs: Dirs) -> tuple[RecoveryResult, FeatureStore, RecordingLog]:
    store = FeatureStore(clock=Clock())
    log = RecordingLog()
    result = recover(str(dirs.wal), str(dirs.snaps), load_snapshot=store.load_snapshot,
                     apply=store.replay, log=log, mounts_path=str(dirs.root / "no-mounts"))
    store.intake.restore(result.next_lsn - 1, result.watermark_ms)
    return result, store, log


def _pickled_state(marker: Path, state_format: int):
    def mutate(body: dict) -> dict:
        return {**body, "state_format": state_format, "state": pickle_payload(marker)}
    return mutate


def _cut_column(body: dict) -> dict:
    columns = body["state"]["tables"]["L"]["columns"]
    columns["streak"] = columns["streak"][:-8]
    return body


def _ints_for_keys(body: dict) -> dict:
    table = body["state"]["tables"]["W"]
    table["keys"] = list(range(len(table["keys"])))
    return body


@pytest.mark.parametrize("damage, reason", [
    ("pickle, old state_format", "unsupported state_format 1"),
    ("pickle, current state_format", "state does not load: ValueError: snapshot state is not"),
    ("column cut short", "state does not load: ValueError: snapshot buffer"),
    ("int entity keys", "state does not load: ValueError: snapshot entity key 0"),
])
def test_store_snapshot_that_does_not_load_falls_back(tmp_path: Path, damage: str,
                                                     reason: str) -> None:
    """The newest snapshot is rejected with a WARN line (never unpickled, never half
    installed), the older one is loaded and the WAL tail replayed: the state is the live
    one. Without the older snapshot, the whole WAL is replayed."""
    marker = tmp_path / "unpickled"
    mutate = {"pickle, old state_format": _pickled_state(marker, 1),
              "pickle, current state_format": _pickled_state(marker, 2),
              "column cut short": _cut_column, "int entity keys": _ints_for_keys}[damage]
    dirs = Dirs(tmp_path / "data")
    live, paths = store_history(dirs, 300, snapshot_at=(101, 201))
    rewrite_snapshot(paths[201], mutate)
    result, store, log = recover_store(dirs)
    invalid = lines(log, "recovery.snapshot_invalid")
    assert [line["path"] for line in invalid] == [paths[201]]
    assert invalid[0]["reason"].startswith(reason), invalid
    assert lines(log, "recovery.snapshot_loaded")[0]["snapshot_lsn"] == 101
    assert (result.snapshot_lsn, result.records_replayed, result.next_lsn) == (101, 200, 302)
    assert all_rows(store, live.watermark_ms) == all_rows(live, live.watermark_ms)
    os.unlink(paths[101])
    result, store, log = recover_store(dirs)
    assert len(lines(log, "recovery.snapshot_invalid")) == 1
    assert (result.snapshot_lsn, result.records_replayed) == (0, 301)
    assert all_rows(store, live.watermark_ms) == all_rows(live, live.watermark_ms)
    assert not marker.exists()


# -- continuity (§9.1 step 5) ------------------------------------------------------------------


def test_missing_history_without_snapshot_is_fatal(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    build(dirs, 12, per_segment=4)
    os.unlink(dirs.seg(1))
    with pytest.raises(RecoveryFatal, match=r"^recovery: WAL gap after LSN 0$"):
        dirs.recover()


def test_gap_after_snapshot_is_fatal(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    build(dirs, 12, per_segment=4)  # seg-1, seg-5, seg-9
    dirs.snapshot(3)
    os.unlink(dirs.seg(1))
    with pytest.raises(RecoveryFatal, match=r"WAL gap after LSN 3$"):
        dirs.recover()


def test_gap_between_sealed_segments_is_fatal(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    build(dirs, 12, per_segment=4)
    os.unlink(dirs.seg(5))
    replayer = Replayer()
    with pytest.raises(RecoveryFatal, match=r"WAL gap after LSN 4$"):
        dirs.recover(replayer)
    assert replayer.lsns == [1, 2, 3, 4]


def test_only_invalid_snapshots_and_no_wal_is_fatal(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    path = dirs.snapshot(10)
    Path(path).write_bytes(b"garbage")
    with pytest.raises(RecoveryFatal, match="WAL gap after LSN 0"):
        dirs.recover()


def test_unreadable_directory_is_fatal(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    shutil.rmtree(dirs.wal)
    with pytest.raises(RecoveryFatal, match="data directory I/O error"):
        dirs.recover()


# -- directory hygiene -------------------------------------------------------------------------


def test_stale_temps_deleted_and_foreign_files_reported(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    build(dirs, 2)
    (dirs.snaps / "snap-0000000000000002.bsnap.tmp").write_bytes(b"partial")
    (dirs.wal / "LOCK").write_bytes(b"")
    (dirs.wal / "notes.txt").write_bytes(b"x")
    (dirs.wal / "SEG-0000000000000001.bwal").write_bytes(b"x")
    (dirs.snaps / "snap-1.bsnap").write_bytes(b"x")
    (dirs.wal / "quarantine").mkdir()
    result, replayer, log = dirs.recover()
    assert replayer.lsns == [1, 2]
    assert os.listdir(dirs.snaps) == ["snap-1.bsnap"]
    assert [f["path"] for f in lines(log, "recovery.foreign_file_ignored")] == [
        str(dirs.wal / "SEG-0000000000000001.bwal"), str(dirs.wal / "notes.txt"),
        str(dirs.snaps / "snap-1.bsnap")]
    assert (dirs.wal / "notes.txt").exists()


def test_shared_and_nested_directories_are_not_foreign(tmp_path: Path) -> None:
    wal = tmp_path / "data"
    wal.mkdir()
    log = RecordingLog()
    write_snapshot_file(str(wal), 3, 0, 1, encode_snapshot_body(3, 1, [], {}, []))
    recover(str(wal), str(wal), load_snapshot=lambda s: None, apply=lambda r: None, log=log,
            mounts_path=str(tmp_path / "none"))
    assert lines(log, "recovery.foreign_file_ignored") == []
    wal = tmp_path / "data2"
    nested = wal / "snapshots"
    nested.mkdir(parents=True)
    write_snapshot_file(str(nested), 3, 0, 1, encode_snapshot_body(3, 1, [], {}, []))
    recover(str(wal), str(nested), load_snapshot=lambda s: None, apply=lambda r: None, log=log,
            mounts_path=str(tmp_path / "none"))
    assert lines(log, "recovery.foreign_file_ignored") == []


def test_network_filesystem_warning(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    mounts = tmp_path / "mounts"
    root = str(tmp_path)
    mounts.write_text(f"/dev/sda1 / ext4 rw 0 0\nsshfs#host: {root} fuse.sshfs rw 0 0\n")
    _, _, log = dirs.recover(mounts_path=str(mounts))
    assert lines(log, "recovery.network_filesystem") == [
        {"path": str(dirs.wal), "fstype": "fuse.sshfs"}]
    mounts.write_text(f"/dev/sda1 / ext4 rw 0 0\n/dev/sdb {root}x nfs4 rw 0 0\n")
    _, _, log = dirs.recover(mounts_path=str(mounts))
    assert lines(log, "recovery.network_filesystem") == []


def test_filesystem_type_helpers(tmp_path: Path) -> None:
    spaced = tmp_path / "my dir"
    spaced.mkdir()
    mounts = tmp_path / "mounts"
    escaped = str(spaced).replace(" ", "\\040")
    mounts.write_text(f"rootfs / overlay rw 0 0\nsrv:/x {escaped} nfs rw 0 0\n"
                      f"tmpfs {tmp_path} tmpfs rw 0 0\n")
    assert filesystem_type(str(spaced / "wal"), str(mounts)) == "nfs"
    assert filesystem_type(str(tmp_path / "other"), str(mounts)) == "tmpfs"
    assert filesystem_type("/usr", str(mounts)) == "overlay"
    assert filesystem_type("/usr", str(tmp_path / "missing")) is None
    for fstype in ("nfs", "nfs4", "cifs", "smb3", "smbfs", "fuse", "fuseblk", "fuse.sshfs"):
        assert is_network_fstype(fstype), fstype
    for fstype in ("ext4", "xfs", "overlay", "tmpfs", "btrfs"):
        assert not is_network_fstype(fstype), fstype


# -- crash injection ---------------------------------------------------------------------------


def test_recovery_mid_replay_crash_point(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    build(dirs, 10)
    seen = tmp_path / "applied"

    class Tracing(Replayer):
        def apply(self, record: wf.Record) -> None:
            super().apply(record)
            with open(seen, "a") as f:
                f.write(f"{record.lsn}\n")

    status = in_child(lambda: dirs.recover(Tracing(), crash_points=CrashPoints(
        "recovery_mid_replay:3")))
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert seen.read_text().split() == ["1", "2", "3"]
    # Recovery is repeatable after a crash during recovery.
    assert dirs.recover()[1].lsns == list(range(1, 11))


def test_restart_after_wal_after_write_crash(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    writer = dirs.writer(crash_points=CrashPoints("wal_after_write:2"))
    writer.start(1)
    status = in_child(lambda: [writer.write_and_sync(event(n)) for n in (1, 2, 3)])
    assert os.WIFSIGNALED(status)
    result, replayer, _ = dirs.recover()
    assert replayer.lsns == [1, 2] and result.next_lsn == 3


def test_restart_after_rotation_after_create_crash(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    writer = dirs.writer(segment_bytes=40, crash_points=CrashPoints("rotation_after_create"))
    writer.start(1)
    writer.write_and_sync(event(1))
    status = in_child(lambda: writer.maybe_rotate(2))
    assert os.WIFSIGNALED(status)
    assert dirs.segments() == [1, 2]
    result, replayer, _ = dirs.recover()
    assert replayer.lsns == [1] and result.next_lsn == 2
    writer = dirs.writer()
    writer.start(result.next_lsn)
    writer.write_and_sync(event(2))
    writer.close()
    assert dirs.recover()[1].lsns == [1, 2]
