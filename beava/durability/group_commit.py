"""Acknowledgement timing of pushes: memory-only, periodic fsync, strict group commit
(spec/durability.md §2, §6).

The store's intake (beava._fast.intake.intake) appends every accepted push's record to the log's
pending batch (``buf``, a bytearray) and, in strict mode, the push to ``batch``, then calls
``accepted()`` once for the pushes of a call. It reads the log's ``mode`` (MEMORY, STRICT or
PERIODIC) once, when the log is attached, and nothing else asks the mode.
``MemoryLog`` is not used for pushes (the intake applies them itself); ``PeriodicLog``
buffers the record while the intake applies the push at once, fsyncing on a tick;
``GroupCommit`` keeps the push in the pending batch and applies it only after the fsync that
covers the record (one writer thread, in C, that never takes the GIL: it tells the event
loop of a durable batch through an eventfd; one batch in flight at a time). A pending batch holds no
object per push beyond its event's name: the pushes' LSNs run consecutively from the batch's
first, each has one event record in the batch's bytes (in order), and callbacks wait apart as
waiters ``(count, callback)``, run once the first ``count`` pushes of the batch are applied.
A durable batch is applied from its records, as recovery replays them, through the log's
``apply_batch`` function (the store's) a part at a time, at most
``APPLY_SLICE_SECONDS`` per loop iteration, while the next batch is already being written:
other requests are answered in between, and acknowledgements are released as their pushes
are applied. ``barrier()`` makes every accepted record durable and applied before a
register, reset, snapshot or shutdown.

A full disk (spec/durability.md §6.6) puts the log in write-refusing mode (``writable``
False; the store answers pushes, registers and resets ``wal_unavailable``). Strict mode:
every push accepted but not durable (the failed batch and the pending one) is handed to
``on_failed``, not applied, and its LSNs are given out again. Periodic mode: those pushes
were applied and acknowledged already, so their records stay queued and are written first
once space returns. Every ``PROBE_INTERVAL_S`` the log tries the disk again (periodic: by
writing the queued records); the first write that succeeds ends the mode.
"""

from __future__ import annotations

import asyncio
import os
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from time import perf_counter
from typing import Any, NoReturn

from beava._fast.intake.intake import MEMORY, PERIODIC, STRICT
from beava._fast.wal.batch_writer import BatchWriter
from beava._fast.wal.wal_record import seal
from beava.durability.crash_points import CrashPoints
from beava.durability.wal import EventLog, WalFatal, WalUnavailable, WalWriter
from beava.durability.wal_format import record_lsn_at

Callback = Callable[[], None]
# (count, callback): run callback once the batch's first ``count`` pushes are applied
Waiter = tuple[int, Callback]
# apply_batch(first_lsn, events, data, offset, start, stop, deadline): apply pushes
# start..stop-1 of a durable batch, push i (LSN first_lsn + i) from its event record in data,
# push start's at byte offset, stopping early (after at least one) once deadline
# (perf_counter; 0.0: none) has passed; returns (the offset of the next record, the index of
# the next push)
ApplyBatch = Callable[[int, list[str], bytearray, int, int, int, float], tuple[int, int]]
# on_failed(first_lsn, waiters, events): the pushes from first_lsn on (of these events, in
# LSN order) were not written (strict mode)
OnFailed = Callable[[int, list[Waiter], list[str]], None]
# on_writable(writable, error): write-refusing mode ends (True) or begins (False, the error)
OnWritable = Callable[[bool, str], None]
PROBE_INTERVAL_S = 1.0
# Durable pushes are applied at most this long per loop iteration (the rest on the next
# ones; the store's apply reads the clock every few pushes).
APPLY_SLICE_SECONDS = 0.00025
# Durable pushes not applied yet above which client sockets stop being read, as for the
# bytes pending durability (§6.5): intake never outruns the sliced apply for long.
UNAPPLIED_LIMIT = 65_536


class Batch:
    """Pushes accepted into one WAL batch, not applied yet, and the waiters among them;
    ``data``: the batch's records, once it is taken from the pending buffer."""

    __slots__ = ("first_lsn", "events", "waiters", "data")

    def __init__(self) -> None:
        self.first_lsn = 0
        self.events: list[str] = []
        self.waiters: list[Waiter] = []
        self.data = bytearray()


class Applying:
    """A durable batch being applied: its first ``done`` pushes are (the next one's record
    starts at byte ``offset``), and its waiters before ``waiter`` have run."""

    __slots__ = ("batch", "done", "offset", "waiter")

    def __init__(self, batch: Batch) -> None:
        self.batch = batch
        self.done = 0
        self.offset = 0
        self.waiter = 0


