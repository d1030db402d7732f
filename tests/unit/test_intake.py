"""The push intake (beava._fast.intake.intake) is the one owner of LSNs, push counts and push
records: pushes the compiled pass takes and pushes the store's Python path takes (a dedupe
key, a body the pass leaves to it, HTTP) share one dense LSN sequence and one set of
counters, and register / reset records take their LSNs from the same sequence."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from beava._fast.intake.intake import MEMORY, STRICT, Intake
from beava._fast.wal.wal_record import seal
from beava._fast.wire.frame_splitter import FrameSplitter, encode_frame
from beava.catalogue.errors import BeavaError
from beava.durability.wal_format import RECORD_EVENT, parse_record
from beava.engine.store import FeatureStore
from beava.server.service import Service
from beava_client.opcodes import CT_JSON, CT_MSGPACK, OP_PUSH
from tests.held_log import HeldLog

NODES = [
    {"kind": "event", "name": "Fast", "schema": {"fields": {"k": "str", "n": "i64"}}},
    {"kind": "event", "name": "Deduped", "schema": {"fields": {"k": "str", "id": "str"}},
     "dedupe_key": "id"},
    {"kind": "derivation", "name": "F", "output_kind": "table", "upstreams": ["Fast"],
     "table_primary_key": ["k"],
     "ops": [{"op": "group_by", "keys": ["k"], "agg": {"c": {"op": "count"}}}]},
    {"kind": "derivation", "name": "D", "output_kind": "table", "upstreams": ["Deduped"],
     "table_primary_key": ["k"],
     "ops": [{"op": "group_by", "keys": ["k"], "agg": {"d": {"op": "count"}}}]},
]


def _frame(event: str, body: dict[str, Any], ct: int = CT_MSGPACK) -> tuple[int, int, bytes]:
    envelope = {"event": event, "body": body}
    payload = (msgspec.msgpack.encode(envelope) if ct == CT_MSGPACK
               else json.dumps(envelope).encode())
    return OP_PUSH, ct, payload


def _replies(out: bytes) -> list[Any]:
    """Each reply frame in ``out`` (JSON): its ack LSN, or its error code."""
    replies, at = [], 0
    while at < len(out):
        length = int.from_bytes(out[at:at + 4], "big")
        body = json.loads(out[at + 7:at + 4 + length])
        replies.append(body["error"]["code"] if "error" in body else body["ack_lsn"])
        at += 4 + length
    return replies


@pytest.mark.parametrize("mode", ["memory", "strict"])
def test_pass_and_python_path_interleaved_give_dense_lsns_and_exact_counts(mode: str) -> None:
    store = FeatureStore()
    log = HeldLog(store) if mode == "strict" else None
    if log is not None:
        store.log = log
    service = Service(store, test_mode=True)
    assert store.register(json.dumps({"nodes": NODES}).encode())[0] == 200
    assert store.last_lsn == 1  # the REGISTRY record's
    frames = [
        _frame("Fast", {"k": "a", "n": 1}),                  # the pass
        _frame("Deduped", {"k": "a", "id": "x"}),            # the store, inside the call
        _frame("Fast", {"k": "b", "n": 2}, CT_JSON),         # the pass, decoded by msgspec
        _frame("Fast", {"k": "a", "n": "not a number"}),     # refused by the store
        _frame("Deduped", {"k": "a", "id": "x"}),            # a replay: no LSN
        _frame("Fast", {"k": "c", "n": 3}),                  # the pass again
    ]
    out = bytearray()
    read = FrameSplitter().feed(b"".join(encode_frame(*frame) for frame in frames))
    assert service.push_pass.run(read, 0, len(read), out) == len(frames)
    lsn, _version, replay, _pending = store.push("Deduped", {"k": "b", "id": "y"})  # HTTP
    assert (lsn, replay) == (6, False)
    refused: list[tuple[int, str]] = []

    def fallback(index: int, body: Any) -> None:
        with pytest.raises(BeavaError) as err:
            store.push("Fast", body)
        refused.append((index, err.value.code))

    acks, newest = service.push_pass.push_bodies(
        "Fast", [{"k": "d", "n": 4}, {"k": "e", "n": "bad"}, {"k": "e", "n": 5}], fallback)
    assert (acks, newest, refused) == (2, 8, [(1, "invalid_event")])
    assert _replies(bytes(out)) == [2, 3, 4, "invalid_event", 3, 5]
    assert store.last_lsn == 8
    assert store.pushes_total == 7 and store.replays_total == 1
    assert store.pushes_by_event() == {"Fast": 5, "Deduped": 2}
    if log is not None:
        seal(log.buf)
        records, at = [], 0
        while at < len(log.buf):
            record = parse_record(log.buf, at)
            records.append(record)
            at += record.size
        assert [r.lsn for r in records] == list(range(2, 9))  # dense, in order
        assert all(r.type == RECORD_EVENT for r in records)
        assert log.batch.first_lsn == 2 and len(log.batch.events) == 7
        assert store.applied_lsn == 1 and store.hold_lsn == 8
        log.release()
    assert store.applied_lsn == 8
    assert store.table("F").row("a", 10**13) == {"c": 1}
    assert store.table("D").row("a", 10**13) == {"d": 1}
    # register and reset take the next LSNs of the same sequence
    extra = {"kind": "event", "name": "Extra", "schema": {"fields": {"k": "str"}}}
    assert store.register(json.dumps({"nodes": [*NODES, extra]}).encode())[0] == 200
    assert store.last_lsn == store.applied_lsn == 9
    store.reset()
    assert store.last_lsn == store.applied_lsn == 10
    assert store.pushes_by_event() == {"Fast": 5, "Deduped": 2}  # counts outlive a reset


def test_a_push_whose_record_cannot_be_built_takes_no_lsn() -> None:
    """Strict mode: the record is built before the LSN is taken; a failure leaves the
    LSN, the counts and the pending batch as they were."""
    store = FeatureStore()
    store.log = HeldLog(store)
    assert store.register(json.dumps({"nodes": NODES}).encode())[0] == 200

    def broken(row: Any, buf: bytearray, at: int) -> None:
        buf += b"partial"
        raise OverflowError("cannot encode")

    intake = Intake(broken, store.log)
    intake.count_events(store.checkers)
    intake.advance(store.last_lsn)
    with pytest.raises(OverflowError):
        intake.push("Fast", store.checkers["Fast"], {"k": "a", "n": 1}, 5, 1,
                    store.engine.routes, None)
    assert (intake.last_lsn, intake.pushes_total, intake.hold_lsn) == (1, 0, 0)
    assert intake.pushes_by_event() == {"Fast": 0, "Deduped": 0}
    assert store.log.buf == b"" and store.log.batch.events == []


def test_the_mode_is_read_once_when_the_log_is_attached() -> None:
    store = FeatureStore()
    assert store.intake.mode == MEMORY
    store.log = HeldLog(store)
    assert store.intake.mode == STRICT

    class Unknown:
        mode = "strict"  # a name, not one of the modes

    with pytest.raises(ValueError, match="unknown durability mode"):
        store.intake.attach(Unknown())
    assert store.intake.mode == STRICT
