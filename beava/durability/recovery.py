"""Start-up recovery over the WAL and snapshot directories (spec/durability.md §9 steps 1-7).

The caller holds the data-directory lock, owns the state and supplies two callbacks:

- ``load_snapshot(snapshot)`` installs a :class:`~beava.durability.snapshots.LoadedSnapshot`; it may
  raise ``SnapshotInvalid`` to reject it (recovery then tries the next older one), and must
  leave the state untouched when it does.
- ``apply(record)`` applies one WAL record with LSN > the snapshot's, in LSN order. It performs
  the §9.2 semantic checks (registry version, registered event, body decodes to a map) and
  raises :class:`Unapplicable` for a record it cannot apply (the record is quarantined and
  skipped). Structural validity, LSN order, name encoding and damage are handled here.

Damage in the newest segment is a torn tail (§9.4) when no valid record follows it. When
valid records with higher LSNs follow it, acknowledged data was damaged: it is logged as
corruption and, by the ``on_corruption`` policy, either quarantined with the tail (the
default, which keeps G10) or refused before anything on disk is touched
(:class:`WalCorruption`, exit 3; ``beava wal repair`` then does the quarantining).

Step 8 (a new active segment at ``result.next_lsn``) is :meth:`WalWriter.start`; step 9 and the
``recovery.complete`` line belong to the caller. Every other recovery log line is emitted here.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from beava.durability.crash_points import CrashPoints
from beava.durability.snapshots import (
    STATE_FORMAT,
    LoadedSnapshot,
    SnapshotInvalid,
    list_snapshots,
    read_snapshot,
)
from beava.durability.wal import DIR_MODE, FILE_MODE, list_segments, sync_dir, sync_fd
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
    decode_record,
    decode_segment_header,
    is_snapshot_tmp_name,
    parse_segment_name,
    parse_snapshot_name,
    quarantine_range_name,
    quarantine_record_name,
    record_lsn_at,
    record_size_at,
)
from beava.durability.wal_scan import AfterDamage, resync, valid_after

MOUNTS_PATH = "/proc/mounts"

# What recovery does when valid records follow damage in the newest segment.
ON_CORRUPTION_QUARANTINE = "quarantine"  # quarantine the whole tail, truncate, start (G10)
ON_CORRUPTION_REFUSE = "refuse"  # exit 3 without touching anything; `beava wal repair`
ON_CORRUPTION_POLICIES = (ON_CORRUPTION_QUARANTINE, ON_CORRUPTION_REFUSE)


class Unapplicable(Exception):
    """Raised by the ``apply`` callback: the record is valid but cannot be applied."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RecoveryFatal(Exception):
    """Recovery cannot produce a trustworthy state: log ``server.fatal`` and exit 3."""


class TailDamage(NamedTuple):
    """The first damage in the newest segment and what follows it."""

    offset: int
    """Where the damage starts: the first invalid record, or 0 for an invalid header."""
    bytes: int
    """Bytes from ``offset`` to the end of the file."""
    last_good: int
    """LSN of the last valid record before the damage (the base LSN - 1 if none)."""
    after: AfterDamage
    """Valid records after the damage: none for a torn tail, some for corruption."""

    @property
    def corruption(self) -> bool:
        return self.after.records > 0


class WalCorruption(RecoveryFatal):
    """Valid records follow damage in the newest segment and the policy is ``refuse``."""

    def __init__(self, wal_dir: str, segment: str, damage: TailDamage) -> None:
        after = damage.after
        super().__init__(
            f"WAL corruption in {segment} at offset {damage.offset}: {after.records} valid "
            f"records (LSN {after.first_lsn}-{after.last_lsn}) follow the damage; refusing "
            f"to start (--wal-on-corruption refuse), nothing was changed. Inspect with "
            f"'beava wal check {data_dir_of(wal_dir)}'; 'beava wal repair "
            f"{data_dir_of(wal_dir)} --yes' moves the damaged tail to quarantine")
        self.segment = segment
        self.damage = damage


def data_dir_of(wal_dir: str) -> str:
    """The directory ``beava wal`` takes for ``wal_dir``: its parent for ``<data-dir>/wal``,
    else the WAL directory itself."""
    path = os.path.normpath(wal_dir)
    return os.path.dirname(path) or "." if os.path.basename(path) == "wal" else path