def apply_part(entry: Applying, apply_batch: ApplyBatch, deadline: float = 0.0) -> bool:
    """Apply ``entry``'s pushes with ``apply_batch``, running each waiter once its pushes
    are, until ``deadline`` (perf_counter; 0.0: to the end); True once the batch is done."""
    batch = entry.batch
    events, waiters = batch.events, batch.waiters
    total = len(events)
    while True:
        start = stop = entry.done
        w = entry.waiter
        end = waiters[w][0] if w < len(waiters) and waiters[w][0] < total else total
        if end > start:
            entry.offset, stop = apply_batch(batch.first_lsn, events, batch.data,
                                             entry.offset, start, end, deadline)
            entry.done = stop
        while w < len(waiters) and waiters[w][0] <= stop:
            entry.waiter = w + 1
            waiters[w][1]()
            w += 1
        if stop >= total and w >= len(waiters):
            return True
        if deadline and perf_counter() > deadline:
            return False


class MemoryLog:
    """--memory-only: nothing is written; every push applies and acks at once."""

    mode = MEMORY
    sealed_lsn = 0
    pending_bytes = 0
    writable = True

    def after_pending(self, callback: Callback) -> bool:
        return True

    def barrier(self) -> None:
        pass

    def close(self) -> None:
        pass


