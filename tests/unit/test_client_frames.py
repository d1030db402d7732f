"""beava_client.frames: frame encoding and the incremental decoder."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from beava_client.errors import ProtocolError, TransportError
from beava_client.frames import FrameDecoder, check_payload_size, encode_frame


def test_empty_ping_frame_is_the_seven_bytes_of_the_spec() -> None:
    assert encode_frame(0x0000, 0x01) == bytes.fromhex("00000003000001")


def test_frame_layout_is_big_endian_length_op_ct_payload() -> None:
    frame = encode_frame(0x0010, 0x02, b"abc")
    assert frame == b"\x00\x00\x00\x06\x00\x10\x02abc"


def test_decoder_returns_every_frame_of_one_read_in_order() -> None:
    data = encode_frame(0, 1, b"{}") + encode_frame(0x23, 2, b"\x80") + encode_frame(0xFFFF, 1)
    assert FrameDecoder().feed(data) == [(0, 1, b"{}"), (0x23, 2, b"\x80"), (0xFFFF, 1, b"")]


def test_decoder_keeps_a_partial_frame_until_it_completes() -> None:
    frame = encode_frame(0x10, 1, b'{"ack_lsn":1}')
    decoder = FrameDecoder()
    for cut in (1, 3, 4, 6, 7, 10):
        decoder = FrameDecoder()
        assert decoder.feed(frame[:cut]) == []
        assert decoder.buffered == cut
        assert decoder.feed(frame[cut:]) == [(0x10, 1, b'{"ack_lsn":1}')]
        assert decoder.buffered == 0


def test_decoder_byte_by_byte() -> None:
    frames = [encode_frame(op, 1, bytes([op]) * op) for op in range(0, 40, 7)]
    decoder = FrameDecoder()
    got = []
    for byte in b"".join(frames):
        got.extend(decoder.feed(bytes([byte])))
    assert got == [(op, 1, bytes([op]) * op) for op in range(0, 40, 7)]


def test_decoder_does_not_discard_the_start_of_the_next_frame() -> None:
    a = encode_frame(1, 1, b"first")
    b = encode_frame(2, 1, b"second")
    decoder = FrameDecoder()
    assert decoder.feed(a + b[:5]) == [(1, 1, b"first")]
    assert decoder.feed(b[5:]) == [(2, 1, b"second")]


def test_large_frame_in_many_small_reads() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB
    frame = encode_frame(0x23, 1, payload)
    decoder = FrameDecoder()
    out = []
    for i in range(0, len(frame), 1000):
        out.extend(decoder.feed(frame[i : i + 1000]))
    assert out == [(0x23, 1, payload)]


def test_declared_length_below_three_is_a_protocol_error() -> None:
    decoder = FrameDecoder()
    with pytest.raises(ProtocolError) as info:
        decoder.feed(bytes.fromhex("000000020000"))
    assert info.value.code == "frame_error"
    assert isinstance(info.value, TransportError)
    assert isinstance(info.value, ConnectionError)


def test_reply_longer_than_the_limit_fails_as_soon_as_the_length_is_read() -> None:
    decoder = FrameDecoder(max_frame_bytes=16)
    with pytest.raises(ProtocolError) as info:
        decoder.feed(struct.pack(">I", 20))  # only the length field has arrived
    assert info.value.code == "frame_too_large"
    ok = FrameDecoder(max_frame_bytes=16)
    assert ok.feed(encode_frame(0, 1, b"x" * 16)) == [(0, 1, b"x" * 16)]


def test_clear_drops_partial_frame() -> None:
    decoder = FrameDecoder()
    decoder.feed(encode_frame(0, 1, b"abcdef")[:8])
    decoder.clear()
    assert decoder.buffered == 0
    assert decoder.feed(encode_frame(3, 1, b"z")) == [(3, 1, b"z")]


def test_check_payload_size() -> None:
    check_payload_size(4 * 1024 * 1024, 4 * 1024 * 1024)
    with pytest.raises(ValueError, match="exceeds max_frame_bytes"):
        check_payload_size(4 * 1024 * 1024 + 1, 4 * 1024 * 1024)


@given(
    st.lists(st.tuples(st.integers(0, 0xFFFF), st.sampled_from([1, 2]), st.binary(max_size=300)),
             max_size=20),
    st.lists(st.integers(1, 97), min_size=1, max_size=30),
)
def test_any_split_yields_the_same_frames(frames: list, cuts: list[int]) -> None:
    data = b"".join(encode_frame(op, ct, payload) for op, ct, payload in frames)
    decoder = FrameDecoder()
    got = []
    pos = 0
    i = 0
    while pos < len(data):
        step = cuts[i % len(cuts)]
        got.extend(decoder.feed(data[pos : pos + step]))
        pos += step
        i += 1
    assert got == [tuple(f) for f in frames]
    assert decoder.buffered == 0
