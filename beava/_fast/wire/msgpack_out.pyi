"""Type stub of msgpack_out.pyx."""

from typing import Any

# ``value``'s MessagePack bytes as the read fast path writes them (the reply encoder's).
def packb(value: Any) -> bytes: ...

class RowPage:
    """MessagePack rows written one after another into one buffer (a table scan's page)."""

    count: int
    nbytes: int
    def __len__(self) -> int: ...
    # Each row's bytes, in order.
    def rows(self) -> list[bytes]: ...
    # ``head``, the rows, then ``tail``, as one bytes object (one copy of the rows).
    def joined(self, head: bytes, tail: bytes) -> bytes: ...
