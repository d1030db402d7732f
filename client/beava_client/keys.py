"""Entity keys as sent in reads (spec/sdk.md §8.5, spec/wire.md §7.1).

The TCP and HTTP clients send ``key`` unchanged; ``encode_key`` is the canonical encoding
the SDK uses, readable by both this project's server and beava 0.0.6.
"""

from __future__ import annotations

from typing import Any


def _component(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    raise TypeError(f"key components must be str, int or bool, got {type(value).__name__}")


def encode_key(key: Any) -> str | list[str]:
    """``None`` → ``""`` (global row); ``str`` unchanged; ``int`` → decimal; ``bool`` →
    ``"true"``/``"false"``; ``list``/``tuple`` → components joined with ``|``, or the list
    of component strings when any component contains ``|``. Anything else: TypeError."""
    if key is None:
        return ""
    if isinstance(key, (list, tuple)):
        parts = [_component(v) for v in key]
        if any("|" in p for p in parts):
            return parts
        return "|".join(parts)
    return _component(key)
