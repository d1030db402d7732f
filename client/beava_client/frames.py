"""Frame encoding and incremental decoding (spec/wire.md §2.1), in pure Python.

A frame is ``[u32 length][u16 op][u8 ct][payload]`` (big-endian), ``length = 3 + len(payload)``.
"""

from __future__ import annotations

import struct

from .errors import ProtocolError

HEADER = struct.Struct(">IHB")
HEADER_SIZE = HEADER.size  # 7
LENGTH = struct.Struct(">I")
MIN_LENGTH = 3
DEFAULT_MAX_FRAME_BYTES = 4 * 1024 * 1024

Frame = tuple[int, int, bytes]
"""A decoded frame: ``(op, ct, payload)``."""

_pack_header = HEADER.pack
_unpack_header = HEADER.unpack_from
_unpack_length = LENGTH.unpack_from


def encode_frame(op: int, ct: int, payload: bytes = b"") -> bytes:
    """Return one complete frame."""
    return _pack_header(len(payload) + MIN_LENGTH, op, ct) + payload


def check_payload_size(size: int, max_frame_bytes: int) -> None:
    """Raise ValueError for a payload the server would refuse with ``frame_too_large``
    (which also closes the connection)."""
    if size > max_frame_bytes:
        raise ValueError(
            f"request payload of {size} bytes exceeds max_frame_bytes={max_frame_bytes}"
        )


HTTP_REPLY_LENGTH = 0x48545450
"""A reply whose first four bytes are ``HTTP`` (an HTTP server's status line) read as a
frame length: the client was pointed at an HTTP port."""


class FrameDecoder:
    """Incremental frame splitter: ``feed(bytes)`` returns every frame completed so far.

    Frames may be split across any number of reads and one read may carry many frames; the
    bytes of an incomplete frame are kept for the next ``feed``. A declared length below 3 or
    above ``max_frame_bytes + 3`` raises ProtocolError (the stream cannot be resynchronised).
    """

    __slots__ = ("_have", "_max_length", "_need", "_parts")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._max_length = max_frame_bytes + MIN_LENGTH
        # The reads of an incomplete frame, the first from its start, kept as they came: a
        # frame of many reads (a scan page's megabyte) is joined once when whole, where a
        # buffer grown read by read was copied again at each growth.
        self._parts: list[bytes] = []
        self._have = 0  # bytes in _parts
        # Bytes needed in _parts before parsing is worth trying again: the whole frame once
        # its length is known, else its header.
        self._need = 0

    @property
    def buffered(self) -> int:
        """Number of bytes held from an incomplete frame."""
        return self._have

    def clear(self) -> None:
        """Drop any partial frame (after the connection is discarded)."""
        self._parts = []
        self._have = 0
        self._need = 0

    def feed(self, data: bytes) -> list[Frame]:
        """Add received bytes; return the completed frames in order."""
        if self._parts:
            parts = self._parts
            parts.append(data)
            self._have += len(data)
            if self._have < self._need:
                return []
            first = parts[0]
            over = self._have - self._need  # bytes of data after the frame
            self.clear()
            if len(first) < HEADER_SIZE:  # a header split across reads: parse all again
                data = b"".join(parts)
            else:
                _, op, ct = _unpack_header(first, 0)  # its length was checked when kept
                cut = len(data) - over
                frame = (op, ct, b"".join([memoryview(first)[HEADER_SIZE:], *parts[1:-1],
                                           memoryview(data)[:cut]]))
                return [frame, *self.feed(data[cut:])] if over else [frame]
        frames: list[Frame] = []
        append = frames.append
        max_length = self._max_length
        pos = 0
        n = len(data)
        while n - pos >= HEADER_SIZE:
            length, op, ct = _unpack_header(data, pos)
            if length < MIN_LENGTH or length > max_length:
                self._bad_length(length)
            end = pos + 4 + length
            if end > n:
                self._keep(data, pos, end - pos)
                return frames
            append((op, ct, data[pos + HEADER_SIZE : end]))
            pos = end
        if pos < n:
            if n - pos >= 4:
                (length,) = _unpack_length(data, pos)
                if length < MIN_LENGTH or length > max_length:
                    self._bad_length(length)
                self._keep(data, pos, length + 4)
            else:
                self._keep(data, pos, HEADER_SIZE)
        return frames

    def _keep(self, data: bytes, pos: int, need: int) -> None:
        self._parts = [data[pos:] if pos else data]
        self._have = len(data) - pos
        self._need = need

    def _bad_length(self, length: int) -> None:
        self.clear()
        if length == HTTP_REPLY_LENGTH:
            raise ProtocolError(
                "http_reply",
                "the server answered in HTTP: this is an HTTP port; use the TCP port",
            )
        if length < MIN_LENGTH:
            raise ProtocolError(
                "frame_error", f"reply frame declares length {length}, below the minimum 3"
            )
        raise ProtocolError(
            "frame_too_large",
            f"reply frame declares length {length}, above the limit {self._max_length}",
        )
