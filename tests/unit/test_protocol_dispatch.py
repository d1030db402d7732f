"""The command table on the wire, in-process: every framed opcode and every HTTP route
reaches its handler through the connection protocols; refusals and failures come back
as the spec's error envelopes (spec/wire.md §2.4-§2.7, §3.4, §5.1); reads wait behind
an unapplied push exactly for the commands marked as reading state (§2.6)."""

from __future__ import annotations

import json
import struct

import pytest

from beava._fast.wire.frame_splitter import encode_frame
from beava.catalogue.errors import BeavaError
from beava.protocol.commands import FRAMED, ROUTED, Command, HandlerTableError
from beava.protocol.dispatch import FrameDispatch, FrameHandler, HttpDispatch, HttpHandler
from beava.protocol.http import HttpProtocol, HttpRequest
from beava.protocol.reply_slots import PendingReply
from beava.protocol.server_state import ServerState
from beava.protocol.tcp import FramedTcpProtocol
from beava_client.opcodes import CT_JSON, CT_MSGPACK, OP_ERROR
from tests.unit.fake_transport import FakeTransport, frame, split_frames

Calls = list[tuple[str, object, object]]


def frame_handlers(calls: Calls) -> dict[str, FrameHandler]:
    """One recording handler per framed command; each answers its reply op and its name."""

    def handler_for(command: Command) -> FrameHandler:
        def handle(ct: int, payload: bytes) -> bytes:
            calls.append((command.name, ct, payload))
            assert command.reply_op is not None
            return encode_frame(command.reply_op, CT_JSON, command.name.encode())
        return handle

    return {c.name: handler_for(c) for c in FRAMED}


def tcp_connection(handlers: dict[str, FrameHandler], state: ServerState | None = None
                   ) -> tuple[FramedTcpProtocol, FakeTransport]:
    conn = FramedTcpProtocol(FrameDispatch(handlers), 1 << 20, state or ServerState())
    transport = FakeTransport()
    conn.connection_made(transport)
    return conn, transport


def error_body(reply: bytes) -> dict[str, object]:
    ((op, ct, payload),) = split_frames(reply)
    assert (op, ct) == (OP_ERROR, CT_JSON)
    body: dict[str, object] = json.loads(payload)
    return body


# --- framed TCP -----------------------------------------------------------------------------


@pytest.mark.parametrize("command", FRAMED, ids=lambda c: c.name)
def test_every_opcode_reaches_its_handler(command: Command) -> None:
    calls: Calls = []
    conn, transport = tcp_connection(frame_handlers(calls))
    ct = 0x07 if command.name == "ping" else max(command.content_types)  # ping ignores ct
    assert command.op is not None
    conn.data_received(frame(command.op, ct, b"payload of " + command.name.encode()))
    assert calls == [(command.name, ct, b"payload of " + command.name.encode())]
    assert split_frames(transport.take()) == [(command.reply_op, CT_JSON, command.name.encode())]


def test_refused_frames_are_answered_and_the_connection_stays_open() -> None:
    calls: Calls = []
    conn, transport = tcp_connection(frame_handlers(calls))
    conn.data_received(frame(0x0011, CT_JSON, b"{}"))
    assert transport.take() == encode_frame(OP_ERROR, CT_JSON, (
        b'{"error":{"code":"op_not_implemented","message":"opcode 0x0011 (push_sync) is not '
        b'yet implemented","op":17}}'))
    for op in (0x0003, 0x0013, 0x0023, 0x0027, 0x0030, 0x0031, 0x0045, 0xFFFE, 0xFFFF):
        conn.data_received(frame(op, CT_JSON, b"{}"))
        assert error_body(transport.take()) == {"error": {
            "code": "unknown_op", "op": op,
            "message": f"opcode 0x{op:04x} is not recognised by this server"}}
    conn.data_received(frame(0x0010, 0x03, b"{}"))
    assert error_body(transport.take()) == {"error": {
        "code": "unsupported_content_type", "message": "unsupported content_type: 0x03"}}
    conn.data_received(frame(0x0001, CT_MSGPACK, b"\x80"))
    assert error_body(transport.take()) == {"error": {
        "code": "unsupported_content_type",
        "message": "unsupported content_type for register: 0x02"}}
    assert calls == []
    conn.data_received(frame(0x0000, 0xEE))
    assert split_frames(transport.take()) == [(0x0000, CT_JSON, b"ping")]
    assert not transport.closed and transport.reading


