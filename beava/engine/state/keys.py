"""Canonical key strings (spec/operators.md §1, spec/wire.md §7.1).

``fmt_f64_debug`` lives in the table kernel, which builds the same strings for every
pushed event; reads and dedupe use it from there.
"""

from __future__ import annotations

from typing import Any

import msgspec

from beava._fast.table_kernel import fmt_f64_debug

__all__ = ["dedupe_keystr", "fmt_f64_debug", "keystr"]

_encode_sorted = msgspec.json.Encoder(order="sorted").encode


def keystr(value: Any) -> str | None:
    """Text of a scalar for keys and categories; ``None`` for null."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return fmt_f64_debug(value)
    return None


def dedupe_keystr(value: Any) -> str:
    """Dedupe identity of a pushed value: keystr, or compact sorted JSON for lists/objects."""
    text = keystr(value)
    if text is not None:
        return text
    return _encode_sorted(value).decode()
