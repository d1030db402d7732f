"""Start-up recovery over the WAL and snapshot directories (spec/durability.md §9 steps 1-7).

The caller holds the data-directory lock, owns the state and supplies two callbacks:

- ``load_snapshot(snapshot)`` installs a :class:`~beava.durability.snapshots.LoadedSnapshot`; it may
  raise ``SnapshotInvalid`` to reject it (recovery then tries the next older one), and must
  leave the state untouched when it does.
- ``apply(record)`` applies one WAL record with LSN > the snapshot's, in LSN order. It performs
  the §9.2 semantic checks (registry version, registered event, body decodes to a map) and
  raises :class:`Unapplicable` for a record it cannot apply (the record is quarantined and
  skipped). Structural validity, LSN order, name encoding and damage are handled here.

Damage (§9.4, §9.5, §9.7): bytes that are not a structurally valid record, in any segment,
its header included. At the end of the newest segment with nothing valid after them they
are a torn tail (an interrupted last write): quarantined and cut off. Anywhere else, what
happens is the ``on_corruption`` policy:

- ``replay`` (default): the damaged bytes are quarantined and reading resumes at the next
  structurally valid record with a higher LSN; every intact record is applied.
- ``point-in-time``: reading stops at the damage; the rest of that segment and every later
  segment are quarantined, so the recovered history has no hole (damage that only hides
  records the loaded snapshot holds already is passed over as with ``replay``).
- ``refuse``: :class:`WalCorruption` (exit 3) before anything on disk is touched.

Segments and snapshots are read in bounded memory and only when they are regular files
(``wal_scan``, ``data_files``): an entry that is a link, a FIFO, a directory or a device
makes the data directory unusable (RecoveryFatal).

Step 8 (a new active segment at ``result.next_lsn``) is :meth:`WalWriter.start`; step 9 and the
``recovery.complete`` line belong to the caller. Every other recovery log line is emitted here.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from beava.durability.crash_points import CrashPoints
from beava.durability.data_files import (
    UnusableEntry,
    check_regular,
    open_regular,
    write_quarantine,
)
from beava.durability.snapshots import (
    STATE_FORMAT,
    LoadedSnapshot,
    SnapshotInvalid,
    list_snapshots,
    read_snapshot,
)
from beava.durability.wal import list_segments, sync_dir, sync_fd
from beava.durability.wal_format import (
    LOCK_FILE,
    QUARANTINE_DIR,
    RECORD_EVENT,
    RECORD_REGISTRY,
    RECORD_RESET,
    SEGMENT_HEADER_SIZE,
    FormatError,
    Record,
    SegmentHeader,
    decode_segment_header,
    is_snapshot_tmp_name,
    parse_segment_name,
    parse_snapshot_name,
    quarantine_range_name,
    quarantine_record_name,
)
from beava.durability.wal_scan import DamageAt, RecordAt, SegmentReader, walk

MOUNTS_PATH = "/proc/mounts"

# What recovery does at damage that is not a torn tail (§9.7).
ON_CORRUPTION_REPLAY = "replay"  # quarantine the damaged bytes, apply every intact record
ON_CORRUPTION_POINT_IN_TIME = "point-in-time"  # stop at the damage, quarantine the rest
ON_CORRUPTION_REFUSE = "refuse"  # exit 3 without touching anything; `beava wal repair`
ON_CORRUPTION_POLICIES = (ON_CORRUPTION_REPLAY, ON_CORRUPTION_POINT_IN_TIME,
                          ON_CORRUPTION_REFUSE)


class Unapplicable(Exception):
    """Raised by the ``apply`` callback: the record is valid but cannot be applied."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RecoveryFatal(Exception):
    """Recovery cannot produce a trustworthy state: log ``server.fatal`` and exit 3."""


@dataclass
class FirstDamage:
    """The first damage in the WAL that is not a torn tail, and the valid records after it."""

    segment: str
    offset: int
    bytes: int
    last_good: int
    """The highest LSN read before it."""
    resumed_at_lsn: int | None
    """LSN of the record reading resumes at; None when no valid record follows."""
    records_after: int = 0
    """Structurally valid records after the damage (to the end of the WAL)."""
    first_lsn_after: int = 0
    last_lsn_after: int = 0