async def test_framing_errors_are_answered_then_the_connection_closes() -> None:
    conn, transport = tcp_connection(frame_handlers([]))  # max payload 1 MiB
    conn.data_received(frame(0x0000, CT_JSON) + struct.pack(">IHB", (1 << 20) + 4, 0x0010, 1))
    assert error_body(transport.take()[len(frame(0x0000, CT_JSON, b"ping")):]) == {"error": {
        "code": "frame_too_large", "declared": (1 << 20) + 4, "limit": (1 << 20) + 3,
        "message": f"declared frame length {(1 << 20) + 4} exceeds limit {(1 << 20) + 3}"}}
    assert transport.eof
    conn, transport = tcp_connection(frame_handlers([]))
    conn.data_received(b"\x00\x00\x00\x02\x00\x00")
    assert error_body(transport.take()) == {"error": {
        "code": "frame_error", "message": "declared frame length 2 is below the minimum 3"}}
    assert transport.eof


def test_handler_failures_become_error_frames() -> None:
    def rejects(ct: int, payload: bytes) -> bytes:
        raise BeavaError("event_not_found", top={"registry_version": 3}, reason="no Txn")

    def breaks(ct: int, payload: bytes) -> bytes:
        raise KeyError("x")

    handlers = frame_handlers([])
    handlers["push"], handlers["get"] = rejects, breaks
    conn, transport = tcp_connection(handlers)
    conn.data_received(frame(0x0010, CT_JSON, b"{}") + frame(0x0020, CT_JSON, b"{}")
                       + frame(0x0000, CT_JSON))
    replies = split_frames(transport.take())
    assert [json.loads(payload) for _, _, payload in replies[:2]] == [
        {"error": {"code": "event_not_found", "reason": "no Txn"}, "registry_version": 3},
        {"error": {"code": "internal_error", "reason": "KeyError: 'x'"}}]
    assert [op for op, _, _ in replies] == [OP_ERROR, OP_ERROR, 0x0000]


@pytest.mark.parametrize("command", [c for c in FRAMED if c.name != "push"],
                         ids=lambda c: c.name)
def test_only_state_reads_wait_behind_an_unapplied_push(command: Command) -> None:
    calls: Calls = []
    handlers = frame_handlers(calls)
    slot = PendingReply()
    handlers["push"] = lambda ct, payload: slot
    state = ServerState()
    conn, transport = tcp_connection(handlers, state)
    assert command.op is not None
    conn.data_received(frame(0x0010, CT_JSON, b"{}") + frame(command.op, CT_JSON, b"{}"))
    assert [name for name, _, _ in calls] == ([] if command.reads_state else [command.name])
    assert transport.take() == b""  # nothing overtakes the pending ack
    assert transport.reading is not command.reads_state  # a parked read stops intake
    slot.resolve(b"<ack>")
    assert state.dirty == [conn]
    state.flush_dirty()
    assert [name for name, _, _ in calls] == [command.name]
    reply = encode_frame(command.reply_op or 0, CT_JSON, command.name.encode())
    assert transport.take() == b"<ack>" + reply
    assert transport.reading


def test_a_missing_or_stray_handler_fails_at_construction() -> None:
    handlers = frame_handlers([])
    del handlers["batch_get"]
    with pytest.raises(HandlerTableError, match="batch_get"):
        FrameDispatch(handlers)
    with pytest.raises(HandlerTableError, match="legacy_get"):
        FrameDispatch({**frame_handlers([]), "legacy_get": lambda ct, payload: b""})
    with pytest.raises(HandlerTableError, match="health"):
        HttpDispatch({name: h for name, h in http_handlers([]).items() if name != "health"},
                     lambda: None)


# --- HTTP data plane ------------------------------------------------------------------------


def http_handlers(calls: Calls) -> dict[str, HttpHandler]:
    def handler_for(name: str) -> HttpHandler:
        def handle(request: HttpRequest, params: tuple[str, ...]) -> bytes:
            calls.append((name, request.target, params))
            return b"<response of " + name.encode() + b">"
        return handle

    return {c.name: handler_for(c.name) for c in ROUTED}


def request(method: str, target: str, *, after_pending: bool = False,
            keep_alive: bool = True) -> HttpRequest:
    return HttpRequest(method, target, {}, b"", keep_alive, after_pending)


def sample_targets(command: Command) -> list[tuple[str, tuple[str, ...]]]:
    """(target, route params) for each path of ``command``."""
    targets: list[tuple[str, tuple[str, ...]]] = [(path, ()) for path in command.http_paths]
    params = ("Txn",) if command.http_params == 1 else ("amount", "u/1")
    targets += [(prefix + "/".join(params), params) for prefix in command.http_prefixes]
    return targets


