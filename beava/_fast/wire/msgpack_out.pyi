"""Type stub of msgpack_out.pyx."""

from typing import Any

# ``value``'s MessagePack bytes as the read fast path writes them (the reply encoder's).
def packb(value: Any) -> bytes: ...
