"""beava_client.slots: the slot function against the committed vectors (which the Spark
suite checks against Spark's xxhash64) and the shard map's parsing and validation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from beava_client.slots import SLOTS, ShardMap, ShardMapError, slot, split_slots, xxh64
from tests.support import TESTS

VECTORS = json.loads((TESTS / "vectors" / "slots.json").read_text(encoding="utf-8"))


def test_vectors_cover_the_cases_the_contract_names() -> None:
    texts = [v["text"] for v in VECTORS["vectors"]]
    assert len(texts) >= 100
    assert "" in texts
    assert any(len(t.encode()) > 32 for t in texts)  # the 32-byte stripe loop
    assert any(not t.isascii() for t in texts)
    assert any("|" in t and "%7C" in t for t in texts)  # composite with an escaped part


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=lambda v: repr(v["text"][:20]))
def test_slot_matches_vectors(vector: dict[str, Any]) -> None:
    assert xxh64(vector["text"].encode()) == vector["xxhash64"] % 2**64
    assert slot(vector["text"]) == vector["slot"] == vector["xxhash64"] % SLOTS


def test_xxh64_published_values_with_seed_zero() -> None:
    # The algorithm's own reference outputs (seed 0), independent of the vectors above.
    assert xxh64(b"", 0) == 0xEF46DB3751D8E999
    assert xxh64(b"a", 0) == 0xD24EC4F1A98C6E5B
    assert xxh64(b"abc", 0) == 0x44BC2CF5AD770999


def _map(ranges: list[list[list[int]]], **extra: Any) -> dict[str, Any]:
    shards = [{"id": f"s{i}", "ranges": r, "tcp": f"127.0.0.1:{7101 + 2 * i}",
               "http": f"http://127.0.0.1:{7102 + 2 * i}"} for i, r in enumerate(ranges)]
    return {"version": 1, "epoch": 3, "slots": SLOTS, "shards": shards, **extra}


def test_map_round_trip_and_owner() -> None:
    doc = _map([[[0, 5462]], [[5462, 10923]], [[10923, 16384]]])
    doc["shards"][0]["admin"] = "http://127.0.0.1:7200"
    smap = ShardMap.from_json(json.dumps(doc))
    assert smap.to_dict() == doc
    assert ShardMap.from_json(smap.to_json()) == smap
    assert smap.epoch == 3
    assert [smap.owner(s).id for s in (0, 5461, 5462, 10922, 10923, 16383)] == \
        ["s0", "s0", "s1", "s1", "s2", "s2"]
    assert smap.owner_of("u1").id == smap.owner(slot("u1")).id
    assert smap.shard("s1").http == "http://127.0.0.1:7104"
    with pytest.raises(KeyError, match="s9"):
        smap.shard("s9")


def test_bitmap_marks_exactly_the_owned_slots() -> None:
    smap = ShardMap.from_dict(_map([[[0, 9], [100, 16384]], [[9, 100]]]))
    bits = smap.owned_bitmap("s1")
    owned = {s for s in range(SLOTS) if bits[s >> 3] >> (s & 7) & 1}
    assert owned == set(range(9, 100))


def test_split_slots_covers_every_slot_once() -> None:
    assert split_slots(3) == [(0, 5462), (5462, 10923), (10923, 16384)]
    for n in (1, 2, 5, 7, 64):
        ranges = split_slots(n)
        ShardMap.from_dict(_map([[list(r)] for r in ranges]))  # validates coverage


@pytest.mark.parametrize(
    ("doc", "field", "words"),
    [
        (_map([[[0, 5000]], [[5001, 16384]]]), "slot 5000", "no shard"),
        (_map([[[0, 5001]], [[5000, 16384]]]), "slot 5000", "both 's0' and 's1'"),
        (_map([[[0, 16385]]]), "shards[0].ranges[0]", "start < end"),
        (_map([[[10, 10], [0, 16384]]]), "shards[0].ranges[0]", "start < end"),
        (_map([[[0, 16384]]], epoch=0), "epoch", ">= 1"),
        (_map([[[0, 16384]]], slots=1024), "slots", "16384"),
        (_map([[[0, 16384]]], version=2), "version", "must be 1"),
        (_map([[[0, 16384]]], extra=1), "extra", "unknown"),
        (_map([[["0", 16384]]]), "shards[0].ranges[0]", "integer"),
        ({**_map([]), "shards": []}, "shards", "at least one"),
    ],
)
def test_invalid_maps_are_refused_naming_the_field(doc: dict[str, Any], field: str,
                                                   words: str) -> None:
    with pytest.raises(ShardMapError, match=words) as info:
        ShardMap.from_dict(doc)
    assert info.value.field == field


def test_shard_fields_are_validated() -> None:
    doc = _map([[[0, 16384]]])
    del doc["shards"][0]["http"]
    with pytest.raises(ShardMapError) as info:
        ShardMap.from_dict(doc)
    assert info.value.field == "shards[0].http"
    doc = _map([[[0, 8000]], [[8000, 16384]]])
    doc["shards"][1]["id"] = "s0"
    with pytest.raises(ShardMapError) as info:
        ShardMap.from_dict(doc)
    assert info.value.field == "shards[1].id"


def test_load_names_an_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ShardMapError, match="cannot read"):
        ShardMap.load(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    with pytest.raises(ShardMapError, match="not valid JSON"):
        ShardMap.load(str(tmp_path / "bad.json"))


def test_the_servers_compiled_slot_matches_the_vectors() -> None:
    from beava._fast.ops.table_kernel import key_slot

    assert [key_slot(v["text"]) for v in VECTORS["vectors"]] == \
        [v["slot"] for v in VECTORS["vectors"]]
    assert key_slot("\ud800x") == slot("\ud800x")  # a lone surrogate, as surrogatepass writes
