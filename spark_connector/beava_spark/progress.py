"""Live progress of a push, while it runs.

Spark hands Python accumulator updates to the driver only when a task ends, so partition
tasks also send their running counts in small UDP datagrams to a listener on the driver.
Each datagram carries the task attempt's cumulative counts, so a lost one costs nothing
but a stale figure for a moment. Progress is advisory; the totals a push returns come
from the accumulator.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from .totals import counts_line

_encode = msgspec.json.encode
_decode = msgspec.json.Decoder(tuple[str, int, int, int, int, bool]).decode


@dataclass(frozen=True)
class Progress:
    """A snapshot: rows sent, acknowledged (new pushes), answered as dedupe replays and
    rejected so far (every task attempt that reported, failed ones included), seconds
    since the start, and rows sent per second since the start: the basis of
    ``PushTotals.rows_per_second`` too. ``replays_reported`` is False when a server does
    not tell replays apart (its replays are then in ``acknowledged``)."""

    sent: int
    acknowledged: int
    rejected: int
    elapsed: float
    rows_per_second: float
    replays: int = 0
    replays_reported: bool = True

    def line(self) -> str:
        """The progress line: the counts worded as in ``PushTotals.summary``."""
        counts = counts_line(self.sent, self.acknowledged, self.replays, self.rejected,
                             self.replays_reported)
        return f"{counts}  {self.rows_per_second:,.0f} rows/s  {self.elapsed:.1f} s"


class ProgressReporter:
    """Task side: sends ``(attempt, sent, acknowledged, rejected, replays,
    replays_reported)`` at most once per ``interval`` seconds (and always on ``flush``).
    Never raises: progress is optional."""

    def __init__(self, address: tuple[str, int], attempt: str, interval: float = 0.25) -> None:
        self._address = address
        self._attempt = attempt
        self._interval = interval
        self._next = 0.0
        self._sock: socket.socket | None = None
        with contextlib.suppress(OSError):
            family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
            self._sock = socket.socket(family, socket.SOCK_DGRAM)
            self._sock.setblocking(False)

    def update(self, sent: int, acknowledged: int, rejected: int, replays: int = 0,
               replays_reported: bool = True, *, flush: bool = False) -> None:
        """Report the attempt's counts so far (rate-limited unless ``flush``)."""
        now = time.monotonic()
        if self._sock is None or (not flush and now < self._next):
            return
        self._next = now + self._interval
        with contextlib.suppress(OSError):
            self._sock.sendto(_encode((self._attempt, sent, acknowledged, rejected, replays,
                                       replays_reported)), self._address)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


class ProgressListener:
    """Driver side: receives task reports and calls ``callback(Progress)`` (if any) every
    ``interval`` seconds from its own thread until ``close()``; ``snapshot()`` gives the
    counts received so far, also after ``close()``."""

    def __init__(self, callback: Callable[[Progress], None] | None, *, host: str = "127.0.0.1",
                 interval: float = 1.0) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_DGRAM)
        self._sock.bind((host, 0))
        self._sock.settimeout(min(0.1, interval))
        self._callback = callback
        self._interval = interval
        self._attempts: dict[str, tuple[int, int, int, int, bool]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="beava-spark-progress",
                                        daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        """Where tasks send their reports."""
        host, port = self._sock.getsockname()[:2]
        return host, port

    def start(self) -> ProgressListener:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def snapshot(self) -> Progress:
        """The counts received so far."""
        with self._lock:
            counts = list(self._attempts.values())
        now = time.monotonic()
        sent = sum(c[0] for c in counts)
        elapsed = now - self._started
        return Progress(
            sent=sent, acknowledged=sum(c[1] for c in counts),
            rejected=sum(c[2] for c in counts), elapsed=elapsed,
            rows_per_second=sent / elapsed if elapsed > 0 else 0.0,
            replays=sum(c[3] for c in counts),
            replays_reported=all(c[4] for c in counts),
        )

    def _receive(self) -> None:
        try:
            data = self._sock.recv(512)
        except (TimeoutError, OSError):
            return
        self._record(data)

    def _record(self, data: bytes) -> None:
        try:
            attempt, sent, acknowledged, rejected, replays, reported = _decode(data)
        except msgspec.DecodeError:
            return  # not ours
        with self._lock:
            self._attempts[attempt] = (sent, acknowledged, rejected, replays, reported)

    def _run(self) -> None:
        due = time.monotonic() + self._interval
        while not self._stop.is_set():
            self._receive()
            if time.monotonic() >= due:
                due += self._interval
                if self._callback is not None:
                    self._callback(self.snapshot())

    def close(self) -> None:
        """Stop the thread and release the socket (the callback is not called again)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        # The reports already queued (e.g. the last ones of failed tasks) still count in
        # snapshot() after close.
        with contextlib.suppress(OSError):
            self._sock.settimeout(0.0)
            for _ in range(10_000):
                data = self._sock.recv(512)
                self._record(data)
        self._sock.close()
