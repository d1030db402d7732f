"""Type stub of msgpack_json.pyx."""

from typing import Any

# A scan reply's body (a MessagePack map: ``rows``, an array of maps or of arrays, and
# ``cursor``) as the buffers of one Arrow array per column and the next cursor: (row count,
# [(validity bitmap, values, offsets or None, null count)], cursor or None), for columns
# named ``names`` (UTF-8) of ``kinds`` (one byte each: 0 long, 1 double, 2 bool, 3 text, 4
# JSON text); an array row's i-th value goes to column ``order[i]`` (-1: none).
def page_columns(page: Any, names: list[bytes], kinds: bytes, order: list[int] | None = None
                 ) -> tuple[int, list[tuple[bytes, bytes, bytes | None, int]], str | None]: ...
