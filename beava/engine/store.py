"""The feature store: one registry version, acknowledged pushes, dedupe, reset.

The single writer of all state; the server calls it from the event loop only. It knows
nothing of sockets: requests arrive decoded and answers leave as Python values or
:class:`BeavaError`.
"""

from __future__ import annotations

import time
from typing import Any

from beava.engine.engine_state import EngineState
from beava.engine.keys import dedupe_keystr
from beava.engine.push_validation import build_checkers, validate_push
from beava.engine.registry import Registry, empty_registry, register


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class PushAck:
    """Outcome of an accepted push: a new record or a dedupe replay."""

    __slots__ = ("lsn", "registry_version", "replay")

    def __init__(self, lsn: int, registry_version: int, replay: bool) -> None:
        self.lsn = lsn
        self.registry_version = registry_version
        self.replay = replay


class FeatureStore:
    def __init__(self, *, memory_governance_enforce: bool = True, clock=wall_clock_ms) -> None:
        self.memory_governance_enforce = memory_governance_enforce
        self.clock = clock
        self.registry: Registry = empty_registry()
        self.engine = EngineState(self.registry)
        self._checkers = build_checkers(self.registry.events)
        self.last_lsn = 0
        self.watermark_ms = 0
        self.pushes_total = 0
        self.replays_total = 0
        # (event, dedupe key text) -> (lsn, now_ms, registry_version at the original push)
        self._dedupe: dict[tuple[str, str], tuple[int, int, int]] = {}

    @property
    def registry_version(self) -> int:
        return self.registry.version

    @property
    def node_count(self) -> int:
        return self.registry.node_count

    # registry -------------------------------------------------------------------------

    def register(self, body: bytes) -> tuple[int, dict]:
        """POST /register semantics; returns ``(status, response body)``."""
        outcome = register(self.registry, body,
                           memory_governance_enforce=self.memory_governance_enforce)
        if outcome.registry is not None:
            self.last_lsn += 1
            self.apply_registry(outcome.registry)
        return outcome.status, outcome.body

    def apply_registry(self, registry: Registry) -> None:
        """Swap in a new registry version and carry state across (spec/registry.md §9)."""
        self.engine.transition(self.registry, registry)
        self.registry = registry
        self._checkers = build_checkers(registry.events)

    # pushes ---------------------------------------------------------------------------

    def push(self, event: str, fields: Any) -> PushAck:
        """Validate, dedupe and accept one push (spec/wire.md §6.2)."""
        spec, row = validate_push(event, fields, self._checkers)
        now = self.clock()
        version = self.registry.version
        dedupe_field = spec.dedupe_key
        if dedupe_field is not None:
            value = row.get(dedupe_field)
            if value is not None:
                key = (event, dedupe_keystr(value))
                hit = self._dedupe.get(key)
                if hit is not None and now - hit[1] < spec.dedupe_window_ms:
                    self.replays_total += 1
                    return PushAck(hit[0], hit[2], True)
                self._dedupe[key] = (self.last_lsn + 1, now, version)
        self.last_lsn += 1
        self.pushes_total += 1
        self.apply(event, row, now)
        return PushAck(self.last_lsn, version, False)

    def apply(self, event: str, row: dict, now: int) -> None:
        """Apply one accepted push to every table it reaches."""
        self.engine.apply(event, row, now)
        if now > self.watermark_ms:
            self.watermark_ms = now

    def sweep_dedupe(self) -> int:
        """Drop dedupe entries whose window has passed; returns how many were removed."""
        now = self.clock()
        events = self.registry.events
        expired = []
        for key, (_lsn, at, _version) in self._dedupe.items():
            spec = events.get(key[0])
            if spec is None or now - at >= spec.dedupe_window_ms:
                expired.append(key)
        for key in expired:
            del self._dedupe[key]
        return len(expired)

    # reads ----------------------------------------------------------------------------

    def table(self, name: str) -> Any:
        """The state of table ``name``, or None if it is not a table derivation."""
        return self.engine.table(name)

    def query_time(self) -> int:
        """T = max(watermark, wall clock) (spec/operators.md §4)."""
        now = self.clock()
        return now if now > self.watermark_ms else self.watermark_ms

    # test mode ------------------------------------------------------------------------

    def reset(self) -> int:
        """Drop every descriptor and all state; returns the new registry version."""
        self.registry = empty_registry(self.registry.version + 1)
        self.engine = EngineState(self.registry)
        self._checkers = build_checkers(self.registry.events)
        self._dedupe.clear()
        self.watermark_ms = 0
        self.last_lsn += 1
        return self.registry.version
