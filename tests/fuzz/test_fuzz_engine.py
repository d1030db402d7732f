"""Property tests of the server's input handling, in process (fast enough for many
examples): arbitrary values pushed as field values and as whole bodies, through every push
decoding path, are refused with a client error or accepted; whatever is accepted reads back
on every read path without an internal error, and the same after WAL replay (each accepted
row's WAL body replayed into a second store) and after a snapshot (written, read and loaded
into a third store). Read requests, register payloads and expressions of any shape never
fail with an error no handler meant, and the frame splitter agrees with a plain model of
the framing rules on any byte stream in any chunks."""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from beava._fast.wal.wal_record import seal
from beava._fast.wire.frame_splitter import FRAME_TOO_LARGE, FRAME_TOO_SHORT, FrameSplitter
from beava.durability.snapshots import read_snapshot, write_snapshot_file
from beava.durability.wal_format import Record, parse_record
from beava.engine.store import FeatureStore
from beava.protocol.dispatch import FrameDispatch, HttpDispatch
from beava.protocol.http import HttpRequest
from beava.protocol.reply_slots import PendingReply
from beava.server.service import Service
from beava_client.opcodes import (
    CT_JSON,
    CT_MSGPACK,
    OP_BATCH_GET,
    OP_ERROR,
    OP_GET,
    OP_GET_MULTI,
    OP_MGET,
    OP_PUSH,
    OP_PUSH_MANY,
    OP_REGISTER,
    OP_SCAN,
    OP_TEST_CLOCK,
)
from tests.fuzz.strategies import (
    ODD_JSON,
    UNMEANT,
    encode_json,
    encode_msgpack,
    fuzz_settings,
    values,
)
from tests.held_log import HeldLog

_U = {"user": "str"}
REGISTER: dict[str, Any] = {"nodes": [
    {"kind": "event", "name": "E",
     "schema": {"fields": {**_U, "j": "json", "x": "f64"}, "optional_fields": ["j", "x"]}},
    {"kind": "event", "name": "S", "schema": {"fields": {**_U, "s": "str"}}},
    {"kind": "derivation", "name": "T", "output_kind": "table", "upstreams": ["E"],
     "table_primary_key": ["user"],
     "ops": [{"op": "group_by", "keys": ["user"], "agg": {
         "n": {"op": "count"},
         "last_j": {"op": "last", "params": {"field": "j"}},
         "first_j": {"op": "first", "params": {"field": "j"}},
         "recent_j": {"op": "most_recent_n", "params": {"field": "j", "n": 3}},
         "uniq_j": {"op": "n_unique", "params": {"field": "j", "window": "1h"}},
         "top_j": {"op": "top_k", "params": {"field": "j", "k": 3, "window": "1h"}},
         "min_x": {"op": "min", "params": {"field": "x"}},
         "max_x": {"op": "max", "params": {"field": "x", "window": "1h"}},
         "sum_x": {"op": "sum", "params": {"field": "x"}},
         "mean_x": {"op": "mean", "params": {"field": "x", "window": "1h"}},
         "std_x": {"op": "std", "params": {"field": "x"}},
         "q_x": {"op": "quantile", "params": {"field": "x", "q": 0.5, "window": "1h"}},
         "ent_j": {"op": "entropy", "params": {"field": "j", "window": "1h"}},
     }}]},
    {"kind": "derivation", "name": "K", "output_kind": "table", "upstreams": ["E"],
     "table_primary_key": ["j"],
     "ops": [{"op": "group_by", "keys": ["j"], "agg": {"kn": {"op": "count"}}}]},
    {"kind": "derivation", "name": "ST", "output_kind": "table", "upstreams": ["S"],
     "table_primary_key": ["user"],
     "ops": [{"op": "group_by", "keys": ["user"], "agg": {
         "last_s": {"op": "last", "params": {"field": "s"}},
         "uniq_s": {"op": "n_unique", "params": {"field": "s"}},
         "top_s": {"op": "top_k", "params": {"field": "s", "k": 2}},
     }}]},
]}
TABLES = ("T", "K", "ST")
SLICE_TURNS = 100_000  # loop turns a reply evaluated in slices may take (a liveness bound)


