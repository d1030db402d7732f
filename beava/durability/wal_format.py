"""WAL file formats: segment header and records (spec/durability.md §3-§5).

All integers little-endian; CRC = ``zlib.crc32`` with initial value 0.

Segment header (32 bytes)::

    magic "BVWALSEG" | format_version u16 | flags u16 | base_lsn u64 | created_at_ms u64 |
    header_crc u32 (of bytes 0-27)

Record::

    record_len u32 | crc u32 | lsn u64 | type u8 | body_format u8 | flags u16 |
    timestamp_ms u64 | registry_version u32 | name_len u16 | name | body_len u32 | body

``record_len`` counts every byte after itself (``34 + name_len + body_len``); ``crc`` covers
every byte after itself.
"""

from __future__ import annotations

import re
import struct
import zlib
from typing import NamedTuple

from beava._fast.wal.wal_record import append_record

SEGMENT_MAGIC = b"BVWALSEG"
SEGMENT_FORMAT_VERSION = 1
SEGMENT_HEADER_SIZE = 32
SEGMENT_FLAG_HISTORY_BOUNDARY = 0x0001
SEGMENT_SUFFIX = ".bwal"

RECORD_EVENT = 1
RECORD_REGISTRY = 2
RECORD_RESET = 3
# extension (docs/wire.md, backfill): one table's entity state installed by a backfill;
# name = the table, body = MessagePack {"table", "until_ms", "state"}
RECORD_TABLE_STATE = 4
RECORD_TYPES = frozenset({RECORD_EVENT, RECORD_REGISTRY, RECORD_RESET, RECORD_TABLE_STATE})

BODY_JSON = 1
BODY_MSGPACK = 2
BODY_FORMATS = frozenset({BODY_JSON, BODY_MSGPACK})

# Bytes after the record_len field when name and body are empty.
RECORD_FIXED_LEN = 34
RECORD_MAX_LEN = 1 << 30
# Bytes before the name: record_len, crc and the fixed fields.
RECORD_NAME_OFFSET = 34

_SEG_BODY = struct.Struct("<8sHHQQ")
_U32 = struct.Struct("<I")
_HEAD = struct.Struct("<QBBHQIH")  # lsn, type, body_format, flags, timestamp, version, name_len
_FULL_HEAD = struct.Struct("<IIQBBHQIH")
_crc32 = zlib.crc32

_SEGMENT_NAME = re.compile(r"seg-([0-9a-f]{16})\.bwal")


class FormatError(ValueError):
    """A header or record is not structurally valid; the message says why."""


class SegmentHeader(NamedTuple):
    base_lsn: int
    flags: int
    created_at_ms: int

    @property
    def history_boundary(self) -> bool:
        return bool(self.flags & SEGMENT_FLAG_HISTORY_BOUNDARY)


class Record(NamedTuple):
    """One decoded WAL record; ``size`` is its length on disk, length field included."""

    lsn: int
    type: int
    body_format: int
    flags: int
    timestamp_ms: int
    registry_version: int
    name: str
    body: bytes
    size: int


# -- file names (§3) ----------------------------------------------------------------------------
# Lexicographic order of names equals numeric LSN order (16 lower-case hex digits).

SNAPSHOT_SUFFIX = ".bsnap"
SNAPSHOT_TMP_SUFFIX = ".bsnap.tmp"
QUARANTINE_DIR = "quarantine"
LOCK_FILE = "LOCK"

_SNAPSHOT_NAME = re.compile(r"snap-([0-9a-f]{16})\.bsnap")
_SNAPSHOT_TMP_NAME = re.compile(r"snap-([0-9a-f]{16})\.bsnap\.tmp")


