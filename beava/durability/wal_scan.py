"""Finding records past damage in a WAL segment (spec/durability.md §9.4-§9.5).

Recovery and ``beava wal check`` share these scans. :func:`resync` is the byte-by-byte
search for the next structurally valid record that §9.5 prescribes for sealed segments;
:func:`valid_after` uses it to count what follows damage in the newest segment: nothing
means a torn tail (an interrupted last write), valid records with increasing LSNs mean
corruption of acknowledged data.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from beava.durability.wal_format import record_lsn_at, record_size_at

# A record's type byte (1-4) is followed by its body_format byte (1-2), 16 bytes into it.
_TYPE_OFFSET = 16
_RECORD_CANDIDATE = re.compile(rb"(?=[\x01-\x04][\x01\x02])")


def resync(data: bytes, start: int, end: int, last_good: int) -> int:
    """First offset >= ``start`` where a structurally valid record with LSN > ``last_good``
    begins; ``end`` if there is none.

    Byte-by-byte in effect; a regex finds the offsets whose type and body_format bytes are
    in range, so long damaged runs are skipped at C speed.
    """
    for match in _RECORD_CANDIDATE.finditer(data, start + _TYPE_OFFSET, end):
        offset = match.start() - _TYPE_OFFSET
        if record_size_at(data, offset, end) and record_lsn_at(data, offset) > last_good:
            return offset
    return end


class AfterDamage(NamedTuple):
    """Structurally valid records found after damage, each with an LSN above the last."""

    records: int
    first_lsn: int
    """LSN of the first of them; 0 when there is none."""
    last_lsn: int
    """LSN of the last of them; 0 when there is none."""


def valid_after(data: bytes, damage_at: int, end: int, last_good: int) -> AfterDamage:
    """Count the valid records after the damage at ``damage_at``: resynchronise past it,
    read records in order, resynchronise again at each further damage; every counted record
    has an LSN greater than ``last_good`` and than the one counted before it."""
    count = first = 0
    offset = resync(data, damage_at + 1, end, last_good)
    while offset < end:
        size = record_size_at(data, offset, end)
        if size == 0 or record_lsn_at(data, offset) <= last_good:
            offset = resync(data, offset + 1, end, last_good)
            continue
        last_good = record_lsn_at(data, offset)
        if count == 0:
            first = last_good
        count += 1
        offset += size
    return AfterDamage(count, first, last_good if count else 0)
