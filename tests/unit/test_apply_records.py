"""A durable batch applied from its records (beava._fast.intake.push_pass.apply_records): each push
decoded from its event record as recovery replays it (or read by its event's checker when
it settles the body from its bytes), in slices that resume at the offset the previous slice
returned, and a batch whose bytes are not its pushes' records refused."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import msgspec
import pytest

from beava._fast.intake.push_pass import apply_records
from beava._fast.wal.wal_record import append_record
from beava.durability import wal_format as wf
from beava.engine.registry import empty_registry, register
from beava.engine.state.push_validation import build_checkers

DECODE_MSGPACK = msgspec.msgpack.Decoder().decode
DECODE_JSON = msgspec.json.Decoder().decode


class Table:
    """A chain-style push function: records what it is fed."""

    def __init__(self) -> None:
        self.fed: list[tuple[dict[str, Any], int]] = []

    def __call__(self, row: dict[str, Any], now: int) -> None:
        self.fed.append((row, now))


def batch(pushes: list[tuple[str, dict[str, Any], int, int]]) -> bytearray:
    """Event records (event, row, now, body format) as the push pass appends them."""
    data = bytearray()
    for lsn, (event, row, now, fmt) in enumerate(pushes, 1):
        body = (msgspec.msgpack.encode(row) if fmt == wf.BODY_MSGPACK
                else json.dumps(row).encode())
        append_record(data, lsn, wf.RECORD_EVENT, fmt, now, 1, event.encode(), body)
    return data


def test_slices_apply_every_push_in_order_from_its_record() -> None:
    a, b = Table(), Table()
    routes = {"A": (a,), "B": (a, b)}
    pushes = [("A", {"k": "x", "v": 1.5}, 1_000, wf.BODY_MSGPACK),
              ("B", {"k": "y", "n": [1, 2]}, 1_007, wf.BODY_JSON),
              ("C", {"k": "z"}, 990, wf.BODY_MSGPACK),  # an event no table takes
              ("A", {"k": "x", "s": "é"}, 1_003, wf.BODY_MSGPACK)]
    data = batch(pushes)
    events = [event for event, *_ in pushes]
    newest, offset, done = apply_records(routes, {}, events, data, 0, 0, 2, 0.0, DECODE_MSGPACK,
                                         DECODE_JSON)
    assert done == 2
    assert newest == 1_007
    assert offset == wf.record_size_at(data, 0, len(data)) + wf.record_size_at(
        data, wf.record_size_at(data, 0, len(data)), len(data))
    newest, end, done = apply_records(routes, {}, events, data, offset, 2, 4, 0.0,
                                      DECODE_MSGPACK, DECODE_JSON)
    assert (newest, end, done) == (1_003, len(data), 4)
    assert a.fed == [({"k": "x", "v": 1.5}, 1_000), ({"k": "y", "n": [1, 2]}, 1_007),
                     ({"k": "x", "s": "é"}, 1_003)]
    assert b.fed == [({"k": "y", "n": [1, 2]}, 1_007)]


def test_bytes_that_are_not_the_pushes_records_are_refused() -> None:
    table = Table()
    routes = {"A": (table,)}
    data = batch([("A", {"k": "x"}, 5, wf.BODY_MSGPACK)])
    with pytest.raises(ValueError, match="ends before push 1"):  # one record, two pushes
        apply_records(routes, {}, ["A", "A"], data, 0, 0, 2, 0.0, DECODE_MSGPACK, DECODE_JSON)
    registry = bytearray()
    append_record(registry, 1, wf.RECORD_REGISTRY, wf.BODY_JSON, 5, 1, b"", b"{}")
    with pytest.raises(ValueError, match="no event record"):
        apply_records(routes, {}, ["A"], registry, 0, 0, 1, 0.0, DECODE_MSGPACK, DECODE_JSON)
    with pytest.raises(ValueError, match="no event record"):  # cut short
        apply_records(routes, {}, ["A"], data[:-1], 0, 0, 1, 0.0, DECODE_MSGPACK, DECODE_JSON)
    assert table.fed == [({"k": "x"}, 5)]  # only the first call's record was whole


def test_a_deadline_that_has_passed_stops_after_a_few_pushes() -> None:
    table = Table()
    pushes = [("A", {"i": i}, 100 + i, wf.BODY_MSGPACK) for i in range(100)]
    data = batch(pushes)
    events = ["A"] * len(pushes)
    passed = time.perf_counter()
    newest, offset, done = apply_records({"A": (table,)}, {}, events, data, 0, 0, 100, passed,
                                         DECODE_MSGPACK, DECODE_JSON)
    assert 0 < done < 100 and newest == 100 + done - 1
    assert [row["i"] for row, _ in table.fed] == list(range(done))
    _, end, rest = apply_records({"A": (table,)}, {}, events, data, offset, done, 100,
                                 time.perf_counter() + 60, DECODE_MSGPACK, DECODE_JSON)
    assert (end, rest) == (len(data), 100)
    assert [row["i"] for row, _ in table.fed] == list(range(100))


def test_bodies_an_events_checker_settles_are_read_by_it() -> None:
    """A record body the checker settles from its bytes is read by it (its row keyed by the
    interned declared names); any other body (a nested value here) by the decoder: the rows
    are the same either way."""
    outcome = register(empty_registry(), json.dumps({"nodes": [
        {"kind": "event", "name": "A",
         "schema": {"fields": {"k": "str", "v": "f64", "n": "json"},
                    "optional_fields": ["n"]}}]}).encode())
    assert outcome.status == 200, outcome.body
    checkers = build_checkers(outcome.registry.events)
    table = Table()
    pushes = [("A", {"k": "x", "v": 1.5}, 10, wf.BODY_MSGPACK),
              ("A", {"k": "y", "v": 2, "n": [1, {"a": None}]}, 11, wf.BODY_MSGPACK),
              ("A", {"v": -7, "k": "z"}, 12, wf.BODY_JSON)]
    data = batch(pushes)
    newest, end, done = apply_records({"A": (table,)}, checkers, ["A"] * 3, data, 0, 0, 3,
                                      0.0, DECODE_MSGPACK, DECODE_JSON)
    assert (newest, end, done) == (12, len(data), 3)
    assert table.fed == [(row, now) for _, row, now, _ in pushes]
    assert [list(row) for row, _ in table.fed] == [list(row) for _, row, _, _ in pushes]
    settled = table.fed[0][0]
    assert all(key is sys.intern(key) for key in settled)
