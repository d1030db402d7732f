"""The task side of an offline replay: Arrow batches of the exchange's stream
(:mod:`beava_spark.replay_exchange`) in, Arrow batches of feature rows out.

A partition holds the rows of every key group whose keys fall in its bucket, interleaved in
push order; a row is its mask's groups' (``M``, ``W``). One ``beava.offline.Replay`` per
key group, made at the group's first row and kept to the end of the partition, replays
the rows that have its bit, batch by batch, through ``Replay.replay_batch`` (one C loop
over the whole batch, skipping the other groups' rows: each event's fields read from the
typed value columns, checked as a live push and applied at its time, each read row
answered as a GET at its time), with the garbage collector paused.
A read row (its key for each group in the value column ``key`` of the group) comes out as
one row: its row id, the columns it carries (passed through), and the features of the
tables of each group of its mask; other groups' features are null.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .replay_exchange import Refused, ValueColumns, group_masks, new_replay, replay_part

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

    from beava.offline import FeatureInfo

__all__ = ["ReplayGroup", "ReplayOutput", "read_rows"]



@dataclass(frozen=True)
class ReplayGroup:
    """What a task needs of a key group: its mask word and bit, the value column of a read
    row's key for it (``ValueColumns.key_slot``), its store's payload, its tables (in
    feature order), the features of each, and the fields it takes of each event (by event
    code, ``Replay.replay_batch``'s fields)."""

    word: int
    bit: int
    key: int
    payload: bytes
    tables: tuple[str, ...]
    features: tuple[tuple[FeatureInfo, ...], ...]  # by table
    fields: tuple[tuple[tuple[int, str], ...], ...]

    @property
    def reads(self) -> list[tuple[str, tuple[FeatureInfo, ...]]]:
        """``Replay.replay_batch``'s ``reads``: each table with its features."""
        return list(zip(self.tables, self.features, strict=True))


@dataclass(frozen=True)
class ReplayOutput:
    """The output rows: the read rows' id column, a pass-through column (or None), then
    one struct column per group holding its features (null on other groups' rows)."""

    row_id: str
    carried: str | None
    groups: tuple[str, ...]  # the struct columns, by group


def read_rows(batches: Iterator[pa.RecordBatch], *, groups: Sequence[ReplayGroup],
              events: tuple[str, ...], values: ValueColumns, output: ReplayOutput,
              refused: Refused) -> Iterator[pa.RecordBatch]:
    """Replay a partition of the stream (in push order) and yield the read rows
    (``mapInArrow``'s function)."""
    import pyarrow as pa

    from beava.offline import ARROW_TYPES, gc_paused

    types = [pa.struct([(f.name, getattr(pa, ARROW_TYPES[f.kind])()) for fs in g.features
                        for f in fs]) for g in groups]
    numbers = {(g.word, g.bit): number for number, g in enumerate(groups)}
    replays: dict[int, Any] = {}
    with gc_paused():
        for batch in batches:
            if batch.num_rows == 0:
                continue
            read: list[tuple[int, list[int], list[pa.Array]]] = []
            for number, mask, bit in group_masks(batch, numbers):
                group = groups[number]
                if number not in replays:
                    replays[number] = new_replay(group.payload, refused)
                rows, features = replay_part(replays[number], batch, events, group.fields,
                                             values, refused, group.reads, (mask, bit),
                                             group.key)
                if rows:
                    read.append((number, rows, features))
            if read:
                yield _rows(batch, read, output, types)


def _rows(batch: pa.RecordBatch, read: list[tuple[int, list[int], list[pa.Array]]],
          output: ReplayOutput, types: list[Any]) -> pa.RecordBatch:
    """One output row per read row of ``batch``: ``read`` holds, per group that read, its
    rows' indexes and its features' arrays (aligned with them)."""
    import numpy as np
    import pyarrow as pa

    index = np.unique(np.concatenate([np.asarray(rows, np.int64) for _, rows, _ in read]))
    arrays = [batch.column(output.row_id).take(index)]
    if output.carried is not None:
        arrays.append(batch.column(output.carried).take(index))
    found = {number: (rows, features) for number, rows, features in read}
    for number, struct in enumerate(types):
        if number not in found:
            arrays.append(pa.nulls(len(index), struct))
            continue
        rows, features = found[number]
        values = pa.StructArray.from_arrays(features, fields=list(struct))
        if len(rows) == len(index):  # every read row of the batch is this group's
            arrays.append(values)
            continue
        mine = np.asarray(rows, np.int64)
        at = np.minimum(np.searchsorted(mine, index), len(mine) - 1)
        arrays.append(values.take(pa.array(at, mask=mine[at] != index)))
    names = [output.row_id, *([output.carried] if output.carried is not None else []),
             *output.groups]
    return pa.RecordBatch.from_arrays(arrays, names=names)
