"""Reading WAL segments in bounded memory, and finding the records past damage
(spec/durability.md §4-§5, §9.4-§9.5).

Recovery, ``beava wal check|repair`` and the backfill's WAL read share this module.

- :class:`SegmentReader` opens a segment only if it is a regular file (never through a
  link, never blocking: ``data_files.open_regular``) and reads it through a window of
  :data:`WINDOW` bytes, whatever the file's size. A record's declared length is checked
  against the file size before anything is read for it; a record larger than the window is
  CRC-checked in window-sized reads and read whole only once it is known to be valid.
- :meth:`SegmentReader.resync` is §9.5's search for the next structurally valid record:
  a compiled pattern finds the offsets whose type, body_format and flags bytes are in range
  (so long damaged runs are skipped at C speed), holes of a sparse file are skipped
  unread (they are zeros, which no record's type byte is), and each candidate is checked.
- :func:`walk` reads a segment as recovery does: record after record, and at each damage
  the offset where reading resumes.
"""

from __future__ import annotations

import os
import re
import struct
import zlib
from collections.abc import Iterator
from types import TracebackType
from typing import NamedTuple

from beava.durability.data_files import open_regular
from beava.durability.wal_format import (
    RECORD_NAME_OFFSET,
    SEGMENT_HEADER_SIZE,
    Record,
    decode_record,
    record_crc_at,
    record_head_size,
    record_lsn_at,
)

WINDOW = 4 << 20
"""Bytes read at once; memory for reading a segment stays near this (and one valid record
larger than it)."""
# record_len .. name_len, then body_len: every record's first bytes, name excluded.
_FIXED_BYTES = RECORD_NAME_OFFSET + 4
_NAME_LEN_OFFSET = RECORD_NAME_OFFSET - 2
# A record's type (1-4), body_format (1-2) and flags (0) bytes, 16 bytes into it.
_TYPE_OFFSET = 16
# lsn, type, body_format, flags and timestamp_ms, 8 bytes into a record
_LSN_TYPE_TIME = struct.Struct("<QBBHQ")
_CANDIDATE = re.compile(rb"[\x01-\x04][\x01\x02]\x00\x00")
_CANDIDATE_LEN = 4
_SEEK_DATA: int | None = getattr(os, "SEEK_DATA", None)