def read_segment_header(path: str, base: int) -> tuple[SegmentHeader | None, str]:
    """A segment's header and ``""``, or None and why it is invalid (including a
    ``base_lsn`` that differs from the one in the file name)."""
    with open(path, "rb") as f:
        raw = f.read(SEGMENT_HEADER_SIZE)
    try:
        header = decode_segment_header(raw)
    except FormatError as exc:
        return None, str(exc)
    if header.base_lsn != base:
        return None, f"header base_lsn {header.base_lsn} does not match the file name"
    return header, ""


def newest_segment_damage(data: bytes, base: int, header_valid: bool) -> TailDamage | None:
    """The first damage in the newest segment's bytes, None when it ends cleanly.

    ``base`` is the LSN in the file name. Records are read in order from the header; at the
    first one that is not structurally valid (or at the header when it is invalid), the rest
    of the file is scanned for valid records with higher LSNs (:func:`valid_after`).
    """
    end = len(data)
    last_good = base - 1
    offset = SEGMENT_HEADER_SIZE
    if not header_valid:
        offset = 0
    else:
        while offset < end:
            size = record_size_at(data, offset, end)
            if size == 0:
                break
            last_good = max(last_good, record_lsn_at(data, offset))
            offset += size
        else:
            return None
    return TailDamage(offset, end - offset, last_good, valid_after(data, offset, end, last_good))


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
    """Damaged byte ranges plus unapplicable records quarantined (torn tails not counted)."""
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
            on_corruption: str = ON_CORRUPTION_QUARANTINE) -> RecoveryResult:
    """Run recovery; raises RecoveryFatal for the §9.6 conditions (exit 3), and
    WalCorruption for corruption of the newest segment under the ``refuse`` policy.

    An OSError on the data directories is reported as RecoveryFatal too.
    """
    if on_corruption not in ON_CORRUPTION_POLICIES:
        raise ValueError(f"unknown WAL corruption policy {on_corruption!r}")
    run = _Recovery(wal_dir, snapshot_dir, load_snapshot, apply, log,
                    crash_points if crash_points is not None else CrashPoints(None),
                    state_formats, mounts_path, on_corruption == ON_CORRUPTION_REFUSE)
    try:
        return run.run()
    except OSError as exc:
        raise RecoveryFatal(f"recovery: data directory I/O error: {exc}") from exc


