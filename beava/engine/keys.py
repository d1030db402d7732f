"""Canonical key strings (spec/operators.md §1, spec/wire.md §7.1)."""

from __future__ import annotations

import math
from typing import Any

import msgspec

_encode_sorted = msgspec.json.Encoder(order="sorted").encode


def fmt_f64_debug(x: float) -> str:
    """Rust ``{:?}`` spelling of a float: ``42.0``, ``1e16``, ``1.5e-7``, ``NaN``, ``inf``."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    text = repr(x)
    if "e" in text:
        mantissa, exponent = text.split("e")
        return f"{mantissa}e{int(exponent)}"
    return text


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
