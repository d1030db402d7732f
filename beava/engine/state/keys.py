"""Canonical key strings (spec/operators.md §1, spec/wire.md §7.1).

``fmt_f64_debug`` lives in the table kernel, which builds the same strings for every
pushed event; reads and dedupe use it from there.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from beava._fast.ops.table_kernel import fmt_f64_debug

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


# Dedupe identities longer than this are kept as a digest (docs/limits.md): a client could
# otherwise make the dedupe cache keep megabytes per entry for the whole dedupe window.
DEDUPE_KEY_KEPT_CHARS = 128


def dedupe_keystr(value: Any) -> str:
    """Dedupe identity of a pushed value: keystr, or compact sorted JSON for lists/objects;
    one longer than DEDUPE_KEY_KEPT_CHARS as its SHA-256, marked with a control character
    that no accepted value holds (so no short identity can equal a digest)."""
    text = keystr(value)
    if text is None:
        text = _encode_sorted(value).decode()
    if len(text) <= DEDUPE_KEY_KEPT_CHARS:
        return text
    return "\x00sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
