"""The WAL's writer thread in C (beava._fast.wal.batch_writer) and WalWriter's side of it."""

from __future__ import annotations

import errno
import os
import select
import sys
import time
from pathlib import Path

import pytest

from beava._fast.wal.batch_writer import STAGE_NONE, STAGE_SYNC, STAGE_WRITE, BatchWriter
from beava.durability import wal_format as wf
from beava.durability.wal import WalFatal, WalUnavailable, WalWriter
from tests.support import thread_nices


def readable(fd: int, timeout: float = 5.0) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])


def test_writes_at_the_offset_syncs_and_signals(tmp_path: Path) -> None:
    writer = BatchWriter()
    fd = os.open(tmp_path / "seg", os.O_RDWR | os.O_CREAT)
    try:
        assert writer.result() is None  # nothing in flight
        writer.submit(fd, bytearray(b"abc" * 100_000), 5)
        assert readable(writer.fileno())
        err, stage, seconds = writer.result()
        assert (err, stage) == (0, STAGE_NONE) and seconds >= 0.0
        assert os.pread(fd, 300_005, 0) == bytes(5) + b"abc" * 100_000
        assert writer.result() is None  # taken once
        assert not readable(writer.fileno(), 0.0)  # its wake-up was consumed
        writer.submit(fd, bytearray(b"z"), 2)
        writer.wait()  # synchronously, as a barrier does
        err, stage, _ = writer.result()
        assert (err, stage) == (0, STAGE_NONE) and os.pread(fd, 6, 0) == b"\0\0z\0\0a"
    finally:
        writer.close()
        writer.close()  # idempotent
        os.close(fd)
    with pytest.raises(RuntimeError):
        writer.submit(0, bytearray(b"x"), 0)


def test_sealed_batches_are_written_with_their_records_crcs(tmp_path: Path) -> None:
    records = b"".join(wf.encode_record(lsn, wf.RECORD_EVENT, wf.BODY_MSGPACK, lsn, 1,
                                                b"txn", b"\x81\xa1k" + bytes([lsn]))
                       for lsn in range(1, 50))
    batch = bytearray(records)
    offset = 0
    while offset < len(batch):  # as the push pass appends them: CRC 0
        batch[offset + 4:offset + 8] = bytes(4)
        offset += wf.parse_record(records, offset).size
    writer = BatchWriter()
    fd = os.open(tmp_path / "seg", os.O_RDWR | os.O_CREAT)
    try:
        writer.submit(fd, batch, 0, seal=True)
        writer.wait()
        assert writer.result()[:2] == (0, STAGE_NONE)
        assert os.pread(fd, len(records) + 1, 0) == records
    finally:
        writer.close()
        os.close(fd)


def test_one_batch_in_flight() -> None:
    writer = BatchWriter()
    read_end, write_end = os.pipe()  # pwrite on a pipe fails: ESPIPE
    try:
        writer.submit(write_end, bytearray(b"x"), 0)
        with pytest.raises(RuntimeError):
            writer.submit(write_end, bytearray(b"y"), 0)
        writer.wait()
        assert writer.result() == (errno.ESPIPE, STAGE_WRITE, 0.0)
    finally:
        writer.close()
        os.close(read_end)
        os.close(write_end)


def test_a_full_disk_and_a_failed_sync_are_reported() -> None:
    writer = BatchWriter()
    full = os.open("/dev/full", os.O_WRONLY)
    read_end, write_end = os.pipe()
    try:
        writer.submit(full, bytearray(b"x" * 10), 0)
        writer.wait()
        assert writer.result() == (errno.ENOSPC, STAGE_WRITE, 0.0)
        writer.submit(write_end, bytearray(), 0)  # nothing to write; fdatasync of a pipe
        writer.wait()
        err, stage, _ = writer.result()
        assert (err, stage) == (errno.EINVAL, STAGE_SYNC)
    finally:
        writer.close()
        os.close(full)
        os.close(read_end)
        os.close(write_end)


def test_the_thread_never_waits_for_the_gil(tmp_path: Path) -> None:
    """With the switch interval at 100 s, a thread that needed the GIL could not run while
    this one spins in pure Python; the batch is written and signalled all the same."""
    writer = BatchWriter()
    fd = os.open(tmp_path / "seg", os.O_RDWR | os.O_CREAT)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(100.0)
    try:
        writer.submit(fd, bytearray(b"q" * 4096), 0)
        end = time.perf_counter() + 2.0
        result = None
        while result is None and time.perf_counter() < end:  # never releases the GIL
            result = writer.result()
    finally:
        sys.setswitchinterval(interval)
        writer.close()
        os.close(fd)
    assert result is not None and result[:2] == (0, STAGE_NONE)


def test_wal_writer_counts_a_batch_or_raises_as_write_and_sync(tmp_path: Path) -> None:
    (tmp_path / "wal").mkdir()
    (tmp_path / "snap").mkdir()
    wal = WalWriter(str(tmp_path / "wal"), str(tmp_path / "snap"))
    wal.start(1)
    writer = BatchWriter()
    try:
        fd, offset = wal.batch_target()
        start = wal.active_size
        assert offset == start
        fsyncs = wal.fsyncs_total
        writer.submit(fd, bytearray(b"r" * 100), offset)
        writer.wait()
        wal.batch_done(100, *writer.result())
        assert wal.active_size == start + 100 and wal.fsyncs_total == fsyncs + 1
        assert os.path.getsize(wal.active_path) == start + 100
        fsyncs = wal.fsyncs_total
        with pytest.raises(WalUnavailable):  # back to the previous length
            wal.batch_done(50, errno.ENOSPC, STAGE_WRITE, 0.0)
        assert wal.active_size == start + 100 and os.path.getsize(wal.active_path) == start + 100
        with pytest.raises(WalFatal):
            wal.batch_done(50, errno.EIO, STAGE_WRITE, 0.0)
        with pytest.raises(WalFatal):
            wal.batch_done(0, errno.EIO, STAGE_SYNC, 0.0)
        assert wal.fsyncs_total == fsyncs
    finally:
        writer.close()
        wal.close()



@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
@pytest.mark.parametrize("nice", [0, 10])
def test_the_writer_thread_takes_the_nice_value_asked_for(nice: int) -> None:
    before = thread_nices()
    writer = BatchWriter(nice)
    expected = [min(19, os.nice(0) + nice)]
    try:
        deadline = time.monotonic() + 5.0
        while True:  # the thread sets its own nice value as it starts
            added = [value for tid, value in thread_nices().items() if tid not in before]
            if added == expected or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert added == expected
        assert thread_nices()[str(os.getpid())] == os.nice(0)  # the rest: as it was
    finally:
        writer.close()
