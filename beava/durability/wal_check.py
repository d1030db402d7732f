"""Checking and repairing a data directory's WAL offline (``beava wal check|repair``).

:func:`check` reads every segment as recovery does (spec/durability.md §9) and reports, per
segment, its records, LSN range and damage; it changes nothing and may run beside a live
server. :func:`repair_plan` lists what recovery's quarantine policy would do to the newest
segment, :func:`repair` does it: the damaged tail is copied to ``quarantine/`` and the
segment truncated (an invalid newest header: the whole file moves to quarantine). Damage in
sealed segments is left in place: recovery skips it at every start (G11).
"""

from __future__ import annotations

import errno
import fcntl
import os
from dataclasses import dataclass, field

from beava.durability.recovery import (
    newest_segment_damage,
    quarantine_tail,
    read_segment_header,
    write_quarantine,
)
from beava.durability.snapshots import SnapshotInvalid, list_snapshots, read_snapshot
from beava.durability.wal import list_segments, lock_wal_dir, sync_dir
from beava.durability.wal_format import (
    LOCK_FILE,
    QUARANTINE_DIR,
    SEGMENT_HEADER_SIZE,
    quarantine_range_name,
    record_lsn_at,
    record_size_at,
)
from beava.durability.wal_scan import resync

# Damage kinds.
TORN_TAIL = "torn_tail"  # newest segment, nothing valid after it: an interrupted write
CORRUPTION = "corruption"  # newest segment, valid records after it: acknowledged data hit
SKIPPED = "skipped"  # sealed segment: recovery quarantines a copy and resumes after it

# Exit codes of ``beava wal check`` (2 is a usage error, as for every beava command).
CHECK_CLEAN = 0
CHECK_TORN_TAIL = 1
CHECK_CORRUPTION = 3
CHECK_UNREADABLE = 4


@dataclass
class Damage:
    offset: int
    """Where it starts; 0 for an invalid header."""
    bytes: int
    """Length of the damaged range (newest segment: to the end of the file)."""
    kind: str
    valid_after: int = 0
    """Newest segment: valid records after the damage (they are lost with the tail)."""
    first_lsn_after: int = 0
    last_lsn_after: int = 0
    resumed_at_lsn: int | None = None
    """Sealed segment: LSN of the record replay resumes at (None: the end of the file)."""
    header_error: str = ""


@dataclass
class SegmentReport:
    name: str
    path: str
    base: int
    size: int
    newest: bool
    records: int = 0
    """Valid records recovery would read (before the damage in the newest segment)."""
    first_lsn: int = 0
    last_lsn: int = 0
    damage: list[Damage] = field(default_factory=list)


@dataclass
class SnapshotChoice:
    path: str
    snapshot_lsn: int
    registry_version: int


@dataclass
class WalReport:
    wal_dir: str
    snapshot_dir: str | None
    segments: list[SegmentReport]
    snapshot: SnapshotChoice | None
    """The newest snapshot that validates (None: replay from the first record)."""
    invalid_snapshots: list[tuple[str, str]]
    locked: bool
    """A running server holds the lock: the newest segment may be mid-write."""

    @property
    def exit_code(self) -> int:
        kinds = {d.kind for seg in self.segments for d in seg.damage}
        if kinds - {TORN_TAIL}:
            return CHECK_CORRUPTION
        return CHECK_TORN_TAIL if kinds else CHECK_CLEAN


def resolve_dirs(path: str) -> tuple[str, str | None]:
    """``(wal_dir, snapshot_dir)`` for a ``--data-dir`` directory (``PATH/wal``,
    ``PATH/snapshots``) or for a WAL directory itself (no snapshot directory then).
    Raises FileNotFoundError when neither is there."""
    if os.path.isdir(os.path.join(path, "wal")):
        snapshots = os.path.join(path, "snapshots")
        return os.path.join(path, "wal"), snapshots if os.path.isdir(snapshots) else None
    if os.path.isdir(path) and (list_segments(path) or os.path.exists(
            os.path.join(path, LOCK_FILE))):
        return path, None
    raise FileNotFoundError(errno.ENOENT, "no WAL directory (PATH/wal, or segment files)", path)