class _Recovery:
    def __init__(self, wal_dir: str, snapshot_dir: str,
                 load_snapshot: Callable[[LoadedSnapshot], None],
                 apply: Callable[[Record], None], log: Any, crash: CrashPoints,
                 state_formats: frozenset[int], mounts_path: str, refuse: bool) -> None:
        self.wal_dir = wal_dir
        self.refuse = refuse
        self.snapshot_dir = snapshot_dir
        self.load_snapshot = load_snapshot
        self.apply = apply
        self.log = log
        self.crash = crash
        self.state_formats = state_formats
        self.mounts_path = mounts_path
        self.quarantine_dir = os.path.join(wal_dir, QUARANTINE_DIR)
        self.quarantined = 0
        self.replayed = 0
        self.last_seen = 0  # highest LSN of a valid record read in order (the "last good" LSN)
        self.last_record: Record | None = None
        self.registry_version: int | None = None
        self.watermark: int | None = None

    # -- driver ------------------------------------------------------------------------------

    def run(self) -> RecoveryResult:
        started = time.monotonic()
        self.log.info("recovery.started", "recovery started", wal_dir=self.wal_dir,
                      snapshot_dir=self.snapshot_dir)
        segments = self._read_headers()
        if self.refuse:
            self._refuse_corrupt_newest(segments)  # before anything on disk changes
        self._delete_snapshot_temps()
        self._check_filesystem()
        self._report_foreign_files()
        max_base = segments[-1].base if segments else 0
        segments = self._drop_interrupted_newest(segments)
        segments = self._apply_history_boundary(segments)
        snapshot, had_invalid = self._load_newest_snapshot()
        s_lsn = snapshot.header.snapshot_lsn if snapshot is not None else 0
        first = self._first_relevant(segments, s_lsn, had_invalid)
        relevant = segments[first:] if first is not None else []
        for index, seg in enumerate(relevant):
            next_base = relevant[index + 1].base if index + 1 < len(relevant) else None
            damaged_to_eof = self._replay_segment(seg, s_lsn, next_base)
            if next_base is not None:
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
        next_lsn = max(self.last_seen + 1, s_lsn + 1, max_base)
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
        segments = []
        for base, name in list_segments(self.wal_dir):
            path = os.path.join(self.wal_dir, name)
            header, error = read_segment_header(path, base)
            segments.append(_Segment(base, name, path, header, error))
        return segments

    def _refuse_corrupt_newest(self, segments: list[_Segment]) -> None:
        """The ``refuse`` policy: raise WalCorruption when valid records follow damage in
        the newest segment (its header included)."""
        if not segments:
            return
        seg = segments[-1]
        with open(seg.path, "rb") as f:
            data = f.read()
        damage = newest_segment_damage(data, seg.base, seg.header is not None)
        if damage is not None:
            self._refuse_if_policy(seg, damage)

    def _drop_interrupted_newest(self, segments: list[_Segment]) -> list[_Segment]:
        """A newest segment whose header is short or invalid was being created: quarantine
        it. If valid records follow the header, it is corruption, reported as such."""
        if not segments or segments[-1].header is not None:
            return segments
        seg = segments[-1]
        with open(seg.path, "rb") as f:
            data = f.read()
        damage = newest_segment_damage(data, seg.base, False)
        assert damage is not None  # an invalid header is damage at offset 0
        target = os.path.join(self._quarantine(), quarantine_range_name(seg.base, 0))
        os.replace(seg.path, target)
        sync_dir(self.quarantine_dir)
        sync_dir(self.wal_dir)
        if damage.corruption:
            self._log_corruption(seg, damage, target)
        else:
            self.log.warn("recovery.wal_tail_truncated",
                          f"newest WAL segment has an invalid header ({seg.header_error}); "
                          "moved to quarantine", segment=seg.name, offset=0,
                          bytes=len(data), quarantine_path=target)
        return segments[:-1]

    def _refuse_if_policy(self, seg: _Segment, damage: TailDamage) -> None:
        # Checked before anything changes, and again at the damage during replay, where
        # the last good LSN may differ when an earlier segment ends past this one's base.
        if self.refuse and damage.corruption:
            self._log_corruption(seg, damage, None)
            raise WalCorruption(self.wal_dir, seg.name, damage)

    def _log_corruption(self, seg: _Segment, damage: TailDamage,
                        quarantine_path: str | None) -> None:
        """ERROR ``recovery.wal_corruption`` for damage in the newest segment followed by
        valid records; ``quarantine_path`` None: refused, nothing changed. A quarantined
        tail counts once for the damage and once per valid record discarded with it."""
        after = damage.after
        if damage.offset == 0:
            message = "newest WAL segment header damaged with valid records after it; "
            done = "the whole segment was moved to quarantine"
        else:
            message = "newest WAL segment damaged with valid records after the damage; "
            done = "the whole tail was copied to quarantine and truncated"
        if quarantine_path is None:
            message += "refusing to start"
        else:
            message += done
            self.quarantined += 1 + after.records
        self.log.error("recovery.wal_corruption", message, segment=seg.name,
                       offset=damage.offset, bytes=damage.bytes, resumed_at_lsn=None,
                       quarantine_path=quarantine_path, last_good_lsn=damage.last_good,
                       valid_records_after=after.records, first_lsn_after=after.first_lsn,
                       last_lsn_after=after.last_lsn,
                       policy=ON_CORRUPTION_REFUSE if quarantine_path is None
                       else ON_CORRUPTION_QUARANTINE)

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
        with open(seg.path, "rb") as f:
            data = f.read()
        if seg.header is None:
            # Only sealed segments get here (an invalid newest header was quarantined).
            self._quarantine_range(seg, data, 0, len(data), next_base,
                                   f"invalid segment header: {seg.header_error}")
            return True
        end = len(data)
        offset = SEGMENT_HEADER_SIZE
        damaged_to_eof = False
        while offset < end:
            size = record_size_at(data, offset, end)
            if size == 0:
                if newest:
                    damage = TailDamage(offset, end - offset, self.last_seen,
                                        valid_after(data, offset, end, self.last_seen))
                    self._refuse_if_policy(seg, damage)
                    self._truncate_tail(seg, data, damage)
                    end = offset
                    break
                resume = resync(data, offset + 1, end, self.last_seen)
                resumed_lsn = record_lsn_at(data, resume) if resume < end else next_base
                self._quarantine_range(seg, data, offset, resume, resumed_lsn,
                                       "record not structurally valid")
                if resume >= end:
                    damaged_to_eof = True
                    break
                offset = resume
                continue
            self._record(data, offset, size, s_lsn)
            offset += size
        if newest and end == SEGMENT_HEADER_SIZE:
            # No record survived: the new active segment (step 8) may need this name.
            os.unlink(seg.path)
            sync_dir(self.wal_dir)
        return damaged_to_eof

    def _record(self, data: bytes, offset: int, size: int, s_lsn: int) -> None:
        lsn = record_lsn_at(data, offset)
        if lsn <= s_lsn:
            # Reflected in the snapshot already.
            self.last_seen = max(self.last_seen, lsn)
            return
        if lsn <= self.last_seen:
            self._quarantine_record(data, offset, size, lsn,
                                    f"LSN {lsn} is not greater than {self.last_seen}")
            return
        self.last_seen = lsn
        try:
            record = decode_record(data, offset)
        except ValueError:
            self._quarantine_record(data, offset, size, lsn, "event name is not valid UTF-8")
            return
        try:
            self.apply(record)
        except Unapplicable as exc:
            self._quarantine_record(data, offset, size, lsn, exc.reason)
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

    def _quarantine(self) -> str:
        if not os.path.isdir(self.quarantine_dir):
            os.makedirs(self.quarantine_dir, mode=DIR_MODE, exist_ok=True)
            sync_dir(self.wal_dir)
        return self.quarantine_dir

    def _write_quarantine(self, name: str, data: bytes | memoryview) -> str:
        return write_quarantine(self.wal_dir, name, data)

    def _truncate_tail(self, seg: _Segment, data: bytes, damage: TailDamage) -> None:
        """§9.4: copy the tail from the damage on to quarantine, truncate the segment there,
        fsync. A torn tail is a WARN; valid records after the damage make it corruption."""
        offset = damage.offset
        target = quarantine_tail(self.wal_dir, seg.path, seg.base, data, offset)
        if damage.corruption:
            self._log_corruption(seg, damage, target)
        else:
            self.log.warn("recovery.wal_tail_truncated", "torn WAL tail removed",
                          segment=seg.name, offset=offset, bytes=damage.bytes,
                          quarantine_path=target)

    def _quarantine_range(self, seg: _Segment, data: bytes, start: int, stop: int,
                          resumed_at_lsn: int | None, why: str) -> None:
        """§9.5: copy damaged bytes of a sealed segment; the segment itself is left as is."""
        target = self._write_quarantine(quarantine_range_name(seg.base, start),
                                        memoryview(data)[start:stop])
        self.quarantined += 1
        self.log.error("recovery.wal_corruption", f"damaged WAL bytes quarantined ({why})",
                       segment=seg.name, offset=start, bytes=stop - start,
                       resumed_at_lsn=resumed_at_lsn, quarantine_path=target)

    def _quarantine_record(self, data: bytes, offset: int, size: int, lsn: int,
                           reason: str) -> None:
        target = self._write_quarantine(quarantine_record_name(lsn),
                                        memoryview(data)[offset:offset + size])
        self.quarantined += 1
        self.log.warn("recovery.wal_record_quarantined", "WAL record quarantined", lsn=lsn,
                      reason=reason, quarantine_path=target)


