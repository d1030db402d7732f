"""Reading the EVENT records a running server's WAL still holds after a given time.

A backfill (docs/wire.md) installs a table's entity state as of ``until_ms`` computed from
history, then applies on top the pushes the server itself received after ``until_ms``. Those
pushes are read back from the WAL segments on disk. Segments older than the oldest retained
snapshot may have been deleted (reclamation, spec/durability.md §7); a backfill is then
exact only if every deleted record is at or before ``until_ms``. :func:`events_after`
checks that and raises :class:`WalTailLost` naming the earliest ``until_ms`` it can serve.
Segments are read in bounded windows (``wal_scan.SegmentReader``).

Runs on the event loop after the durability log's barrier: every accepted record up to
``last_lsn`` is then written. The reader may pause between records (the loop serves other
connections, new records are appended, snapshots may reclaim old segments meanwhile); a
second read after the LSN already read picks up what was appended.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator

from beava.durability.snapshots import SnapshotInvalid, list_snapshots, read_snapshot_header
from beava.durability.wal import list_segments
from beava.durability.wal_format import (
    RECORD_EVENT,
    SEGMENT_HEADER_SIZE,
    FormatError,
    Record,
    decode_segment_header,
)
from beava.durability.wal_scan import SegmentReader

SCAN_STEP = 1024  # records read between two pauses of events_after


class WalTailLost(Exception):
    """The WAL no longer holds every record after ``until_ms``: it can serve a backfill
    only from ``earliest_until_ms`` on."""

    def __init__(self, earliest_until_ms: int, first_lsn: int) -> None:
        super().__init__(f"WAL records before LSN {first_lsn} were reclaimed; they may be as "
                         f"late as {earliest_until_ms} ms")
        self.earliest_until_ms = earliest_until_ms
        self.first_lsn = first_lsn


def events_after(wal_dir: str, snapshot_dir: str, events: Collection[str], until_ms: int,
                 last_lsn: int, after_lsn: int = 0) -> Iterator[Record | None]:
    """EVENT records of ``events`` with a timestamp after ``until_ms`` and an LSN after
    ``after_lsn`` up to ``last_lsn``, in LSN order (the segments wholly at or before
    ``after_lsn`` are not read), and None after every ``SCAN_STEP`` records read: a caller
    on the event loop may let it run between two (a segment reclaimed meanwhile is
    handled as one reclaimed before). Raises WalTailLost when reclaimed segments may have
    held such records; OSError and FormatError (a damaged segment) propagate."""
    segments = list_segments(wal_dir)
    if after_lsn:
        # segment i holds the LSNs below segment i+1's base: skip those read before
        segments = [seg for i, seg in enumerate(segments)
                    if i + 1 == len(segments) or segments[i + 1][0] > after_lsn + 1]
        if segments and segments[0][0] > after_lsn + 1:  # reclaimed since the last read
            raise WalTailLost(_reclaimed_bound(snapshot_dir, segments[0][0], None),
                              segments[0][0])
    first: tuple[int, bool, int | None] | None = None  # base, boundary, first record time
    read = 0
    for base, name in segments:
        try:
            reader = SegmentReader(os.path.join(wal_dir, name))
        except FileNotFoundError:  # reclaimed while the caller paused
            held = list_segments(wal_dir)
            held_from = held[0][0] if held else base + 1
            bound = _reclaimed_bound(snapshot_dir, held_from, None)
            if bound > until_ms:
                raise WalTailLost(bound, held_from) from None
            continue  # its records are all at or before until_ms
        with reader:
            header = decode_segment_header(reader.header())
            offset = SEGMENT_HEADER_SIZE
            end = reader.size
            first_time: int | None = None
            while offset < end:
                # a push is checked whole (its CRC); another record (a register, a reset, a
                # table's whole state after a backfill) only by its fixed fields, its body
                # not read: the installs of one backfill would each read the states of
                # the installs before them again
                head = reader.head_at(offset)
                if head.size == 0 or (head.type == RECORD_EVENT
                                      and reader.record_at(offset) != head.size):
                    raise FormatError(f"segment {name}: no valid record at offset {offset}")
                if first_time is None:
                    first_time = head.timestamp_ms
                if head.lsn > last_lsn:
                    break
                if (head.type == RECORD_EVENT and head.timestamp_ms > until_ms
                        and head.lsn > after_lsn):
                    record = reader.decode_at(offset, head.size)
                    if record.name in events:
                        yield record
                offset += head.size
                read += 1
                if read % SCAN_STEP == 0:
                    yield None
        if first is None:
            first = (base, header.history_boundary, first_time)
    if first is not None and not after_lsn:
        base, boundary, first_time = first
        if not boundary and base > 1:
            bound = _reclaimed_bound(snapshot_dir, base, first_time)
            if bound > until_ms:
                raise WalTailLost(bound, base)


def _reclaimed_bound(snapshot_dir: str, first_lsn: int, first_time: int | None) -> int:
    """The newest time a reclaimed record (LSN below ``first_lsn``) may have: the watermark
    of the oldest snapshot covering them (segments are reclaimed only behind a retained
    snapshot), else the time of the first record still held."""
    for lsn, path in list_snapshots(snapshot_dir):
        if lsn >= first_lsn - 1:
            try:
                return read_snapshot_header(path, lsn).watermark_ms
            except (SnapshotInvalid, OSError):
                continue
    return first_time if first_time is not None else 2**63 - 1