class CaptureLog(HeldLog):
    """A held log that keeps the WAL records it is given (the bytes the store and the push
    pass append to ``buf``, in the WAL's own format) before it applies the pending batch."""

    def __init__(self, store: FeatureStore) -> None:
        super().__init__(store)
        self.records: list[Record] = []

    def release(self) -> None:
        seal(self.buf)  # as the durability log seals a batch when it writes it
        offset = 0
        while offset < len(self.buf):
            record = parse_record(self.buf, offset)
            self.records.append(record)
            offset += record.size
        super().release()


def registered_store() -> FeatureStore:
    store = FeatureStore()
    status, body = store.register(json.dumps(REGISTER).encode())
    assert status == 200, body
    return store


class Wire:
    """The service of a store with a capturing log, called as the transports call it."""

    def __init__(self) -> None:
        self.store = registered_store()
        self.log = CaptureLog(self.store)
        self.store.log = self.log  # type: ignore[assignment]
        self.service = Service(self.store, test_mode=True)
        self.frames = FrameDispatch(self.service.frame_handlers())
        self.http = HttpDispatch(self.service.http_handlers(), self.service.wait_applied)
        self.replayed = 0  # records of self.log already replayed into ``replica``
        self.replica = registered_store()

    def answered(self, call: Callable[[], bytes | PendingReply]) -> bytes:
        """The reply of a handler ``call``, run in an event loop as the transports run it:
        a reply that waits for its records is released at once (the capturing log), one
        evaluated in slices (a BATCH_GET that outlasts its first slice on a busy machine)
        is waited for while the loop runs its slices."""
        async def run() -> bytes:
            reply = call()
            if isinstance(reply, PendingReply):
                self.log.release()
                for _ in range(SLICE_TURNS):
                    if reply.data is not None:
                        break
                    await asyncio.sleep(0)
                assert reply.data is not None, "a sliced reply never finished"
                reply = reply.data
            return reply
        return asyncio.run(run())

    def frame(self, op: int, ct: int, payload: bytes) -> tuple[int, dict[str, Any] | bytes]:
        """(reply op, error envelope or reply payload); a handler failure the transport
        would answer as internal_error is reported like one."""
        content_types, handler = self.frames.routes[op]
        if ct not in content_types:
            return OP_ERROR, {"error": {"code": "unsupported_content_type"}}

        def call() -> bytes | PendingReply:
            try:
                return handler(ct, payload)  # type: ignore[no-any-return]
            except Exception as exc:
                return self.frames.failed(exc)

        reply = self.answered(call)
        op = struct.unpack(">H", reply[4:6])[0]
        body = reply[7:]
        return op, (json.loads(body) if op == OP_ERROR else body)

    def post(self, target: str, body: bytes) -> tuple[int, bytes]:
        reply = self.answered(
            lambda: self.http.respond(HttpRequest("POST", target, {}, body, True)))
        head, _, payload = reply.partition(b"\r\n\r\n")
        return int(head.split(b" ")[1]), payload


def assert_meant(status_or_op: int, body: Any, what: str) -> None:
    """No internal error that a handler did not mean to answer."""
    if status_or_op in (500, OP_ERROR):
        envelope = body if isinstance(body, dict) else json.loads(body)
        error = envelope.get("error", envelope)
        if error.get("code") == "internal_error":
            assert not UNMEANT.match(str(error.get("reason", ""))), (what, envelope)


