"""Strict group commit and its backpressure (spec/durability.md §6.2, §6.5), with a WAL
whose writes the test holds back (a stand-in for the C writer thread, same interface; the
real one is tested in test_batch_writer.py)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import threading
import time

from beava._fast.wal import wal_record
from beava._fast.wal.batch_writer import STAGE_NONE, STAGE_WRITE
from beava.durability.crash_points import CrashPoints
from beava.durability.group_commit import GroupCommit, PeriodicLog
from beava.durability.wal import WalFatal


class HeldWal:
    """A WAL whose writer (``writer``) lets a batch through only while ``release`` is set;
    the batches written, in order, in ``batches``; ``fail``: the errno every batch fails
    with from now on (0: none)."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []
        self.release = threading.Event()
        self.fail = 0
        self.writer = HeldWriter(self)

    def batch_target(self) -> tuple[int, int]:
        return -1, sum(map(len, self.batches))

    def batch_done(self, size: int, err: int, stage: int, seconds: float) -> None:
        if stage != STAGE_NONE:
            raise WalFatal("write", "held", OSError(err, os.strerror(err)))

    def write_and_sync(self, data: bytes) -> None:  # a barrier's own writes
        self.release.wait(10)
        self.batches.append(bytes(data))
        if self.fail:
            raise WalFatal("write", "held", OSError(self.fail, os.strerror(self.fail)))

    def maybe_rotate(self, next_lsn: int) -> bool:
        return False


class HeldWriter:
    """BatchWriter's interface: each batch is written by a thread that waits for the
    WAL's ``release``, then tells the loop through a pipe."""

    def __init__(self, wal: HeldWal) -> None:
        self.wal = wal
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        self._thread: threading.Thread | None = None
        self._result: tuple[int, int, float] | None = None

    def fileno(self) -> int:
        return self._read

    def submit(self, fd: int, batch: bytearray, offset: int,
               kill_after_write: bool = False, seal: bool = False) -> None:
        assert self._thread is None, "one batch in flight at a time"
        if seal:  # as the writer thread seals WAL records before writing them
            wal_record.seal(batch)
        self._thread = threading.Thread(target=self._run, args=(bytes(batch),))
        self._thread.start()

    def _run(self, batch: bytes) -> None:
        self.wal.release.wait(10)
        self.wal.batches.append(batch)
        fail = self.wal.fail
        self._result = (fail, STAGE_WRITE if fail else STAGE_NONE, 0.0)
        os.write(self._write, b"x")

    def result(self) -> tuple[int, int, float] | None:
        with contextlib.suppress(BlockingIOError):
            os.read(self._read, 64)
        if self._thread is None or self._result is None:
            return None
        self._thread.join()
        result, self._thread, self._result = self._result, None, None
        return result

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def close(self) -> None:
        self.wait()
        os.close(self._read)
        os.close(self._write)


def held_log(wal: HeldWal, **kwargs) -> GroupCommit:
    return GroupCommit(wal, crash=CrashPoints(None), writer=wal.writer, **kwargs)


def submit(log: GroupCommit, lsn: int, event: str, on_applied=None) -> None:
    """Add a push whose record is in ``log.buf`` to the pending batch, as the intake does
    (strict mode), and tell the log."""
    batch = log.batch
    if not batch.events:
        batch.first_lsn = lsn
    batch.events.append(event)
    if on_applied is not None:
        batch.waiters.append((len(batch.events), on_applied))
    log.accepted()


# pushes the fake store's apply takes before it looks at the deadline
CHUNK = 64


def applier(applied: list[int]):
    """Like FeatureStore.apply_batch: records the LSNs of the pushes applied, in order; with
    a deadline that has passed, stops after CHUNK pushes."""
    def apply_batch(first_lsn: int, events: list, data: bytearray, offset: int,
                    start: int, stop: int, deadline: float) -> tuple[int, int]:
        assert 0 <= start < stop <= len(events)
        if deadline != 0.0 and time.perf_counter() > deadline:
            stop = min(stop, start + CHUNK)
        applied.extend(range(first_lsn + start, first_lsn + stop))
        return offset, stop
    return apply_batch


async def wait_until(predicate, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.001)


