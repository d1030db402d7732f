"""Strict group commit and its backpressure (spec/durability.md §6.2, §6.5), with a WAL
whose fsync the test holds back."""

from __future__ import annotations

import asyncio
import threading

from beava.durability.crash_points import CrashPoints
from beava.durability.group_commit import GroupCommit


class HeldWal:
    """Records each batch; ``write_and_sync`` blocks until the test releases it."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []
        self.release = threading.Event()

    def write_and_sync(self, data: bytes) -> None:
        self.release.wait(10)
        self.batches.append(bytes(data))

    def maybe_rotate(self, next_lsn: int) -> bool:
        return False


def applier(applied: list[int]):
    """Like FeatureStore.apply_items: records in LSN order, then each item's callback."""
    def apply_items(items: list) -> None:
        for lsn, event, _row, _now, on_applied in items:
            if event is not None:
                applied.append(lsn)
            if on_applied is not None:
                on_applied()
    return apply_items


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
    log = GroupCommit(wal, apply_items=applier(applied),
                      fsync_bytes=64, crash=CrashPoints(None), on_fatal=lambda exc: None,
                      limit_bytes=200, on_pressure=pressure.append)
    record = b"x" * 50
    log.buf += record
    assert log.submit((1, "E", {}, 0, None)) is False
    await asyncio.sleep(0.01)  # the loop turn ends: batch 1 goes to the held worker
    assert applied == [] and log.pending_bytes == 50
    for lsn in range(2, 7):  # 250 bytes wait behind the held fsync
        log.buf += record
        log.submit((lsn, "E", {}, 0, None))
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
    log = GroupCommit(wal, apply_items=applier(applied),
                      fsync_bytes=1 << 20, crash=CrashPoints(None), on_fatal=lambda exc: None)
    log.buf += b"a"
    log.submit((1, "E", {}, 0, None))
    log.buf += b"b"
    log.submit((2, "E", {}, 0, None))
    assert log.after_pending(lambda: fired.append("replay")) is False
    log.barrier()
    assert applied == [1, 2] and fired == ["replay"]
    assert b"".join(wal.batches) == b"ab"
    assert log.after_pending(lambda: fired.append("now")) is True  # nothing pending
    log.close()
