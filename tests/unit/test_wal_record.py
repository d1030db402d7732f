"""WAL records built in C (beava._fast.wal.wal_record, the one encoder of the format, which
wal_format.encode_record calls): byte for byte the layout of spec/durability.md §5 as the
field-by-field layout writes it."""

from __future__ import annotations

import contextlib
import platform
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from beava._fast.wal import wal_record
from beava.durability import wal_format as wf
from tests.unit.test_wal_format import manual_record

u64 = st.integers(0, 2**64 - 1)
u32 = st.integers(0, 2**32 - 1)


@given(st.binary(max_size=300), u32)
def test_crc32_is_zlibs(data: bytes, start: int) -> None:
    assert wal_record.crc32(data) == zlib.crc32(data)
    assert wal_record.crc32(data, start) == zlib.crc32(data, start)
    assert wal_record.crc32(bytearray(data)) == zlib.crc32(data)


def test_crc32_is_zlibs_at_every_length_and_alignment() -> None:
    """Every length around the 16-byte blocks folded by carry-less multiplication (from 32
    bytes) and the table tail, from every alignment of the first byte."""
    data = bytes((i * 131 + 7) % 251 for i in range(700))
    for start in range(16):
        for n in [*range(0, 100), 127, 128, 129, 255, 256, 257, 511, 684 - start]:
            chunk = memoryview(data)[start:start + n]
            assert wal_record.crc32(chunk) == zlib.crc32(chunk), (start, n)
            assert wal_record.crc32(chunk, 0xDEADBEEF) == zlib.crc32(chunk, 0xDEADBEEF)


def test_crc32_folds_where_the_cpu_can() -> None:
    flags: set[str] = set()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    expected = platform.machine() == "x86_64" and {"pclmulqdq", "sse4_1"} <= flags
    assert wal_record.CRC32_FOLDS is expected


@given(u64, st.sampled_from(sorted(wf.RECORD_TYPES)), st.sampled_from(sorted(wf.BODY_FORMATS)),
       u64, u32, st.binary(max_size=70), st.binary(max_size=400))
def test_records_match_the_layout(lsn: int, rtype: int, fmt: int, ts: int, version: int,
                                  name: bytes, body: bytes) -> None:
    expected = manual_record(lsn, rtype, fmt, ts, version, name, body)
    assert wf.encode_record(lsn, rtype, fmt, ts, version, name, body) == expected
    buf = bytearray(b"head")
    assert wal_record.append_record(buf, lsn, rtype, fmt, ts, version, name, body) == len(
        expected)
    assert bytes(buf) == b"head" + expected
    assert wf.record_size_at(buf, 4, len(buf)) == len(expected)


def test_appended_records_follow_each_other_and_parse() -> None:
    buf = bytearray()
    sizes = [wal_record.append_record(buf, lsn, wf.RECORD_EVENT, wf.BODY_MSGPACK, 1000 + lsn, 3,
                                      b"txn", b"\x81\xa1k\xcd" + lsn.to_bytes(2, "big"))
             for lsn in range(1, 200)]
    offset = 0
    for lsn, size in enumerate(sizes, 1):
        record = wf.parse_record(buf, offset)
        assert (record.lsn, record.name, record.timestamp_ms, record.size) == (
            lsn, "txn", 1000 + lsn, size)
        offset += size
    assert offset == len(buf)


def unsealed(sealed: bytes | bytearray) -> bytearray:
    """The records of ``sealed`` with every CRC field 0, as the push pass appends them."""
    out = bytearray(sealed)
    offset = 0
    while offset < len(out):
        size = wf.parse_record(sealed, offset).size
        out[offset + 4:offset + 8] = bytes(4)
        offset += size
    return out


@given(st.lists(st.tuples(st.text(max_size=10).map(str.encode), st.binary(max_size=300)),
                max_size=30))
def test_seal_sets_every_records_crc(records: list[tuple[bytes, bytes]]) -> None:
    sealed = bytearray()
    for lsn, (name, body) in enumerate(records, 1):
        wal_record.append_record(sealed, lsn, wf.RECORD_EVENT, wf.BODY_MSGPACK, lsn, 1, name,
                                 body)
    batch = unsealed(sealed)
    wal_record.seal(batch)
    assert batch == sealed
    wal_record.seal(batch)  # sealed again: the same bytes
    assert batch == sealed


def test_seal_stops_at_bytes_that_are_not_a_whole_record() -> None:
    whole = wf.encode_record(1, wf.RECORD_EVENT, wf.BODY_MSGPACK, 5, 1, b"txn", b"\x80")
    cut = unsealed(whole + whole)[:-1]  # the second record runs past the end
    wal_record.seal(cut)
    assert cut[:len(whole)] == whole and cut[len(whole):] == unsealed(whole)[:-1]
    for short in (bytearray(b"\x03\x00\x00\x00abcd"), bytearray(b"\x00" * 7), bytearray()):
        before = bytes(short)
        wal_record.seal(short)  # a length under 4, too few bytes, nothing: left as they are
        assert short == before


def test_oversized_name_is_refused() -> None:
    buf = bytearray(b"keep")
    with pytest.raises(ValueError):
        wal_record.append_record(buf, 1, wf.RECORD_EVENT, wf.BODY_JSON, 0, 1, b"n" * 65536, b"")
    assert buf == b"keep"
    with pytest.raises(ValueError, match="exceeds 65535"):
        wf.encode_record(1, wf.RECORD_REGISTRY, wf.BODY_JSON, 0, 1, b"n" * 65536, b"")


def test_unsealed_records_are_those_bytes_once_sealed() -> None:
    """A record appended unsealed (the push paths: the log seals a batch when it writes it)
    has CRC 0 and is, once sealed, the sealed record's bytes."""
    sealed, open_ = bytearray(), bytearray()
    wal_record.append_record(sealed, 7, wf.RECORD_EVENT, wf.BODY_MSGPACK, 9, 2, b"Txn", b"\x80")
    wal_record.append_record(open_, 7, wf.RECORD_EVENT, wf.BODY_MSGPACK, 9, 2, b"Txn", b"\x80",
                             sealed=False)
    assert open_[4:8] == bytes(4) and open_ == unsealed(sealed)
    wal_record.seal(open_)
    assert open_ == sealed