async def test_apply_after_fsync_and_pressure_on_pending_bytes():
    wal = HeldWal()
    applied: list[int] = []
    pressure: list[bool] = []
    log = held_log(wal, apply_batch=applier(applied), fsync_bytes=64,
                   on_fatal=lambda exc: None, limit_bytes=200, on_pressure=pressure.append)
    record = b"x" * 50
    log.buf += record
    submit(log, 1, "E", None)
    await asyncio.sleep(0.01)  # the loop turn ends: batch 1 goes to the held worker
    assert applied == [] and log.pending_bytes == 50
    for lsn in range(2, 7):  # 250 bytes wait behind the held fsync
        log.buf += record
        submit(log, lsn, "E", None)
    assert log.pending_bytes == 300
    assert pressure == [True]  # above the limit: stop reading clients
    wal.release.set()
    await wait_until(lambda: applied == [1, 2, 3, 4, 5, 6])
    assert [len(b) for b in wal.batches] == [50, 250]  # one fsync per group
    await wait_until(lambda: pressure == [True, False])  # below half the limit: resume
    assert log.pending_bytes == 0
    log.close()


async def test_barrier_makes_everything_durable_and_applied_synchronously():
    wal = HeldWal()
    wal.release.set()
    applied: list[int] = []
    fired: list[str] = []
    log = held_log(wal, apply_batch=applier(applied), fsync_bytes=1 << 20,
                   on_fatal=lambda exc: None)
    log.buf += b"a"
    submit(log, 1, "E", None)
    log.buf += b"b"
    submit(log, 2, "E", None)
    assert log.after_pending(lambda: fired.append("replay")) is False
    log.barrier()
    assert applied == [1, 2] and fired == ["replay"]
    assert b"".join(wal.batches) == b"ab"
    assert log.after_pending(lambda: fired.append("now")) is True  # nothing pending
    log.close()


async def test_store_pushes_wait_in_the_batch_and_waiters_run_in_order():
    """A strict store keeps its pending pushes in the log's batch: nothing is applied, and
    no read sees them, before the fsync (spec/durability.md G14); then they are applied
    from their WAL records, and each callback runs once exactly the pushes before it are."""
    import json

    from beava.engine.store import FeatureStore

    wal = HeldWal()
    wal.release.set()
    store = FeatureStore(clock=iter([1_000, 3_000, 2_000, 4_000]).__next__)
    store.log = held_log(wal, apply_batch=store.apply_batch, fsync_bytes=1 << 20,
                         on_fatal=lambda exc: None)
    status, _ = store.register(json.dumps({"nodes": [
        {"kind": "event", "name": "E", "schema": {"fields": {"k": "str"}}},
        {"kind": "derivation", "name": "T", "output_kind": "table", "upstreams": ["E"],
         "table_primary_key": ["k"],
         "ops": [{"op": "group_by", "keys": ["k"], "agg": {"n": {"op": "count"}}}]}]}
    ).encode())
    assert status == 200
    base = store.last_lsn
    seen: list[tuple[str, int]] = []
    wal.release.clear()  # hold the fsync
    acks = [store.push("E", {"k": "a"}, lambda: seen.append(("p1", store.applied_lsn))),
            store.push("E", {"k": "a"})]
    assert store.log.after_pending(lambda: seen.append(("w", store.applied_lsn))) is False
    acks.append(store.push("E", {"k": "b"}, lambda: seen.append(("p3", store.applied_lsn))))
    acks.append(store.push("E", {"k": "a"}))
    assert [a[0] for a in acks] == [base + 1, base + 2, base + 3, base + 4]
    assert all(a[3] for a in acks) and store.hold_lsn == base + 4
    await asyncio.sleep(0.01)  # the batch is with the worker, its fsync held
    assert store.intake.sealed_lsn == base + 4
    assert store.applied_lsn == base and seen == [] and store.watermark_ms == 0
    assert store.table("T").row("a", 5_000) is None  # G14: not durable, not read
    wal.release.set()
    await wait_until(lambda: store.applied_lsn == base + 4)
    assert store.table("T").row("a", 5_000) == {"n": 3}
    assert store.table("T").row("b", 5_000) == {"n": 1}
    assert seen == [("p1", base + 1), ("w", base + 2), ("p3", base + 3)]
    assert store.watermark_ms == 4_000
    assert len(wal.batches) == 1
    store.log.close()


