"""Framed-TCP connection protocol (spec/wire.md §2).

One :class:`FramedTcpProtocol` per connection. Everything one ``data_received`` brings is
split into frames (Cython), each frame is handed to the request handler in arrival order,
and all replies of that read go out in one ``transport.write``: strict FIFO with no
per-frame syscalls.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable

import msgspec

from beava._fast.frame_splitter import FRAME_TOO_LARGE, FRAME_TOO_SHORT, FrameSplitter, encode_frame
from beava.protocol.opcodes import CT_JSON, OP_ERROR

# handler(op, ct, payload) -> reply frame bytes (already framed)
FrameHandler = Callable[[int, int, bytes], bytes]

HIGH_WATER = 4 * 1024 * 1024  # stop reading while this much reply data is unsent
LOW_WATER = 1024 * 1024

_encode_sorted = msgspec.json.Encoder(order="sorted").encode


def error_frame(error: dict) -> bytes:
    """An ERROR_RESPONSE frame (op 0xFFFF, JSON) around ``error``."""
    return encode_frame(OP_ERROR, CT_JSON, _encode_sorted(error))


def _frame_too_large(declared: int, limit: int) -> bytes:
    return error_frame({"error": {
        "code": "frame_too_large", "declared": declared, "limit": limit,
        "message": f"declared frame length {declared} exceeds limit {limit}"}})


def _frame_too_short(declared: int) -> bytes:
    return error_frame({"error": {
        "code": "frame_error",
        "message": f"declared frame length {declared} is below the minimum 3"}})


class FramedTcpProtocol(asyncio.Protocol):
    """Reads frames, answers them in order, closes on fatal framing errors."""

    __slots__ = ("_handle", "_splitter", "_transport", "_connections", "_closing",
                 "_paused_by_writes")

    def __init__(self, handle: FrameHandler, max_payload: int, connections: set) -> None:
        self._handle = handle
        self._splitter = FrameSplitter(max_payload)
        self._transport: asyncio.Transport | None = None
        self._connections = connections
        self._closing = False
        self._paused_by_writes = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        transport.set_write_buffer_limits(high=HIGH_WATER, low=LOW_WATER)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.discard(self)
        self._transport = None

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        frames = self._splitter.feed(data)
        if not frames:
            return
        handle = self._handle
        replies = []
        for op, ct, payload in frames:
            if op == FRAME_TOO_LARGE:
                replies.append(_frame_too_large(ct, self._splitter.max_payload + 3))
                self._closing = True
            elif op == FRAME_TOO_SHORT:
                replies.append(_frame_too_short(ct))
                self._closing = True
            else:
                replies.append(handle(op, ct, payload))
        transport = self._transport
        if transport is None:
            return
        transport.write(b"".join(replies) if len(replies) > 1 else replies[0])
        if self._closing:
            transport.close()  # flushes the error frame first

    def pause_writing(self) -> None:
        if self._transport is not None and not self._paused_by_writes:
            self._paused_by_writes = True
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        if self._transport is not None and self._paused_by_writes:
            self._paused_by_writes = False
            if not self._closing:
                self._transport.resume_reading()

    def stop_reading(self) -> None:
        """Graceful shutdown: answer what was fully received, read nothing more."""
        self._closing = True
        if self._transport is not None:
            self._transport.pause_reading()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    @property
    def write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() if self._transport is not None else 0
