"""Service: the handlers the command table binds, over a real in-memory FeatureStore.
One push handler serves both transports; what differs is what the wire spec makes differ
(spec/wire.md §5.1, §6.6, §6.7)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import msgspec
import pytest

from beava._fast.wire.frame_splitter import encode_frame
from beava.catalogue.errors import BeavaError
from beava.engine.store import FeatureStore
from beava.protocol import messages
from beava.protocol.dispatch import FrameDispatch, HttpDispatch
from beava.protocol.http import HttpRequest
from beava.protocol.reply_slots import PendingReply
from beava.server import service as service_module
from beava.server.service import Service
from beava_client.opcodes import (
    CT_JSON,
    CT_MSGPACK,
    OP_BATCH_GET,
    OP_ERROR,
    OP_GET,
    OP_GET_RESPONSE,
    OP_PUSH,
    OP_PUSH_MANY,
)
from tests.held_log import HeldLog

REGISTER = json.dumps({"nodes": [
    {"kind": "event", "name": "E", "schema": {"fields": {"k": "str", "id": "str"}},
     "dedupe_key": "id"},
    {"kind": "derivation", "name": "T", "output_kind": "table", "upstreams": ["E"],
     "table_primary_key": ["k"],
     "ops": [{"op": "group_by", "keys": ["k"], "agg": {"n": {"op": "count"}}}]}]}).encode()


class Wire:
    """A Service bound to the command table, called the way the transports call it."""

    def __init__(self, log: str = "memory") -> None:
        self.store = FeatureStore()
        if log == "held":
            self.store.log = HeldLog(self.store)
        self.service = Service(self.store, test_mode=True)
        self.frames = FrameDispatch(self.service.frame_handlers())
        self.http = HttpDispatch(self.service.http_handlers(), self.service.wait_applied)
        status, _ = self.store.register(REGISTER)
        assert status == 200

    def frame(self, op: int, ct: int, body: Any) -> bytes | PendingReply:
        payload = msgspec.msgpack.encode(body) if ct == CT_MSGPACK else json.dumps(body).encode()
        content_types, handler = self.frames.routes[op]
        assert ct in content_types
        try:
            return handler(ct, payload)
        except Exception as exc:
            return self.frames.failed(exc)

    def post(self, target: str, body: Any) -> bytes | PendingReply:
        request = HttpRequest("POST", target, {}, json.dumps(body).encode(), True)
        return self.http.respond(request)


def _http_body(response: bytes | PendingReply) -> tuple[bytes, bytes]:
    assert isinstance(response, bytes)
    head, _, body = response.partition(b"\r\n\r\n")
    return head, body


@pytest.mark.parametrize("ct", [CT_JSON, CT_MSGPACK])
def test_tcp_push_acks_and_replays(ct: int) -> None:
    wire = Wire()
    push = {"event": "E", "body": {"k": "a", "id": "1"}}
    assert wire.frame(OP_PUSH, ct, push) == encode_frame(
        OP_PUSH, CT_JSON, b'{"ack_lsn":2,"idempotent_replay":false,"registry_version":1}')
    assert wire.frame(OP_PUSH, ct, push) == encode_frame(
        OP_PUSH, CT_JSON, b'{"ack_lsn":2,"idempotent_replay":true,"registry_version":1}')
    assert wire.frame(OP_GET, ct, {"table": "T", "key": "a"}) == encode_frame(
        OP_GET_RESPONSE, ct, msgspec.msgpack.encode({"n": 1}) if ct == CT_MSGPACK
        else b'{"n":1}')


def test_http_push_acks_and_replays_with_the_original_body_and_a_header() -> None:
    wire = Wire()
    ack = b'{"ack_lsn":2,"idempotent_replay":false,"registry_version":1}'
    head, body = _http_body(wire.post("/push", {"event": "E", "data": {"k": "a", "id": "1"}}))
    assert body == ack and b"X-Beava-Idempotent-Replay" not in head
    head, body = _http_body(wire.post("/push/E", {"k": "a", "id": "1"}))
    assert body == ack and b"\r\nX-Beava-Idempotent-Replay: 1\r\n" in head


def test_push_errors_carry_the_registry_version_on_tcp_only() -> None:
    wire = Wire()
    reply = wire.frame(OP_PUSH, CT_JSON, {"event": "Nope", "body": {}})
    assert isinstance(reply, bytes) and reply[4:7] == bytes((0xFF, 0xFF, CT_JSON))
    assert json.loads(reply[7:])["registry_version"] == 1
    assert json.loads(reply[7:])["error"]["code"] == "event_not_found"
    head, body = _http_body(wire.post("/push/Nope", {}))
    assert head.startswith(b"HTTP/1.1 404 ") and "registry_version" not in json.loads(body)


def test_tcp_push_envelope_errors_are_flat() -> None:
    wire = Wire()
    assert wire.frame(OP_PUSH, CT_JSON, {"event": "E", "data": {}}) == encode_frame(
        OP_ERROR, CT_JSON, b'{"code":"unsupported"}')


def test_an_http_push_waiting_for_durability_is_answered_once_applied() -> None:
    wire = Wire(log="held")
    reply = wire.post("/push/E", {"k": "a", "id": "1"})
    assert isinstance(reply, PendingReply) and reply.data is None
    get = wire.frame(OP_GET, CT_JSON, {"table": "T", "key": "a"})
    assert get == encode_frame(OP_GET_RESPONSE, CT_JSON, b"{}")  # not applied yet
    assert isinstance(wire.store.log, HeldLog)
    wire.store.log.release()
    assert reply.data is not None
    ack = b'{"ack_lsn":2,"idempotent_replay":false,"registry_version":1}'
    assert _http_body(reply.data)[1] == ack
    assert wire.frame(OP_GET, CT_JSON, {"table": "T", "key": "a"}) == encode_frame(
        OP_GET_RESPONSE, CT_JSON, b'{"n":1}')


def test_a_tcp_push_waiting_for_durability_holds_its_ack_by_lsn() -> None:
    """The ack frame comes back at once; the store's hold_lsn says what it waits for."""
    wire = Wire(log="held")
    store = wire.store
    reply = wire.frame(OP_PUSH, CT_JSON, {"event": "E", "body": {"k": "a", "id": "1"}})
    ack = b'{"ack_lsn":2,"idempotent_replay":false,"registry_version":1}'
    assert reply == encode_frame(OP_PUSH, CT_JSON, ack)
    assert store.hold_lsn == 2 and store.applied_lsn == 1
    get = wire.frame(OP_GET, CT_JSON, {"table": "T", "key": "a"})
    assert get == encode_frame(OP_GET_RESPONSE, CT_JSON, b"{}")  # not applied yet
    # a replay of the pending original waits for everything accepted so far
    wire.frame(OP_PUSH, CT_JSON, {"event": "E", "body": {"k": "b", "id": "2"}})
    replay = wire.frame(OP_PUSH, CT_JSON, {"event": "E", "body": {"k": "a", "id": "1"}})
    assert replay == encode_frame(OP_PUSH, CT_JSON, ack.replace(b"false", b"true"))
    assert store.hold_lsn == 3
    assert isinstance(store.log, HeldLog)
    store.log.release()
    assert store.applied_lsn == 3
    assert wire.frame(OP_GET, CT_JSON, {"table": "T", "key": "a"}) == encode_frame(
        OP_GET_RESPONSE, CT_JSON, b'{"n":1}')