class WalCorruption(RecoveryFatal):
    """The WAL is damaged (not only a torn tail) and the policy is ``refuse``."""

    def __init__(self, wal_dir: str, damage: FirstDamage) -> None:
        data_dir = data_dir_of(wal_dir)
        after = (f"{damage.records_after} valid records (LSN {damage.first_lsn_after}-"
                 f"{damage.last_lsn_after}) follow the damage" if damage.records_after
                 else "no valid record follows the damage")
        super().__init__(
            f"WAL corruption in {damage.segment} at offset {damage.offset}: {damage.bytes} "
            f"damaged bytes after LSN {damage.last_good}; {after}; refusing to start "
            f"(--wal-on-corruption refuse), nothing was changed. Inspect with 'beava wal "
            f"check {data_dir}'; 'beava wal repair {data_dir} --yes' moves the damaged "
            f"bytes to quarantine and keeps every intact record")
        self.damage = damage


def data_dir_of(wal_dir: str) -> str:
    """The directory ``beava wal`` takes for ``wal_dir``: its parent for ``<data-dir>/wal``,
    else the WAL directory itself."""
    path = os.path.normpath(wal_dir)
    return os.path.dirname(path) or "." if os.path.basename(path) == "wal" else path


def read_segment_header(reader: SegmentReader, base: int) -> tuple[SegmentHeader | None, str]:
    """A segment's header and ``""``, or None and why it is invalid (including a
    ``base_lsn`` that differs from the one in the file name)."""
    try:
        header = decode_segment_header(reader.header())
    except FormatError as exc:
        return None, str(exc)
    if header.base_lsn != base:
        return None, f"header base_lsn {header.base_lsn} does not match the file name"
    return header, ""


def first_damage(segments: list[tuple[str, SegmentReader, bool]]) -> FirstDamage | None:
    """The first damage of a WAL that is not a torn tail, with the valid records after it;
    ``segments`` are ``(name, reader, header valid)`` in LSN order, the newest last."""
    found: FirstDamage | None = None
    last_good = 0
    for index, (name, reader, header_valid) in enumerate(segments):
        newest = index == len(segments) - 1
        for item in walk(reader, header_valid, last_good):
            if isinstance(item, RecordAt):
                last_good = max(last_good, item.lsn)
                if found is not None and item.lsn > found.last_good:
                    found.records_after += 1
                    found.first_lsn_after = found.first_lsn_after or item.lsn
                    found.last_lsn_after = item.lsn
            elif found is None and not (newest and item.resume >= reader.size):
                resumed = reader.lsn_at(item.resume) if item.resume < reader.size else None
                found = FirstDamage(name, item.offset, item.bytes, item.last_good, resumed)
    return found


@dataclass
class RecoveryResult:
    next_lsn: int
    """LSN for the next record; the new active segment's base (step 8)."""
    snapshot_lsn: int
    """LSN of the loaded snapshot, 0 if none."""
    snapshot_path: str | None
    records_replayed: int
    """Records applied from the WAL (quarantined ones excluded)."""
    last_lsn: int
    """LSN of the last record reflected in state: last replayed, else the snapshot's, else 0."""
    last_record: Record | None
    """The last replayed record, None if none was replayed."""
    registry_version: int
    """From the last replayed REGISTRY/RESET record, else the snapshot, else 0."""
    watermark_ms: int
    """Last replayed EVENT's timestamp; 0 after a later RESET; else the snapshot's (step 7)."""
    quarantined: int
    """Damaged byte ranges plus valid records quarantined (torn tails not counted)."""
    segments_read: int
    duration_ms: int


@dataclass
class _Segment:
    base: int
    name: str
    path: str
    header: SegmentHeader | None
    header_error: str = ""
    boundary: bool = False


def recover(wal_dir: str, snapshot_dir: str, *,
            load_snapshot: Callable[[LoadedSnapshot], None],
            apply: Callable[[Record], None], log: Any,
            crash_points: CrashPoints | None = None,
            state_formats: frozenset[int] = frozenset({STATE_FORMAT}),
            mounts_path: str = MOUNTS_PATH,
            on_corruption: str = ON_CORRUPTION_REPLAY) -> RecoveryResult:
    """Run recovery; raises RecoveryFatal for the §9.6 conditions (exit 3), for an entry
    of the data directories that is a link or not a regular file, and WalCorruption for
    damage under the ``refuse`` policy.

    An OSError on the data directories is reported as RecoveryFatal too.
    """
    if on_corruption not in ON_CORRUPTION_POLICIES:
        raise ValueError(f"unknown WAL corruption policy {on_corruption!r}")
    run = _Recovery(wal_dir, snapshot_dir, load_snapshot, apply, log,
                    crash_points if crash_points is not None else CrashPoints(None),
                    state_formats, mounts_path, on_corruption)
    try:
        return run.run()
    except UnusableEntry as exc:
        raise RecoveryFatal(str(exc)) from None
    except OSError as exc:
        raise RecoveryFatal(f"recovery: data directory I/O error: {exc}") from exc