def read_all(wire: Wire, store: FeatureStore, user: str) -> dict[str, bytes]:
    """Every read path for ``user`` and every table page, answered by ``store``'s service."""
    service = Service(store, test_mode=True)
    frames = FrameDispatch(service.frame_handlers())
    out: dict[str, bytes] = {}
    async def answer(op: int, ct: int, payload: bytes) -> bytes | PendingReply:
        reply = frames.routes[op][1](ct, payload)
        while type(reply) is PendingReply and reply.data is None:
            await asyncio.sleep(0)
        return reply

    def call(name: str, op: int, ct: int, body: Any) -> None:
        payload = encode_msgpack(body) if ct == CT_MSGPACK else json.dumps(body).encode()
        try:
            # on a loop: a read served in slices runs one slice per loop iteration
            reply = asyncio.run(answer(op, ct, payload))
        except Exception as exc:
            raise AssertionError(f"{name} raised {exc!r}") from exc
        if type(reply) is PendingReply:  # a BATCH_GET whose first slice did not finish it
            assert reply.data is not None
            reply = reply.data
        assert isinstance(reply, bytes)
        op_back = struct.unpack(">H", reply[4:6])[0]
        if op_back == OP_ERROR:
            code = json.loads(reply[7:])["error"]["code"]
            assert code == "key_not_found", (name, reply)
        out[name] = reply

    key = [user]  # the array form reads a single key that holds "|" (spec/wire.md §7.1)
    for table in ("T", "ST"):
        for ct in (CT_JSON, CT_MSGPACK):
            call(f"get {table} {ct}", OP_GET, ct, {"table": table, "key": key})
    call("batch", OP_BATCH_GET, CT_JSON, {"requests": [
        {"table": t, "key": key} for t in ("T", "ST")]})
    call("multi", OP_GET_MULTI, CT_JSON, {"keys": [user], "features": ["last_j", "recent_j"]})
    call("mget", OP_MGET, CT_JSON, {"keys": [user], "feature": "top_j"})
    for table in TABLES:
        for ct in (CT_JSON, CT_MSGPACK):
            # every page (a page also ends on a time budget): the rows, in a set order
            decode = msgspec.msgpack.decode if ct == CT_MSGPACK else json.loads
            rows: list[bytes] = []
            cursor = None
            while True:
                name = f"scan {table} {ct}"
                call(name, OP_SCAN, ct, {"table": table, "cursor": cursor})
                page = decode(out.pop(name)[7:])
                rows += [encode_msgpack(row) for row in page["rows"]]
                cursor = page["cursor"]
                if cursor is None:
                    break
            out[f"scan {table} {ct}"] = b"".join(sorted(rows))
    return out


def snapshot_store(store: FeatureStore, tmp: Path) -> FeatureStore:
    """``store`` written as a snapshot file, read back and loaded into a new store."""
    for old in tmp.glob("*"):
        old.unlink()
    lsn = store.applied_lsn
    written = write_snapshot_file(str(tmp), lsn, store.watermark_ms, store.registry_version,
                                  store.snapshot_body())
    loaded = FeatureStore()
    loaded.load_snapshot(read_snapshot(written.path))
    return loaded


def replay_new_records(wire: Wire) -> None:
    """The WAL records written since the last call, replayed into the replica."""
    for record in wire.log.records[wire.replayed:]:
        wire.replica.replay(record)
    wire.replayed = len(wire.log.records)


# -- pushes --------------------------------------------------------------------------------

PLACES = ("j", "x", "s", "body", "user")
TRANSPORTS = ("tcp-json", "tcp-msgpack", "http-event", "http-envelope", "push-many-msgpack")


@st.composite
def pushes(draw: st.DrawFn) -> tuple[str, str, Any]:
    transport = draw(st.sampled_from(TRANSPORTS))
    place = draw(st.sampled_from(PLACES))
    value = draw(values(msgpack="msgpack" in transport))
    return transport, place, value