def test_an_http_read_behind_a_pending_push_sees_it() -> None:
    wire = Wire(log="held")
    assert isinstance(wire.post("/push/E", {"k": "a", "id": "1"}), PendingReply)
    request = HttpRequest("POST", "/get", {}, b'{"table":"T","key":"a"}', True, True)
    assert _http_body(wire.http.respond(request))[1] == b'{"n":1}'


def _batch(n: int, tail: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    entries: list[dict[str, Any]] = [{"table": "T", "key": f"k{i % 7}"} for i in range(n)]
    entries[1] = {"table": "Nope", "key": "a"}
    entries[2] = {"table": "T", "key": ["a", "b"]}
    entries[3] = {"table": "T", "entity_id": "k1", "features": ["n"]}
    return {"requests": entries + (tail or [])}


async def _sliced(wire: Wire, reply: bytes | PendingReply) -> bytes:
    """Let the loop run the slices of ``reply``; its bytes."""
    assert isinstance(reply, PendingReply), "expected a batch served in slices"
    turns = 0
    while reply.data is None:
        turns += 1
        assert turns < 10_000
        await asyncio.sleep(0)
    assert wire.service.sliced == set()
    return reply.data


async def test_a_big_batch_get_is_served_in_slices_with_the_same_answer(monkeypatch) -> None:
    wire = Wire()
    for i in range(7):
        wire.frame(OP_PUSH, CT_JSON, {"event": "E", "body": {"k": f"k{i}", "id": str(i)}})
    monkeypatch.setattr(service_module, "BATCH_SLICE_SECONDS", 60.0)  # one slice
    whole_tcp = wire.frame(OP_BATCH_GET, CT_JSON, _batch(1000))
    whole_http = wire.post("/batch_get", _batch(1000))
    assert isinstance(whole_tcp, bytes) and isinstance(whole_http, bytes)
    results = json.loads(whole_tcp[7:])["results"]
    assert len(results) == 1000 and results[0] == {"n": 1} and results[3] == {"n": 1}
    assert results[1]["error"]["code"] == "unknown_table"
    assert results[2]["error"]["code"] == "key_parse_failure"
    # every slice ends after one clock check (64 entries): the batch takes many loop turns
    monkeypatch.setattr(service_module, "BATCH_SLICE_SECONDS", 0.0)
    assert await _sliced(wire, wire.frame(OP_BATCH_GET, CT_JSON, _batch(1000))) == whole_tcp
    assert await _sliced(wire, wire.post("/batch_get", _batch(1000))) == whole_http
    # a request-level failure found by a late slice answers the whole request
    bad = await _sliced(wire, wire.frame(OP_BATCH_GET, CT_JSON, _batch(1000, [{"key": "a"}])))
    assert bad[4:7] == bytes((0xFF, 0xFF, CT_JSON))
    assert json.loads(bad[7:])["error"]["code"] == "internal_error"
    head, _ = _http_body(await _sliced(wire, wire.post(
        "/batch_get", _batch(1000, [{"table": "T", "key": "a", "features": ["zz"]}]))))
    assert head.startswith(b"HTTP/1.1 500 ")


async def test_a_batch_body_is_decoded_and_its_answer_encoded_in_slices(monkeypatch) -> None:
    """The entries stay encoded until a slice decodes them and the answer is encoded a
    piece at a time: the bytes are those of decoding and encoding the whole at once, for
    both content types, and an entry nested past the decoder still fails the request."""
    wire = Wire()
    for i in range(7):
        wire.frame(OP_PUSH, CT_JSON, {"event": "E", "body": {"k": f"k{i}", "id": str(i)}})
    monkeypatch.setattr(service_module, "BATCH_SLICE_SECONDS", 0.0)
    for ct in (CT_JSON, CT_MSGPACK):
        reply = await _sliced(wire, wire.frame(OP_BATCH_GET, ct, _batch(5000)))
        assert reply[4:7] == bytes((OP_GET_RESPONSE >> 8, OP_GET_RESPONSE & 0xFF, CT_JSON))
        results = json.loads(reply[7:])["results"]
        assert len(results) == 5000 and results[4999] == {"n": 1}
        assert reply[7:] == messages.encode_json({"results": results})
    deep = {CT_JSON: b'{"requests": [{"table": "T", "key": "k1"}, ' + b'{"k":' * 5000
            + b"null" + b"}" * 5000 + b"]}",
            CT_MSGPACK: b"\x81\xa8requests\x92\x82\xa5table\xa1T\xa3key\xa2k1"
            + b"\x81\xa1k" * 5000 + b"\xc0"}
    for ct, payload in deep.items():
        with pytest.raises(BeavaError) as info:
            wire.frames.routes[OP_BATCH_GET][1](ct, payload)
        assert info.value.fields["reason"] == "body nested too deep to decode"


async def test_a_sliced_batch_starts_over_after_a_registry_change_and_finishes_on_demand(
        monkeypatch) -> None:
    wire = Wire()
    wire.frame(OP_PUSH, CT_JSON, {"event": "E", "body": {"k": "k0", "id": "0"}})
    monkeypatch.setattr(service_module, "BATCH_SLICE_SECONDS", 0.0)
    reply = wire.frame(OP_BATCH_GET, CT_JSON, _batch(1000))
    assert isinstance(reply, PendingReply) and reply.data is None
    wire.service.reset()  # T is gone: the answer reflects the new registry only
    results = json.loads((await _sliced(wire, reply))[7:])["results"]
    assert {r["error"]["code"] for r in results} == {"unknown_table"}
    # shutdown finishes the batches still in slices at once
    assert wire.store.register(REGISTER)[0] == 200
    reply = wire.frame(OP_BATCH_GET, CT_JSON, _batch(1000))
    assert isinstance(reply, PendingReply) and reply.data is None
    wire.service.finish_slices()
    assert reply.data is not None and wire.service.sliced == set()
    assert json.loads(reply.data[7:])["results"][0] == {}


def test_bodies_nested_past_the_decoder_answer_their_own_errors() -> None:
    # the decoder's RecursionError escaped as 500 "RecursionError: maximum recursion depth"
    wire = Wire()
    deep = {CT_JSON: b'{"k":' * 5000 + b"null" + b"}" * 5000,
            CT_MSGPACK: b"\x81\xa1k" * 5000 + b"\xc0"}
    for op in (OP_GET, OP_BATCH_GET):
        for ct, payload in deep.items():
            with pytest.raises(BeavaError) as info:
                wire.frames.routes[op][1](ct, payload)
            assert info.value.code == "internal_error"
            assert info.value.fields["reason"] == "body nested too deep to decode"
    bodies = b'{"event": "E", "bodies": [' + deep[CT_JSON] + b"]}"
    with pytest.raises(BeavaError) as info:
        wire.frames.routes[OP_PUSH_MANY][1](CT_JSON, bodies)
    assert info.value.code == "invalid_push_many"
    reply = wire.http.respond(HttpRequest("POST", "/test/clock", {}, deep[CT_JSON], True))
    head, body = _http_body(reply)
    assert head.startswith(b"HTTP/1.1 400 ")
    assert json.loads(body)["error"]["code"] == "invalid_test_clock"
