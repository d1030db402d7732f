"""The command table's face on each transport: a request to its command's handler, a
failure to the transport's error envelope (spec/wire.md §2.4-§2.7, §3.2-§3.4, §5.1).

The server supplies one handler per command name; a handler returns its complete reply
(a frame, an HTTP response) or a :class:`PendingReply` resolved once durable. A failure it
raises is turned into the error envelope here, for both transports by :func:`as_error`:
a :class:`BeavaError` as raised, anything else is a bug, answered ``internal_error`` —
one request lost, never the connection.

A simple command (``Command.takes``, beava.protocol.commands) is served by one call of the
server's; :func:`simple_frame_handlers` and :func:`simple_http_handlers` are the one
adapter per transport that turns such calls into handlers: the body decoded per content
type (as ``takes`` asks), the call made, its value encoded as the reply (framed TCP: the
command's reply opcode, JSON or, when the command replies in kind, the request's content
type; HTTP: 200 with JSON).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from time import perf_counter
from typing import Any

from beava._fast.wire.frame_splitter import Frames, encode_frame
from beava._fast.wire.reply_values import finite_or_none
from beava.catalogue.errors import BeavaError
from beava.protocol import messages
from beava.protocol.commands import (
    BODY,
    BY_OP,
    FRAMED,
    RAW_BODY,
    ROUTE_PARAMS,
    ROUTED,
    SIMPLE,
    Command,
    bind_handlers,
)
from beava.protocol.http import HttpRequest, render_response
from beava.protocol.http_routes import resolve
from beava.protocol.messages import encode_json
from beava.protocol.reply_slots import PendingReply
from beava.protocol.request_timings import RequestTimings
from beava_client.opcodes import CONTENT_TYPES, CT_JSON, CT_MSGPACK, OP_ERROR

# handler(ct, payload) -> reply frame, or a PendingReply resolved later
FrameHandler = Callable[[int, bytes], "bytes | PendingReply"]
# push_run(frames, start, stop, replies, deadline) -> index of the first frame not handled:
# a run of OP_PUSH frames handled at once until the deadline (perf_counter; 0.0 = none),
# their replies appended to ``replies`` (the push pass)
PushRun = Callable[[Frames, int, int, bytearray, float], int]
# handler(request, route params) -> HTTP response, or a PendingReply resolved later
HttpHandler = Callable[[HttpRequest, tuple[str, ...]], "bytes | PendingReply"]

DATA_PLANE_HEADERS = (("Content-Type", "application/json"), ("X-Runtime", "hand-rolled"))
REPLAY_HEADERS = DATA_PLANE_HEADERS + (("X-Beava-Idempotent-Replay", "1"),)
UNAUTHENTICATED_HEADERS = DATA_PLANE_HEADERS + (("WWW-Authenticate", 'Bearer realm="beava"'),)
# authorize(request, scope, command name): raises unauthenticated / forbidden (protocol.auth)
Authorize = Callable[[HttpRequest, str, str], None]
# a simple command's call: given what its command ``takes``, returns the reply's value
Call = Callable[..., Any]
TOO_DEEP_TO_DECODE = "body nested too deep to decode"


def as_error(exc: Exception) -> BeavaError:
    """The wire error a failed request is answered with."""
    if isinstance(exc, BeavaError):
        return exc
    return BeavaError("internal_error", reason=f"{type(exc).__name__}: {exc}")


def error_frame(err: BeavaError) -> bytes:
    """An ERROR_RESPONSE frame (op 0xFFFF, JSON) carrying ``err``'s envelope."""
    return encode_frame(OP_ERROR, CT_JSON, encode_json(err.body()))


def json_response(status: int, body: Any, keep_alive: bool, replay: bool = False) -> bytes:
    """A data-plane response; ``body`` is JSON text or a value to encode (keys sorted)."""
    payload = body if isinstance(body, bytes) else encode_json(body)
    return render_response(status, payload, REPLAY_HEADERS if replay else DATA_PLANE_HEADERS,
                           keep_alive)


def decode_body(ct: int, payload: bytes) -> Any:
    """A request body in its content type; undecodable is ``internal_error`` (spec/wire.md
    §2.7)."""
    try:
        return messages.json_any(payload) if ct == CT_JSON else messages.msgpack_any(payload)
    except messages.DECODE_ERRORS as exc:
        raise BeavaError("internal_error", reason=str(exc)) from None
    except RecursionError:  # nested past what the decoder follows: undecodable too
        raise BeavaError("internal_error", reason=TOO_DEEP_TO_DECODE) from None


def simple_frame_handlers(calls: Mapping[str, Call]) -> dict[str, FrameHandler]:
    """Framed TCP: the handler of each simple command served there, from ``calls``
    (command name -> call, one for every simple command)."""
    bound = bind_handlers(calls, SIMPLE)
    return {c.name: _frame_adapter(c, bound[c.name]) for c in SIMPLE if c.framed}


