"""Duration arguments of the SDK (spec/sdk.md §2.2, §6.1).

The SDK grammar is stricter than the server's (no leading zero, so no ``0ms`` / ``05m``);
the conversion to milliseconds and the upper bound are the catalogue's.
"""

from __future__ import annotations

import re

from beava.catalogue.operators import FOREVER, MAX_DURATION_MS, parse_duration

_DURATION = re.compile(r"[1-9][0-9]*(?:ms|s|m|h|d)", re.ASCII)


def is_duration(text: str) -> bool:
    """Whether ``text`` matches ``^[1-9][0-9]*(ms|s|m|h|d)$`` (``forever`` excluded)."""
    return _DURATION.fullmatch(text) is not None


def check_duration(
    value: object, name: str, *, allow_forever: bool, required: bool = False
) -> str | None:
    """Validate a duration-string argument and return it unchanged.

    ``None`` is allowed unless ``required`` (then ``ValueError``); a non-``str`` is a
    ``TypeError``; a string outside the grammar (or ``forever`` when not allowed) is a
    ``ValueError``.
    """
    if value is None:
        if required:
            raise ValueError(f"{name} is required")
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a duration string, got {type(value).__name__}")
    if value == FOREVER:
        if allow_forever:
            return value
        raise ValueError(f"{name}={value!r} is not allowed; give a finite duration")
    if not is_duration(value):
        allowed = "<n>(ms|s|m|h|d)" + (" or 'forever'" if allow_forever else "")
        raise ValueError(f"invalid {name} {value!r}; expected {allowed} with n >= 1")
    parse_duration(value)  # the catalogue's upper bound (2^63-1 ms)
    return value


def option_ms(value: object, name: str, *, allow_forever: bool) -> int | None:
    """An event option given as a duration string or a positive ``int`` of milliseconds,
    as integer milliseconds; ``None`` (and ``forever`` where allowed) give ``None``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(
            f"{name} must be a duration string or an int of milliseconds, "
            f"got {type(value).__name__}"
        )
    if isinstance(value, int):
        if not 0 < value <= MAX_DURATION_MS:
            raise ValueError(f"{name} must be a positive number of milliseconds, got {value}")
        return int(value)
    if value == FOREVER and allow_forever:
        return None
    check_duration(value, name, allow_forever=False)
    return parse_duration(value)