@pytest.mark.parametrize("command", ROUTED, ids=lambda c: c.name)
def test_every_route_reaches_its_handler(command: Command) -> None:
    calls: Calls = []
    dispatch = HttpDispatch(http_handlers(calls), lambda: None)
    assert command.http_method is not None
    for target, params in sample_targets(command):
        response = dispatch.respond(request(command.http_method, target + "/?q=1"))
        assert response == b"<response of " + command.name.encode() + b">"
        assert calls.pop() == (command.name, target + "/?q=1", params)


@pytest.mark.parametrize("command", ROUTED, ids=lambda c: c.name)
def test_only_state_reads_wait_for_the_connection_s_pushes(command: Command) -> None:
    waits: list[str] = []
    dispatch = HttpDispatch(http_handlers([]), lambda: waits.append("wait"))
    assert command.http_method is not None
    target, _ = sample_targets(command)[0]
    dispatch.respond(request(command.http_method, target))
    assert waits == []
    dispatch.respond(request(command.http_method, target, after_pending=True))
    assert waits == (["wait"] if command.reads_state else [])


def _response(status: str, body: bytes, connection: str = "keep-alive") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
            f"X-Runtime: hand-rolled\r\nContent-Length: {len(body)}\r\n"
            f"Connection: {connection}\r\n\r\n").encode() + body


def test_routing_errors_and_failures_are_json_envelopes() -> None:
    handlers = http_handlers([])

    def breaks(request: HttpRequest, params: tuple[str, ...]) -> bytes:
        raise ValueError("boom")

    def rejects(request: HttpRequest, params: tuple[str, ...]) -> bytes:
        raise BeavaError("reset_disabled_in_production", reason="test mode only")

    handlers["get"], handlers["reset"] = breaks, rejects
    dispatch = HttpDispatch(handlers, lambda: None)
    assert dispatch.respond(request("GET", "/nope/?x=1")) == _response(
        "404 Not Found", b'{"error":{"code":"not_found","path":"/nope/?x=1"}}')
    assert dispatch.respond(request("HEAD", "/ping", keep_alive=False)) == _response(
        "405 Method Not Allowed",
        b'{"error":{"code":"method_not_allowed","method":"HEAD","path":"/ping"}}', "close")
    assert dispatch.respond(request("POST", "/get")) == _response(
        "500 Internal Server Error",
        b'{"error":{"code":"internal_error","reason":"ValueError: boom"}}')
    assert dispatch.respond(request("POST", "/reset")) == _response(
        "403 Forbidden",
        b'{"error":{"code":"reset_disabled_in_production","reason":"test mode only"}}')
    assert dispatch.protocol_error() == _response(
        "400 Bad Request", b'{"error":{"code":"http_protocol_error"}}', "close")


def test_http_connection_holds_a_read_behind_its_pending_push() -> None:
    """Through HttpProtocol: the push's response is deferred, the read behind it asks to
    wait, and the answers leave in request order once the push is applied."""
    slot = PendingReply()
    seen: list[bool] = []
    handlers = http_handlers([])
    handlers["push_event"] = lambda request, params: slot

    def get(request: HttpRequest, params: tuple[str, ...]) -> bytes:
        seen.append(request.after_pending)
        return b"<row>"

    handlers["get"] = get
    waits: list[int] = []
    dispatch = HttpDispatch(handlers, lambda: waits.append(1))
    state = ServerState()
    conn = HttpProtocol(dispatch.respond, dispatch.protocol_error, state)
    transport = FakeTransport()
    conn.connection_made(transport)
    conn.data_received(b"POST /push/Txn HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"
                       b"POST /get HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
    assert seen == [True] and waits == [1]
    assert transport.take() == b""
    slot.resolve(b"<ack>")
    state.flush_dirty()
    assert transport.take() == b"<ack><row>"
    assert state.connections == {conn}
    conn.data_received(b"GET /ready HTTP/1.1\r\n\r\n")
    assert transport.take() == b"<response of ready>"


def test_unparseable_http_is_answered_then_closed() -> None:
    dispatch = HttpDispatch(http_handlers([]), lambda: None)
    conn = HttpProtocol(dispatch.respond, dispatch.protocol_error, ServerState())
    transport = FakeTransport()
    conn.connection_made(transport)
    conn.data_received(b"NOT HTTP AT ALL\r\n\r\n")
    assert transport.take() == dispatch.protocol_error()
    assert transport.closed