class _Recovery:
    def __init__(self, wal_dir: str, snapshot_dir: str,
                 load_snapshot: Callable[[LoadedSnapshot], None],
                 apply: Callable[[Record], None], log: Any, crash: CrashPoints,
                 state_formats: frozenset[int], mounts_path: str, policy: str) -> None:
        self.wal_dir = wal_dir
        self.policy = policy
        self.snapshot_dir = snapshot_dir
        self.load_snapshot = load_snapshot
        self.apply = apply
        self.log = log
        self.crash = crash
        self.state_formats = state_formats
        self.mounts_path = mounts_path
        self.quarantined = 0
        self.replayed = 0
        self.last_seen = 0  # highest LSN of a valid record read in order (the "last good" LSN)
        self.last_record: Record | None = None
        self.registry_version: int | None = None
        self.watermark: int | None = None
        self.stopped = False  # point-in-time: the history ended at a damage

    # -- driver ------------------------------------------------------------------------------

    def run(self) -> RecoveryResult:
        started = time.monotonic()
        self.log.info("recovery.started", "recovery started", wal_dir=self.wal_dir,
                      snapshot_dir=self.snapshot_dir)
        segments = self._read_headers()
        snapshots = list_snapshots(self.snapshot_dir)
        for _lsn, path in snapshots:
            check_regular(path)
        if self.policy == ON_CORRUPTION_REFUSE:
            self._refuse_damage(segments)  # before anything on disk changes
        self._delete_snapshot_temps()
        self._check_filesystem()
        self._report_foreign_files()
        max_base = segments[-1].base if segments else 0
        segments = self._apply_history_boundary(segments)
        snapshot, had_invalid = self._load_newest_snapshot()
        s_lsn = snapshot.header.snapshot_lsn if snapshot is not None else 0
        first = self._first_relevant(segments, s_lsn, had_invalid)
        relevant = segments[first:] if first is not None else []
        for index, seg in enumerate(relevant):
            if self.stopped:
                self._quarantine_segment(seg)
                continue
            next_base = relevant[index + 1].base if index + 1 < len(relevant) else None
            damaged_to_eof = self._replay_segment(seg, s_lsn, next_base)
            if next_base is not None and not self.stopped:
                end_lsn = max(self.last_seen, s_lsn)
                if next_base > end_lsn + 1 and not damaged_to_eof:
                    raise RecoveryFatal(f"recovery: WAL gap after LSN {end_lsn}")

        if snapshot is not None:
            registry_version = snapshot.header.registry_version
            watermark = snapshot.header.watermark_ms
        else:
            registry_version = watermark = 0
        if self.registry_version is not None:
            registry_version = self.registry_version
        if self.watermark is not None:
            watermark = self.watermark
        next_lsn = max(self.last_seen + 1, s_lsn + 1, 0 if self.stopped else max_base)
        last_lsn = self.last_record.lsn if self.last_record is not None else s_lsn
        return RecoveryResult(
            next_lsn=next_lsn, snapshot_lsn=s_lsn,
            snapshot_path=snapshot.path if snapshot is not None else None,
            records_replayed=self.replayed, last_lsn=last_lsn, last_record=self.last_record,
            registry_version=registry_version, watermark_ms=watermark,
            quarantined=self.quarantined, segments_read=len(relevant),
            duration_ms=int((time.monotonic() - started) * 1000))

    # -- step 1 and directory checks ----------------------------------------------------------

    def _delete_snapshot_temps(self) -> None:
        deleted = False
        for name in os.listdir(self.snapshot_dir):
            if is_snapshot_tmp_name(name):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self.snapshot_dir, name))
                deleted = True
        if deleted:
            sync_dir(self.snapshot_dir)

    def _check_filesystem(self) -> None:
        fstype = filesystem_type(self.wal_dir, self.mounts_path)
        if fstype is not None and is_network_fstype(fstype):
            self.log.warn("recovery.network_filesystem",
                          "WAL directory is on a network/FUSE filesystem; durability depends "
                          "on it honouring fsync", path=self.wal_dir, fstype=fstype)

    def _report_foreign_files(self) -> None:
        wal_real = os.path.realpath(self.wal_dir)
        snap_real = os.path.realpath(self.snapshot_dir)
        same = wal_real == snap_real

        def wal_known(name: str) -> bool:
            return name in (LOCK_FILE, QUARANTINE_DIR) or parse_segment_name(name) is not None

        def snap_known(name: str) -> bool:
            return parse_snapshot_name(name) is not None

        listings = [(self.wal_dir, wal_known, snap_real)]
        if not same:
            listings.append((self.snapshot_dir, snap_known, wal_real))
        for directory, known, other in listings:
            for name in sorted(os.listdir(directory)):
                if known(name) or (same and snap_known(name)):
                    continue
                path = os.path.join(directory, name)
                if os.path.realpath(path) == other:
                    continue  # one data directory nested inside the other
                self.log.warn("recovery.foreign_file_ignored",
                              "unrecognised file in a data directory ignored", path=path)

    # -- step 2: segment headers ----------------------------------------------------------------

    def _read_headers(self) -> list[_Segment]:
        """Every segment with its header, or why the header is invalid; a segment with an
        invalid header keeps the base LSN of its name and is read as damage from offset 0."""
        segments = []
        for base, name in list_segments(self.wal_dir):
            path = os.path.join(self.wal_dir, name)
            with SegmentReader(path) as reader:
                header, error = read_segment_header(reader, base)
            segments.append(_Segment(base, name, path, header, error))
        return segments

    def _refuse_damage(self, segments: list[_Segment]) -> None:
        """The ``refuse`` policy: raise WalCorruption at the first damage that is not a
        torn tail, in any segment (its header included)."""
        readers: list[tuple[str, SegmentReader, bool]] = []
        try:
            for seg in segments:
                readers.append((seg.name, SegmentReader(seg.path), seg.header is not None))
            damage = first_damage(readers)
        finally:
            for _name, reader, _valid in readers:
                reader.close()
        if damage is not None:
            self.log.error("recovery.wal_corruption", "WAL damaged; refusing to start",
                           segment=damage.segment, offset=damage.offset, bytes=damage.bytes,
                           last_good_lsn=damage.last_good,
                           resumed_at_lsn=damage.resumed_at_lsn, quarantine_path=None,
                           policy=ON_CORRUPTION_REFUSE)
            raise WalCorruption(self.wal_dir, damage)

    # -- step 3: history boundary ----------------------------------------------------------------

    def _apply_history_boundary(self, segments: list[_Segment]) -> list[_Segment]:
        for index in range(len(segments) - 1, -1, -1):
            seg = segments[index]
            if seg.header is not None and seg.header.history_boundary and _starts_with_reset(seg):
                seg.boundary = True
                break
        else:
            return segments
        boundary = segments[index].base
        for old in segments[:index]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(old.path)
        for lsn, path in list_snapshots(self.snapshot_dir):
            if lsn < boundary:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        sync_dir(self.wal_dir)
        sync_dir(self.snapshot_dir)
        return segments[index:]

    # -- step 4: snapshot ---------------------------------------------------------------------

    def _load_newest_snapshot(self) -> tuple[LoadedSnapshot | None, bool]:
        had_invalid = False
        for _lsn, path in reversed(list_snapshots(self.snapshot_dir)):
            try:
                snapshot = read_snapshot(path, self.state_formats)
                self.load_snapshot(snapshot)
            except UnusableEntry:
                raise
            except (SnapshotInvalid, OSError) as exc:
                reason = exc.reason if isinstance(exc, SnapshotInvalid) else str(exc)
                self.log.warn("recovery.snapshot_invalid", "invalid snapshot skipped",
                              path=path, reason=reason)
                had_invalid = True
                continue
            self.log.info("recovery.snapshot_loaded", "snapshot loaded", path=path,
                          snapshot_lsn=snapshot.header.snapshot_lsn,
                          registry_version=snapshot.header.registry_version)
            return snapshot, had_invalid
        return None, had_invalid

    # -- step 5: continuity -------------------------------------------------------------------

    @staticmethod
    def _first_relevant(segments: list[_Segment], s_lsn: int, had_invalid: bool) -> int | None:
        """Index of the first segment that may hold records after ``s_lsn``."""
        if not segments:
            if s_lsn == 0 and had_invalid:
                # Snapshots existed but none is readable, and no WAL is left to rebuild from.
                raise RecoveryFatal("recovery: WAL gap after LSN 0")
            return None
        first = None
        for index, seg in enumerate(segments):
            if seg.base <= s_lsn + 1:
                first = index
        if first is None:
            if not segments[0].boundary:
                raise RecoveryFatal(f"recovery: WAL gap after LSN {s_lsn}")
            first = 0
        return first

    # -- step 6: replay -----------------------------------------------------------------------

    def _replay_segment(self, seg: _Segment, s_lsn: int, next_base: int | None) -> bool:
        """Replay one segment; True when damage ran to its end (an LSN gap may follow).

        ``next_base`` is the next segment's base LSN; None marks the newest segment.
        """
        newest = next_base is None
        with SegmentReader(seg.path) as reader:
            end = reader.size
            for item in walk(reader, seg.header is not None, self.last_seen):
                if isinstance(item, RecordAt):
                    self._record(reader, item, s_lsn)
                    continue
                if newest and item.resume >= end:
                    self._truncate(seg, reader, item, "torn tail")
                    end = item.offset
                    break
                resumed = reader.lsn_at(item.resume) if item.resume < end else next_base
                if (self.policy == ON_CORRUPTION_POINT_IN_TIME
                        and (resumed is None or resumed > s_lsn + 1)):
                    self.stopped = True
                    self._truncate(seg, reader, item, "point-in-time")
                    end = item.offset
                    break
                self._quarantine_damage(seg, reader, item, resumed)
                if item.resume >= end:
                    return True
        if (newest or self.stopped) and end <= SEGMENT_HEADER_SIZE:
            # No record survived: the new active segment (step 8) may need this name.
            os.unlink(seg.path)
            sync_dir(self.wal_dir)
        return False

    def _record(self, reader: SegmentReader, item: RecordAt, s_lsn: int) -> None:
        lsn = item.lsn
        if lsn <= s_lsn:
            # Reflected in the snapshot already.
            self.last_seen = max(self.last_seen, lsn)
            return
        if lsn <= self.last_seen:
            self._quarantine_record(reader, item, f"LSN {lsn} is not greater than "
                                                  f"{self.last_seen}")
            return
        self.last_seen = lsn
        try:
            record = reader.decode_at(item.offset, item.size)
        except ValueError:
            self._quarantine_record(reader, item, "event name is not valid UTF-8")
            return
        try:
            self.apply(record)
        except Unapplicable as exc:
            self._quarantine_record(reader, item, exc.reason)
            return
        self.replayed += 1
        self.last_record = record
        rtype = record.type
        if rtype == RECORD_EVENT:
            self.watermark = record.timestamp_ms
        elif rtype == RECORD_RESET:
            self.watermark = 0
            self.registry_version = record.registry_version
        elif rtype == RECORD_REGISTRY:
            self.registry_version = record.registry_version
        self.crash.hit("recovery_mid_replay")

    # -- quarantine ---------------------------------------------------------------------------

    def _truncate(self, seg: _Segment, reader: SegmentReader, item: DamageAt,
                  why: str) -> None:
        """Copy the segment's bytes from the damage on to quarantine and cut them off: a
        torn tail (§9.4, WARN), or the end of the history under point-in-time (ERROR, with
        the valid records discarded counted)."""
        size = reader.size - item.offset
        if why == "torn tail":
            target = quarantine_tail(self.wal_dir, seg.path, seg.base, reader, item.offset)
            self.log.warn("recovery.wal_tail_truncated", "torn WAL tail removed",
                          segment=seg.name, offset=item.offset, bytes=size,
                          quarantine_path=target)
            return
        discarded = 0
        offset = item.resume
        while offset < reader.size:  # the valid records cut off with the damage
            found = reader.record_at(offset)
            if found:
                discarded += 1
                offset += found
            else:
                offset = reader.resync(offset + 1, item.last_good)
        target = quarantine_tail(self.wal_dir, seg.path, seg.base, reader, item.offset)
        self.quarantined += 1 + discarded
        self.log.error("recovery.wal_corruption",
                       "damaged WAL bytes: replay stopped there (point-in-time); the rest "
                       "of the WAL was moved to quarantine", segment=seg.name,
                       offset=item.offset, bytes=size, last_good_lsn=item.last_good,
                       resumed_at_lsn=None, valid_records_discarded=discarded,
                       quarantine_path=target, policy=self.policy)

    def _quarantine_segment(self, seg: _Segment) -> None:
        """Point-in-time, after the history stopped: move a later segment to quarantine."""
        with SegmentReader(seg.path) as reader:
            target = write_quarantine(self.wal_dir, quarantine_range_name(seg.base, 0), reader,
                                      0, reader.size)
            discarded = sum(1 for step in walk(reader, seg.header is not None, 0)
                            if isinstance(step, RecordAt))
        os.unlink(seg.path)
        sync_dir(self.wal_dir)
        self.quarantined += discarded
        self.log.error("recovery.wal_segment_quarantined",
                       "WAL segment after the damage moved to quarantine (point-in-time)",
                       segment=seg.name, valid_records_discarded=discarded,
                       quarantine_path=target)

    def _quarantine_damage(self, seg: _Segment, reader: SegmentReader, item: DamageAt,
                           resumed_at_lsn: int | None) -> None:
        """§9.5: copy damaged bytes to quarantine; the segment itself is left as is."""
        target = write_quarantine(self.wal_dir, quarantine_range_name(seg.base, item.offset),
                                  reader, item.offset, item.resume)
        self.quarantined += 1
        why = (f"invalid segment header: {seg.header_error}"
               if item.offset == 0 and seg.header is None else "record not structurally valid")
        self.log.error("recovery.wal_corruption", f"damaged WAL bytes quarantined ({why}); "
                       "replay resumed at the next valid record", segment=seg.name,
                       offset=item.offset, bytes=item.bytes, last_good_lsn=item.last_good,
                       resumed_at_lsn=resumed_at_lsn, quarantine_path=target,
                       policy=self.policy)

    def _quarantine_record(self, reader: SegmentReader, item: RecordAt, reason: str) -> None:
        target = write_quarantine(self.wal_dir, quarantine_record_name(item.lsn), reader,
                                  item.offset, item.offset + item.size)
        self.quarantined += 1
        self.log.warn("recovery.wal_record_quarantined", "WAL record quarantined",
                      lsn=item.lsn, reason=reason, quarantine_path=target)