class _WorkerLog(ABC):
    """Shared machinery: one writer thread (beava._fast.wal.batch_writer, no GIL) writes and
    fsyncs batches, in order.

    At most one batch is in flight (``_in_flight``). The loop hands it to the writer
    thread with the WAL's target file and offset; the thread writes and fdatasyncs it and
    signals its eventfd, which the loop watches: ``_written`` then completes the batch on
    the loop (``_finish``). A synchronous ``barrier()`` waits for the thread instead."""

    writer_nice = 0  # the writer thread's nice value above the process's

    def __init__(self, wal: WalWriter, *, apply_batch: ApplyBatch, fsync_bytes: int,
                 crash: CrashPoints, on_fatal: Callable[[BaseException], None],
                 after_batch: Callback | None = None,
                 next_lsn: Callable[[], int] | None = None,
                 limit_bytes: int | None = None,
                 on_pressure: Callable[[bool], None] | None = None,
                 on_failed: OnFailed | None = None,
                 on_writable: OnWritable | None = None,
                 writer: BatchWriter | None = None) -> None:
        self.wal = wal
        self.writable = True  # False in write-refusing mode (a full disk, §6.6)
        self.on_failed = on_failed
        self.on_writable = on_writable
        self._probe_timer: asyncio.TimerHandle | None = None
        # Backpressure (§6.5): above limit_bytes not yet durable, on_pressure(True) stops
        # reading client sockets; below half of it, on_pressure(False) resumes.
        self.limit_bytes = limit_bytes
        self.on_pressure = on_pressure
        self.pressured = False
        self.apply_batch = apply_batch
        self.fsync_bytes = fsync_bytes
        self.crash = crash
        self.on_fatal = on_fatal
        self.after_batch = after_batch
        self.next_lsn = next_lsn
        self.buf = bytearray()  # the pending batch: records appended by the store
        self.sealed_lsn = 0  # the last push LSN handed to the worker
        # the pushes of the pending batch (strict: the intake appends to it, then calls
        # accepted())
        self.batch = Batch()
        self._in_flight: Batch | None = None  # with the writer thread
        self._applying: deque[Applying] = deque()  # durable, not all applied yet
        self.unapplied = 0  # pushes durable but not applied yet (of the batches in _applying)
        self._apply_scheduled = False
        self._loop = asyncio.get_event_loop()
        self._writer = writer if writer is not None else BatchWriter(self.writer_nice)
        self._loop.add_reader(self._writer.fileno(), self._written)

    def _written(self) -> None:
        """The writer thread's eventfd is readable: complete the batch it is done with."""
        batch = self._in_flight
        result = self._writer.result()
        if batch is not None and result is not None:
            self._finish(batch, result)

    @property
    def pending_bytes(self) -> int:
        """Bytes accepted but not yet durable: the pending batch plus the one in flight."""
        batch = self._in_flight
        return len(self.buf) + (0 if batch is None else len(batch.data))

    def _check_pressure(self) -> None:
        limit = self.limit_bytes
        if limit is None or self.on_pressure is None:
            return
        if not self.pressured and (self.pending_bytes > limit
                                   or self.unapplied > UNAPPLIED_LIMIT):
            self.pressured = True
            self.on_pressure(True)
        elif (self.pressured and self.pending_bytes < limit // 2
              and self.unapplied < UNAPPLIED_LIMIT // 2):
            self.pressured = False
            self.on_pressure(False)

    def _has_pending(self) -> bool:
        return bool(self.buf or self.batch.waiters)

    def _take(self) -> Batch:
        """The pending batch, its records in ``data``; a new one is pending from now on."""
        batch = self.batch
        batch.data = self.buf
        self.buf, self.batch = bytearray(), Batch()
        if batch.events:
            self.sealed_lsn = batch.first_lsn + len(batch.events) - 1
        return batch

    def _start(self) -> None:
        """Hand the pending batch to the writer thread (at most one batch in flight)."""
        if self._in_flight is not None or not self._has_pending():
            return
        batch = self._take()
        if not batch.data:
            self._complete(batch)
            return
        fd, offset = self.wal.batch_target()
        self._in_flight = batch
        # the writer thread sets the CRCs the push pass left unset (wal_record.seal_records)
        self._writer.submit(fd, batch.data, offset, self.crash.due("wal_after_write"),
                            seal=True)

    def _finish(self, batch: Batch, result: tuple[int, int, float]) -> None:
        """The writer thread is done with ``batch`` (its ``result``: errno, stage, fsync
        seconds)."""
        self._in_flight = None
        try:
            self.wal.batch_done(len(batch.data), *result)
        except WalUnavailable as exc:
            self._refuse(batch, exc)
            self._check_pressure()
            return
        except BaseException as exc:  # noqa: BLE001 - a WAL failure ends the server
            self.on_fatal(exc)
            return
        if not self.writable:
            self._resume()
        self._durable(batch)
        self._start_next()
        if not self._apply_scheduled:  # else the turn already due applies it: one slice
            self._apply_slice()
        self._check_pressure()

    @abstractmethod
    def _start_next(self) -> bool:
        """The writer thread is free again: hand it the pending batch now (True) or
        later."""

    # -- write-refusing mode (§6.6) -----------------------------------------------------------

    def _refuse(self, batch: Batch, exc: WalUnavailable) -> None:
        """A batch could not be written for lack of space (the segment is back to its
        previous length): hand its pushes over (strict) or keep its records (periodic),
        and refuse writes until a probe succeeds."""
        self._requeue(batch)
        if self.writable:
            self.writable = False
            if self.on_writable is not None:
                self.on_writable(False, str(exc))
        if self._probe_timer is None:
            self._probe_timer = self._loop.call_later(PROBE_INTERVAL_S, self._probe)

    @abstractmethod
    def _requeue(self, batch: Batch) -> None:
        """What becomes of a batch the disk did not take (strict: failed; periodic: kept)."""

    def _probe(self) -> None:
        self._probe_timer = None
        if self.writable or self._in_flight is not None:
            return
        if self.buf:  # periodic: the queued records are the probe
            self._start()
            return
        try:
            ok = self.wal.probe()
        except WalFatal as exc:
            self.on_fatal(exc)
            return
        if ok:
            self._resume()
        else:
            self._probe_timer = self._loop.call_later(PROBE_INTERVAL_S, self._probe)

    def _resume(self) -> None:
        self.writable = True
        if self.on_writable is not None:
            self.on_writable(True, "")

    def _complete(self, batch: Batch) -> None:
        """``batch`` is durable: queue it to be applied, and apply as much as one slice
        allows (the rest later)."""
        self._durable(batch)
        self._apply_slice()

    def _durable(self, batch: Batch) -> None:
        """``batch`` is durable: rotate the segment if it is full (no write is in flight
        now), then queue the batch to be applied."""
        self.crash.hit("wal_after_fsync")
        if self.next_lsn is not None:
            # A new segment is named by the LSN of the next record written to it: the first
            # pending record's (accepted, LSN assigned, not written yet), else the next one.
            base = record_lsn_at(self.buf, 0) if self.buf else self.next_lsn()
            try:
                self.wal.maybe_rotate(base)
            except WalFatal as exc:
                self.on_fatal(exc)
        self._applying.append(Applying(batch))
        self.unapplied += len(batch.events)

    def _apply_slice(self) -> None:
        """Apply durable batches for at most one slice; the rest on later iterations."""
        if not self._apply(perf_counter() + APPLY_SLICE_SECONDS) and not self._apply_scheduled:
            self._apply_scheduled = True
            self._loop.call_soon(self._apply_turn)
        if self.pressured:
            self._check_pressure()

    def _apply_turn(self) -> None:
        self._apply_scheduled = False
        self._apply_slice()

    def _apply(self, deadline: float = 0.0) -> bool:
        """Apply the durable batches in order until ``deadline`` (0.0: all of them);
        True once none is left. The replies released are flushed at the end (which may
        run a barrier that applies the rest at once)."""
        applying = self._applying
        finished = True
        while applying and finished:
            finished = apply_part(applying[0], self._apply_counted, deadline)
            if finished:
                applying.popleft()
                self.crash.hit("wal_after_apply")
        if self.after_batch is not None:
            self.after_batch()
        return finished and not applying

    def _apply_counted(self, first_lsn: int, events: list[str], data: bytearray, offset: int,
                       start: int, stop: int, deadline: float) -> tuple[int, int]:
        """``apply_batch``, counting the pushes it applied off ``unapplied``."""
        offset, done = self.apply_batch(first_lsn, events, data, offset, start, stop, deadline)
        self.unapplied -= done - start
        return offset, done

    def barrier(self) -> None:
        """Synchronously: wait for the batch in flight, then write and fsync the rest, and
        apply every durable batch. In write-refusing mode nothing more is written (the
        callers refuse their operation, or, at shutdown, the queued records stay
        unwritten)."""
        while True:
            batch = self._in_flight
            if batch is not None:
                self._writer.wait()
                result = self._writer.result()
                assert result is not None
                self._finish(batch, result)  # may hand the next batch to the writer thread
                continue
            self._apply()
            if not self._has_pending() or not self.writable:
                self._check_pressure()
                return
            batch = self._take()
            if batch.data:
                seal(batch.data)  # as the writer thread seals the batches it writes
                try:
                    self.wal.write_and_sync(batch.data)
                except WalUnavailable as exc:
                    self._refuse(batch, exc)
                    return
                except WalFatal as exc:
                    self.on_fatal(exc)
                    return
            self._complete(batch)
            self._apply()

    def stop_probing(self) -> None:
        if self._probe_timer is not None:
            self._probe_timer.cancel()
            self._probe_timer = None

    def close(self) -> None:
        self.stop_probing()
        self.barrier()
        if not self._loop.is_closed():
            self._loop.remove_reader(self._writer.fileno())
        self._writer.close()


class GroupCommit(_WorkerLog):
    """Strict mode: a push is applied and acknowledged after the fsync covering it.

    Its writer thread runs at nice +10: when the cores are busy the event loop goes first
    and the thread waits its turn, while the pending batch grows, so each write and
    fdatasync covers more pushes (the clients wait for their acks, so intake slows with
    it). Periodic mode's writer keeps the process's nice value: its intake is not held
    back by the fsyncs, and a writer that falls behind runs long slices later, stalling
    the loop (GET p99 under load)."""

    mode = STRICT
    writer_nice = 10

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._scheduled = False

    def accepted(self) -> None:
        """Pushes were added to the pending batch (records in ``buf``, pushes in ``batch``):
        hand it to the writer once it holds ``fsync_bytes``, else at the end of this loop
        turn (one fsync per turn)."""
        if len(self.buf) >= self.fsync_bytes:
            self._start()
            self._check_pressure()
        elif not self._scheduled:
            # Run once the loop has processed all ready input: one fsync per loop turn.
            self._scheduled = True
            self._loop.call_soon(self._flush_turn)

    def after_pending(self, callback: Callback) -> bool:
        """Run ``callback`` once everything accepted so far is durable (dedupe replays of a
        pending original). Returns True when that is already the case (nothing pending)."""
        if not (self._has_pending() or self._in_flight is not None or self._applying):
            return True
        self.batch.waiters.append((len(self.batch.events), callback))
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush_turn)
        return False

    def _flush_turn(self) -> None:
        self._scheduled = False
        self._start()

    def _start_next(self) -> bool:
        self._start()  # the next batch is written while this one is applied
        return True

    def _requeue(self, batch: Batch) -> None:
        """The failed batch and the pending one (its records follow) are not applied: their
        pushes and waiters go to ``on_failed``, their LSNs are given out again."""
        pending = self._take()
        first = batch.first_lsn if batch.events else pending.first_lsn
        if not (batch.events or pending.events):
            first = self.sealed_lsn + 1
        self.sealed_lsn = first - 1
        if self.on_failed is not None:
            self.on_failed(first, batch.waiters + pending.waiters,
                           batch.events + pending.events)


class PeriodicLog(_WorkerLog):
    """Periodic mode: apply and acknowledge at once, fsync every tick."""

    mode = PERIODIC

    def __init__(self, *args: Any, tick_ms: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tick_s = tick_ms / 1000.0
        self._timer = self._loop.call_later(self.tick_s, self._tick)

    def accepted(self) -> None:
        """Records were appended to ``buf``: hand them to the writer once they reach
        ``fsync_bytes`` (else at the next tick)."""
        if self._start_next():
            self._check_pressure()

    def _start_next(self) -> bool:
        """Only a full batch goes at once (True); the rest waits for the tick (one fsync
        per tick, or per ``fsync_bytes``)."""
        if len(self.buf) < self.fsync_bytes:
            return False
        self._start()
        return True

    def after_pending(self, callback: Callback) -> bool:
        return True

    def _tick(self) -> None:
        if self.writable:  # else the probe writes the queued records
            self._start()
        self._timer = self._loop.call_later(self.tick_s, self._tick)

    def _requeue(self, batch: Batch) -> None:
        """The batch's pushes were applied and acknowledged already: its records go back
        in front of the buffer, to be written first once space returns."""
        self.buf[:0] = batch.data

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
