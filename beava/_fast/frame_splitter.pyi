"""Type stub of frame_splitter.pyx (spec/wire.md §2.1-§2.2)."""

from typing import Final, Self

FRAME_TOO_LARGE: Final = 0x10000
FRAME_TOO_SHORT: Final = 0x10001

class FrameSplitter:
    def __new__(cls, max_payload: int = 4194304) -> Self: ...
    @property
    def max_payload(self) -> int: ...
    @property
    def failed(self) -> bool: ...
    @property
    def buffered(self) -> int: ...
    # ``(op, ct, payload)`` per complete frame; after a framing violation the last entry is
    # ``(FRAME_TOO_LARGE | FRAME_TOO_SHORT, declared_length, b"")``.
    def feed(self, data: bytes | bytearray | memoryview) -> list[tuple[int, int, bytes]]: ...

def encode_frame(op: int, ct: int, payload: bytes) -> bytes: ...