def write_quarantine(wal_dir: str, name: str, data: bytes | memoryview) -> str:
    """Write ``data`` to ``<wal_dir>/quarantine/<name>`` (created if needed), fsync the file
    and the directory; returns its path."""
    directory = os.path.join(wal_dir, QUARANTINE_DIR)
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=DIR_MODE, exist_ok=True)
        sync_dir(wal_dir)
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        sync_fd(fd)
    finally:
        os.close(fd)
    sync_dir(directory)
    return path


def quarantine_tail(wal_dir: str, path: str, base: int, data: bytes, offset: int) -> str:
    """Copy the newest segment's bytes from ``offset`` on (``data`` is the whole file) to
    ``quarantine/seg-<base>-off-<offset>.bin``, then truncate the segment at ``offset`` and
    fsync it (§9.4). Returns the quarantine file's path."""
    target = write_quarantine(wal_dir, quarantine_range_name(base, offset),
                              memoryview(data)[offset:])
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, offset)
        sync_fd(fd)
    finally:
        os.close(fd)
    return target


def _starts_with_reset(seg: _Segment) -> bool:
    """A history boundary counts only if its first record is a valid RESET at its base LSN:
    a boundary whose RESET never became durable must not erase the older history."""
    with open(seg.path, "rb") as f:
        f.seek(SEGMENT_HEADER_SIZE)
        prefix = f.read(4)
        if len(prefix) < 4:
            return False
        rest = f.read(int.from_bytes(prefix, "little"))
    data = prefix + rest
    if not record_size_at(data, 0, len(data)):
        return False
    record = decode_record(data, 0)
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
