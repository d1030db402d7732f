"""The Cython frame splitter (spec/wire.md §2.1-§2.2)."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from beava._fast.wire.frame_splitter import (
    FRAME_TOO_LARGE,
    FRAME_TOO_SHORT,
    FrameSplitter,
    encode_frame,
    join_frames,
)


def test_encode_frame_layout():
    assert encode_frame(0, 1, b"") == bytes.fromhex("00000003000001")
    assert encode_frame(0xFFFF, 2, b"ab") == b"\x00\x00\x00\x05\xff\xff\x02ab"


def test_many_frames_in_one_read():
    data = b"".join(encode_frame(op, 1, b"x" * op) for op in range(10))
    frames = FrameSplitter().feed(data)
    assert len(frames) == 10
    assert list(frames) == [(op, 1, b"x" * op) for op in range(10)]
    assert [frames.op(i) for i in range(10)] == list(range(10))
    assert frames[-1] == (9, 1, b"x" * 9)
    assert list(frames[7:]) == [(op, 1, b"x" * op) for op in range(7, 10)]


frames_strategy = st.lists(
    st.tuples(st.integers(0, 0xFFFF), st.integers(0, 255), st.binary(max_size=300)),
    max_size=20)


@given(frames_strategy, st.lists(st.integers(1, 50), min_size=1, max_size=30))
def test_any_split_of_the_stream_yields_the_same_frames(frames, cuts):
    data = b"".join(encode_frame(op, ct, p) for op, ct, p in frames)
    splitter = FrameSplitter()
    got, pos, i = [], 0, 0
    while pos < len(data):
        step = cuts[i % len(cuts)]
        got += splitter.feed(data[pos:pos + step])
        pos += step
        i += 1
    assert got == frames
    assert splitter.buffered == 0


def test_partial_frame_is_kept():
    splitter = FrameSplitter()
    data = encode_frame(0x10, 1, b"hello")
    assert list(splitter.feed(data[:6])) == []
    assert splitter.buffered == 6
    assert list(splitter.feed(data[6:] + data[:2])) == [(0x10, 1, b"hello")]
    assert splitter.buffered == 2


def test_payload_limit_is_inclusive_and_checked_on_the_length_alone():
    splitter = FrameSplitter(8)
    assert list(splitter.feed(encode_frame(0, 1, b"x" * 8))) == [(0, 1, b"x" * 8)]
    # Only the 4 length bytes arrived: the verdict comes before the payload.
    assert list(splitter.feed(struct.pack(">I", 12))) == [(FRAME_TOO_LARGE, 12, b"")]
    assert splitter.failed
    assert list(splitter.feed(encode_frame(0, 1, b""))) == []


def test_length_below_three_fails_after_earlier_frames():
    splitter = FrameSplitter()
    frames = splitter.feed(encode_frame(0, 1, b"") + struct.pack(">I", 2) + b"\x00\x00")
    assert list(frames) == [(0, 1, b""), (FRAME_TOO_SHORT, 2, b"")]


def test_large_frame_in_small_reads_is_assembled():
    payload = bytes(range(256)) * 4096
    data = encode_frame(0x20, 2, payload)
    splitter = FrameSplitter()
    got = []
    for i in range(0, len(data), 65536):
        got += splitter.feed(data[i:i + 65536])
    assert got == [(0x20, 2, payload)]


def test_frames_of_several_reads_join_in_order():
    splitter = FrameSplitter()
    first = splitter.feed(encode_frame(1, 1, b"a") + encode_frame(2, 2, b"bc"))
    second = splitter.feed(encode_frame(3, 1, b"") + encode_frame(4, 2, b"def"))
    joined = join_frames([first[1:], second])
    assert list(joined) == [(2, 2, b"bc"), (3, 1, b""), (4, 2, b"def")]
    assert join_frames([second]) is second
