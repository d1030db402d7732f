"""Push-side validation of one event (spec/wire.md §6.2-§6.5), steps 2-6.

The per-field work runs in C (``beava._fast.intake.push_check.EventChecker``, one per event
schema, built when a registry version is installed); this module keeps the order of the
checks that involve the event name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from beava._fast.intake.intake import CheckerEntry
from beava._fast.intake.push_check import EventChecker, has_control_character
from beava.catalogue.errors import BeavaError, did_you_mean, nearest_names, quoted_list
from beava.engine.registry import EventSpec

__all__ = ["CheckerEntry", "EventChecker", "build_checkers", "event_not_found_error",
           "explain_push_error", "has_control_character", "not_a_map_error", "validate_push"]

# What a declared type accepts, in words (spec/wire.md §6.3).
_ACCEPTS = {"str": "a string", "i64": "a number", "f64": "a number", "bool": "a boolean"}
_LONGEST_SHOWN = 40
# A non-finite float as JavaScript and JSON texts that allow them spell it.
_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def build_checkers(events: Mapping[str, EventSpec]) -> dict[str, CheckerEntry]:
    """Event name -> its CheckerEntry: the EventSpec, its compiled checker, its index in
    ``events`` (the intake's push counts), whether it has a dedupe key."""
    return {name: CheckerEntry(name, spec, EventChecker(spec.fields, spec.optional,
                                                        spec.required, spec.defaults), index)
            for index, (name, spec) in enumerate(events.items())}


def validate_push(event_name: str, fields: Any,
                  checkers: Mapping[str, CheckerEntry]) -> tuple[EventSpec, dict[str, Any]]:
    """Checks 2-6 of spec/wire.md §6.2; returns ``(event spec, accepted row)``."""
    if type(fields) is not dict:
        raise not_a_map_error(fields)
    if has_control_character(event_name):
        raise BeavaError("control_character_in_string", field="<event name>",
                         message="the event name holds a control character")
    entry = checkers.get(event_name)
    if entry is None:
        if has_control_character(fields):
            raise BeavaError("control_character_in_string",
                             message="a field name or string value holds a control character")
        raise event_not_found_error(event_name, checkers)
    code = entry.checker.check(fields)
    if code is not None:
        raise BeavaError(code, **explain_push_error(code, entry.spec, fields))
    return entry.spec, fields


def event_not_found_error(event_name: str, events: Mapping[str, Any]) -> BeavaError:
    close = nearest_names(event_name, events)
    hint = did_you_mean(close)
    text = f"no event {event_name!r} is registered"
    text += f"; {hint}" if hint else f"; registered events: {quoted_list(sorted(events))}"
    extra: dict[str, Any] = {"got": event_name, "expected": close or sorted(events)[:12],
                             "message": text}
    if hint:
        extra["hint"] = hint
    return BeavaError("event_not_found", **extra)


def not_a_map_error(fields: Any) -> BeavaError:
    """``invalid_event`` for an event body that is not a map (spec/wire.md §6.2 check 2)."""
    got = wire_type_name(fields)
    return BeavaError("invalid_event", got=got, expected="map",
                      message=f"the event body must be a map of field names to values, "
                              f"got {got}")


def wire_type_name(value: Any) -> str:
    """The type of a pushed value as the wire spells it (JSON / MessagePack)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, dict):
        return "map"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _LONGEST_SHOWN else text[:_LONGEST_SHOWN - 3] + "..."


def _type_fits(declared: str, value: Any) -> bool:
    kind = type(value)
    if declared == "str":
        return kind is str
    if declared in ("i64", "f64"):
        return kind is int or kind is float
    if declared == "bool":
        return kind is bool
    return value is not None


def _unstorable(value: Any, depth: int = 0) -> str | None:
    """Why a value cannot be stored (push_check's SCAN_INVALID), or None."""
    kind = type(value)
    if kind is dict:
        if depth >= 64:
            return "nested deeper than 64 containers"
        for key, item in value.items():
            if type(key) is not str:
                return f"a map key that is not a string ({_shown(key)})"
            why = _unstorable(item, depth + 1)
            if why is not None:
                return why
    elif kind is list:
        if depth >= 64:
            return "nested deeper than 64 containers"
        for item in value:
            why = _unstorable(item, depth + 1)
            if why is not None:
                return why
    elif kind not in (str, int, float, bool) and value is not None:
        return f"a {wire_type_name(value)} value (MessagePack extension types are not stored)"
    return None


def explain_push_error(code: str, spec: EventSpec, fields: dict[Any, Any]) -> dict[str, Any]:
    """Informative keys of a rejected push's error object (spec/wire.md §5.1): which field,
    what was expected and what arrived. Runs only after a push has failed its checks."""
    declared = sorted({*spec.fields, *spec.optional})
    if code in ("unknown_field_v0", "unknown_field_event_time_v0"):
        unknown = [k if isinstance(k, str) else repr(k) for k in fields
                   if not isinstance(k, str) or k not in spec.fields and k not in spec.optional]
        names = ", ".join(repr(k) for k in unknown)
        text = (f"event {spec.name!r} has no field{'s' if len(unknown) > 1 else ''} {names}; "
                f"declared fields: {quoted_list(declared, 50)}")
        out: dict[str, Any] = {"field": unknown[0] if len(unknown) == 1 else unknown,
                               "expected": declared}
        if code == "unknown_field_event_time_v0":
            out["hint"] = ("beava stamps events with processing time; declare the field in the "
                           "schema to keep it as data")
        else:
            close = [c for u in unknown for c in nearest_names(u, declared, 1)]
            if close:
                out["hint"] = did_you_mean(close)
        out["message"] = text
        return out
    if code == "invalid_event":
        for name in sorted(spec.required):
            declared_type = spec.fields.get(name, "json")
            if name not in fields:
                return {"field": name, "expected": declared_type, "got": "missing",
                        "message": f"required field {name!r} ({declared_type}) is missing"}
            value = fields[name]
            if not _type_fits(declared_type, value):
                accepts = _ACCEPTS.get(declared_type, "any non-null value")
                got = wire_type_name(value)
                shown = "" if value is None else f" {_shown(value)}"
                return {"field": name, "expected": declared_type, "got": got,
                        "message": f"field {name!r} is declared {declared_type} and takes "
                                   f"{accepts}; got {got}{shown}"}
        for name, value in fields.items():
            if type(value) is float and not math.isfinite(value):  # spec/wire.md §6.3
                got = _NON_FINITE[repr(value)]
                return {"field": name, "expected": "finite number", "got": got,
                        "message": f"field {name!r}: expected a finite number, got {got}"}
            why = _unstorable(value)
            if why is not None:
                return {"field": name, "got": wire_type_name(value),
                        "message": f"field {name!r} cannot be stored: it holds {why}"}
        return {}
    if code == "control_character_in_string":
        for name, value in fields.items():
            if has_control_character(name) or has_control_character(value):
                return {"field": name if isinstance(name, str) else repr(name),
                        "message": f"field {name!r}: a control character (U+0000-U+001F, "
                                   "U+007F-U+009F) in its name or a string value"}
    return {}
