"""Opening and creating files inside a data directory without trusting its entries.

A data directory may hold entries nobody meant to be there: a symbolic link named like a
segment or planted at a quarantine file's name, a FIFO or a device named like a segment or
a snapshot, a symlinked ``quarantine`` directory. Recovery and ``beava wal`` never follow
such an entry and never open one that is not a regular file (a FIFO opened for reading
blocks until a writer appears; a device may do anything on open):

- :func:`open_regular` checks the entry with ``lstat`` before opening it, opens it with
  ``O_NOFOLLOW | O_NONBLOCK`` and checks the descriptor with ``fstat`` (the entry may have
  been swapped in between); anything else raises :class:`UnusableEntry`.
- :func:`write_quarantine` creates quarantine files exclusively (``O_CREAT | O_EXCL |
  O_NOFOLLOW``) inside a ``quarantine`` directory opened without following a link, relative
  to the WAL directory's descriptor, so nothing is written outside the data directory.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from beava.durability.wal import DIR_MODE, FILE_MODE, sync_fd
from beava.durability.wal_format import QUARANTINE_DIR

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
# Another name is picked for a quarantine file while its name is taken by something else.
QUARANTINE_NAME_TRIES = 1000
COMPARE_CHUNK = 1 << 20


class UnusableEntry(OSError):
    """An entry of a data directory is a symbolic link or not a regular file (directory);
    the message names it: ``data directory unusable: PATH is a FIFO, not a regular file``.
    An OSError, so that every reader of a data directory treats it as unreadable."""

    def __init__(self, path: str, what: str) -> None:
        super().__init__(f"data directory unusable: {path} {what}")
        self.path = path


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_regular(path: str, dir_fd: int | None = None) -> None:
    """Raise UnusableEntry unless ``path`` is a regular file itself (not through a link)."""
    mode = os.lstat(path, dir_fd=dir_fd).st_mode
    if not stat.S_ISREG(mode):
        raise UnusableEntry(path, f"is {_kind(mode)}, not a regular file")


def open_regular(path: str, flags: int = os.O_RDONLY, dir_fd: int | None = None) -> int:
    """Open an existing regular file without following a link or blocking; UnusableEntry
    for anything else (OSError for the usual failures)."""
    check_regular(path, dir_fd)
    try:
        fd = os.open(path, flags | _NOFOLLOW | os.O_NONBLOCK | _CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnusableEntry(path, "is a symbolic link, not a regular file") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnusableEntry(path, f"is {_kind(mode)}, not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_directory(path: str) -> None:
    """Raise UnusableEntry when ``path`` exists and is not a directory itself (a symlink
    to one included)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(mode):
        raise UnusableEntry(path, f"is {_kind(mode)}, not a directory")


@contextmanager
def quarantine_dir(wal_dir: str) -> Iterator[int]:
    """A descriptor of ``<wal_dir>/quarantine`` (created if missing), opened without
    following a link; UnusableEntry when the entry is a link or not a directory."""
    path = os.path.join(wal_dir, QUARANTINE_DIR)
    wal_fd = os.open(wal_dir, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    try:
        check_directory(path)
        try:
            os.mkdir(QUARANTINE_DIR, DIR_MODE, dir_fd=wal_fd)
            os.fsync(wal_fd)
        except FileExistsError:
            pass
        try:
            fd = os.open(QUARANTINE_DIR, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC,
                         dir_fd=wal_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise UnusableEntry(path, "is a symbolic link or not a directory") from None
            raise
    finally:
        os.close(wal_fd)
    try:
        yield fd
    finally:
        os.close(fd)


class RangeSource(Protocol):
    """Bytes to quarantine: a byte range of an open file (wal_scan.SegmentReader)."""

    def read(self, offset: int, size: int) -> bytes: ...

    def copy_to(self, fd: int, start: int, stop: int) -> None: ...


def _same_content(dir_fd: int, name: str, source: RangeSource, start: int, stop: int) -> bool:
    """True when ``name`` is a regular file holding exactly ``source``'s bytes
    ``[start, stop)`` (quarantined at an earlier start)."""
    try:
        fd = open_regular(name, os.O_RDONLY, dir_fd)
    except OSError:  # UnusableEntry included
        return False
    try:
        if os.fstat(fd).st_size != stop - start:
            return False
        pos = start
        while pos < stop:
            n = min(COMPARE_CHUNK, stop - pos)
            if os.pread(fd, n, pos - start) != source.read(pos, n):
                return False
            pos += n
        return True
    finally:
        os.close(fd)


def write_quarantine(wal_dir: str, name: str, source: RangeSource, start: int,
                     stop: int) -> str:
    """Copy ``source``'s bytes ``[start, stop)`` to ``<wal_dir>/quarantine/<name>``, fsync
    the file and the directory; returns the path written.

    The file is created exclusively and never through a link. When the name is taken, a
    file already holding the same bytes (this range quarantined at an earlier start) is
    kept; anything else keeps its name and the copy goes to ``<stem>-<n><suffix>``.
    """
    stem, suffix = os.path.splitext(name)
    with quarantine_dir(wal_dir) as qfd:
        for attempt in range(QUARANTINE_NAME_TRIES):
            candidate = name if attempt == 0 else f"{stem}-{attempt}{suffix}"
            try:
                fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW
                             | _CLOEXEC, FILE_MODE, dir_fd=qfd)
            except FileExistsError:
                if _same_content(qfd, candidate, source, start, stop):
                    return os.path.join(wal_dir, QUARANTINE_DIR, candidate)
                continue
            try:
                source.copy_to(fd, start, stop)
                sync_fd(fd)
            finally:
                os.close(fd)
            os.fsync(qfd)
            return os.path.join(wal_dir, QUARANTINE_DIR, candidate)
    raise UnusableEntry(os.path.join(wal_dir, QUARANTINE_DIR, name),
                        f"and {QUARANTINE_NAME_TRIES - 1} other names are taken")