async def test_fatal_errors_reach_the_loop_and_barrier():
    """A failing write or fsync reaches on_fatal on the loop, and through a barrier
    synchronously; the failed pushes are never applied."""
    wal = HeldWal()
    wal.release.set()
    applied: list[int] = []
    fatal: list[BaseException] = []
    log = held_log(wal, apply_batch=applier(applied), fsync_bytes=1 << 20,
                   on_fatal=fatal.append)
    for lsn in range(1, 6):
        log.buf += b"r"
        submit(log, lsn, "E", None)
        await wait_until(lambda lsn=lsn: applied[-1:] == [lsn])
    assert len(wal.batches) == 5
    wal.fail = errno.EIO
    log.buf += b"x"
    submit(log, 6, "E", None)
    await wait_until(lambda: len(fatal) == 1)
    assert isinstance(fatal[0], WalFatal) and applied[-1] == 5  # never applied
    wal.release.clear()  # the next batch stays with the writer until the barrier waits
    log.buf += b"y"
    submit(log, 7, "E", None)
    await asyncio.sleep(0.01)
    assert log.pending_bytes == 1
    threading.Timer(0.05, wal.release.set).start()
    log.barrier()  # waits for the write in flight, synchronously
    assert len(fatal) == 2 and applied[-1] == 5 and log.pending_bytes == 0
    wal.fail = 0
    log.close()
    await asyncio.sleep(0.01)  # the writer's own wake-up for the batch is a no-op
    assert len(fatal) == 2


async def test_a_large_durable_batch_is_applied_in_slices_while_the_next_is_written(
        monkeypatch):
    """Each loop iteration applies a durable batch for at most one slice (here: one chunk
    of pushes), flushing the replies released so far; the next batch goes to the writer
    before the previous one is applied; waiters run right after their pushes; a barrier
    applies everything at once."""
    from beava.durability import group_commit

    monkeypatch.setattr(group_commit, "APPLY_SLICE_SECONDS", 0.0)
    wal = HeldWal()
    wal.release.set()
    applied: list[int] = []
    flushes: list[int] = []  # how many pushes were applied at each flush of replies
    fired: list[tuple[str, int]] = []
    log = held_log(wal, apply_batch=applier(applied), fsync_bytes=1 << 20,
                   on_fatal=lambda exc: None,
                   after_batch=lambda: flushes.append(len(applied)))
    chunk = CHUNK
    total = 3 * chunk + 5
    for lsn in range(1, total + 1):
        log.buf += b"r"
        submit(log, lsn, "E", (lambda n=lsn: fired.append(("push", n)))
                   if lsn in (chunk, 2 * chunk + 3) else None)
    while not applied:  # one loop iteration at a time
        await asyncio.sleep(0)
    assert len(wal.batches) == 1
    assert len(applied) == chunk and flushes == [chunk]  # one chunk, then the replies
    assert fired == [("push", chunk)]  # its waiter right after its push
    log.buf += b"n"  # a next batch meanwhile
    submit(log, total + 1, "E", None)
    await asyncio.sleep(0)  # the turn ends: the writer takes it, the first is not applied
    assert not log.buf and len(applied) == 2 * chunk
    await wait_until(lambda: len(applied) == total + 1)
    assert len(wal.batches) == 2
    assert applied == list(range(1, total + 2))
    assert fired == [("push", chunk), ("push", 2 * chunk + 3)]
    assert len(flushes) >= 4 and flushes == sorted(flushes) and flushes[0] < total
    # a barrier does not wait for loop iterations
    for lsn in range(total + 2, total + 2 + 2 * chunk):
        log.buf += b"r"
        submit(log, lsn, "E", None)
    log.barrier()
    assert applied == list(range(1, total + 2 + 2 * chunk))
    log.close()


