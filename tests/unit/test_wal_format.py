"""WAL segment header and record format (spec/durability.md §3-§5)."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from beava.durability import wal_format as wf


def manual_record(lsn: int, rtype: int, fmt: int, ts: int, version: int, name: bytes,
                  body: bytes, flags: int = 0) -> bytes:
    """The record laid out field by field from the spec table, independently of the codec."""
    after_crc = (struct.pack("<Q", lsn) + bytes([rtype, fmt]) + struct.pack("<H", flags)
                 + struct.pack("<Q", ts) + struct.pack("<I", version)
                 + struct.pack("<H", len(name)) + name + struct.pack("<I", len(body)) + body)
    return struct.pack("<I", 4 + len(after_crc)) + struct.pack("<I", zlib.crc32(after_crc)) \
        + after_crc


# -- segment header ----------------------------------------------------------------------------


def test_segment_header_layout() -> None:
    data = wf.encode_segment_header(0x0102030405060708, wf.SEGMENT_FLAG_HISTORY_BOUNDARY,
                                    1_700_000_000_123)
    assert len(data) == 32
    assert data[0:8] == b"BVWALSEG"
    assert data[8:10] == b"\x01\x00"
    assert data[10:12] == b"\x01\x00"
    assert data[12:20] == bytes([8, 7, 6, 5, 4, 3, 2, 1])
    assert data[20:28] == struct.pack("<Q", 1_700_000_000_123)
    assert data[28:32] == struct.pack("<I", zlib.crc32(data[:28]))


def test_segment_header_round_trip() -> None:
    header = wf.decode_segment_header(wf.encode_segment_header(42, 0, 7))
    assert header == wf.SegmentHeader(42, 0, 7)
    assert not header.history_boundary
    boundary = wf.decode_segment_header(wf.encode_segment_header(43, 1, 7))
    assert boundary.history_boundary


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d[:31], "short segment header"),
    (lambda d: b"BVWALSEX" + d[8:], "bad segment magic"),
    (lambda d: d[:20] + bytes([d[20] ^ 1]) + d[21:], "CRC mismatch"),
])
def test_segment_header_rejects(mutate, message) -> None:
    data = wf.encode_segment_header(1, 0, 5)
    with pytest.raises(wf.FormatError, match=message):
        wf.decode_segment_header(mutate(data))


def _with_crc(body28: bytes) -> bytes:
    return body28 + struct.pack("<I", zlib.crc32(body28))


def test_segment_header_rejects_unknown_version_and_flags() -> None:
    version2 = _with_crc(b"BVWALSEG" + struct.pack("<HHQQ", 2, 0, 1, 0))
    with pytest.raises(wf.FormatError, match="format_version 2"):
        wf.decode_segment_header(version2)
    flag2 = _with_crc(b"BVWALSEG" + struct.pack("<HHQQ", 1, 2, 1, 0))
    with pytest.raises(wf.FormatError, match="unknown segment flags 0x0002"):
        wf.decode_segment_header(flag2)


# -- names -------------------------------------------------------------------------------------


def test_names() -> None:
    assert wf.segment_name(1) == "seg-0000000000000001.bwal"
    assert wf.segment_name(0x186A1) == "seg-00000000000186a1.bwal"
    assert wf.parse_segment_name("seg-00000000000186a1.bwal") == 0x186A1
    for bad in ("seg-00000000000186A1.bwal", "seg-186a1.bwal", "seg-00000000000186a1.bwal.x",
                "xseg-00000000000186a1.bwal", "LOCK"):
        assert wf.parse_segment_name(bad) is None
    assert wf.snapshot_name(0x186A0) == "snap-00000000000186a0.bsnap"
    assert wf.parse_snapshot_name("snap-00000000000186a0.bsnap") == 0x186A0
    assert wf.parse_snapshot_name("snap-00000000000186a0.bsnap.tmp") is None
    assert wf.is_snapshot_tmp_name("snap-00000000000186a0.bsnap.tmp")
    assert not wf.is_snapshot_tmp_name("snap-00000000000186a0.bsnap")
    assert wf.quarantine_range_name(0x10, 4096) == "seg-0000000000000010-off-4096.bin"
    assert wf.quarantine_record_name(255) == "lsn-00000000000000ff.rec"


def test_name_order_is_lsn_order() -> None:
    lsns = [1, 9, 10, 15, 16, 255, 256, 0x186A1, 2**40]
    names = [wf.segment_name(n) for n in lsns]
    assert sorted(names) == names


# -- records -----------------------------------------------------------------------------------


def test_record_layout_matches_spec_table() -> None:
    data = wf.encode_record(7, wf.RECORD_EVENT, wf.BODY_JSON, 1_700_000_000_000, 3,
                            b"txn", b'{"a":1}')
    assert data == manual_record(7, 1, 1, 1_700_000_000_000, 3, b"txn", b'{"a":1}')
    assert struct.unpack_from("<I", data, 0)[0] == 34 + 3 + 7 == len(data) - 4
    assert struct.unpack_from("<I", data, 4)[0] == zlib.crc32(data[8:])
    assert struct.unpack_from("<Q", data, 8)[0] == 7
    assert data[16] == 1 and data[17] == 1
    assert data[18:20] == b"\x00\x00"
    assert struct.unpack_from("<Q", data, 20)[0] == 1_700_000_000_000
    assert struct.unpack_from("<I", data, 28)[0] == 3
    assert struct.unpack_from("<H", data, 32)[0] == 3
    assert data[34:37] == b"txn"
    assert struct.unpack_from("<I", data, 37)[0] == 7
    assert data[41:] == b'{"a":1}'


def test_record_round_trip_all_types() -> None:
    cases = [
        (1, wf.RECORD_EVENT, wf.BODY_MSGPACK, b"\x81\xa1a\x01", "clicks"),
        (2, wf.RECORD_REGISTRY, wf.BODY_JSON, b'{"force":false}', ""),
        (3, wf.RECORD_RESET, wf.BODY_JSON, b'{"new_version":4}', ""),
        (4, wf.RECORD_EVENT, wf.BODY_JSON, b"", "\u00e9v\u00e9nement"),
    ]
    buf = b"".join(wf.encode_record(lsn, t, f, 1000 + lsn, 9, name.encode(), body)
                   for lsn, t, f, body, name in cases)
    offset = 0
    for lsn, t, f, body, name in cases:
        record = wf.parse_record(buf, offset)
        assert record == wf.Record(lsn, t, f, 0, 1000 + lsn, 9, name, body,
                                   38 + len(name.encode()) + len(body))
        offset += record.size
    assert offset == len(buf)


def test_reset_record() -> None:
    record = wf.parse_record(wf.encode_reset_record(12, 99, 5))
    assert (record.lsn, record.type, record.body_format, record.timestamp_ms,
            record.registry_version, record.name, record.body) == (
        12, wf.RECORD_RESET, wf.BODY_JSON, 99, 5, "", b'{"new_version":5}')


def test_size_at_rejects_every_truncation() -> None:
    data = wf.encode_record(1, 1, 1, 5, 1, b"ev", b"0123456789")
    assert wf.record_size_at(data, 0, len(data)) == len(data)
    for cut in range(len(data)):
        assert wf.record_size_at(data[:cut], 0, cut) == 0
        # The end bound is honoured even when the buffer holds more bytes.
        assert wf.record_size_at(data, 0, cut) == 0


def test_size_at_rejects_every_flipped_byte() -> None:
    data = wf.encode_record(1, 1, 1, 5, 1, b"ev", b"0123456789")
    for i in range(len(data)):
        damaged = bytearray(data)
        damaged[i] ^= 0x40
        assert wf.record_size_at(bytes(damaged), 0, len(damaged)) == 0, i


# type 4 is the TABLE_STATE extension (docs/wire.md, backfill); 5 is unknown
@pytest.mark.parametrize("kwargs", [
    {"rtype": 5}, {"rtype": 0}, {"fmt": 3}, {"fmt": 0},
])
def test_size_at_rejects_unknown_type_or_format_even_with_good_crc(kwargs) -> None:
    fields = {"rtype": 1, "fmt": 1} | kwargs
    data = manual_record(1, fields["rtype"], fields["fmt"], 0, 0, b"", b"x")
    assert wf.record_size_at(data, 0, len(data)) == 0


def _recrc(data: bytearray) -> bytes:
    struct.pack_into("<I", data, 4, zlib.crc32(bytes(data[8:])))
    return bytes(data)


def test_size_at_rejects_inconsistent_lengths_even_with_good_crc() -> None:
    good = bytearray(manual_record(1, 1, 1, 0, 0, b"name", b"body!"))
    longer_name = bytearray(good)
    struct.pack_into("<H", longer_name, 32, 5)
    assert wf.record_size_at(_recrc(longer_name), 0, len(good)) == 0
    huge_name = bytearray(good)
    struct.pack_into("<H", huge_name, 32, 60000)
    assert wf.record_size_at(_recrc(huge_name), 0, len(good)) == 0
    shorter_body = bytearray(good)
    struct.pack_into("<I", shorter_body, 38, 4)
    assert wf.record_size_at(_recrc(shorter_body), 0, len(good)) == 0


def test_size_at_rejects_record_len_bounds() -> None:
    small = bytearray(manual_record(1, 1, 1, 0, 0, b"", b""))
    assert wf.record_size_at(bytes(small), 0, len(small)) == 38
    struct.pack_into("<I", small, 0, 33)
    assert wf.record_size_at(bytes(small), 0, len(small)) == 0
    big = bytearray(manual_record(1, 1, 1, 0, 0, b"", b""))
    struct.pack_into("<I", big, 0, 2**30 + 1)
    assert wf.record_size_at(bytes(big) + bytes(64), 0, len(big) + 64) == 0


def test_parse_rejects_and_name_must_be_utf8() -> None:
    with pytest.raises(wf.FormatError, match="offset 0"):
        wf.parse_record(b"\x00" * 40)
    data = wf.encode_record(1, 1, 1, 0, 0, b"\xff\xfe", b"{}")
    assert wf.record_size_at(data, 0, len(data)) == len(data)
    with pytest.raises(UnicodeDecodeError):
        wf.decode_record(data, 0)


def test_record_lsn_at() -> None:
    data = b"pad" + wf.encode_record(0xABCDEF, 2, 1, 0, 0, b"", b"{}")
    assert wf.record_lsn_at(data, 3) == 0xABCDEF


@given(lsn=st.integers(0, 2**64 - 1), rtype=st.sampled_from([1, 2, 3]),
       fmt=st.sampled_from([1, 2]), ts=st.integers(0, 2**64 - 1),
       version=st.integers(0, 2**32 - 1), name=st.text(max_size=40),
       body=st.binary(max_size=300))
def test_round_trip_property(lsn, rtype, fmt, ts, version, name, body) -> None:
    encoded_name = name.encode()
    data = wf.encode_record(lsn, rtype, fmt, ts, version, encoded_name, body)
    assert data == manual_record(lsn, rtype, fmt, ts, version, encoded_name, body)
    assert wf.parse_record(data) == wf.Record(lsn, rtype, fmt, 0, ts, version, name, body,
                                              len(data))
