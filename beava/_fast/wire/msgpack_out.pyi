"""Type stub of msgpack_out.pyx."""

from typing import Any

# ``value``'s MessagePack bytes as the read fast path writes them (the reply encoder's).
def packb(value: Any) -> bytes: ...

class RowPage:
    """Rows written one after another into one buffer (a table scan's page): MessagePack
    maps, or JSON texts with a ``separator`` between two."""

    count: int
    def __init__(self, separator: bytes = b"") -> None: ...
    nbytes: int
    def __len__(self) -> int: ...
    # Each row's bytes, in order (separators left out).
    def rows(self) -> list[bytes]: ...
    # ``head``, the rows, then ``tail``, as one bytes object (one copy of the rows).
    def joined(self, head: bytes, tail: bytes) -> bytes: ...
