"""Key routing without Spark: canonical keys, the BLAKE2b digest, jump consistent hash,
the line router used before repartitioning, and the totals merged by the accumulator."""

from __future__ import annotations

import hashlib
import pickle

import pytest

from beava_spark import (
    PushTotals,
    RowsRejectedError,
    canonical_key,
    jump_hash,
    key_digest,
    keystr,
    server_for_key,
    shard_for_key,
)
from beava_spark.routing import LineRouter
from beava_spark.totals import MAX_REJECTION_SAMPLES, TotalsAccumulatorParam

# (digest, [bucket for 1, 2, 3, 5, 10, 100, 1000 buckets]) from the reference C code of
# Lamping & Veach, compiled and run separately.
JUMP_VECTORS = [
    (0x4DEAEC0CCE54DA89, [0, 1, 1, 1, 1, 55, 552]),
    (0x74F32B2BB966A492, [0, 1, 1, 1, 7, 50, 138]),
    (0xE4A6A0577479B2B4, [0, 0, 2, 2, 5, 62, 472]),
    (0, [0, 0, 0, 0, 0, 0, 0]),
    (1, [0, 0, 0, 0, 6, 55, 549]),
    (2**64 - 1, [0, 1, 2, 2, 9, 92, 313]),
    (0xDEADBEEF, [0, 1, 2, 3, 5, 87, 285]),
]
BUCKETS = [1, 2, 3, 5, 10, 100, 1000]


@pytest.mark.parametrize(("digest", "expected"), JUMP_VECTORS)
def test_jump_hash_matches_reference_vectors(digest: int, expected: list[int]) -> None:
    assert [jump_hash(digest, n) for n in BUCKETS] == expected


def test_jump_hash_rejects_no_buckets() -> None:
    with pytest.raises(ValueError, match="buckets"):
        jump_hash(1, 0)


def test_key_digest_is_big_endian_blake2b_64() -> None:
    assert key_digest("alice") == 0x4DEAEC0CCE54DA89
    assert key_digest("bob") == 0x74F32B2BB966A492
    assert key_digest("") == 0xE4A6A0577479B2B4
    raw = hashlib.blake2b("é漢字".encode(), digest_size=8).digest()
    assert key_digest("é漢字") == int.from_bytes(raw, "big")


def test_keystr_follows_the_canonical_forms() -> None:
    assert [keystr(v) for v in ("alice", 7, -12, True, False, None)] == [
        "alice", "7", "-12", "true", "false", ""]
    assert [keystr(v) for v in (42.0, 0.1, 1e16, 1.5e-7, -0.0, float("inf"))] == [
        "42.0", "0.1", "1e16", "1.5e-7", "-0.0", "inf"]
    with pytest.raises(TypeError, match="key values"):
        keystr(b"bytes")


def test_canonical_key_escapes_pipes_of_composite_keys_only() -> None:
    assert canonical_key(["a|b"]) == "a|b"
    assert canonical_key(["alice", "m|1"]) == "alice|m%7C1"
    assert canonical_key([7, True]) == "7|true"
    assert canonical_key(["x", None]) == "x|"


def test_server_for_key_accepts_strings_values_and_composites() -> None:
    urls = ["tcp://a:1", "tcp://b:2", "tcp://c:3"]
    assert server_for_key("alice", urls) == urls[shard_for_key("alice", 3)] == urls[1]
    assert server_for_key(["alice", 7], urls) == server_for_key("alice|7", urls)
    assert server_for_key(7, urls) == server_for_key("7", urls)
    assert server_for_key("anything", urls[:1]) == urls[0]
    with pytest.raises(ValueError):
        server_for_key("alice", [])


def test_adding_a_server_moves_only_its_share_of_keys() -> None:
    keys = [f"user-{i}" for i in range(20_000)]
    before = [shard_for_key(k, 4) for k in keys]
    after = [shard_for_key(k, 5) for k in keys]
    moved = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
    assert all(a == 4 for _, a in moved)  # every moved key goes to the new server
    assert 0.17 < len(moved) / len(keys) < 0.23  # about 1/5 of the keys
    counts = [after.count(s) for s in range(5)]
    assert min(counts) > 0.9 * len(keys) / 5 and max(counts) < 1.1 * len(keys) / 5


def test_line_router_reads_the_key_from_the_body() -> None:
    router = LineRouter(["user_id"], servers=3, partitions_per_server=2)
    assert router.partitions == 6
    line = b'{"amount":1.5,"user_id":"alice","ok":true}'
    digest = key_digest("alice")
    assert router.key_of(line) == "alice"
    assert router(line) == (jump_hash(digest, 3) + 3 * (digest % 2), line)
    assert router.partition_of(line) % 3 == shard_for_key("alice", 3)
    composite = LineRouter(["shop id", "vip"], servers=2)
    assert composite.key_of(b'{"vip":true,"x":[1],"shop id":7}') == "7|true"
    assert composite.key_of(b'{"x":1}') == "|"  # null (left out) key values count as ""
    assert LineRouter(["v"], 2).key_of(b'{"v":1e16}') == "1e16"


def test_line_router_survives_pickling() -> None:
    router = LineRouter(["a", "b"], servers=4, partitions_per_server=3)
    line = b'{"a":"x|y","b":3}'
    assert router.key_of(line) == "x%7Cy|3"
    copy = pickle.loads(pickle.dumps(router))
    assert copy(line) == router(line)
    with pytest.raises(ValueError):
        LineRouter([], servers=2)


def test_totals_merge_and_cap_samples() -> None:
    param = TotalsAccumulatorParam()
    first = PushTotals(rows=10, sent=10, acknowledged=8, partitions=1, seconds=1.0)
    for i in range(2):
        first.reject("tcp://a:1", {"code": "invalid_event"}, f'{{"i":{i}}}'.encode())
    first.server("tcp://a:1").sent = 10
    second = PushTotals(rows=5, sent=4, acknowledged=4, partitions=1, stopped_partitions=1)
    for _ in range(MAX_REJECTION_SAMPLES + 5):
        second.reject("tcp://b:2", {"code": "unknown_field_v0"}, "x" * 5000)
    merged = param.addInPlace(param.zero(PushTotals()), first)
    merged = param.addInPlace(merged, second)
    assert (merged.rows, merged.sent, merged.acknowledged, merged.rejected) == (15, 14, 12, 27)
    assert merged.rejected_by_code == {"invalid_event": 2, "unknown_field_v0": 25}
    assert len(merged.rejections) == MAX_REJECTION_SAMPLES
    assert merged.rejections[0].row == '{"i":0}' and merged.rejections[0].server == "tcp://a:1"
    assert len(merged.rejections[-1].row) == 1000
    assert merged.servers["tcp://a:1"].sent == 10 and merged.servers["tcp://b:2"].rejected == 25
    assert (merged.partitions, merged.stopped_partitions) == (2, 1)
    error = RowsRejectedError(merged)
    assert str(error).startswith("27 row(s) rejected (invalid_event x2, unknown_field_v0 x25); "
                                 "12 acknowledged; first: [invalid_event] {\"i\":0}")
    assert merged.as_dict()["rows_per_second"] == 14.0
