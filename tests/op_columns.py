"""State columns for the op-family tests, built and fed the way the engine does it."""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

import msgspec

from beava.catalogue.operators import lookup, normalise_params, resolve_params
from beava.engine.registry import FeatureSpec
from beava.engine.state.columns import make_column


def engine_column(op: str, slots: int = 4, **wire: Any) -> Any:
    """A lifetime column of ``op`` as a register payload makes it: the wire params resolved
    by the operator catalogue, the column made by the engine's ``make_column``."""
    spec = lookup(op)
    params = resolve_params(spec, normalise_params(wire))
    col = make_column(FeatureSpec(f"f_{op}", spec.name, params, None), None)
    col.py_ensure(slots)
    return col


def feed_events(col: Any, events: Iterable[tuple[Any, ...]], slot: int = 0) -> None:
    """Update ``slot`` with rows ``{"x": x}``; events are ``(now, x)`` or
    ``(now, x, matched)``, and an Ellipsis ``x`` leaves the field absent."""
    for now, x, *matched in events:
        row = {} if x is ... else {"x": x}
        col.py_update(slot, row, matched[0] if matched else True, now)


def through_snapshot(state: Any) -> Any:
    """A column's ``dump()`` after a trip through MessagePack, as a snapshot carries it."""
    return msgspec.msgpack.decode(msgspec.msgpack.encode(state))


def block_records(*blocks: tuple[int, bytes]) -> bytes:
    """The block-record bytes of a block column's snapshot: ``[int64 slot][int64 n][n bytes]``
    per ``(slot, block bytes)``."""
    return b"".join(struct.pack("=qq", slot, len(raw)) + raw for slot, raw in blocks)
