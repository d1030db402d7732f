"""WAL records built in C (beava._fast.wal_record): byte for byte the layout of
spec/durability.md §5, as the Python codec and the field-by-field layout write them."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from beava._fast import wal_record
from beava.durability import wal_format as wf
from tests.unit.test_wal_format import manual_record

u64 = st.integers(0, 2**64 - 1)
u32 = st.integers(0, 2**32 - 1)


@given(st.binary(max_size=300), u32)
def test_crc32_is_zlibs(data: bytes, start: int) -> None:
    assert wal_record.crc32(data) == zlib.crc32(data)
    assert wal_record.crc32(data, start) == zlib.crc32(data, start)
    assert wal_record.crc32(bytearray(data)) == zlib.crc32(data)


@given(u64, st.sampled_from(sorted(wf.RECORD_TYPES)), st.sampled_from(sorted(wf.BODY_FORMATS)),
       u64, u32, st.binary(max_size=70), st.binary(max_size=400))
def test_records_match_the_layout(lsn: int, rtype: int, fmt: int, ts: int, version: int,
                                  name: bytes, body: bytes) -> None:
    expected = manual_record(lsn, rtype, fmt, ts, version, name, body)
    assert wal_record.encode_record(lsn, rtype, fmt, ts, version, name, body) == expected
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


def test_oversized_name_is_refused() -> None:
    buf = bytearray(b"keep")
    with pytest.raises(ValueError):
        wal_record.append_record(buf, 1, wf.RECORD_EVENT, wf.BODY_JSON, 0, 1, b"n" * 65536, b"")
    assert buf == b"keep"
