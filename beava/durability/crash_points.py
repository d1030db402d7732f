"""Crash-injection hook for conformance tests (spec/durability.md §15).

``BEAVA_CRASH_AT=<point>[:<n>]``: the process sends itself SIGKILL the n-th time it reaches
``<point>``. The server builds a :class:`CrashPoints` from that value only in test mode (None
otherwise), so in production every ``hit`` is a single comparison.
"""

from __future__ import annotations

import os
import signal

POINTS = frozenset({
    "wal_after_write",
    "wal_after_fsync",
    "wal_after_apply",
    "registry_after_fsync",
    "reset_after_boundary",
    "rotation_after_create",
    "snapshot_before_rename",
    "recovery_mid_replay",
})


def kill_self() -> None:
    """SIGKILL the calling process: no cleanup, no flush, exactly like a crash."""
    os.kill(os.getpid(), signal.SIGKILL)


class CrashPoints:
    """Counts arrivals at the configured point and kills the process on the n-th one.

    ``CrashPoints(None)`` is inert. A malformed value raises ``ValueError`` naming the problem.
    """

    __slots__ = ("point", "n", "count")

    def __init__(self, value: str | None) -> None:
        self.point: str | None = None
        self.n = 1
        self.count = 0
        if value is None:
            return
        point, sep, n_text = value.strip().partition(":")
        if point not in POINTS:
            raise ValueError(f"unknown crash point {point!r}")
        if sep:
            if not n_text.isdigit() or int(n_text) < 1:
                raise ValueError(f"invalid crash count {n_text!r}: expected an integer >= 1")
            self.n = int(n_text)
        self.point = point

    def due(self, point: str) -> bool:
        """Count one arrival at ``point``; True when this is the n-th arrival.

        Used directly where the kill must happen elsewhere (the snapshot child counts in the
        parent, so that ``snapshot_before_rename:2`` kills the second child).
        """
        if point != self.point:
            return False
        self.count += 1
        return self.count == self.n

    def hit(self, point: str) -> None:
        """Count one arrival at ``point`` and SIGKILL the process if it is the n-th."""
        if point == self.point and self.due(point):
            kill_self()
