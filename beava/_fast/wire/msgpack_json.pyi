"""Type stub of msgpack_json.pyx."""

from typing import Any

# The JSON text of each MessagePack value (bytes-like; None for nil), as msgspec.json gives
# the decoded value; written byte by byte unless the value holds a float.
def json_texts(values: list[Any]) -> list[str | None]: ...
