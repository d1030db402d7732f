"""An in-memory asyncio transport for driving the connection protocols in-process."""

from __future__ import annotations

import asyncio
import struct
from typing import Any


class FakeTransport(asyncio.Transport):
    """Records what the protocol writes and whether it reads."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.reading = True
        self.closed = False
        self.eof = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_reading(self) -> bool:
        return self.reading

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def close(self) -> None:
        self.closed = True

    def take(self) -> bytes:
        """What was written since the last take."""
        data = bytes(self.written)
        self.written.clear()
        return data


def frame(op: int, ct: int, payload: bytes = b"") -> bytes:
    return struct.pack(">IHB", len(payload) + 3, op, ct) + payload


def split_frames(data: bytes) -> list[tuple[int, int, bytes]]:
    """The (op, ct, payload) of each frame in ``data`` (complete frames only)."""
    frames = []
    while data:
        length, op, ct = struct.unpack(">IHB", data[:7])
        frames.append((op, ct, data[7:4 + length]))
        data = data[4 + length:]
    return frames