def push_once(wire: Wire, transport: str, event: str, body: Any) -> bool:
    """Push ``body``; True if accepted. A refusal must be a client error."""
    msgpack = "msgpack" in transport
    enc = encode_msgpack if msgpack else encode_json
    if transport.startswith("tcp"):
        op, reply = wire.frame(OP_PUSH, CT_MSGPACK if msgpack else CT_JSON,
                               enc({"event": event, "body": body}))
        assert_meant(op, reply, "push")
        if op == OP_ERROR:
            assert isinstance(reply, dict)
            code = reply.get("error", reply)
            assert code != "internal_error" and code.get("code") != "internal_error", reply
        return op == OP_PUSH
    if transport == "push-many-msgpack":
        op, reply = wire.frame(OP_PUSH_MANY, CT_MSGPACK, enc({"event": event,
                                                              "bodies": [body]}))
        assert_meant(op, reply, "push_many")
        assert op == OP_PUSH_MANY, reply  # per-body outcomes; the request itself succeeds
        assert isinstance(reply, bytes)
        outcome = json.loads(reply)
        assert all(e["error"]["code"] != "internal_error" for e in outcome["errors"]), outcome
        return bool(outcome["acks"])
    if transport == "http-event":
        status, raw = wire.post(f"/push/{event}", enc(body))
    else:
        status, raw = wire.post("/push", enc({"event": event, "data": body}))
    assert status < 500, (status, raw)
    return status == 200


_counter = iter(range(10**9))


@fuzz_settings(250)
@given(case=pushes())
def test_pushed_values_are_refused_or_kept_through_replay_and_snapshots(
        case: tuple[str, str, Any], tmp_path_factory: pytest.TempPathFactory) -> None:
    wire = WIRE.get("wire")
    if wire is None or len(wire.log.records) > 400:  # a fresh store now and then
        wire = WIRE["wire"] = Wire()
    transport, place, value = case
    user = f"u{next(_counter)}"
    if place == "body":
        event, body = "E", value
    elif place == "user":
        event, body = "E", {"user": value, "j": 1}
    elif place == "s":
        event, body = "S", {"user": user, "s": value}
    else:
        event, body = "E", {"user": user, place: value}
    accepted = push_once(wire, transport, event, body)
    wire.log.release()
    if isinstance(body, dict) and isinstance(body.get("user"), str):
        user = body["user"]
    if accepted and event == "E" and place in ("j", "x"):
        op, row = wire.frame(OP_GET, CT_JSON, json.dumps({"table": "T",
                                                          "key": [user]}).encode())
        assert op != OP_ERROR and json.loads(row)["n"] >= 1  # type: ignore[arg-type]
    live = read_all(wire, wire.store, user)
    replay_new_records(wire)
    assert read_all(wire, wire.replica, user) == live
    tmp = tmp_path_factory.getbasetemp() / "snap"
    tmp.mkdir(exist_ok=True)
    assert read_all(wire, snapshot_store(wire.store, tmp), user) == live


WIRE: dict[str, Wire] = {}


# -- read requests and other bodies ----------------------------------------------------------

READ_OPS = (OP_GET, OP_MGET, OP_GET_MULTI, OP_BATCH_GET, OP_SCAN, OP_TEST_CLOCK, OP_PUSH,
            OP_PUSH_MANY, OP_REGISTER)
HTTP_TARGETS = ("/get", "/batch_get", "/scan", "/push", "/push/E", "/push_many/E",
                "/register", "/test/clock", "/get/last_j/u1")


def request_bodies(msgpack: bool) -> st.SearchStrategy[Any]:
    """Read request bodies close to valid ones, with any value in any slot."""
    anything = values(msgpack)
    return st.one_of(
        anything,
        st.fixed_dictionaries({"table": st.sampled_from(["T", "K", "ST", "nope"]) | anything,
                               "key": anything},
                              optional={"features": st.lists(st.sampled_from(
                                  ["n", "last_j", "zz"]), max_size=3) | anything,
                                        "cursor": anything, "limit": anything,
                                        "until": anything, "splits": anything}),
        st.fixed_dictionaries({"requests": st.lists(st.fixed_dictionaries(
            {"table": st.sampled_from(["T", "K"]) | anything},
            optional={"key": anything, "entity_id": anything, "features": anything}),
            max_size=4) | anything}),
        st.fixed_dictionaries({"keys": anything, "features": anything}),
        st.fixed_dictionaries({"event": st.sampled_from(["E", "S"]) | anything,
                               "body": anything, "bodies": anything, "data": anything}),
        st.fixed_dictionaries({"now_ms": anything}),
    )