class SegmentReader:
    """A segment opened for reading; ``size`` is its length when opened."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = open_regular(path)
        try:
            self.size = os.fstat(self.fd).st_size
        except BaseException:
            os.close(self.fd)
            raise
        self._buf = b""
        self._base = 0

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> SegmentReader:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- bytes ------------------------------------------------------------------------------

    def read(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``offset`` (fewer only at the end of the file)."""
        parts = []
        while size > 0:
            chunk = os.pread(self.fd, size, offset)
            if not chunk:
                break
            parts.append(chunk)
            offset += len(chunk)
            size -= len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _view(self, offset: int, need: int, ahead: int = WINDOW) -> tuple[bytes, int]:
        """A buffer holding the file's bytes from ``offset`` (``need`` of them unless the
        file ends first) and the position of ``offset`` in it. Reads ``ahead`` bytes at
        once so that records read in order share one read."""
        buf = self._buf
        base = self._base
        if base <= offset and offset + need <= base + len(buf):
            return buf, offset - base
        self._buf = buf = self.read(offset, min(max(need, ahead), self.size - offset))
        self._base = offset
        return buf, 0

    def _data_from(self, offset: int) -> int:
        """The first offset >= ``offset`` that is not in a hole of a sparse file."""
        if _SEEK_DATA is None:
            return offset
        try:
            return os.lseek(self.fd, offset, _SEEK_DATA)
        except OSError:  # ENXIO: only a hole is left; EINVAL: not supported here
            return self.size if offset < self.size else offset

    def copy_to(self, fd: int, start: int, stop: int) -> None:
        """Write bytes ``[start, stop)`` to ``fd`` from its offset 0, in window-sized reads;
        holes and runs of zeros stay holes in the copy."""
        pos = start
        while pos < stop:
            pos = min(self._data_from(pos), stop)
            n = min(WINDOW, stop - pos)
            if n <= 0:
                break
            chunk = self.read(pos, n)
            if not chunk:
                break
            if chunk.count(0) != len(chunk):
                view = memoryview(chunk)
                at = pos - start
                while view:
                    written = os.pwrite(fd, view, at)
                    view = view[written:]
                    at += written
            pos += len(chunk)
        os.ftruncate(fd, stop - start)

    # -- records ----------------------------------------------------------------------------

    def header(self) -> bytes:
        return self.read(0, SEGMENT_HEADER_SIZE)

    def _head(self, offset: int, ahead: int) -> tuple[int, bytes, int]:
        """The size the record at ``offset`` declares when its fixed fields make it
        structurally valid apart from the CRC (else 0), a buffer holding those fields and
        their position in it; the body is not read."""
        end = self.size
        if end - offset < _FIXED_BYTES:
            return 0, b"", 0
        buf, rel = self._view(offset, _FIXED_BYTES, ahead)
        name_len = int.from_bytes(buf[rel + _NAME_LEN_OFFSET:rel + RECORD_NAME_OFFSET], "little")
        buf, rel = self._view(offset, _FIXED_BYTES + name_len, ahead)
        return record_head_size(buf, rel, rel + end - offset), buf, rel

    def head_at(self, offset: int) -> RecordHead:
        """The fixed fields of the record at ``offset``, its body unread and its CRC
        unchecked (size 0: its fields do not make it structurally valid)."""
        size, buf, rel = self._head(offset, WINDOW)
        if size == 0:
            return RecordHead(0, 0, 0, 0)
        lsn, rtype, _, _, timestamp_ms = _LSN_TYPE_TIME.unpack_from(buf, rel + 8)
        return RecordHead(size, lsn, rtype, timestamp_ms)

    def record_at(self, offset: int, ahead: int = WINDOW) -> int:
        """Size of the structurally valid record starting at ``offset`` (§5), else 0."""
        size, buf, rel = self._head(offset, ahead)
        if size == 0:
            return 0
        crc = record_crc_at(buf, rel)
        if size <= WINDOW:
            buf, rel = self._view(offset, size, ahead)
            if len(buf) - rel < size:  # the file shrank
                return 0
            return size if zlib.crc32(memoryview(buf)[rel + 8:rel + size]) == crc else 0
        value = 0
        pos = offset + 8
        stop = offset + size
        while pos < stop:
            chunk = self.read(pos, min(WINDOW, stop - pos))
            if not chunk:
                return 0
            value = zlib.crc32(chunk, value)
            pos += len(chunk)
        return size if value == crc else 0

    def lsn_at(self, offset: int) -> int:
        """The LSN field of the record at ``offset`` (no validation)."""
        buf, rel = self._view(offset, 16)
        return record_lsn_at(buf, rel)

    def decode_at(self, offset: int, size: int) -> Record:
        """Decode the structurally valid record of ``size`` bytes at ``offset``."""
        buf, rel = self._view(offset, size)
        return decode_record(buf, rel)

    def resync(self, start: int, last_good: int) -> int:
        """First offset >= ``start`` where a structurally valid record with LSN >
        ``last_good`` begins; the file's size if there is none."""
        end = self.size
        pos = start + _TYPE_OFFSET
        while end - pos >= _CANDIDATE_LEN:
            pos = self._data_from(pos)
            n = min(WINDOW, end - pos)
            if n < _CANDIDATE_LEN:
                break
            chunk = self.read(pos, n)
            for match in _CANDIDATE.finditer(chunk):
                offset = pos + match.start() - _TYPE_OFFSET
                if self.record_at(offset, 0) and self.lsn_at(offset) > last_good:
                    return offset
            # the next read repeats the last bytes, where a candidate may start
            pos += len(chunk) - (_CANDIDATE_LEN - 1)
        return end


class RecordHead(NamedTuple):
    """The fixed fields of a record (:meth:`SegmentReader.head_at`)."""

    size: int
    lsn: int
    type: int
    timestamp_ms: int


class RecordAt(NamedTuple):
    """A structurally valid record read in order."""

    offset: int
    size: int
    lsn: int


class DamageAt(NamedTuple):
    """Bytes that are not a structurally valid record, from ``offset`` to ``resume``."""

    offset: int
    resume: int
    """Where the next structurally valid record with a higher LSN starts; the file's size
    when there is none."""
    last_good: int
    """The highest LSN read before the damage (in this segment or, as passed to
    :func:`walk`, before it)."""

    @property
    def bytes(self) -> int:
        return self.resume - self.offset


def walk(reader: SegmentReader, header_valid: bool,
         last_good: int) -> Iterator[RecordAt | DamageAt]:
    """Read a segment as recovery does (§9.4-§9.5): records in order from the end of the
    header (from offset 0 when the header is invalid: its bytes are damage); at each
    damage, resynchronise on the next structurally valid record with an LSN above every
    LSN read so far (``last_good`` counts those of earlier segments)."""
    end = reader.size
    offset = SEGMENT_HEADER_SIZE if header_valid else 0
    while offset < end:
        size = reader.record_at(offset)
        if size:
            lsn = reader.lsn_at(offset)
            yield RecordAt(offset, size, lsn)
            last_good = max(last_good, lsn)
            offset += size
            continue
        resume = reader.resync(offset + 1, last_good)
        yield DamageAt(offset, resume, last_good)
        offset = resume
