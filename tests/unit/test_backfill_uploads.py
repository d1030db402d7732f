"""Bounds of the backfill staging area (beava.server.backfill_uploads)."""

from __future__ import annotations

import functools
import json
from typing import Any

import msgspec
import pytest

import beava as bv
from beava.catalogue.errors import BeavaError
from beava.dsl.compiler import compile_register_payload
from beava.engine.backfill import load_table
from beava.engine.backfill_state import StateDecoder
from beava.engine.store import FeatureStore
from beava.server.backfill_uploads import (
    IDLE_SECONDS,
    MAX_CHUNK_BYTES,
    MAX_PARTS,
    MAX_STAGED_BYTES,
    MAX_UPLOADS,
    BackfillUploads,
    Commit,
)
from tests.unit.test_snapshots import every_op_store


@bv.event
class Ping:
    host: str


@bv.table(key="host")
def ByHost(p: Ping) -> bv.Table:
    return p.group_by("host").agg(n=bv.count())


@bv.table
def AllPings(p: Ping) -> bv.Table:
    return p.agg(n_all=bv.count())


NODES = compile_register_payload(Ping, ByHost, AllPings)["nodes"]


def uploads() -> tuple[BackfillUploads, list[float]]:
    store = FeatureStore(memory_governance_enforce=False)
    assert store.register(json.dumps({"nodes": NODES}).encode())[0] == 200
    now = [0.0]
    return BackfillUploads(store, monotonic=lambda: now[0]), now


def begin(area: BackfillUploads, table: str, size: int) -> str:
    reply = area.handle({"action": "begin", "table": table, "until_ms": 0, "size": size,
                         "nodes": NODES})
    upload: str = reply["upload"]
    return upload


def test_staged_bytes_are_bounded_across_uploads() -> None:
    area, _ = uploads()
    begin(area, "ByHost", MAX_STAGED_BYTES - 10)
    with pytest.raises(BeavaError) as info:
        begin(area, "AllPings", 11)
    assert info.value.code == "backfill_too_large" and info.value.status == 413
    begin(area, "AllPings", 10)
    assert area.staged_bytes == MAX_STAGED_BYTES and MAX_UPLOADS >= 2


def test_idle_uploads_are_dropped_when_another_begins() -> None:
    area, now = uploads()
    first = begin(area, "ByHost", 5)
    now[0] += IDLE_SECONDS + 1
    begin(area, "AllPings", 5)
    with pytest.raises(BeavaError) as info:
        area.handle({"action": "commit", "upload": first})
    assert info.value.code == "backfill_upload_not_found"


def test_status_keeps_an_upload_open() -> None:
    area, now = uploads()
    kept = begin(area, "ByHost", 5)
    for _ in range(3):
        now[0] += IDLE_SECONDS - 1
        assert area.handle({"action": "status", "upload": kept}) == {"parts": [0]}
    begin(area, "AllPings", 5)
    assert area.handle({"action": "status", "upload": kept}) == {"parts": [0]}


# -- an upload of key-disjoint parts --------------------------------------------------------


def host_state(*hosts: str) -> bytes:
    """The ByHost state (MessagePack dump) after a ping of each host."""
    store = FeatureStore(clock=lambda: 1_700_000_000_000, memory_governance_enforce=False)
    assert store.register(json.dumps({"nodes": NODES}).encode())[0] == 200
    for host in hosts:
        store.push("Ping", {"host": host})
    return bytes(msgspec.msgpack.encode(store.table("ByHost").dump()))


def stage_parts(area: BackfillUploads, parts: list[bytes]) -> str:
    begun = area.handle({"action": "begin", "table": "ByHost", "until_ms": 0,
                         "parts": len(parts), "nodes": NODES})
    assert begun["parts"] == len(parts)
    for index, data in reversed(list(enumerate(parts))):  # in any order
        assert area.handle({"action": "part", "upload": begun["upload"], "part": index,
                            "size": len(data)}) == {"part": index, "size": len(data)}
        area.handle({"action": "chunk", "upload": begun["upload"], "part": index,
                     "offset": 0, "data": data})
    upload: str = begun["upload"]
    return upload