@fuzz_settings(300)
@given(op=st.sampled_from(READ_OPS), ct=st.sampled_from([CT_JSON, CT_MSGPACK]),
       data=st.data())
def test_any_request_body_is_answered_without_an_unmeant_error(op: int, ct: int,
                                                                data: st.DataObject) -> None:
    wire = WIRE.get("reads")
    if wire is None:
        wire = WIRE["reads"] = Wire()
        for i in range(3):
            wire.frame(OP_PUSH, CT_JSON, encode_json({"event": "E", "body": {
                "user": f"u{i}", "j": [i], "x": i}}))
        wire.log.release()
    kind = data.draw(st.sampled_from(["value", "raw", "odd"]))
    if kind == "value":
        body = data.draw(request_bodies(ct == CT_MSGPACK))
        payload = encode_msgpack(body) if ct == CT_MSGPACK else encode_json(body)
    elif kind == "raw":
        payload = data.draw(st.binary(max_size=64))
    else:
        payload = data.draw(ODD_JSON)
    reply_op, reply = wire.frame(op, ct, payload)
    assert_meant(reply_op, reply, f"op {op:#06x}")
    target = data.draw(st.sampled_from(HTTP_TARGETS))
    status, raw = wire.post(target, payload)
    assert_meant(status, raw, target)


# -- register payloads and expressions -------------------------------------------------------

EXPR_TOKENS = ["x", "j", "user", "s", "1", "0", "-1", "1.5", "1e400", "'a'", '"b"', "null",
               "true", "false", "and", "or", "not", "+", "-", "*", "/", "%", "==", "!=", "<",
               "<=", ">", ">=", "(", ")", ",", ".", "[", "]", "cast", "len", "abs", "lower",
               "coalesce", "if", "is", "in", "as", "f64", "i64", "str", "9" * 30, "'\\x00'",
               "\u00e9", "((((", "))))", "@", "$", "#", "\\", "'"]


@st.composite
def expressions(draw: st.DrawFn) -> str:
    tokens = draw(st.lists(st.sampled_from(EXPR_TOKENS), min_size=1, max_size=14))
    joiner = draw(st.sampled_from([" ", ""]))
    return joiner.join(tokens)


@st.composite
def register_payloads(draw: st.DrawFn) -> dict[str, Any]:
    expr = draw(expressions())
    anything = draw(values(msgpack=False))
    slot = draw(st.sampled_from(["filter", "where", "with_columns", "param", "field",
                                 "window", "keys", "default"]))
    payload = json.loads(json.dumps(REGISTER))
    agg = payload["nodes"][2]["ops"][0]["agg"]
    if slot == "filter":
        payload["nodes"][2]["ops"].insert(0, {"op": "filter", "expr": expr})
    elif slot == "where":
        agg["w"] = {"op": "count", "params": {"where": expr}}
    elif slot == "with_columns":
        payload["nodes"][2]["ops"].insert(0, {"op": "with_columns",
                                              "columns": {"c": expr}})
    elif slot == "param":
        op = draw(st.sampled_from(["most_recent_n", "reservoir_sample", "bloom_member",
                                   "event_type_mix", "distance_from_home", "top_k",
                                   "quantile", "histogram", "outlier_count", "lag"]))
        name = draw(st.sampled_from(["n", "k", "samples", "q", "max_categories",
                                     "expected_n", "target_fpr", "buckets", "sigma",
                                     "categories", "half_life", "window"]))
        agg["p"] = {"op": op, "params": {"field": "x", name: anything}}
    elif slot == "field":
        agg["f"] = {"op": "sum", "params": {"field": anything}}
    elif slot == "window":
        agg["f"] = {"op": "sum", "params": {"field": "x", "window": anything}}
    elif slot == "keys":
        payload["nodes"][2]["ops"][-1]["keys"] = anything
    else:
        payload["nodes"][0]["schema"]["defaults"] = {"x": anything}
    return payload