def lock_held(wal_dir: str) -> bool:
    """True when another process holds ``<wal_dir>/LOCK`` (the file is not created)."""
    try:
        fd = os.open(os.path.join(wal_dir, LOCK_FILE), os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def check(wal_dir: str, snapshot_dir: str | None) -> WalReport:
    """Read every segment and snapshot; change nothing. OSError propagates."""
    segments = list_segments(wal_dir)
    reports = []
    last_good = 0
    for index, (base, name) in enumerate(segments):
        newest = index == len(segments) - 1
        report = _check_segment(os.path.join(wal_dir, name), name, base, newest, last_good)
        last_good = max(last_good, report.last_lsn)
        reports.append(report)
    snapshot = None
    invalid: list[tuple[str, str]] = []
    if snapshot_dir is not None:
        for _lsn, path in reversed(list_snapshots(snapshot_dir)):
            try:
                loaded = read_snapshot(path)
            except SnapshotInvalid as exc:
                invalid.append((path, exc.reason))
                continue
            snapshot = SnapshotChoice(path, loaded.header.snapshot_lsn,
                                      loaded.header.registry_version)
            break
    return WalReport(wal_dir, snapshot_dir, reports, snapshot, invalid, lock_held(wal_dir))


def _check_segment(path: str, name: str, base: int, newest: bool,
                   last_good: int) -> SegmentReport:
    with open(path, "rb") as f:
        data = f.read()
    end = len(data)
    report = SegmentReport(name, path, base, end, newest)
    header, header_error = read_segment_header(path, base)
    if newest:
        tail = newest_segment_damage(data, base, header is not None)
        stop = end if tail is None else tail.offset
        if tail is not None:
            after = tail.after
            report.damage.append(Damage(tail.offset, tail.bytes,
                                        CORRUPTION if tail.corruption else TORN_TAIL,
                                        after.records, after.first_lsn, after.last_lsn,
                                        header_error=header_error))
        if header is not None:
            _count(report, data, SEGMENT_HEADER_SIZE, stop)
        return report
    if header is None:
        report.damage.append(Damage(0, end, SKIPPED, header_error=header_error))
        return report
    offset = SEGMENT_HEADER_SIZE
    while offset < end:
        size = record_size_at(data, offset, end)
        if size:
            lsn = record_lsn_at(data, offset)
            report.first_lsn = report.first_lsn or lsn
            report.last_lsn = lsn
            last_good = max(last_good, lsn)
            report.records += 1
            offset += size
            continue
        resume = resync(data, offset + 1, end, last_good)
        report.damage.append(Damage(offset, resume - offset, SKIPPED, resumed_at_lsn=(
            record_lsn_at(data, resume) if resume < end else None)))
        offset = resume
    return report


def _count(report: SegmentReport, data: bytes, offset: int, stop: int) -> None:
    """Records of the newest segment up to its damage (all valid: read in order)."""
    while offset < stop:
        lsn = record_lsn_at(data, offset)
        report.first_lsn = report.first_lsn or lsn
        report.last_lsn = lsn
        report.records += 1
        offset += record_size_at(data, offset, stop)


class SegmentChanged(Exception):
    """A segment changed between the check and the repair (a server ran meanwhile)."""


@dataclass
class RepairStep:
    segment: SegmentReport
    damage: Damage
    target: str
    """The quarantine file the damaged bytes go to."""

    def describe(self) -> str:
        damage = self.damage
        if damage.offset == 0:
            what = f"move {self.segment.name} ({damage.bytes} bytes, invalid header)"
        else:
            what = (f"copy {damage.bytes} bytes of {self.segment.name} from offset "
                    f"{damage.offset} and truncate it there")
        lost = (f"; discards {damage.valid_after} valid records (LSN "
                f"{damage.first_lsn_after}-{damage.last_lsn_after})"
                if damage.valid_after else "")
        return f"{what} -> {self.target}{lost}"


def repair_plan(report: WalReport) -> list[RepairStep]:
    """What recovery's quarantine policy does to the newest segment's damage."""
    steps = []
    for seg in report.segments:
        for damage in seg.damage:
            if damage.kind in (TORN_TAIL, CORRUPTION):
                target = os.path.join(report.wal_dir, QUARANTINE_DIR,
                                      quarantine_range_name(seg.base, damage.offset))
                steps.append(RepairStep(seg, damage, target))
    return steps


def repair(wal_dir: str, steps: list[RepairStep]) -> None:
    """Carry out ``steps`` under the data directory's lock (DataDirLocked if a server
    holds it). Each segment is re-read first: it must not have changed since the check."""
    fd = lock_wal_dir(wal_dir)
    try:
        for step in steps:
            seg = step.segment
            with open(seg.path, "rb") as f:
                data = f.read()
            if len(data) != seg.size:
                raise SegmentChanged(f"{seg.name} changed since it was checked")
            if step.damage.offset == 0:
                write_quarantine(wal_dir, os.path.basename(step.target), data)
                os.unlink(seg.path)
                sync_dir(wal_dir)
            else:
                quarantine_tail(wal_dir, seg.path, seg.base, data, step.damage.offset)
    finally:
        os.close(fd)
