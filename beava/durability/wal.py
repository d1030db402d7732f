"""WAL writer: segment files, batch writes, rotation, reset truncation, reclamation.

spec/durability.md §4, §6-§7, §11. The server holds ``<wal_dir>/LOCK``; this module owns the
segment files. Threading: :meth:`WalWriter.write_and_sync` runs on the one WAL worker thread;
every other method runs on the event loop while no batch is in flight (the loop's barrier
guarantees that), so the writer needs no lock.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

from beava._fast.timing.histogram import Histogram
from beava._fast.wal.batch_writer import STAGE_SYNC, STAGE_WRITE
from beava.durability.crash_points import CrashPoints
from beava.durability.wal_format import (
    LOCK_FILE,
    SEGMENT_FLAG_HISTORY_BOUNDARY,
    SEGMENT_HEADER_SIZE,
    encode_segment_header,
    is_snapshot_tmp_name,
    parse_segment_name,
    parse_snapshot_name,
    segment_name,
)

DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
FILE_MODE = 0o644
DIR_MODE = 0o755


class EventLog(Protocol):
    """Where durability reports what it did: the server's JSON log lines (``LogLines``)."""

    def info(self, kind: str, message: str, **fields: Any) -> None: ...

    def error(self, kind: str, message: str, **fields: Any) -> None: ...


def _fullfsync(fd: int) -> None:
    import fcntl

    try:
        fcntl.fcntl(fd, fcntl.F_FULLFSYNC)  # type: ignore[attr-defined]
    except OSError:
        os.fsync(fd)


# Make a file's data durable (§6.1): fdatasync on Linux, F_FULLFSYNC on macOS, else fsync.
if sys.platform == "darwin":
    sync_fd: Callable[[int], None] = _fullfsync
elif hasattr(os, "fdatasync"):
    sync_fd = os.fdatasync
else:
    sync_fd = os.fsync


def sync_dir(path: str) -> None:
    """fsync a directory so that creations, renames and deletions in it are durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DataDirLocked(Exception):
    """Another process holds the data directory's lock (``<wal_dir>/LOCK``)."""


def lock_wal_dir(wal_dir: str) -> int:
    """Take the exclusive advisory lock on ``<wal_dir>/LOCK`` (created if missing) and return
    its descriptor; closing the descriptor releases it. Raises OSError when the file cannot
    be opened and DataDirLocked when another process holds the lock."""
    import fcntl

    fd = os.open(os.path.join(wal_dir, LOCK_FILE),
                 os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), FILE_MODE)  # no link
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise DataDirLocked(wal_dir) from None
    return fd


def now_ms() -> int:
    return int(time.time() * 1000)


class WalIOError(Exception):
    """A failed WAL file operation: ``op`` (write, fsync, truncate...) on ``path``."""

    def __init__(self, op: str, path: str, error: BaseException | str) -> None:
        super().__init__(f"{op} {path}: {error}")
        self.op = op
        self.path = path
        self.error = str(error)


class WalFatal(WalIOError):
    """A WAL I/O failure the server cannot continue after (§6.6): log and exit 4."""


class WalUnavailable(WalIOError):
    """A write failed and was rolled back (a registry record: any write error; an event
    batch: the disk or quota is full): answer 503 ``wal_unavailable``."""


# Write errors after which the server refuses writes until space returns (§6.6).
SPACE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT})
PROBE_BYTES = 4096


class SegmentFile:
    """One open segment file with positional writes. Subclass to inject I/O failures."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self.fd = fd

    @classmethod
    def create(cls, path: str) -> SegmentFile:
        """Create a new, empty file; fails if it exists (``O_CREAT | O_EXCL``)."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                     FILE_MODE)
        return cls(path, fd)

    def write_at(self, data: bytes | bytearray | memoryview, offset: int) -> None:
        """Write all of ``data`` at ``offset``, looping on short writes."""
        view = memoryview(data)
        done = 0
        total = len(view)
        while done < total:
            n = os.pwrite(self.fd, view[done:], offset + done)
            if n <= 0:
                raise OSError(28, "no progress writing WAL segment")  # ENOSPC-like
            done += n

    def sync(self) -> None:
        sync_fd(self.fd)

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)

    def close(self) -> None:
        os.close(self.fd)