def test_disjoint_parts_reach_the_install_and_overlapping_ones_are_refused() -> None:
    area, _ = uploads()
    # a part of 0 bytes holds no entity, as does the dump of an empty table
    upload = stage_parts(area, [host_state("a", "b"), b"", host_state("c"), host_state()])
    job = area.handle({"action": "commit", "upload": upload})
    assert isinstance(job, Commit)
    with pytest.raises(BeavaError) as info:  # joined, then refused by the memory-only store
        job.run(None)
    assert info.value.code == "backfill_wal_required"
    assert job.table is not None and job.table.slot_keys(0, 9) == ["a", "b", "c"]
    upload = stage_parts(area, [host_state("a", "b"), host_state("c"), host_state("b")])
    job = area.handle({"action": "commit", "upload": upload})
    with pytest.raises(BeavaError) as info:
        job.run(None)
    assert (info.value.code, info.value.status) == ("backfill_parts_overlap", 409)
    assert (info.value.fields["key"], info.value.fields["parts"]) == ({"host": "b"}, [0, 2])
    assert area.staged_bytes == 0


def test_a_part_that_does_not_decode_is_named() -> None:
    area, _ = uploads()
    upload = stage_parts(area, [host_state("a"), b"\xc1"])
    with pytest.raises(BeavaError) as info:
        area.handle({"action": "commit", "upload": upload}).run(None)
    assert (info.value.code, info.value.fields["part"]) == ("invalid_backfill", 1)


def test_parts_are_checked_and_bounded() -> None:
    area, _ = uploads()

    def error(body: dict[str, Any]) -> dict[str, Any]:
        with pytest.raises(BeavaError) as info:
            area.handle(body)
        return {"code": info.value.code, **info.value.fields}

    begin = {"action": "begin", "table": "ByHost", "until_ms": 0, "nodes": NODES}
    assert error({**begin, "parts": 0})["path"] == "parts"
    assert error({**begin, "parts": MAX_PARTS + 1})["path"] == "parts"
    assert error({**begin, "parts": 2, "size": 5})["path"] == "size"
    assert error({**begin, "table": "AllPings", "parts": 2})["path"] == "parts"  # no key
    upload = area.handle({**begin, "parts": 3})["upload"]
    assert error({"action": "chunk", "upload": upload, "part": 1, "offset": 0,
                  "data": b"x"})["path"] == "part"
    assert error({"action": "part", "upload": upload, "part": 3, "size": 1})["path"] == "part"
    area.handle({"action": "part", "upload": upload, "part": 1, "size": 4})
    area.handle({"action": "chunk", "upload": upload, "part": 1, "offset": 0, "data": b"ab"})
    refused = error({"action": "commit", "upload": upload})
    assert (refused["path"], refused["parts"]) == ("upload", [0, 1, 2])
    assert area.handle({"action": "status", "upload": upload}) == {"parts": [None, 2, None]}
    # a part opened again starts over, and only its new size counts
    area.handle({"action": "part", "upload": upload, "part": 1, "size": 2})
    assert area.handle({"action": "chunk", "upload": upload, "part": 1, "offset": 0,
                        "data": b"ab"}) == {"received": 2}
    assert area.staged_bytes == 2
    assert error({"action": "part", "upload": upload, "part": 0,
                  "size": MAX_STAGED_BYTES - 1})["code"] == "backfill_too_large"
    assert area.staged_bytes == 2


# -- what a committed state may hold (beava.engine.backfill_state) --------------------------

# `p` is declared without a type: it takes any value a push may carry (docs/limits.md).
HELD_NODES = [
    {"kind": "event", "name": "Tag", "schema": {"fields": {"user": "str", "tag": "str"},
                                                "optional_fields": ["p"]}},
    {"kind": "derivation", "name": "Tags", "upstreams": ["Tag"], "key": ["user"], "agg": {
        "top": {"op": "max", "params": {"field": "tag"}},
        "last_p": {"op": "last", "params": {"field": "p"}},
        "recent_p": {"op": "most_recent_n", "params": {"field": "p", "n": 3}},
        "max_p_1h": {"op": "max", "params": {"field": "p", "window": "1h"}},
        "top_1h": {"op": "max", "params": {"field": "tag", "window": "1h"}}}},
]


def held_state() -> tuple[FeatureStore, dict[str, Any]]:
    """A store whose Tags table holds str and json values, and its dump."""
    store = FeatureStore(clock=lambda: 1_700_000_000_000, memory_governance_enforce=False)
    assert store.register(json.dumps({"nodes": HELD_NODES}).encode())[0] == 200
    store.push("Tag", {"user": "u1", "tag": "b", "p": {"k": [1, 2]}})
    store.push("Tag", {"user": "u2", "tag": "a", "p": "text"})
    return store, store.table("Tags").dump()


