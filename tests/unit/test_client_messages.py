"""beava_client.messages: push envelopes, push_many chunking, read and register bodies."""

from __future__ import annotations

import json

import msgspec
import pytest

from beava_client.frames import FrameDecoder
from beava_client.messages import (
    EnvelopeEncoder,
    batch_get_body,
    encode_push_many_chunks,
    get_body,
    register_body,
)


def test_json_push_frame_bytes() -> None:
    frame = EnvelopeEncoder("Txn").encode({"user": "u1", "amount": 1.5})
    payload = b'{"event":"Txn","body":{"user":"u1","amount":1.5}}'
    assert frame == len(payload + b"...").to_bytes(4, "big") + b"\x00\x10\x01" + payload


def test_event_name_is_json_escaped() -> None:
    frame = EnvelopeEncoder('a"b\\c').encode({})
    (_, _, payload), = FrameDecoder().feed(frame)
    assert json.loads(payload) == {"event": 'a"b\\c', "body": {}}


def test_msgpack_push_is_a_two_entry_map() -> None:
    frame = EnvelopeEncoder("Txn", ct=2).encode({"n": 1})
    (op, ct, payload), = FrameDecoder().feed(frame)
    assert (op, ct) == (0x10, 2)
    assert payload[0] == 0x82
    assert msgspec.msgpack.decode(payload) == {"event": "Txn", "body": {"n": 1}}


def test_http_push_body_uses_data() -> None:
    enc = EnvelopeEncoder("Txn", field="data", op=None)
    assert enc.encode({"a": [1, None]}) == b'{"event":"Txn","data":{"a":[1,null]}}'


def test_batches_split_and_concatenate_frames() -> None:
    enc = EnvelopeEncoder("E")
    bodies = [{"i": i} for i in range(10)]
    batches = list(enc.batches(bodies, 4))
    assert [count for _, count in batches] == [4, 4, 2]
    frames = FrameDecoder().feed(b"".join(bytes(blob) for blob, _ in batches))
    assert [json.loads(p)["body"]["i"] for _, _, p in frames] == list(range(10))


def test_oversized_push_raises_and_leaves_buffer_clean() -> None:
    enc = EnvelopeEncoder("E", max_payload=40)
    buf = bytearray()
    enc.append(buf, {"s": "x"})
    size = len(buf)
    with pytest.raises(ValueError, match="exceeds max_frame_bytes=40"):
        enc.append(buf, {"s": "x" * 40})
    assert len(buf) == size
    with pytest.raises(ValueError):
        list(enc.batches([{"s": "y"}, {"s": "y" * 50}], 10))


def test_event_name_must_be_str() -> None:
    with pytest.raises(TypeError):
        EnvelopeEncoder(5)  # type: ignore[arg-type]


def _decode_chunk(chunk: bytes, framed: bool = True) -> tuple[int, int, object]:
    if framed:
        (op, ct, payload), = FrameDecoder().feed(chunk)
    else:
        op, ct, payload = 0, 1, chunk
    if ct == 2:
        return op, ct, msgspec.msgpack.decode(payload)
    return op, ct, json.loads(payload)


def test_push_many_chunks_by_count() -> None:
    rows = [{"i": i} for i in range(2500)]
    chunks = encode_push_many_chunks("Txn", rows, chunk_size=1000)
    assert [(c.start, c.count) for c in chunks] == [(0, 1000), (1000, 1000), (2000, 500)]
    op, ct, body = _decode_chunk(chunks[2].data)
    assert (op, ct) == (0x12, 1)
    assert body == {"event": "Txn", "bodies": rows[2000:]}


def test_push_many_chunks_msgpack_count_patched() -> None:
    rows = [{"i": i} for i in range(7)]
    chunks = encode_push_many_chunks("E", rows, ct=2, chunk_size=3)
    decoded = [_decode_chunk(c.data) for c in chunks]
    assert [d[2]["bodies"] for d in decoded] == [rows[0:3], rows[3:6], rows[6:7]]
    assert {d[1] for d in decoded} == {2}


def test_push_many_chunks_by_bytes() -> None:
    rows = [{"s": "x" * 30} for _ in range(10)]  # each row encodes to 38 bytes
    chunks = encode_push_many_chunks("E", rows, chunk_size=10, max_payload=130, framed=False)
    assert all(len(c.data) <= 130 for c in chunks)
    assert [c.count for c in chunks] == [2, 2, 2, 2, 2]
    assert [c.start for c in chunks] == [0, 2, 4, 6, 8]
    assert [r for c in chunks for r in json.loads(c.data)["bodies"]] == rows


def test_push_many_row_too_large_raises_before_anything() -> None:
    rows = [{"s": "a"}, {"s": "x" * 200}]
    with pytest.raises(ValueError, match="row 1 encodes to"):
        encode_push_many_chunks("E", rows, max_payload=100)


@pytest.mark.parametrize("size", [0, 10_001, True, 1.5])
def test_push_many_chunk_size_checked(size: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        encode_push_many_chunks("E", [{}], chunk_size=size)  # type: ignore[arg-type]


def test_push_many_no_rows_no_chunks() -> None:
    assert encode_push_many_chunks("E", []) == []


def test_register_body_flags() -> None:
    nodes = [{"kind": "event", "name": "E"}]
    assert register_body({"nodes": nodes}) == {"nodes": nodes}
    assert register_body(nodes, force=True) == {"nodes": nodes, "force": True}
    assert register_body({"nodes": nodes, "force": True}) == {"nodes": nodes, "force": True}
    assert register_body(nodes, dry_run=True)["dry_run"] is True
    with pytest.raises(TypeError):
        register_body("nodes")  # type: ignore[arg-type]


def test_read_bodies() -> None:
    assert get_body("T", None, None) == {"table": "T", "key": ""}
    assert get_body("T", 7, ("a",)) == {"table": "T", "key": 7, "features": ["a"]}
    assert get_body("T", "k", []) == {"table": "T", "key": "k", "features": []}
    assert batch_get_body([("T", "k"), ("U", "", ["f"]), {"table": "V", "key": "x"}]) == {
        "requests": [
            {"table": "T", "key": "k"},
            {"table": "U", "key": "", "features": ["f"]},
            {"table": "V", "key": "x"},
        ]
    }
    with pytest.raises(TypeError):
        batch_get_body([("T",)])
    with pytest.raises(TypeError):
        batch_get_body(["T"])