async def test_durable_pushes_waiting_to_be_applied_stop_intake_until_applied(monkeypatch):
    """The sliced apply must not fall behind for long: past UNAPPLIED_LIMIT durable pushes
    not applied yet, client sockets stop being read (on_pressure), and intake resumes once
    fewer than half of that wait."""
    from beava.durability import group_commit

    monkeypatch.setattr(group_commit, "APPLY_SLICE_SECONDS", 0.0)
    monkeypatch.setattr(group_commit, "UNAPPLIED_LIMIT", 4 * CHUNK)
    wal = HeldWal()
    wal.release.set()
    applied: list[int] = []
    pressure: list[tuple[bool, int]] = []
    log = held_log(wal, apply_batch=applier(applied), fsync_bytes=1 << 20,
                   on_fatal=lambda exc: None, limit_bytes=1 << 30,
                   on_pressure=lambda shut: pressure.append((shut, len(applied))))
    total = 10 * CHUNK
    for lsn in range(1, total + 1):
        log.buf += b"r"
        submit(log, lsn, "E", None)
    await wait_until(lambda: len(applied) == total)
    assert [shut for shut, _ in pressure] == [True, False]
    shut_at, resumed_at = pressure[0][1], pressure[1][1]
    assert shut_at < total - group_commit.UNAPPLIED_LIMIT  # shut while far behind
    assert total - resumed_at < group_commit.UNAPPLIED_LIMIT // 2  # resumed once caught up
    assert log.unapplied == 0
    log.close()


async def test_periodic_writes_a_full_batch_at_once_and_the_rest_on_its_tick():
    """Periodic mode fsyncs per ``fsync_bytes`` or per tick: a finished batch does not send
    the few records that came meanwhile straight after it (that would be strict's fsync
    per loop turn)."""
    wal = HeldWal()
    log = PeriodicLog(wal, apply_batch=applier([]), fsync_bytes=100, crash=CrashPoints(None),
                      on_fatal=lambda exc: None, writer=wal.writer, tick_ms=300)
    log.buf += b"x" * 150
    log.accepted()  # full: to the writer at once (held)
    log.buf += b"y" * 10
    log.accepted()
    wal.release.set()
    await wait_until(lambda: len(wal.batches) == 1)
    await asyncio.sleep(0.05)
    assert [len(b) for b in wal.batches] == [150] and len(log.buf) == 10
    log.buf += b"z" * 90
    log.accepted()  # full again
    await wait_until(lambda: len(wal.batches) == 2)
    assert wal.batches[1] == b"y" * 10 + b"z" * 90
    log.buf += b"t"
    log.accepted()
    await wait_until(lambda: len(wal.batches) == 3)  # on the tick
    assert wal.batches[2] == b"t"
    log.close()


async def test_a_batch_made_durable_mid_apply_adds_no_slice_to_the_loop_iteration(monkeypatch):
    """While a durable batch is applied a slice per loop iteration, the next batch's fsync
    completing does not apply a second slice in the same iteration (a read waiting for the
    loop would wait for both): the apply turn already due takes it."""
    from beava.durability import group_commit

    monkeypatch.setattr(group_commit, "APPLY_SLICE_SECONDS", 0.0)
    wal = HeldWal()
    wal.release.set()
    applied: list[int] = []
    iteration = [0]
    slices: list[int] = []  # the loop iteration of each slice applied
    log = held_log(wal, apply_batch=applier(applied), fsync_bytes=1 << 20,
                   on_fatal=lambda exc: None, after_batch=lambda: slices.append(iteration[0]))
    total = 200 * CHUNK
    for lsn in range(1, total + 1):
        log.buf += b"r"
        submit(log, lsn, "E", None)
    while not applied:
        await asyncio.sleep(0)
    wal.release.clear()
    log.buf += b"n"  # the next batch
    submit(log, total + 1, "E", None)
    await asyncio.sleep(0)  # the turn ends: it goes to the (held) writer
    wal.release.set()
    time.sleep(0.05)  # the writer writes it and signals the loop, which is not running
    assert len(wal.batches) == 2 and len(applied) < total  # durable mid-apply
    slices.clear()
    while len(applied) < total + 1:
        await asyncio.sleep(0)
        iteration[0] += 1
    assert len(slices) == len(set(slices))  # one slice per loop iteration
    log.close()
