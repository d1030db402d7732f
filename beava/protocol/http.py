"""HTTP/1.1 transport over httptools, shared by the data plane and the admin sidecar.

spec/wire.md §3.1: keep-alive, pipelining (answers in request order), Content-Length and
chunked bodies, ``Expect: 100-continue``, header/body limits, ``Connection: close``.
The protocol parses; a ``respond(request)`` callable turns each complete request into one
full response (status line, headers, body).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterable
from types import MappingProxyType

import httptools

from beava.catalogue.errors import BeavaError
from beava.protocol.connection import HIGH_WATER, LOW_WATER, TURN_SECONDS, ServerConnection
from beava.protocol.messages import encode_json
from beava.protocol.read_gate import PARKED, SLICED, WRITES
from beava.protocol.reply_slots import PendingReply
from beava.protocol.server_state import ServerState

MAX_HEADER_BYTES = 8 * 1024
MAX_HEADER_LINES = 64
MAX_BODY_BYTES = 4 * 1024 * 1024
# Bounded turns, as on framed TCP: the pipelined requests of one read are answered until
# TURN_BYTES of responses or TURN_SECONDS of work; the rest wait, unread input too, for this
# connection's next round of the server's turn scheduler. A client that pipelines reads of
# a large row and never reads the answers used to have a whole read's worth answered at
# once, as long as the kernel took them (tens of ms).
TURN_BYTES = 256 * 1024

_REASONS = MappingProxyType({
    401: "Unauthorized",
    100: "Continue", 200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found",
    405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict",
    415: "Unsupported Media Type",
    500: "Internal Server Error", 501: "Not Implemented", 503: "Service Unavailable"})

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
ERROR_HEADERS = (("Content-Type", "application/json"),)
# After refusing a connection: how long its input is still read (and dropped) before close.
REFUSE_LINGER_SECONDS = 1.0


class HttpRequest:
    """One parsed request; ``headers`` has lower-case names (last occurrence wins)."""

    __slots__ = ("method", "target", "headers", "body", "keep_alive", "after_pending")

    def __init__(self, method: str, target: str, headers: dict[str, str], body: bytes,
                 keep_alive: bool, after_pending: bool = False) -> None:
        self.method = method
        self.target = target
        self.headers = headers
        self.body = body
        self.keep_alive = keep_alive
        # an earlier request on this connection still waits for durability
        self.after_pending = after_pending


def render_response(status: int, body: bytes, headers: Iterable[tuple[str, str]],
                    keep_alive: bool, include_body: bool = True) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}"]
    lines.extend(f"{name}: {value}" for name, value in headers)
    lines.append(f"Content-Length: {len(body)}")
    lines.append("Connection: keep-alive" if keep_alive else "Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + body if include_body else head


class HttpLimitError(Exception):
    """A request broke a size limit (answered like a parse error)."""


# respond(request) -> response bytes, or a PendingReply resolved once durable
Responder = Callable[[HttpRequest], "bytes | PendingReply"]
# protocol_error() -> response bytes for an unparseable request (sent before closing)
ProtocolErrorResponder = Callable[[], bytes]


class HttpProtocol(ServerConnection):
    """httptools callbacks assemble requests; each complete one is answered in order."""

    def __init__(self, respond: Responder, protocol_error: ProtocolErrorResponder,
                 state: ServerState, *, limited: bool = True) -> None:
        super().__init__(state, limited=limited)
        self._respond = respond
        self._protocol_error = protocol_error
        self._parser = httptools.HttpRequestParser(self)
        self._parked: deque[HttpRequest] = deque()  # parsed, answered in a later turn
        self._unflushed = 0  # response bytes queued since the last write
        self._began = False  # a request began in the bytes being parsed
        self._in_message = False  # a request has begun and is not complete yet
        self._over_budget = False  # a request's head would pass the server's budget
        self._turn_bytes = 0  # response bytes built in this turn
        self._turn_end = 0.0  # perf_counter deadline of this turn
        self._turn_scheduled = False
        self._reset_message()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.set_write_buffer_limits(high=HIGH_WATER, low=LOW_WATER)  # type: ignore[attr-defined]
        super().connection_made(transport)

    def pause_writing(self) -> None:
        self.reads.pause(WRITES)

    def resume_writing(self) -> None:
        if self.reads.holds(WRITES):
            self.reads.resume(WRITES)
            self._new_turn(time.perf_counter() + TURN_SECONDS)
            self._answer_parked(limited=True)
            self.flush_ready()

    def _answer(self, request: HttpRequest) -> None:
        last = self._last_pending  # as of answering: parked requests are answered later
        request.after_pending = last is not None and last.data is None
        response = self._respond(request)
        if type(response) is PendingReply and response.data is None:
            response.conn = self
            self._last_pending = response
            if response.holds_all:
                self.reads.pause(SLICED)  # later requests wait for it (parked)
        elif type(response) is bytes:
            self._unflushed += len(response)
            self._turn_bytes += len(response)
        self._out.append(response)
        if self._unflushed > HIGH_WATER:  # write now: the transport may ask us to pause
            self._unflushed = 0
            self._write_ready()

    def _answer_parked(self, *, limited: bool) -> None:
        """Answer parked requests in order (``limited``: until writes pause again or the
        turn is spent; what is left then waits for a later turn)."""
        parked = self._parked
        while parked and not (limited and self._must_wait()):
            self._answer(parked.popleft())
        if not parked:
            self.reads.resume(PARKED)
        elif limited and not self.writes_paused() and not self.held_back():
            self._schedule_turn()

    def _must_wait(self) -> bool:
        """A complete request is not answered now: writes are paused, an earlier request is
        served in slices, or this turn has used its budget."""
        return (self.writes_paused() or self.held_back() or self._turn_bytes >= TURN_BYTES
                or time.perf_counter() > self._turn_end)

    def _new_turn(self, deadline: float) -> None:
        self._turn_bytes = 0
        self._turn_end = deadline

    def _schedule_turn(self) -> None:
        if not self._turn_scheduled:
            self._turn_scheduled = True
            self.state.turns.add(self)

    def next_turn(self, deadline: float) -> None:
        """Answer requests left over from this connection's previous turn."""
        self._turn_scheduled = False
        if self._transport is None or not self._parked:
            return
        self._new_turn(deadline)
        self._answer_parked(limited=True)
        self.flush_ready()

    def _reset_message(self) -> None:
        self._url = bytearray()
        self._headers: dict[str, str] = {}
        self._header_bytes = 0
        self._header_lines = 0
        self._body = bytearray()

    # asyncio.Protocol -------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self._began = False
        self._new_turn(time.perf_counter() + TURN_SECONDS)
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            if self._over_budget:
                self.refuse(self.busy_error())
                return
            if not self._closing:
                self._out.append(self._protocol_error())
                self._closing = True
        self.received(self._began, self._in_message)
        self.flush_ready()

    def refuse(self, err: BeavaError) -> None:
        """Answer ``err`` (``Connection: close``), send FIN, then close after a moment in
        which further input is read and dropped (closing with unread input would reset the
        connection and could destroy the answer)."""
        self._closing = True
        self._parked.clear()
        self._out.append(render_response(err.status, encode_json(err.body()),
                                          ERROR_HEADERS, keep_alive=False))
        transport = self._write_ready()
        if transport is None:
            return
        self.reads.linger()
        if transport.can_write_eof():
            transport.write_eof()
        asyncio.get_running_loop().call_later(REFUSE_LINGER_SECONDS, transport.close)

    def busy(self) -> bool:
        return bool(self._parked) or self.writes_paused() or super().busy()

    def flush_ready(self) -> None:
        """Write the responses that are ready, in request order."""
        self._unflushed = 0
        transport = self._write_ready()
        if self.reads.holds(SLICED) and not self.held_back():
            # the request served in slices is answered: the ones parked behind it now
            self.reads.resume(SLICED)
            if not self.writes_paused():
                self._new_turn(time.perf_counter() + TURN_SECONDS)
                self._answer_parked(limited=True)
                transport = self._write_ready()
        if transport is not None and self._closing and not self._out and not self._parked:
            transport.close()

    def drain(self) -> bool:
        """Shutdown: answer the requests parked by write backpressure now."""
        if self._parked:
            self._answer_parked(limited=False)
            self.flush_ready()
        return False

    def close(self) -> None:
        """Close once every queued response has been written."""
        self._closing = True
        if self._transport is not None and not self._out and not self._parked:
            self._transport.close()

    # httptools callbacks ----------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._began = self._in_message = True
        self._reset_message()

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._header_bytes += len(url)
        if self._header_bytes > MAX_HEADER_BYTES:
            raise HttpLimitError("request line too long")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_lines += 1
        self._header_bytes += len(name) + len(value) + 4
        if self._header_lines > MAX_HEADER_LINES or self._header_bytes > MAX_HEADER_BYTES:
            raise HttpLimitError("header block too large")
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        length = self._headers.get("content-length")
        body = 0
        if length is not None and length.strip().isdigit():
            body = int(length)
            if body > MAX_BODY_BYTES:
                raise HttpLimitError("body too large")
        elif "chunked" in self._headers.get("transfer-encoding", "").lower():
            body = MAX_BODY_BYTES  # its length is not known: it holds as much as one may
        # the request holds its head and its body from now until it is complete
        if not self.hold_request(self._header_bytes + body):
            self._over_budget = True
            raise HttpLimitError("server busy")
        if self._headers.get("expect", "").lower() == "100-continue" and not self._closing:
            self._out.append(CONTINUE)
            self.flush_ready()

    def on_body(self, body: bytes) -> None:
        self._body += body
        if len(self._body) > MAX_BODY_BYTES:
            raise HttpLimitError("body too large")

    def on_message_complete(self) -> None:
        self._in_message = False
        self.hold_request(0)
        if self._closing:
            return
        keep_alive = self._parser.should_keep_alive()
        request = HttpRequest(self._parser.get_method().decode("latin-1"),
                              self._url.decode("latin-1"), self._headers, bytes(self._body),
                              keep_alive)
        if self._parked or self._must_wait():
            self._parked.append(request)
            self.reads.pause(PARKED)  # read nothing more until they are answered
            if not self.writes_paused() and not self.held_back():
                self._schedule_turn()
        else:
            self._answer(request)
        if not keep_alive:
            self._closing = True