def simple_http_handlers(calls: Mapping[str, Call]) -> dict[str, HttpHandler]:
    """HTTP data plane: the handler of each simple command routed there, from ``calls``."""
    bound = bind_handlers(calls, SIMPLE)
    return {c.name: _http_adapter(c, bound[c.name]) for c in SIMPLE if c.routed}


def _given(command: Command, ct: int, body: bytes, params: tuple[str, ...]) -> tuple[Any, ...]:
    """The arguments of a simple command's call (``Command.takes``)."""
    if command.takes == BODY:
        return (decode_body(ct, body),)
    if command.takes == RAW_BODY:
        return (body,)
    if command.takes == ROUTE_PARAMS:
        return params
    return ()


def _frame_adapter(command: Command, call: Call) -> FrameHandler:
    op = command.reply_op
    assert op is not None  # a framed command has one
    in_kind = command.replies_in_kind

    def handler(ct: int, payload: bytes) -> bytes:
        value = call(*_given(command, ct, payload, ()))
        if in_kind and ct == CT_MSGPACK:
            return encode_frame(op, CT_MSGPACK, messages.encode_msgpack(finite_or_none(value)))
        return encode_frame(op, CT_JSON, encode_json(value))

    return handler


def _http_adapter(command: Command, call: Call) -> HttpHandler:
    def handler(request: HttpRequest, params: tuple[str, ...]) -> bytes:
        value = call(*_given(command, CT_JSON, request.body, params))
        return json_response(200, value, request.keep_alive)

    return handler


class FrameDispatch:
    """Framed TCP: ``routes`` maps each served opcode to (content types accepted, handler).
    The connection looks a frame up there itself (no call in between on the push path)
    and turns to :meth:`refuse` when it is not served and :meth:`failed` when it fails.
    ``push_run``, when given, takes runs of OP_PUSH frames in place of the push handler
    (which it falls back to for anything unusual)."""

    __slots__ = ("routes", "push_run")

    def __init__(self, handlers: Mapping[str, FrameHandler],
                 push_run: PushRun | None = None) -> None:
        self.push_run = push_run
        bound = bind_handlers(handlers, FRAMED)
        self.routes: dict[int, tuple[frozenset[int], FrameHandler]] = {
            c.op: (c.content_types, bound[c.name]) for c in FRAMED if c.op is not None}

    @staticmethod
    def failed(exc: Exception) -> bytes:
        return error_frame(as_error(exc))

    @staticmethod
    def refuse(op: int, ct: int) -> bytes:
        """The reply to a frame that no handler takes (spec/wire.md §2.3, §2.5)."""
        command = BY_OP.get(op)
        if command is None:
            err = BeavaError("unknown_op", op=op,
                             message=f"opcode 0x{op:04x} is not recognised by this server")
        elif not command.implemented:
            err = BeavaError("op_not_implemented", op=op,
                             message=f"opcode 0x{op:04x} ({command.name}) is not yet implemented")
        elif ct not in CONTENT_TYPES:
            err = BeavaError("unsupported_content_type",
                             message=f"unsupported content_type: 0x{ct:02x}")
        else:
            err = BeavaError("unsupported_content_type",
                             message=f"unsupported content_type for {command.name}: 0x{ct:02x}")
        return error_frame(err)


class HttpDispatch:
    """HTTP data plane: route, hold a read behind the connection's unapplied push
    (``wait_applied``), call the handler; errors become JSON responses. ``authorize``,
    when tokens are configured, checks each request against its command's scope. Each
    routed request is timed into its command's histogram in ``timings``, from the access
    check to its response (a request that matches no route is not)."""

    def __init__(self, handlers: Mapping[str, HttpHandler],
                 wait_applied: Callable[[], None], authorize: Authorize | None = None,
                 timings: RequestTimings | None = None) -> None:
        self._handlers = bind_handlers(handlers, ROUTED)
        self._wait_applied = wait_applied
        self._authorize = authorize
        self._timings = timings if timings is not None else RequestTimings()

    def respond(self, request: HttpRequest) -> bytes | PendingReply:
        try:
            command, params = resolve(request.method, request.target)
        except Exception as exc:
            return _error_response(as_error(exc), request)
        began = perf_counter()
        reply: bytes | PendingReply
        try:
            if self._authorize is not None and command.scope is not None:
                self._authorize(request, command.scope, command.name)
            if command.reads_state and request.after_pending:
                self._wait_applied()
            reply = self._handlers[command.name](request, params)
        except Exception as exc:  # a bug must cost one request, never the connection
            reply = _error_response(as_error(exc), request)
        self._timings.finish(self._timings.by_name[command.name], began, reply)
        return reply

    @staticmethod
    def protocol_error() -> bytes:
        """The answer to an unparseable request, sent before closing (spec/wire.md §3.1)."""
        return json_response(400, BeavaError("http_protocol_error").body(), keep_alive=False)


def _error_response(err: BeavaError, request: HttpRequest) -> bytes:
    if err.status == 401:
        return render_response(401, encode_json(err.body()), UNAUTHENTICATED_HEADERS,
                               request.keep_alive)
    return json_response(err.status, err.body(), request.keep_alive)