def segment_name(base_lsn: int) -> str:
    """``seg-<16 lower-case hex>.bwal``."""
    return f"seg-{base_lsn:016x}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """The base LSN a segment file name claims, or None for any other name."""
    match = _SEGMENT_NAME.fullmatch(name)
    return int(match.group(1), 16) if match else None


def snapshot_name(snapshot_lsn: int) -> str:
    """``snap-<16 lower-case hex>.bsnap``."""
    return f"snap-{snapshot_lsn:016x}{SNAPSHOT_SUFFIX}"


def parse_snapshot_name(name: str) -> int | None:
    """The LSN a committed snapshot file name claims, or None for any other name."""
    match = _SNAPSHOT_NAME.fullmatch(name)
    return int(match.group(1), 16) if match else None


def is_snapshot_tmp_name(name: str) -> bool:
    """True for ``snap-<16 hex>.bsnap.tmp`` (a snapshot being written)."""
    return _SNAPSHOT_TMP_NAME.fullmatch(name) is not None


def quarantine_range_name(base_lsn: int, offset: int) -> str:
    """``seg-<base 16 hex>-off-<offset decimal>.bin``: damaged bytes from ``offset`` (§9.4-5)."""
    return f"seg-{base_lsn:016x}-off-{offset}.bin"


def quarantine_record_name(lsn: int) -> str:
    """``lsn-<16 hex>.rec``: a valid record that could not be applied (§9.5)."""
    return f"lsn-{lsn:016x}.rec"


# -- segment header ----------------------------------------------------------------------------


def encode_segment_header(base_lsn: int, flags: int, created_at_ms: int) -> bytes:
    body = _SEG_BODY.pack(SEGMENT_MAGIC, SEGMENT_FORMAT_VERSION, flags, base_lsn, created_at_ms)
    return body + _U32.pack(_crc32(body))


def decode_segment_header(data: bytes) -> SegmentHeader:
    """Decode the first 32 bytes of a segment; FormatError if short or invalid."""
    if len(data) < SEGMENT_HEADER_SIZE:
        raise FormatError(f"short segment header ({len(data)} bytes)")
    magic, version, flags, base_lsn, created = _SEG_BODY.unpack_from(data, 0)
    if magic != SEGMENT_MAGIC:
        raise FormatError("bad segment magic")
    (stored_crc,) = _U32.unpack_from(data, 28)
    if stored_crc != _crc32(memoryview(data)[:28]):
        raise FormatError("segment header CRC mismatch")
    if version != SEGMENT_FORMAT_VERSION:
        raise FormatError(f"unsupported segment format_version {version}")
    if flags & ~SEGMENT_FLAG_HISTORY_BOUNDARY:
        raise FormatError(f"unknown segment flags 0x{flags:04x}")
    return SegmentHeader(base_lsn, flags, created)


# -- records -----------------------------------------------------------------------------------


def encode_record(lsn: int, type: int, body_format: int, timestamp_ms: int,
                  registry_version: int, name: bytes, body: bytes) -> bytes:
    """The on-disk bytes of one record. ``name`` is the UTF-8 event name (b"" otherwise).
    Written by the one encoder of the format, the push path's (beava._fast.wal.wal_record);
    ValueError when the name is over 65535 bytes or the record over RECORD_MAX_LEN."""
    out = bytearray()
    append_record(out, lsn, type, body_format, timestamp_ms, registry_version, name, body)
    return bytes(out)


def reset_body(new_version: int) -> bytes:
    """The JSON body of a RESET record: ``{"new_version":N}``."""
    return b'{"new_version":%d}' % new_version


def encode_reset_record(lsn: int, timestamp_ms: int, new_version: int) -> bytes:
    """A RESET record: JSON body ``{"new_version":N}``, registry_version = N."""
    return encode_record(lsn, RECORD_RESET, BODY_JSON, timestamp_ms, new_version, b"",
                         reset_body(new_version))


def record_head_size(buf: bytes | bytearray | memoryview, offset: int, end: int) -> int:
    """Size on disk the record starting at ``offset`` declares when its fixed fields make
    it structurally valid apart from the CRC, else 0.

    The fields (§5): ``34 <= record_len <= 2^30``, the record ends at or before ``end``,
    ``record_len == 34 + name_len + body_len``, known type and body format, flags 0. ``buf``
    must hold the record's first ``38 + name_len`` bytes (``end`` may lie beyond it).
    """
    if end - offset < 4 + RECORD_FIXED_LEN or len(buf) - offset < 4 + RECORD_FIXED_LEN:
        return 0
    record_len: int
    record_len, _crc, _lsn, rtype, fmt, flags, _ts, _ver, name_len = _FULL_HEAD.unpack_from(
        buf, offset)
    if record_len < RECORD_FIXED_LEN or record_len > RECORD_MAX_LEN:
        return 0
    size = 4 + record_len
    if offset + size > end or rtype not in RECORD_TYPES or fmt not in BODY_FORMATS or flags:
        return 0
    if RECORD_FIXED_LEN + name_len > record_len:
        return 0
    if record_len != RECORD_FIXED_LEN + name_len + _U32.unpack_from(
            buf, offset + RECORD_NAME_OFFSET + name_len)[0]:
        return 0
    return size


def record_crc_at(buf: bytes | bytearray | memoryview, offset: int) -> int:
    """The CRC field of the record at ``offset`` (no validation)."""
    crc: int = _U32.unpack_from(buf, offset + 4)[0]
    return crc


def record_size_at(buf: bytes | bytearray | memoryview, offset: int, end: int) -> int:
    """Size on disk of the structurally valid record starting at ``offset``, else 0: the
    fields of :func:`record_head_size` and the CRC. ``buf`` holds the record whole."""
    size = record_head_size(buf, offset, end)
    if size and _crc32(memoryview(buf)[offset + 8:offset + size]) == record_crc_at(buf, offset):
        return size
    return 0


def record_lsn_at(buf: bytes | bytearray | memoryview, offset: int) -> int:
    """The LSN field of the record at ``offset`` (no validation)."""
    lsn: int = _HEAD.unpack_from(buf, offset + 8)[0]
    return lsn


def decode_record(buf: bytes | bytearray | memoryview, offset: int) -> Record:
    """Decode a record already known to be structurally valid (see :func:`record_size_at`).

    Raises ``UnicodeDecodeError`` (a ValueError) when the name is not UTF-8.
    """
    record_len, _crc, lsn, rtype, fmt, flags, ts, version, name_len = _FULL_HEAD.unpack_from(
        buf, offset)
    name_start = offset + RECORD_NAME_OFFSET
    body_start = name_start + name_len + 4
    name = bytes(buf[name_start:name_start + name_len]).decode() if name_len else ""
    size = 4 + record_len
    return Record(lsn, rtype, fmt, flags, ts, version, name,
                  bytes(buf[body_start:offset + size]), size)


def parse_record(buf: bytes | bytearray | memoryview, offset: int = 0,
                 end: int | None = None) -> Record:
    """Validate and decode one record; FormatError when it is not structurally valid."""
    if end is None:
        end = len(buf)
    if record_size_at(buf, offset, end) == 0:
        raise FormatError(f"no structurally valid record at offset {offset}")
    return decode_record(buf, offset)