@fuzz_settings(300)
@given(payload=register_payloads())
def test_register_payloads_and_expressions_never_fail_unmeant(payload: dict[str, Any]) -> None:
    store = FeatureStore()
    try:
        status, body = store.register(encode_json(payload))
    except Exception as exc:  # the handler would answer 500
        raise AssertionError(f"register raised {exc!r}") from exc
    assert status != 500, body
    if status == 200:  # what registered also takes a push and answers its reads
        wire = Wire.__new__(Wire)
        wire.store = store
        wire.log = CaptureLog(store)
        store.log = wire.log  # type: ignore[assignment]
        wire.service = Service(store, test_mode=True)
        wire.frames = FrameDispatch(wire.service.frame_handlers())
        op, reply = wire.frame(OP_PUSH, CT_JSON, encode_json({"event": "E", "body": {
            "user": "u1", "j": "a", "x": 2.5}}))
        assert_meant(op, reply, "push after register")
        wire.log.release()
        for table in ("T", "K"):
            op, reply = wire.frame(OP_SCAN, CT_JSON, encode_json({"table": table}))
            assert_meant(op, reply, "scan after register")


# -- the frame splitter --------------------------------------------------------------------------

def model_split(stream: bytes, max_payload: int) -> list[tuple[int, int, bytes]]:
    """The framing rules of spec/wire.md §2.1-§2.2 over a whole stream."""
    frames: list[tuple[int, int, bytes]] = []
    pos = 0
    while len(stream) - pos >= 4:
        (length,) = struct.unpack_from(">I", stream, pos)
        if length < 3:
            frames.append((FRAME_TOO_SHORT, length, b""))
            return frames
        if length > max_payload + 3:
            frames.append((FRAME_TOO_LARGE, length, b""))
            return frames
        if len(stream) - pos < 4 + length:
            break
        op, ct = struct.unpack_from(">HB", stream, pos + 4)
        frames.append((op, ct, stream[pos + 7:pos + 4 + length]))
        pos += 4 + length
    return frames


def framed(parts: list[tuple[int, int, bytes]]) -> bytes:
    return b"".join(struct.pack(">IHB", len(p) + 3, op, ct) + p for op, ct, p in parts)


stream_parts = st.lists(st.one_of(
    st.tuples(st.integers(0, 0xFFFF), st.integers(0, 255), st.binary(max_size=40)).map(
        lambda f: framed([f])),
    st.binary(max_size=12),  # anything, including short or huge length fields
    st.sampled_from([b"\x00\x00\x00\x02", b"\x00\x00\x00\x00", b"\xff\xff\xff\xff",
                     b"\x00\x00\x00\x03\x00\x00\x01", b"\x00\x00\x00\x43"]),
), max_size=12)


@fuzz_settings(500)
@given(parts=stream_parts, cuts=st.lists(st.integers(0, 64), max_size=20),
       max_payload=st.sampled_from([0, 1, 16, 64, 4_194_304]))
def test_the_frame_splitter_follows_the_framing_rules_in_any_chunks(
        parts: list[bytes], cuts: list[int], max_payload: int) -> None:
    stream = b"".join(parts)
    splitter = FrameSplitter(max_payload)
    got: list[tuple[int, int, bytes]] = []
    pos = 0
    for cut in [*cuts, len(stream)]:
        chunk = stream[pos:pos + cut] if cut else b""
        pos += len(chunk)
        got += splitter.feed(chunk)
    got += splitter.feed(stream[pos:])
    expected = model_split(stream, max_payload)
    assert got == expected
    assert splitter.failed == bool(expected and expected[-1][0] in (FRAME_TOO_LARGE,
                                                                    FRAME_TOO_SHORT))
    if not splitter.failed:
        consumed = sum(4 + len(p) + 3 for _, _, p in expected)
        assert splitter.buffered == len(stream) - consumed

