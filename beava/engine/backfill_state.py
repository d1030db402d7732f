"""Decoding an uploaded table state (backfill, docs/wire.md) against the shape its table
fixes, one part at a time.

A ``TableState.dump()`` is ``{keys, touch, columns, arenas}``: the keys are strings, the
state of each feature column that owns storage has its op family's form (typed buffers as
bytes, the values the column holds in a list) and so has each bucket arena. An upload is
decoded against that shape with msgspec types (:class:`StateDecoder`), so that

- a part of the wrong shape fails at its first byte, before anything after it is built;
- a list of held values is no longer than the slots (or ring entries) of the upload that
  can refer to them, checked from its header before any item is built;
- every held value obeys the rules a pushed value of its field obeys (docs/limits.md): the
  field's declared type (decoded as such), and for a field of no scalar type the push
  checks (``EventChecker``): map keys are strings, at most 64 nested containers, no
  MessagePack extension, no integer that no double holds, no control character. Such
  values are decoded one by one, each checked as soon as it is built.

Anything else is ``invalid_backfill`` naming the table and the column. The work runs in
steps (:meth:`StateDecoder.run` with a deadline), so that a large upload is decoded a
slice per event-loop iteration; the kernel's ``load`` then checks the buffers.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Annotated, Any

import msgspec

from beava._fast.intake.push_check import EventChecker
from beava._fast.ops.column import Column
from beava._fast.ops.ops_buffer import EventTypeMixColumn
from beava._fast.ops.ops_core import BUCKETS_PER_SLOT, KIND_NAMES, BucketArena, CoreColumn
from beava._fast.ops.ops_point import RingColumn, ValueColumn
from beava._fast.ops.struct_column import StructColumn
from beava.catalogue.errors import BeavaError
from beava.engine.expressions.chain_ops import chain_output_schema
from beava.engine.registry import EventSpec, TableSpec
from beava.engine.state.push_validation import explain_push_error
from beava.engine.state.tables import TableState

__all__ = ["StateDecoder"]

# Values of a field of these declared types are decoded as that type (spec/wire.md §6.3);
# any other declared type takes any value the push checks accept.
_SCALAR: dict[str, Any] = {"str": str, "i64": int | float, "f64": int | float, "bool": bool}
_EXTREME = frozenset((KIND_NAMES.index("min"), KIND_NAMES.index("max")))
# Held values checked between two looks at the deadline.
_VALUES_PER_STEP = 1024
# A value ring record holds an 8-byte payload and a 1-byte tag per entry (slot_buffers.pxd).
_RING_ENTRY_BYTES = 9


class _Dump(msgspec.Struct, forbid_unknown_fields=True):
    keys: list[str]
    touch: bytes
    columns: dict[str, msgspec.Raw]
    arenas: list[msgspec.Raw]


class _CoreCells(msgspec.Struct, forbid_unknown_fields=True):
    cells: bytes
    objs: msgspec.Raw


class _Arena(msgspec.Struct, forbid_unknown_fields=True):
    window_ms: int
    members: list[tuple[str, str]]
    counts: bytes
    records: bytes
    objs: msgspec.Raw


_DUMP = msgspec.msgpack.Decoder(_Dump)
_CORE = msgspec.msgpack.Decoder(_CoreCells)
_ARENA = msgspec.msgpack.Decoder(_Arena)
_VALUE_COLUMN = msgspec.msgpack.Decoder(tuple[bytes, bytes, msgspec.Raw])
_RINGS = msgspec.msgpack.Decoder(tuple[bytes, msgspec.Raw])
_MIX = msgspec.msgpack.Decoder(tuple[list[str], bytes])
_STRUCTS = msgspec.msgpack.Decoder(bytes | tuple[bytes, bytes])
_BYTES = msgspec.msgpack.Decoder(bytes)
_ANY = msgspec.msgpack.Decoder()
_NIL = 0xC0


class _Held:
    """How the values one list of a state holds are decoded and checked: ``field`` and its
    declared type (``None``: no field, or several of different types)."""

    __slots__ = ("field", "declared", "checker", "spec")

    def __init__(self, table: str, field: str | None, declared: str | None) -> None:
        self.field = field or "value"
        self.declared = declared
        self.checker: EventChecker | None = None
        self.spec: EventSpec | None = None
        if declared not in _SCALAR:
            fields = {self.field: declared or "json"}
            self.spec = EventSpec(table, fields, frozenset(fields), frozenset(), {}, None, 0,
                                  None, fields)
            self.checker = EventChecker(fields, frozenset(), frozenset(fields), {})

    def decoder(self, bound: int, nullable: bool) -> msgspec.msgpack.Decoder[Any]:
        """A decoder of a list of at most ``bound`` items: the values themselves for a
        scalar type, else each value still encoded."""
        item: Any = msgspec.Raw if self.declared is None else _SCALAR.get(self.declared,
                                                                           msgspec.Raw)
        if nullable and item is not msgspec.Raw:
            item = item | None
        return msgspec.msgpack.Decoder(Annotated[list[item], msgspec.Meta(max_length=bound)])

    def problem(self, value: Any) -> tuple[Any, str | None]:
        """The value as a push would store it (integers beyond 64 bits widened) and what
        is wrong with it, if anything (the push checks and their wording)."""
        assert self.checker is not None and self.spec is not None
        row = {self.field: value}
        code = self.checker.check(row)
        if code is None:
            return row[self.field], None
        why = explain_push_error(code, self.spec, row).get("message", code)
        return value, f"{why} ({code})"


def _held_for(table: str, schema: dict[str, str], fields: set[str | None]) -> _Held:
    types = {schema.get(field) if field is not None else None for field in fields}
    field = next(iter(fields)) if len(fields) == 1 else None
    return _Held(table, field, types.pop() if len(types) == 1 else None)


class StateDecoder:
    """An upload of ``spec``'s state decoded a part per step; ``state`` is what
    ``TableState.load`` takes once :meth:`run` has answered True."""

    def __init__(self, spec: TableSpec, data: bytes | bytearray) -> None:
        self.spec = spec
        self.schema = chain_output_schema(spec.chain, spec.input_schema)
        self.state: dict[str, Any] | None = None
        self._steps = self._decode(memoryview(data))

    def run(self, deadline: float | None, clock: Callable[[], float]) -> bool:
        """Decode until done (True) or ``clock()`` passes ``deadline`` (False; call again).
        BeavaError ``invalid_backfill`` when the upload does not fit."""
        return all(deadline is None or clock() < deadline for _ in self._steps)

    def _fail(self, path: str, what: str, reason: str) -> BeavaError:
        return BeavaError("invalid_backfill", path=path, table=self.spec.name,
                          message=f"table {self.spec.name}, {what}: {reason}")

    def _decode(self, data: memoryview) -> Generator[None, None, None]:
        spec = self.spec
        table = TableState(spec)
        columns, arenas = table.stored_columns()
        try:
            dump = _DUMP.decode(data)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise self._fail("state", "the table state", str(exc)) from None
        nslots = len(dump.keys)
        unknown = sorted(set(dump.columns) - set(columns))
        missing = sorted(set(columns) - set(dump.columns))
        if unknown or missing:
            raise self._fail("state.columns", "columns",
                             f"unknown {unknown}, missing {missing} (expected "
                             f"{sorted(columns)})")
        if len(dump.arenas) != len(arenas):
            raise self._fail("state.arenas", "bucket arenas",
                             f"{len(dump.arenas)}, expected {len(arenas)}")
        out: dict[str, Any] = {}
        for name, raw in dump.columns.items():
            column = columns[name]
            what = f"feature {name} ({type(column).__name__})"
            path = f"state.columns.{name}"
            held = _held_for(spec.name, self.schema, {column.field})
            out[name] = yield from self._column(column, raw, nslots, held, path, what)
        dumped_arenas = []
        for index, raw in enumerate(dump.arenas):
            path = f"state.arenas[{index}]"
            try:
                window = _ARENA.decode(raw).window_ms
            except (msgspec.DecodeError, RecursionError) as exc:
                raise self._fail(path, "a bucket arena", str(exc)) from None
            arena = next((a for a in arenas if a.window == window), None)
            if arena is None:
                raise self._fail(path, "a bucket arena",
                                 f"no arena of a {window} ms window in this table")
            what = f"bucket arena of {window} ms ({', '.join(m.name for m in arena.members)})"
            dumped_arenas.append((yield from self._arena(arena, raw, nslots, path, what)))
        self.state = {"keys": dump.keys, "touch": dump.touch, "columns": out,
                      "arenas": dumped_arenas}

    def _column(self, column: Column, raw: msgspec.Raw, nslots: int, held: _Held,
                path: str, what: str) -> Generator[None, None, Any]:
        """Generator returning the decoded state of one column (a step per part)."""
        try:
            if isinstance(column, CoreColumn):  # lifetime: windowed ones are in an arena
                core = _CORE.decode(raw)
                bound = nslots if column.kind in _EXTREME else 0  # one handle per slot
                objs = yield from self._values(core.objs, bound, True, held, path, what)
                return {"cells": core.cells, "objs": objs}
            if isinstance(column, ValueColumn):
                tags, payloads, objects = _VALUE_COLUMN.decode(raw)
                values = yield from self._values(objects, nslots, False, held, path, what)
                return [tags, payloads, values]
            if isinstance(column, RingColumn):
                records, objects = _RINGS.decode(raw)
                values = yield from self._values(objects, len(records) // _RING_ENTRY_BYTES,
                                                 False, held, path, what)
                return [records, values]
            if isinstance(column, EventTypeMixColumn):
                return list(_MIX.decode(raw))
            if isinstance(column, StructColumn):
                structs = _STRUCTS.decode(raw)
                return structs if type(structs) is bytes else list(structs)
            return _BYTES.decode(raw)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise self._fail(path, what, str(exc)) from None

    def _arena(self, arena: BucketArena, raw: msgspec.Raw, nslots: int, path: str,
               what: str) -> Generator[None, None, dict[str, Any]]:
        """Generator returning the decoded state of a bucket arena; its values belong to
        its min/max members."""
        try:
            state = _ARENA.decode(raw)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise self._fail(path, what, str(exc)) from None
        extreme = [m for m in arena.members if m.kind in _EXTREME]
        held = _held_for(self.spec.name, self.schema, {m.field for m in extreme})
        # at most one live handle per min/max cell of each live bucket of each slot
        bound = nslots * BUCKETS_PER_SLOT * len(extreme)
        objs = yield from self._values(state.objs, bound, True, held, path, what)
        return {"window_ms": state.window_ms, "members": [list(m) for m in state.members],
                "counts": state.counts, "records": state.records, "objs": objs}

    def _values(self, raw: msgspec.Raw, bound: int, nullable: bool, held: _Held,
                path: str, what: str) -> Generator[None, None, list[Any]]:
        """Generator returning a list of held values (``nullable``: None marks a free
        handle), checked as described in the module docstring."""
        yield
        try:
            items: list[Any] = held.decoder(bound, nullable).decode(raw)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise self._fail(path, what, f"held values: {exc}") from None
        if held.checker is None:
            return items
        values: list[Any] = []
        for index, item in enumerate(items):
            if index % _VALUES_PER_STEP == 0:
                yield
            if nullable and len(item) == 1 and memoryview(item)[0] == _NIL:
                values.append(None)
                continue
            try:
                value = _ANY.decode(item)
            except (msgspec.DecodeError, RecursionError) as exc:
                raise self._fail(path, what, f"held value {index}: {exc}") from None
            value, why = held.problem(value)
            if why is not None:
                raise self._fail(path, what, f"held value {index}: {why}")
            values.append(value)
        return values
