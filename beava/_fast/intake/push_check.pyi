"""Type stub of push_check.pyx (spec/wire.md §6.2-§6.5)."""

from collections.abc import Iterable, Mapping
from typing import Any

def has_control_character(value: object) -> bool: ...

class EventChecker:
    def __init__(
        self,
        fields: Mapping[str, str],
        optional: Iterable[str],
        required: Iterable[str],
        defaults: Mapping[str, Any],
    ) -> None: ...
    # None when accepted, else the error code; may fill defaults and widen ints in place.
    def check(self, fields: dict[str, Any]) -> str | None: ...