def quarantine_tail(wal_dir: str, path: str, base: int, reader: SegmentReader,
                    offset: int) -> str:
    """Copy a segment's bytes from ``offset`` on to ``quarantine/seg-<base>-off-<offset>.bin``,
    then truncate the segment at ``offset`` and fsync it (§9.4). Returns the quarantine
    file's path."""
    target = write_quarantine(wal_dir, quarantine_range_name(base, offset), reader, offset,
                              reader.size)
    fd = open_regular(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, offset)
        sync_fd(fd)
    finally:
        os.close(fd)
    return target


def _starts_with_reset(seg: _Segment) -> bool:
    """A history boundary counts only if its first record is a valid RESET at its base LSN:
    a boundary whose RESET never became durable must not erase the older history."""
    with SegmentReader(seg.path) as reader:
        size = reader.record_at(SEGMENT_HEADER_SIZE)
        if not size:
            return False
        record = reader.decode_at(SEGMENT_HEADER_SIZE, size)
    return record.type == RECORD_RESET and record.lsn == seg.base


# -- filesystem type ---------------------------------------------------------------------------

_NETWORK_FSTYPES = frozenset({"nfs", "nfs4", "cifs", "smb", "smbfs", "smb2", "smb3"})


def is_network_fstype(fstype: str) -> bool:
    """NFS, SMB/CIFS or FUSE (including ``fuse.<name>`` and ``fuseblk``)."""
    return fstype in _NETWORK_FSTYPES or fstype.startswith(("nfs", "fuse"))


def _unescape_mount_field(field: str) -> str:
    # /proc/mounts escapes space, tab, newline and backslash as \ooo octal.
    if "\\" not in field:
        return field
    out = []
    i = 0
    while i < len(field):
        chunk = field[i + 1:i + 4]
        if field[i] == "\\" and len(chunk) == 3 and all(c in "01234567" for c in chunk):
            out.append(chr(int(chunk, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def filesystem_type(path: str, mounts_path: str = MOUNTS_PATH) -> str | None:
    """The fstype of the mount holding ``path`` per a mounts table, or None if unknown."""
    try:
        with open(mounts_path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    target = os.path.realpath(path)
    best: tuple[int, str] | None = None
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mount_point = _unescape_mount_field(parts[1])
        prefix = mount_point.rstrip("/") + "/"
        if (target == mount_point or target.startswith(prefix)) and (
                best is None or len(mount_point) >= best[0]):
            best = (len(mount_point), parts[2])
    return best[1] if best is not None else None
