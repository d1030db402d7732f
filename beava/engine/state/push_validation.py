"""Push-side validation of one event (spec/wire.md §6.2-§6.5), steps 2-6.

The per-field work runs in C (``beava._fast.push_check.EventChecker``, one per event
schema, built when a registry version is installed); this module keeps the order of the
checks that involve the event name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from beava._fast.push_check import EventChecker, has_control_character
from beava.catalogue.errors import BeavaError
from beava.engine.registry import EventSpec

__all__ = ["EventChecker", "build_checkers", "has_control_character", "validate_push"]


def build_checkers(events: Mapping[str, EventSpec]) -> dict[str, tuple[EventSpec, EventChecker]]:
    """Event name -> (EventSpec, its compiled checker)."""
    return {name: (spec, EventChecker(spec.fields, spec.optional, spec.required, spec.defaults))
            for name, spec in events.items()}


def validate_push(event_name: str, fields: Any,
                  checkers: Mapping[str, tuple[EventSpec, EventChecker]]
                  ) -> tuple[EventSpec, dict[str, Any]]:
    """Checks 2-6 of spec/wire.md §6.2; returns ``(event spec, accepted row)``."""
    if type(fields) is not dict:
        raise BeavaError("invalid_event")
    if has_control_character(event_name):
        raise BeavaError("control_character_in_string")
    entry = checkers.get(event_name)
    if entry is None:
        if has_control_character(fields):
            raise BeavaError("control_character_in_string")
        raise BeavaError("event_not_found")
    code = entry[1].check(fields)
    if code is not None:
        raise BeavaError(code)
    return entry[0], fields
