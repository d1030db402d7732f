"""Entity keys as sent in reads (spec/sdk.md §8.5, spec/wire.md §7.1).

The TCP and HTTP clients send ``key`` unchanged; ``encode_key`` is the canonical encoding
the SDK uses, readable by both this project's server and beava 0.0.6.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


# -- canonical key strings, as the server stores and places them -----------------------------

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def float_text(x: float) -> str:
    """Rust ``{:?}`` text of a finite float, the server's spelling of a float in a key:
    Python's ``repr`` with the exponent's ``+`` and leading zeros dropped (``1e16``,
    ``1.5e-7``)."""
    text = repr(x)
    mantissa, e, exponent = text.partition("e")
    if not e:
        return text
    sign = "-" if exponent.startswith("-") else ""
    return f"{mantissa}e{sign}{exponent.lstrip('+-').lstrip('0') or '0'}"


def key_text(value: Any) -> str | None:
    """The text of one key value as the server stores it, or None when the value makes an
    event skip the table (absent, null, a non-finite float, not a scalar). An int outside
    signed 64-bit arrives at the server as a float."""
    kind = type(value)
    if kind is str:
        return value  # type: ignore[no-any-return]
    if kind is bool:
        return "true" if value else "false"
    if isinstance(value, int) and not isinstance(value, bool):
        if _INT64_MIN <= value <= _INT64_MAX:
            return str(int(value))
        value = float(value)
    if isinstance(value, float):
        return float_text(value) if value - value == 0.0 else None
    if isinstance(value, str):
        return str(value)
    return None


def event_key(body: Mapping[str, Any], fields: Sequence[str]) -> str | None:
    """The canonical key string of an event for a table keyed by ``fields``: one field, its
    text; several, each text with ``|`` escaped as ``%7C``, joined by ``|``; none (a global
    table), ``""``. None when a key value is missing or unusable (the server skips the
    table for that event)."""
    if len(fields) == 1:
        return key_text(body.get(fields[0]))
    parts = []
    for field in fields:
        text = key_text(body.get(field))
        if text is None:
            return None
        parts.append(text.replace("|", "%7C"))
    return "|".join(parts)


def read_key(key: Any, width: int) -> str | None:
    """The canonical key string a read of ``key`` names in a table with ``width`` key
    fields (a string as sent, a scalar as its text, a list of parts escaped and joined);
    None for a key the server will refuse (it answers the read's error itself)."""
    if isinstance(key, (list, tuple)):
        parts = [key_text(part) for part in key]
        if len(parts) != width or None in parts:
            return None
        if width == 1:
            return parts[0]
        return "|".join(p.replace("|", "%7C") for p in parts if p is not None)
    return "" if key is None else key_text(key)
