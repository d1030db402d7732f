"""Push-side validation of one event (spec/wire.md §6.2-§6.5), steps 2-6.

``validate_push`` returns the row to accept (defaults filled in) or raises
:class:`BeavaError` with the first failing check's code.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from beava.protocol.errors import BeavaError

# Unicode general category Cc.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_EVENT_TIME_FIELDS = frozenset(("event_time", "event_time_ms"))
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def has_control_character(value: Any) -> bool:
    """Whether a string, or any key or string at any depth of a container, holds a Cc."""
    if isinstance(value, str):
        return _CONTROL.search(value) is not None
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and _CONTROL.search(key) is not None:
                return True
            if isinstance(item, (str, dict, list)) and has_control_character(item):
                return True
        return False
    if isinstance(value, list):
        return any(isinstance(item, (str, dict, list)) and has_control_character(item)
                   for item in value)
    return False


def widen_big_ints(row: dict[str, Any]) -> None:
    """Integers outside signed 64-bit become floats (spec/wire.md §1), at any depth."""
    for key, value in row.items():
        if type(value) is int:
            if not _I64_MIN <= value <= _I64_MAX:
                row[key] = float(value)
        elif isinstance(value, dict):
            widen_big_ints(value)
        elif isinstance(value, list):
            _widen_list(value)


def _widen_list(items: list[Any]) -> None:
    for i, value in enumerate(items):
        if type(value) is int:
            if not _I64_MIN <= value <= _I64_MAX:
                items[i] = float(value)
        elif isinstance(value, dict):
            widen_big_ints(value)
        elif isinstance(value, list):
            _widen_list(value)


def _type_ok(declared: str, value: Any) -> bool:
    kind = type(value)
    if declared == "str":
        return kind is str
    if declared in ("i64", "f64"):
        return kind is int or kind is float
    if declared == "bool":
        return kind is bool
    return value is not None  # bytes, datetime, json: any non-null value


def validate_push(event_name: str, fields: Any, events: Mapping[str, Any]) -> tuple[Any, dict]:
    """Checks 2-6 of spec/wire.md §6.2; returns ``(event spec, accepted row)``."""
    if not isinstance(fields, dict):
        raise BeavaError("invalid_event")
    if _CONTROL.search(event_name) is not None or has_control_character(fields):
        raise BeavaError("control_character_in_string")
    spec = events.get(event_name)
    if spec is None:
        raise BeavaError("event_not_found")
    declared = spec.fields
    optional = spec.optional
    undeclared = [k for k in fields if k not in declared and k not in optional]
    if undeclared:
        if any(k in _EVENT_TIME_FIELDS for k in undeclared):
            raise BeavaError("unknown_field_event_time_v0")
        raise BeavaError("unknown_field_v0")
    for name, default in spec.defaults.items():
        if fields.get(name) is None:
            fields[name] = default
    for name in spec.required:
        value = fields.get(name)
        if value is None or not _type_ok(declared[name], value):
            raise BeavaError("invalid_event")
    widen_big_ints(fields)
    return spec, fields
