"""Damage in the newest WAL segment: torn tail vs corruption (valid records after the
damage), the ``refuse`` policy of recovery, and ``beava wal check|repair``."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from beava.cli_wal import main as wal_main
from beava.durability import wal_format as wf
from beava.durability.recovery import RecoveryFatal, WalCorruption
from beava.durability.wal import lock_wal_dir
from beava.durability.wal_check import (
    CHECK_CLEAN,
    CHECK_CORRUPTION,
    CHECK_TORN_TAIL,
    CORRUPTION,
    TORN_TAIL,
    check,
)
from beava.durability.wal_scan import RecordAt, SegmentReader, walk
from tests.unit.test_recovery import Dirs, build, event, lines, offsets


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes (directories as empty markers)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            out[os.path.relpath(os.path.join(dirpath, name), root) + "/"] = b""
        for name in filenames:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = f.read()
    return out


def damage(path: Path, offset: int) -> bytes:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))
    return bytes(data)


def wal(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    code = wal_main(argv, out)
    return code, out.getvalue()


# -- the scan ----------------------------------------------------------------------------------


def test_resync_and_walk_skip_damage_to_higher_lsns(tmp_path: Path) -> None:
    records = [event(lsn) for lsn in range(1, 9)]
    data = bytearray(wf.encode_segment_header(1, 0, 0) + b"".join(records))
    starts = [32 + sum(len(r) for r in records[:i]) for i in range(len(records))]
    data[starts[2] + 20] ^= 1  # record 3
    data[starts[5] + 20] ^= 1  # record 6
    path = tmp_path / wf.segment_name(1)
    path.write_bytes(bytes(data))
    with SegmentReader(str(path)) as reader:
        assert reader.resync(starts[2] + 1, 2) == starts[3]
        assert reader.resync(starts[2] + 1, 8) == len(data)  # only higher LSNs count
        steps = list(walk(reader, True, 0))
    assert [s.lsn if isinstance(s, RecordAt) else (s.offset, s.resume, s.last_good)
            for s in steps] == [1, 2, (starts[2], starts[3], 2), 4, 5,
                                (starts[5], starts[6], 5), 7, 8]


# -- recovery policies -------------------------------------------------------------------------


def test_refuse_policy_raises_and_changes_nothing(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    build(dirs, 12, per_segment=6)  # seg-1: 1-6, seg-7: 7-12, seg-13 empty
    dirs.seg(13).unlink()
    seg = dirs.seg(7)
    starts = offsets(seg)
    damage(seg, starts[1] + 25)  # record 8
    (dirs.snaps / "snap-0000000000000003.bsnap.tmp").write_bytes(b"partial")
    before = tree(dirs.root)
    with pytest.raises(WalCorruption) as caught:
        dirs.recover(on_corruption="refuse")
    message = str(caught.value)
    assert f"{wf.segment_name(7)} at offset {starts[1]}: {starts[2] - starts[1]} damaged " \
        "bytes after LSN 7; 4 valid records (LSN 9-12) follow the damage" in message
    assert f"beava wal repair {dirs.root}" in message and "\n" not in message
    assert tree(dirs.root) == before  # not even the snapshot temp file was deleted
    # The default policy starts and applies every intact record.
    result, replayer, log = dirs.recover()
    assert replayer.lsns == [1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12]
    (corruption,) = lines(log, "recovery.wal_corruption")
    assert (corruption["offset"], corruption["last_good_lsn"], corruption["resumed_at_lsn"]) \
        == (starts[1], 7, 9)
    assert result.quarantined == 1


def test_refuse_policy_covers_sealed_segments(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    build(dirs, 12, per_segment=6)
    starts = offsets(dirs.seg(1))
    damage(dirs.seg(1), starts[2] + 25)  # record 3
    before = tree(dirs.root)
    with pytest.raises(WalCorruption, match=f"{wf.segment_name(1)} at offset {starts[2]}"):
        dirs.recover(on_corruption="refuse")
    assert tree(dirs.root) == before


def test_refuse_policy_still_truncates_a_torn_tail(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    build(dirs, 4)
    starts = offsets(dirs.seg(1))
    with open(dirs.seg(1), "r+b") as f:
        f.truncate(starts[3] + 5)
    result, replayer, log = dirs.recover(on_corruption="refuse")
    assert replayer.lsns == [1, 2, 3]
    assert lines(log, "recovery.wal_tail_truncated")[0]["offset"] == starts[3]
    assert lines(log, "recovery.wal_corruption") == [] and result.quarantined == 0


def test_damaged_newest_header_with_records_after_it(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    build(dirs, 8, per_segment=4)  # seg-1: 1-4, seg-5: 5-8, seg-9 empty
    dirs.seg(9).unlink()
    damaged = damage(dirs.seg(5), 3)  # the magic
    before = tree(dirs.root)
    with pytest.raises(WalCorruption, match="offset 0: 32 damaged bytes after LSN 4; 4 valid"):
        dirs.recover(on_corruption="refuse")
    assert tree(dirs.root) == before
    result, replayer, log = dirs.recover()
    assert replayer.lsns == list(range(1, 9)) and result.next_lsn == 9
    assert lines(log, "recovery.wal_tail_truncated") == []
    (corruption,) = lines(log, "recovery.wal_corruption")
    assert (corruption["offset"], corruption["bytes"], corruption["resumed_at_lsn"]) == (0, 32, 5)
    assert dirs.quarantine() == ["seg-0000000000000005-off-0.bin"]
    assert (dirs.wal / "quarantine" / dirs.quarantine()[0]).read_bytes() == damaged[:32]
    assert result.quarantined == 1
    # at the next start the same bytes are found again; their quarantine copy is kept
    result, replayer, log = dirs.recover()
    assert replayer.lsns == list(range(1, 9)) and dirs.quarantine() == [
        "seg-0000000000000005-off-0.bin"]


def test_unknown_policy_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="policy"):
        Dirs(tmp_path).recover(on_corruption="ignore")


# -- beava wal check / repair ------------------------------------------------------------------


def test_check_reports_each_kind_with_its_exit_code(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path)
    build(dirs, 12, per_segment=6)
    dirs.seg(13).unlink()
    report = check(str(dirs.wal), str(dirs.snaps))
    assert report.exit_code == CHECK_CLEAN and not report.locked
    assert [(s.name, s.records, s.first_lsn, s.last_lsn, s.newest) for s in report.segments] \
        == [(wf.segment_name(1), 6, 1, 6, False), (wf.segment_name(7), 6, 7, 12, True)]
    newest = offsets(dirs.seg(7))
    with open(dirs.seg(7), "r+b") as f:
        f.truncate(newest[5] + 3)
    report = check(str(dirs.wal), str(dirs.snaps))
    assert report.exit_code == CHECK_TORN_TAIL
    assert [(d.kind, d.offset, d.bytes) for d in report.segments[1].damage] == [
        (TORN_TAIL, newest[5], 3)]
    assert report.segments[1].records == 5
    sealed = offsets(dirs.seg(1))
    damage(dirs.seg(1), sealed[2] + 30)
    damage(dirs.seg(7), newest[1] + 30)
    report = check(str(dirs.wal), str(dirs.snaps))
    assert report.exit_code == CHECK_CORRUPTION
    assert [(d.kind, d.offset, d.last_good_lsn, d.resumed_at_lsn)
            for d in report.segments[0].damage] == [(CORRUPTION, sealed[2], 2, 4)]
    assert report.segments[0].records == 5
    assert [(d.kind, d.offset, d.last_good_lsn, d.resumed_at_lsn)
            for d in report.segments[1].damage] == [
        (CORRUPTION, newest[1], 7, 9), (TORN_TAIL, newest[5], 11, None)]
    assert report.segments[1].records == 4  # 7, 9, 10, 11: what recovery applies
    code, text = wal(["check", str(dirs.wal)])
    assert code == CHECK_CORRUPTION
    assert f"CORRUPTION at offset {newest[1]}: {newest[2] - newest[1]} damaged bytes after " \
        "LSN 7; replay resumes at LSN 9" in text
    assert f"{sealed[3] - sealed[2]} damaged bytes after LSN 2; replay resumes at LSN 4" in text


def test_repair_dry_run_then_yes_keeps_every_intact_record(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path / "data")
    dirs.snaps.rename(dirs.root / "snapshots")  # the --data-dir layout
    dirs.snaps = dirs.root / "snapshots"
    build(dirs, 6)
    starts = offsets(dirs.seg(1))
    damaged = damage(dirs.seg(1), starts[2] + 30)
    before = tree(dirs.root)
    code, text = wal(["repair", str(dirs.root)])
    assert code == 0 and tree(dirs.root) == before
    assert f"would rewrite {wf.segment_name(1)} keeping its 5 valid records; 1 damaged " \
        f"range(s), {starts[3] - starts[2]} bytes" in text
    fd = lock_wal_dir(str(dirs.wal))  # a running server (creates LOCK)
    try:
        before = tree(dirs.root)
        code, _ = wal(["repair", str(dirs.root), "--yes"])
        assert code == 3 and tree(dirs.root) == before
        code, text = wal(["check", str(dirs.root)])  # read-only is fine meanwhile
        assert code == CHECK_CORRUPTION and "running server holds the lock" in text
    finally:
        os.close(fd)
    code, text = wal(["repair", str(dirs.root), "--yes"])
    assert code == 0 and "done: rewrite" in text
    assert dirs.seg(1).read_bytes()[32:] == damaged[32:starts[2]] + damaged[starts[3]:]
    assert dirs.quarantine() == [f"seg-0000000000000001-off-{starts[2]}.bin"]
    assert (dirs.wal / "quarantine" / dirs.quarantine()[0]).read_bytes() == \
        damaged[starts[2]:starts[3]]
    assert wal(["check", str(dirs.root)])[0] == CHECK_CLEAN
    result, replayer, log = dirs.recover(on_corruption="refuse")
    assert replayer.lsns == [1, 2, 4, 5, 6]
    assert lines(log, "recovery.wal_corruption") == lines(log, "recovery.wal_tail_truncated") \
        == []


def test_repair_merges_a_segment_damaged_to_its_end_with_the_next(tmp_path: Path) -> None:
    """Damage running to the end of a sealed segment: its lost LSNs would read as a missing
    segment once the damage is gone, so the next segment's records join it."""
    dirs = Dirs(tmp_path)
    build(dirs, 12, per_segment=4)  # seg-1: 1-4, seg-5: 5-8, seg-9: 9-12, seg-13 empty
    starts = offsets(dirs.seg(5))
    damage(dirs.seg(5), starts[3] + 30)  # record 8, the last of seg-5
    damage(dirs.seg(9), 5)  # seg-9's header
    code, text = wal(["repair", str(dirs.wal), "--yes"])
    assert code == 0, text
    assert dirs.segments() == [1, 5, 13]
    assert check(str(dirs.wal), None).exit_code == CHECK_CLEAN
    result, replayer, log = dirs.recover(on_corruption="refuse")
    assert replayer.lsns == [1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12] and result.next_lsn == 13