class WalWriter:
    """Appends records to the active segment of ``wal_dir`` and manages the segment set.

    Metrics (read by the server): ``fsyncs_total`` (fsyncs of segment files),
    ``bytes_written_total`` (record bytes appended, rolled-back bytes excluded),
    ``last_fsync_seconds``, and ``fsync_durations`` (a histogram of every fsync counted in
    ``fsyncs_total``, timed on the thread that fsyncs: the WAL worker's for event batches).
    """

    def __init__(self, wal_dir: str, snapshot_dir: str, *,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 crash_points: CrashPoints | None = None, log: EventLog | None = None,
                 file_factory: Callable[[str], SegmentFile] = SegmentFile.create) -> None:
        self.wal_dir = wal_dir
        self.snapshot_dir = snapshot_dir
        self.segment_bytes = segment_bytes
        self.crash = crash_points if crash_points is not None else CrashPoints(None)
        self.log = log
        self._file_factory = file_factory
        self._file: SegmentFile | None = None
        self.active_base_lsn = 0
        self.active_size = 0
        self.fsyncs_total = 0
        self.bytes_written_total = 0
        self.last_fsync_seconds = 0.0
        self.fsync_durations = Histogram()  # every fsync of a segment file, as timed here

    # -- segments ----------------------------------------------------------------------------

    @property
    def active_path(self) -> str:
        return os.path.join(self.wal_dir, segment_name(self.active_base_lsn))

    def start(self, next_lsn: int) -> None:
        """Create the first active segment, ``seg-<next_lsn>`` (recovery step 8)."""
        self._open_segment(next_lsn, 0, None)

    def _open_segment(self, base_lsn: int, flags: int, crash_point: str | None) -> None:
        """Create ``seg-<base_lsn>``: O_EXCL, header, fsync file, fsync directory (§4).

        Any failure is fatal (§6.6). The new segment becomes active; the old one is closed.
        """
        path = os.path.join(self.wal_dir, segment_name(base_lsn))
        try:
            new = self._file_factory(path)
        except OSError as exc:
            raise WalFatal("create", path, exc) from exc
        try:
            new.write_at(encode_segment_header(base_lsn, flags, now_ms()), 0)
            if crash_point is not None:
                self.crash.hit(crash_point)
            self._timed_sync(new)
            sync_dir(self.wal_dir)
        except OSError as exc:
            new.close()
            raise WalFatal("create", path, exc) from exc
        old = self._file
        self._file = new
        self.active_base_lsn = base_lsn
        self.active_size = SEGMENT_HEADER_SIZE
        if old is not None:
            # Sealed and fsynced already: a close error loses nothing.
            with contextlib.suppress(OSError):
                old.close()

    def _timed_sync(self, f: SegmentFile) -> None:
        started = time.perf_counter()
        f.sync()
        self._synced(time.perf_counter() - started)

    def _synced(self, seconds: float) -> None:
        """Count one fsync of a segment file that took ``seconds``."""
        self.fsync_durations.observe(seconds)
        self.fsyncs_total += 1
        self.last_fsync_seconds = seconds

    def _active(self) -> SegmentFile:
        if self._file is None:
            raise RuntimeError("WAL writer has no active segment (call start first)")
        return self._file

    # -- writes ------------------------------------------------------------------------------

    def _append(self, f: SegmentFile, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` at the end of the active segment ``f``; a failure is WalFatal."""
        try:
            f.write_at(data, self.active_size)
        except OSError as exc:
            raise WalFatal("write", f.path, exc) from exc
        self.active_size += len(data)
        self.bytes_written_total += len(data)

    def _fsync(self, f: SegmentFile) -> None:
        """fsync ``f``; a failure is WalFatal."""
        try:
            self._timed_sync(f)
        except OSError as exc:
            raise WalFatal("fsync", f.path, exc) from exc

    def write_and_sync(self, data: bytes | bytearray | memoryview) -> None:
        """Append an event batch and fsync it, synchronously.

        A full disk or quota (ENOSPC, EDQUOT) while writing: the segment is truncated back
        to its previous length and WalUnavailable raised. Any other failure, a failed
        truncation or any fsync failure: WalFatal.
        """
        f = self._active()
        before = self.active_size
        try:
            f.write_at(data, before)
        except OSError as exc:
            self._write_failed(f, before, exc)
        self._written(len(data))
        self.crash.hit("wal_after_write")
        self._fsync(f)

    def batch_target(self) -> tuple[int, int]:
        """``(fd, offset)`` where the next event batch goes: the end of the active segment
        (for the writer thread, which writes and fdatasyncs it; then batch_done)."""
        return self._active().fd, self.active_size

    def batch_done(self, size: int, err: int, stage: int, seconds: float) -> None:
        """The writer thread's outcome of a batch of ``size`` bytes sent to batch_target():
        counted, or raised as write_and_sync raises it (``stage``: where ``err`` happened,
        beava._fast.wal.batch_writer)."""
        f = self._active()
        if stage == STAGE_WRITE:
            self._write_failed(f, self.active_size, OSError(err, os.strerror(err)))
        self._written(size)
        if stage == STAGE_SYNC:
            raise WalFatal("fsync", f.path, OSError(err, os.strerror(err)))
        self._synced(seconds)

    def _written(self, size: int) -> None:
        self.active_size += size
        self.bytes_written_total += size

    def _write_failed(self, f: SegmentFile, before: int, exc: OSError) -> NoReturn:
        """A batch write to ``f`` at ``before`` failed: WalUnavailable for a full disk or
        quota (the segment cut back to ``before`` first), else WalFatal."""
        if exc.errno not in SPACE_ERRORS:
            raise WalFatal("write", f.path, exc) from exc
        self._truncate_back(f, before)
        raise WalUnavailable("write", f.path, exc) from exc

    def _truncate_back(self, f: SegmentFile, size: int) -> None:
        try:
            f.truncate(size)
        except OSError as exc:
            raise WalFatal("truncate", f.path, exc) from exc

    def probe(self) -> bool:
        """Whether the disk takes writes again: write a page of zeros after the active
        segment's end and truncate it away (a crash in between leaves zeros, a torn tail).
        False while the disk or quota is full; WalFatal on any other failure."""
        f = self._active()
        try:
            f.write_at(bytes(PROBE_BYTES), self.active_size)
        except OSError as exc:
            self._truncate_back(f, self.active_size)
            if exc.errno not in SPACE_ERRORS:
                raise WalFatal("write", f.path, exc) from exc
            return False
        self._truncate_back(f, self.active_size)
        return True

    def write_registry_record(self, data: bytes | bytearray) -> None:
        """Append one REGISTRY record and fsync it, synchronously (§10 step 2).

        A write failure is rolled back (truncate to the previous length + fsync) and raises
        WalUnavailable; the caller answers 503 and reuses the LSN. A failed rollback or any
        fsync failure raises WalFatal.
        """
        f = self._active()
        before = self.active_size
        try:
            f.write_at(data, before)
        except OSError as exc:
            try:
                f.truncate(before)
                self._timed_sync(f)
            except OSError as exc2:
                raise WalFatal("truncate", f.path, exc2) from exc2
            raise WalUnavailable("write", f.path, exc) from exc
        self.active_size = before + len(data)
        self.bytes_written_total += len(data)
        self._fsync(f)

    # -- rotation, reset, reclamation ---------------------------------------------------------

    def maybe_rotate(self, next_lsn: int) -> bool:
        """After a completed batch: open ``seg-<next_lsn>`` if the active one is full (§7).

        Returns True when a new segment was created. An empty active segment never rotates.
        """
        if self.active_size < self.segment_bytes or next_lsn <= self.active_base_lsn:
            return False
        self._open_segment(next_lsn, 0, "rotation_after_create")
        if self.log is not None:
            self.log.info("wal.segment_rotated", "WAL segment rotated",
                          segment=segment_name(next_lsn), base_lsn=next_lsn)
        return True

    def reset(self, lsn: int, record_bytes: bytes | bytearray) -> None:
        """Reset truncation (§11 steps 2-3).

        ``record_bytes`` is the encoded RESET record with LSN ``lsn``. Creates the history-boundary
        segment ``seg-<lsn>``, writes and fsyncs the record (the reset is durable from here),
        then deletes every older segment and every snapshot file and fsyncs both directories.
        Failures raise WalFatal; a crash after the boundary is completed by recovery.
        """
        if self._file is not None and lsn == self.active_base_lsn:
            # The active segment holds no record yet and has the boundary's name: replace it.
            self._discard_empty_active()
        self._open_segment(lsn, SEGMENT_FLAG_HISTORY_BOUNDARY, None)
        f = self._active()
        self._append(f, record_bytes)
        self._fsync(f)
        self.crash.hit("reset_after_boundary")
        try:
            for base, name in list_segments(self.wal_dir):
                if base < lsn:
                    _remove(os.path.join(self.wal_dir, name))
            for name in os.listdir(self.snapshot_dir):
                if parse_snapshot_name(name) is not None or is_snapshot_tmp_name(name):
                    _remove(os.path.join(self.snapshot_dir, name))
        except OSError as exc:
            raise WalFatal("delete", self.wal_dir, exc) from exc
        for directory in (self.wal_dir, self.snapshot_dir):
            try:
                sync_dir(directory)
            except OSError as exc:
                raise WalFatal("fsync", directory, exc) from exc

    def _discard_empty_active(self) -> None:
        f = self._active()
        self._file = None
        try:
            f.close()
            os.unlink(f.path)
            sync_dir(self.wal_dir)
        except OSError as exc:
            raise WalFatal("delete", f.path, exc) from exc

    def reclaim(self, oldest_retained_snapshot_lsn: int) -> int:
        """Delete sealed segments whose records all have LSN <= the oldest retained snapshot.

        A segment qualifies when the next segment's base LSN is <= ``S_min + 1`` (§7). The
        active segment is never deleted. Returns the number of segments deleted.
        """
        limit = oldest_retained_snapshot_lsn + 1
        try:
            segments = list_segments(self.wal_dir)
        except OSError as exc:
            raise WalFatal("list", self.wal_dir, exc) from exc
        deleted = 0
        for (base, name), (next_base, _) in zip(segments, segments[1:], strict=False):
            if base >= self.active_base_lsn or next_base > limit:
                break
            _remove(os.path.join(self.wal_dir, name))
            deleted += 1
        if deleted:
            try:
                sync_dir(self.wal_dir)
            except OSError as exc:
                raise WalFatal("fsync", self.wal_dir, exc) from exc
            if self.log is not None:
                self.log.info("wal.segments_reclaimed", "old WAL segments deleted",
                              count=deleted, up_to_lsn=oldest_retained_snapshot_lsn)
        return deleted

    def close(self) -> None:
        """Close the active segment (the caller has made every record durable first)."""
        if self._file is not None:
            f, self._file = self._file, None
            f.close()


def list_segments(wal_dir: str) -> list[tuple[int, str]]:
    """``(base_lsn, file name)`` of every segment-named file, in LSN order."""
    found = []
    for name in os.listdir(wal_dir):
        base = parse_segment_name(name)
        if base is not None:
            found.append((base, name))
    found.sort()
    return found


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise WalFatal("delete", path, exc) from exc