def commit(area: BackfillUploads, table: str, data: bytes, nodes: list[Any]) -> Any:
    """Stage ``data`` and commit it, every slice at once."""
    upload = area.handle({"action": "begin", "table": table, "until_ms": 0, "size": len(data),
                          "nodes": nodes})["upload"]
    for offset in range(0, len(data), MAX_CHUNK_BYTES):
        area.handle({"action": "chunk", "upload": upload, "offset": offset,
                     "data": data[offset:offset + MAX_CHUNK_BYTES]})
    job = area.handle({"action": "commit", "upload": upload})
    assert isinstance(job, Commit)
    return job.run(None)


def refusal(state: Any, nodes: list[Any] = HELD_NODES, table: str = "Tags") -> BeavaError:
    store = FeatureStore(memory_governance_enforce=False)
    assert store.register(json.dumps({"nodes": nodes}).encode())[0] == 200
    with pytest.raises(BeavaError) as info:
        commit(BackfillUploads(store), table, msgspec.msgpack.encode(state), nodes)
    return info.value


def test_a_state_that_fits_reaches_the_install() -> None:
    """The memory-only store refuses at the install, after the decode and the load."""
    _, state = held_state()
    assert refusal(state).code == "backfill_wal_required"


@pytest.mark.parametrize("table", ["L", "W", "G"])
def test_every_column_layout_decodes_to_the_state_it_dumped(table: str) -> None:
    store, clock = every_op_store(600)
    spec = store.registry.tables[table]
    decoder = StateDecoder(spec, msgspec.msgpack.encode(store.table(table).dump()))
    assert decoder.run(None, lambda: 0.0) and decoder.state is not None
    loaded = load_table(spec, decoder.state)
    for key in store.table(table).slot_keys(0, store.table(table).entity_count):
        assert loaded.row(key, clock.now) == store.table(table).row(key, clock.now)


def _plant(state: dict[str, Any], column: str, value: Any) -> dict[str, Any]:
    """``state`` with the first value held by ``column`` (an arena: ``arenas[0]``)
    replaced by ``value``."""
    part = state["arenas"][0] if column == "arenas[0]" else state["columns"][column]
    if isinstance(part, dict):
        part["objs"][0] = value
    else:
        part[-1][0] = value
    return state


@pytest.mark.parametrize(("column", "value", "why"), [
    ("top", {1: "x"}, "Expected `str | null`, got `object`"),
    ("top", 5, "Expected `str | null`, got `int`"),
    ("last_p", {1: "x"}, "a map key that is not a string"),
    ("last_p", msgspec.msgpack.Ext(1, b"x"), "extension"),
    ("last_p", functools.reduce(lambda v, _: [v], range(70), 0), "nested deeper than 64"),
    ("recent_p", {"a": {2: 0}}, "a map key that is not a string"),
    ("arenas[0]", {3: 0}, "a map key that is not a string"),
])
def test_held_values_obey_what_a_push_obeys(column: str, value: Any, why: str) -> None:
    _, state = held_state()
    error = refusal(_plant(state, column, value))
    assert (error.code, error.status) == ("invalid_backfill", 400)
    message = error.fields["message"]
    if column == "arenas[0]":  # shared by max(p) and max(tag) over 1h: the json rules
        assert error.fields["path"] == "state.arenas[0]"
        assert "table Tags, bucket arena of 3600000 ms (max_p_1h, top_1h)" in message
    else:
        assert error.fields["path"] == f"state.columns.{column}"
        assert f"table Tags, feature {column}" in message
    assert why in message


def test_a_list_of_held_values_is_bounded_by_its_slots_before_it_is_built() -> None:
    _, state = held_state()
    state["columns"]["last_p"][2] = [{}] * 100_000  # two slots: at most two values
    error = refusal(state)
    assert "length <= 2" in error.fields["message"] and "last_p" in error.fields["message"]


def test_a_state_of_the_wrong_shape_fails_at_its_first_byte() -> None:
    n = 4_000_000
    area, _ = uploads()
    data = b"\xdd" + n.to_bytes(4, "big") + b"\x80" * n  # an array of 4M empty maps
    with pytest.raises(BeavaError) as info:
        commit(area, "ByHost", data, NODES)
    assert info.value.fields["path"] == "state"
    assert "Expected `object`, got `array`" in info.value.fields["message"]
    assert area.staged_bytes == 0
