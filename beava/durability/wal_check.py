"""Checking and repairing a data directory's WAL offline (``beava wal check|repair``).

:func:`check` reads every segment as recovery does (spec/durability.md §9) and reports, per
segment, its records, LSN range and damage; it changes nothing and may run beside a live
server. :func:`repair_plan` lists what ``repair`` does, consistently with recovery's default
``replay`` policy (§9.7): every intact record is kept, only damaged bytes are lost.

- A torn tail (the newest segment ends in bytes with no valid record after them) is copied
  to ``quarantine/`` and cut off, as recovery does.
- A segment with any other damage is rewritten: its damaged byte ranges are copied to
  ``quarantine/`` and a new file holding its header (rebuilt from the file name when it is
  damaged) and every structurally valid record replaces it. When the damage runs to the end
  of a sealed segment, the next segment's records are written into the same file and that
  segment removed: the LSNs lost at the end would otherwise read as a missing segment.

Segments are read in bounded memory and only when they are regular files; nothing is
created or truncated through a link (``data_files``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from dataclasses import dataclass, field

from beava.durability.data_files import (
    check_directory,
    check_regular,
    open_regular,
    write_quarantine,
)
from beava.durability.recovery import quarantine_tail, read_segment_header
from beava.durability.snapshots import SnapshotInvalid, list_snapshots, read_snapshot
from beava.durability.wal import FILE_MODE, list_segments, lock_wal_dir, now_ms, sync_dir, sync_fd
from beava.durability.wal_format import (
    LOCK_FILE,
    QUARANTINE_DIR,
    SEGMENT_FLAG_HISTORY_BOUNDARY,
    encode_segment_header,
    quarantine_range_name,
)
from beava.durability.wal_scan import RecordAt, SegmentReader, walk

# Damage kinds.
TORN_TAIL = "torn_tail"  # newest segment, nothing valid after it: an interrupted write
CORRUPTION = "corruption"  # anything else: the damaged bytes are lost, replay resumes after

# Exit codes of ``beava wal check`` (2 is a usage error, as for every beava command).
CHECK_CLEAN = 0
CHECK_TORN_TAIL = 1
CHECK_CORRUPTION = 3
CHECK_UNREADABLE = 4

REPAIR_SUFFIX = ".repair"


@dataclass
class Damage:
    offset: int
    """Where it starts; 0 for an invalid header."""
    bytes: int
    kind: str
    last_good_lsn: int
    """The highest LSN read before it."""
    resumed_at_lsn: int | None = None
    """LSN of the record replay resumes at (the next segment's base when the damage runs
    to the end of a sealed segment); None when nothing follows."""
    header_error: str = ""


@dataclass
class SegmentReport:
    name: str
    path: str
    base: int
    size: int
    newest: bool
    header_flags: int | None
    """The header's flags; None when the header is invalid."""
    last_good_before: int
    """The highest LSN read in the segments before this one."""
    records: int = 0
    """Structurally valid records recovery reads (and, unless quarantined, applies)."""
    first_lsn: int = 0
    last_lsn: int = 0
    damage: list[Damage] = field(default_factory=list)
    damaged_to_end: bool = False


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
        fd = open_regular(os.path.join(wal_dir, LOCK_FILE))
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
    """Read every segment and snapshot; change nothing. OSError propagates (UnusableEntry
    for an entry that is a link or not a regular file)."""
    check_directory(os.path.join(wal_dir, QUARANTINE_DIR))
    segments = list_segments(wal_dir)
    reports: list[SegmentReport] = []
    last_good = 0
    for index, (base, name) in enumerate(segments):
        newest = index == len(segments) - 1
        report = _check_segment(os.path.join(wal_dir, name), name, base, newest, last_good)
        last_good = max(last_good, report.last_lsn)
        if reports and reports[-1].damaged_to_end:
            for damage in reports[-1].damage:
                if damage.resumed_at_lsn is None and damage.kind == CORRUPTION:
                    damage.resumed_at_lsn = base
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
    with SegmentReader(path) as reader:
        header, header_error = read_segment_header(reader, base)
        report = SegmentReport(name, path, base, reader.size, newest,
                               header.flags if header is not None else None, last_good)
        for item in walk(reader, header is not None, last_good):
            if isinstance(item, RecordAt):
                report.first_lsn = report.first_lsn or item.lsn
                report.last_lsn = max(report.last_lsn, item.lsn)
                report.records += 1
                continue
            to_end = item.resume >= reader.size
            report.damage.append(Damage(
                item.offset, item.bytes, TORN_TAIL if newest and to_end else CORRUPTION,
                item.last_good, None if to_end else reader.lsn_at(item.resume),
                header_error if item.offset == 0 and header is None else ""))
            report.damaged_to_end = to_end
    return report


