"""Acknowledgement timing of pushes: memory-only, periodic fsync, strict group commit
(spec/durability.md §2, §6).

The store appends every accepted push record to the log's pending batch (``buf``, a
bytearray) and hands the log an item describing how to apply it,
``(lsn, event, row, now_ms, on_applied)``; the log calls its
``apply_items`` function (the store's) with items in LSN order. ``MemoryLog`` is not used
for pushes (the store applies them itself); ``PeriodicLog`` buffers the record and applies
at once, fsyncing on a tick; ``GroupCommit`` applies only after the fsync that covers the
record (one worker thread, one fsync per loop turn). ``barrier()`` makes every accepted
record durable and applied before a register, reset, snapshot or shutdown. A waiter item
``(0, None, None, 0, callback)`` only runs its callback once earlier items are applied.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from collections.abc import Callable
from typing import Any, NoReturn

from beava.durability.crash_points import CrashPoints
from beava.durability.wal import EventLog, WalFatal, WalWriter
from beava.durability.wal_format import record_lsn_at

Callback = Callable[[], None]
# (lsn, event, row, now_ms, on_applied); event None = a waiter that only runs on_applied
Item = tuple[int, str | None, dict[str, Any] | None, int, Callback | None]
ApplyItems = Callable[[list[Item]], None]


class MemoryLog:
    """--memory-only: nothing is written; every push applies and acks at once."""

    mode = "memory"
    acks_immediately = True  # a push is applied and acknowledged before submit returns
    sealed_lsn = 0

    def after_pending(self, callback: Callback) -> bool:
        return True

    def barrier(self) -> None:
        pass

    def close(self) -> None:
        pass


class _WorkerLog:
    """Shared machinery: one worker thread writes and fsyncs batches, in order."""

    acks_immediately = False

    def __init__(self, wal: WalWriter, *, apply_items: ApplyItems, fsync_bytes: int,
                 crash: CrashPoints, on_fatal: Callable[[BaseException], None],
                 after_batch: Callback | None = None,
                 next_lsn: Callable[[], int] | None = None,
                 limit_bytes: int | None = None,
                 on_pressure: Callable[[bool], None] | None = None) -> None:
        self.wal = wal
        # Backpressure (§6.5): above limit_bytes not yet durable, on_pressure(True) stops
        # reading client sockets; below half of it, on_pressure(False) resumes.
        self.limit_bytes = limit_bytes
        self.on_pressure = on_pressure
        self.pressured = False
        self._in_flight_bytes = 0
        self.apply_items = apply_items
        self.fsync_bytes = fsync_bytes
        self.crash = crash
        self.on_fatal = on_fatal
        self.after_batch = after_batch
        self.next_lsn = next_lsn
        self.buf = bytearray()  # the pending batch: records appended by the store
        self.sealed_lsn = 0  # the last push LSN handed to the worker
        self._callbacks: list[Item] = []
        self._in_flight: concurrent.futures.Future[None] | None = None
        self._in_flight_callbacks: list[Item] = []
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="wal")
        self._loop = asyncio.get_event_loop()

    @property
    def pending_bytes(self) -> int:
        """Bytes accepted but not yet durable: the pending batch plus the one in flight."""
        return len(self.buf) + self._in_flight_bytes

    def _check_pressure(self) -> None:
        limit = self.limit_bytes
        if limit is None or self.on_pressure is None:
            return
        if not self.pressured and self.pending_bytes > limit:
            self.pressured = True
            self.on_pressure(True)
        elif self.pressured and self.pending_bytes < limit // 2:
            self.pressured = False
            self.on_pressure(False)

    def _take(self) -> tuple[bytearray, list[Item]]:
        data, callbacks = self.buf, self._callbacks
        self.buf, self._callbacks = bytearray(), []
        for item in reversed(callbacks):
            if item[1] is not None:
                self.sealed_lsn = item[0]
                break
        return data, callbacks

    def _start(self) -> None:
        """Hand the pending batch to the worker (at most one batch in flight)."""
        if self._in_flight is not None or not (self.buf or self._callbacks):
            return
        data, callbacks = self._take()
        future = self._executor.submit(self.wal.write_and_sync, data) if data else None
        if future is None:
            self._complete(callbacks)
            return
        self._in_flight = future
        self._in_flight_callbacks = callbacks
        self._in_flight_bytes = len(data)
        future.add_done_callback(
            lambda f: self._loop.call_soon_threadsafe(self._finish, f))

    def _finish(self, future: concurrent.futures.Future[None]) -> None:
        if future is not self._in_flight:
            return  # already completed synchronously by a barrier
        self._in_flight = None
        self._in_flight_bytes = 0
        callbacks, self._in_flight_callbacks = self._in_flight_callbacks, []
        exc = future.exception()
        if exc is not None:
            self.on_fatal(exc)
            return
        self._complete(callbacks)
        self._start()
        self._check_pressure()

    def _complete(self, items: list[Item]) -> None:
        self.crash.hit("wal_after_fsync")
        if items:
            self.apply_items(items)
        self.crash.hit("wal_after_apply")
        if self.after_batch is not None:
            self.after_batch()
        if self.next_lsn is not None:
            # A new segment is named by the LSN of the next record written to it: the first
            # pending record's (accepted, LSN assigned, not written yet), else the next one.
            base = record_lsn_at(self.buf, 0) if self.buf else self.next_lsn()
            try:
                self.wal.maybe_rotate(base)
            except WalFatal as exc:
                self.on_fatal(exc)

    def barrier(self) -> None:
        """Synchronously: wait for the batch in flight, then write and fsync the rest."""
        while True:
            future = self._in_flight
            if future is not None:
                concurrent.futures.wait([future])
                self._finish(future)  # may hand the next batch to the worker
                continue
            if not (self.buf or self._callbacks):
                self._check_pressure()
                return
            data, callbacks = self._take()
            if data:
                try:
                    self.wal.write_and_sync(data)
                except WalFatal as exc:
                    self.on_fatal(exc)
                    return
            self._complete(callbacks)

    def close(self) -> None:
        self.barrier()
        self._executor.shutdown(wait=True)


class GroupCommit(_WorkerLog):
    """Strict mode: a push is applied and acknowledged after the fsync covering it."""

    mode = "strict"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._scheduled = False

    def submit(self, item: Item) -> bool:
        """Accept the push of ``item``, whose record is already appended to ``buf``."""
        self._callbacks.append(item)
        if len(self.buf) >= self.fsync_bytes:
            self._start()
            self._check_pressure()
        elif not self._scheduled:
            # Run once the loop has processed all ready input: one fsync per loop turn.
            self._scheduled = True
            self._loop.call_soon(self._flush_turn)
        return False

    def after_pending(self, callback: Callback) -> bool:
        """Run ``callback`` once everything accepted so far is durable (dedupe replays of a
        pending original). Returns True when that is already the case (nothing pending)."""
        if not (self.buf or self._callbacks or self._in_flight is not None):
            return True
        self._callbacks.append((0, None, None, 0, callback))
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush_turn)
        return False

    def _flush_turn(self) -> None:
        self._scheduled = False
        self._start()


class PeriodicLog(_WorkerLog):
    """Periodic mode: apply and acknowledge at once, fsync every tick."""

    mode = "periodic"
    acks_immediately = True

    def __init__(self, *args: Any, tick_ms: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tick_s = tick_ms / 1000.0
        self._timer = self._loop.call_later(self.tick_s, self._tick)

    def submit(self, item: Item) -> bool:
        """Apply ``item`` at once; its record is already appended to ``buf``."""
        self.apply_items([item])
        if len(self.buf) >= self.fsync_bytes:
            self._start()
            self._check_pressure()
        return True

    def after_pending(self, callback: Callback) -> bool:
        return True

    def _tick(self) -> None:
        self._start()
        self._timer = self._loop.call_later(self.tick_s, self._tick)

    def close(self) -> None:
        self._timer.cancel()
        super().close()


def fatal_exit(log: EventLog, exc: BaseException) -> NoReturn:
    """A WAL write/fsync failure: log it and stop at once with exit 4 (§6.6)."""
    op = getattr(exc, "op", "write")
    path = getattr(exc, "path", "")
    log.error("wal.io_error", "WAL I/O failure", op=op, path=path, error=str(exc), fatal=True)
    log.error("server.fatal", "fatal WAL I/O error", reason=f"wal {op} failed: {exc}",
              exit_code=4)
    os._exit(4)
