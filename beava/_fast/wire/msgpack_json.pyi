"""Type stub of msgpack_json.pyx."""

from typing import Any

# The rows of a scan page (a MessagePack array of maps) as the buffers of one Arrow array
# per column: (row count, [(validity bitmap, values, offsets or None, null count)]), for
# columns named ``names`` (UTF-8) of ``kinds`` (one byte each: 0 long, 1 double, 2 bool,
# 3 text, 4 JSON text).
def page_columns(rows: Any, names: list[bytes], kinds: bytes
                 ) -> tuple[int, list[tuple[bytes, bytes, bytes | None, int]]]: ...