class SegmentChanged(Exception):
    """A segment changed between the check and the repair (a server ran meanwhile)."""


@dataclass
class RepairStep:
    segments: list[SegmentReport]
    """One segment; more when damage runs to the end of a sealed one (merged into it)."""

    @property
    def cut(self) -> bool:
        """Only a torn tail: copy it to quarantine and truncate the segment."""
        return len(self.segments) == 1 and all(d.kind == TORN_TAIL
                                               for d in self.segments[0].damage)

    def quarantine_targets(self, wal_dir: str) -> list[str]:
        return [os.path.join(wal_dir, QUARANTINE_DIR, quarantine_range_name(seg.base, d.offset))
                for seg in self.segments for d in seg.damage]

    def describe(self, wal_dir: str) -> str:
        first = self.segments[0]
        targets = ", ".join(self.quarantine_targets(wal_dir))
        if self.cut:
            (damage,) = first.damage
            return (f"copy {damage.bytes} bytes of {first.name} from offset {damage.offset} "
                    f"and truncate it there (torn tail) -> {targets}")
        damaged = sum(d.bytes for seg in self.segments for d in seg.damage)
        ranges = sum(len(seg.damage) for seg in self.segments)
        kept = sum(seg.records for seg in self.segments)
        merged = (f", with the records of {', '.join(s.name for s in self.segments[1:])} "
                  "(removed)" if len(self.segments) > 1 else "")
        return (f"rewrite {first.name} keeping its {kept} valid records{merged}; "
                f"{ranges} damaged range(s), {damaged} bytes -> {targets}")


def repair_plan(report: WalReport) -> list[RepairStep]:
    """What ``repair`` does, segment by segment (see the module docstring)."""
    steps = []
    segments = report.segments
    index = 0
    while index < len(segments):
        seg = segments[index]
        index += 1
        if not seg.damage:
            continue
        group = [seg]
        while (group[-1].damaged_to_end and not group[-1].newest and index < len(segments)
               and not _boundary(segments[index])):
            group.append(segments[index])
            index += 1
        steps.append(RepairStep(group))
    return steps


def _boundary(seg: SegmentReport) -> bool:
    return seg.header_flags is not None and bool(
        seg.header_flags & SEGMENT_FLAG_HISTORY_BOUNDARY)


def repair(wal_dir: str, steps: list[RepairStep]) -> None:
    """Carry out ``steps`` under the data directory's lock (DataDirLocked if a server
    holds it). Each segment is re-opened first: it must not have changed since the check."""
    fd = lock_wal_dir(wal_dir)
    try:
        for step in steps:
            readers: list[SegmentReader] = []
            try:
                for seg in step.segments:
                    reader = SegmentReader(seg.path)
                    readers.append(reader)
                    if reader.size != seg.size:
                        raise SegmentChanged(f"{seg.name} changed since it was checked")
                if step.cut:
                    seg = step.segments[0]
                    offset = seg.damage[0].offset
                    quarantine_tail(wal_dir, seg.path, seg.base, readers[0], offset)
                    if offset == 0:
                        os.unlink(seg.path)
                        sync_dir(wal_dir)
                else:
                    _rewrite(wal_dir, step.segments, readers)
            finally:
                for reader in readers:
                    reader.close()
    finally:
        os.close(fd)


def _rewrite(wal_dir: str, group: list[SegmentReport], readers: list[SegmentReader]) -> None:
    """Quarantine every damaged range of ``group``, then replace its first segment by a file
    holding a valid header and every valid record of the group, and remove the others."""
    for seg, reader in zip(group, readers, strict=True):
        for damage in seg.damage:
            write_quarantine(wal_dir, quarantine_range_name(seg.base, damage.offset), reader,
                             damage.offset, damage.offset + damage.bytes)
    first = group[0]
    tmp = first.path + REPAIR_SUFFIX
    with contextlib.suppress(FileNotFoundError):
        check_regular(tmp)  # a file left by an interrupted repair, nothing else
        os.unlink(tmp)
    out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                  | getattr(os, "O_CLOEXEC", 0), FILE_MODE)
    try:
        position = _write_all(out, encode_segment_header(
            first.base, first.header_flags or 0, now_ms()), 0)
        for seg, reader in zip(group, readers, strict=True):
            for item in walk(reader, seg.header_flags is not None, seg.last_good_before):
                if isinstance(item, RecordAt):
                    position = _write_all(out, reader.read(item.offset, item.size), position)
        sync_fd(out)
    finally:
        os.close(out)
    os.replace(tmp, first.path)
    sync_dir(wal_dir)
    for seg in group[1:]:
        os.unlink(seg.path)
    sync_dir(wal_dir)


def _write_all(fd: int, data: bytes, position: int) -> int:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view = view[written:]
        position += written
    return position