def test_check_of_a_missing_directory_exits_4(tmp_path: Path) -> None:
    assert wal(["check", str(tmp_path / "nothing")])[0] == 4


# -- hostile data directories (links, FIFOs, huge files) ---------------------------------------


def wal_process(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``beava wal ...`` in a child process; ``timeout`` bounds it (a hang fails the test)."""
    return subprocess.run([sys.executable, "-m", "beava", "wal", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


@pytest.mark.parametrize("where", ["segment", "snapshot"])
def test_fifo_named_like_a_segment_or_snapshot_fails_every_reader(tmp_path: Path,
                                                                  where: str) -> None:
    dirs = Dirs(tmp_path / "data")
    dirs.snaps.rename(dirs.root / "snapshots")
    dirs.snaps = dirs.root / "snapshots"
    build(dirs, 3)
    fifo = (dirs.seg(9) if where == "segment"
            else dirs.snaps / "snap-0000000000000002.bsnap")
    os.mkfifo(fifo)
    for args in (["check", str(dirs.root)], ["repair", str(dirs.root), "--yes"]):
        done = wal_process(*args)
        assert done.returncode == 4, (args, done.stdout, done.stderr)
        assert f"{fifo} is a FIFO, not a regular file" in done.stderr
    with pytest.raises(RecoveryFatal, match=f"data directory unusable: {fifo} is a FIFO"):
        dirs.recover()


def test_planted_link_at_a_quarantine_name_is_never_followed(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path / "data")
    build(dirs, 12, per_segment=6)  # seg-1: 1-6, seg-7: 7-12, seg-13 empty
    starts = offsets(dirs.seg(1))
    damaged = damage(dirs.seg(1), starts[2] + 30)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"precious")
    quarantine = dirs.wal / "quarantine"
    quarantine.mkdir()
    name = f"seg-0000000000000001-off-{starts[2]}.bin"
    (quarantine / name).symlink_to(outside)
    result, replayer, log = dirs.recover()
    assert replayer.lsns == [1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    assert outside.read_bytes() == b"precious" and (quarantine / name).is_symlink()
    other = quarantine / name.replace(".bin", "-1.bin")
    assert lines(log, "recovery.wal_corruption")[0]["quarantine_path"] == str(other)
    assert other.read_bytes() == damaged[starts[2]:starts[3]]
    other.unlink()
    done = wal_process("repair", str(dirs.wal), "--yes")
    assert done.returncode == 0, done.stderr
    assert outside.read_bytes() == b"precious" and other.read_bytes() == \
        damaged[starts[2]:starts[3]]


def test_symlinked_quarantine_directory_fails_repair(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path / "data")
    build(dirs, 6)
    starts = offsets(dirs.seg(1))
    damage(dirs.seg(1), starts[2] + 30)
    outside = tmp_path / "outside"
    outside.mkdir()
    (dirs.wal / "quarantine").symlink_to(outside)
    before = dirs.seg(1).read_bytes()
    for args in (["check", str(dirs.wal)], ["repair", str(dirs.wal), "--yes"]):
        done = wal_process(*args)
        assert done.returncode == 4, (args, done.stdout, done.stderr)
        assert f"{dirs.wal / 'quarantine'} is a symbolic link, not a directory" in done.stderr
    assert list(outside.iterdir()) == [] and dirs.seg(1).read_bytes() == before


SPARSE_SIZE = 2 << 30
PEAK_RSS_BOUND_KB = 300 * 1024
# Runs a command as its child and prints the child's peak RSS (KiB): the caller's own
# earlier children do not count.
_PEAK_RSS = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=300)
sys.stderr.write(done.stdout + done.stderr)
print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""
_RECOVER = """
import sys
from beava.durability.recovery import recover
class Log:
    def __getattr__(self, name):
        return lambda kind, message, **fields: print(kind, fields)
result = recover(sys.argv[1], sys.argv[2], load_snapshot=lambda s: None,
                 apply=lambda r: None, log=Log())
print("replayed", result.records_replayed)
"""


def peak_rss(*command: str) -> tuple[int, int]:
    done = subprocess.run([sys.executable, "-c", _PEAK_RSS, *command], capture_output=True,
                          text=True, timeout=600, check=True)
    code, rss = done.stdout.split()
    return int(code), int(rss)


def test_huge_sparse_segment_is_read_in_bounded_memory(tmp_path: Path) -> None:
    """A valid header, three records, then 2 GiB of nothing: ``wal check`` and recovery
    stream it (the old reader held the whole file: 1.5-2 GiB)."""
    dirs = Dirs(tmp_path)
    build(dirs, 3)
    size = os.path.getsize(dirs.seg(1))
    with open(dirs.seg(1), "r+b") as f:
        f.truncate(SPARSE_SIZE)
    code, rss = peak_rss(sys.executable, "-m", "beava", "wal", "check", str(dirs.wal))
    assert code == CHECK_TORN_TAIL and rss < PEAK_RSS_BOUND_KB, rss
    code, rss = peak_rss(sys.executable, "-c", _RECOVER, str(dirs.wal), str(dirs.snaps))
    assert code == 0 and rss < PEAK_RSS_BOUND_KB, rss
    assert os.path.getsize(dirs.seg(1)) == size  # the torn tail was cut off
    (copy,) = (dirs.wal / "quarantine").iterdir()
    assert copy.stat().st_size == SPARSE_SIZE - size


def test_huge_damaged_run_in_a_sealed_segment_is_resynchronised(tmp_path: Path) -> None:
    """Records after 2 GiB of junk in a sealed segment are found and applied, in bounded
    memory; the junk's quarantine copy keeps the holes."""
    dirs = Dirs(tmp_path)
    build(dirs, 3)  # seg-1: 1-3
    with open(dirs.seg(1), "r+b") as f:
        start = f.seek(0, os.SEEK_END)
        f.write(b"\x01\x02\x00\x00" * 8)  # candidates that are no record
        f.seek(SPARSE_SIZE)
        f.write(event(4) + event(5))
    writer = dirs.writer()
    writer.start(6)
    writer.write_and_sync(event(6))
    writer.close()
    code, rss = peak_rss(sys.executable, "-c", _RECOVER, str(dirs.wal), str(dirs.snaps))
    assert code == 0 and rss < PEAK_RSS_BOUND_KB, rss
    (copy,) = (dirs.wal / "quarantine").iterdir()
    assert copy.name == f"seg-0000000000000001-off-{start}.bin"
    assert copy.stat().st_size == SPARSE_SIZE - start
    assert copy.stat().st_blocks * 512 < 16 << 20  # the junk's window, not 2 GiB
    result, replayer, log = dirs.recover()
    assert replayer.lsns == [1, 2, 3, 4, 5, 6]


def test_lock_file_link_is_not_followed(tmp_path: Path) -> None:
    dirs = Dirs(tmp_path / "data")
    build(dirs, 3)
    outside = tmp_path / "outside-lock"
    (dirs.wal / "LOCK").symlink_to(outside)
    with pytest.raises(OSError):
        lock_wal_dir(str(dirs.wal))
    done = wal_process("repair", str(dirs.wal), "--yes")
    assert done.returncode == 4 and "LOCK" in done.stderr
    assert not outside.exists()
