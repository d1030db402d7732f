"""What every server connection shares, framed TCP and HTTP alike.

Each connection belongs to its server's :class:`ServerState`: to its connection set while it
is open (shutdown walks it: ``stop_reading``, then ``drain`` until nothing waits, then
``close``). Whether its socket is read is up to its :class:`ReadGate` alone, which knows
every reason it is not (the server's intake gate among them). It queues its replies in
arrival order in ``_out``, where an LSN tag or a :class:`PendingReply` holds back the
replies behind it (``beava.protocol.reply_slots``).
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from beava.catalogue.errors import BeavaError
from beava.protocol.read_gate import INTAKE, WRITES, ReadGate
from beava.protocol.reply_slots import PendingReply, Queued, fail_acks, take_ready
from beava.protocol.server_state import ServerState

if TYPE_CHECKING:  # ssl is imported only when TLS is configured
    import ssl

# Replies not yet taken by the peer: above HIGH_WATER a connection stops reading, and builds
# no more replies for requests it already read, until the backlog drains below LOW_WATER.
HIGH_WATER = 4 * 1024 * 1024
LOW_WATER = 1024 * 1024
# Bounded turns: a read brings at most TURN_SECONDS of work at once; what is left waits in
# the connection and is run by the server's turn scheduler, a bounded round per loop
# iteration, round-robin over the busy connections (beava.protocol.server_state). Between
# two rounds the loop polls the sockets, so a lone GET on another connection waits about
# one round, not behind every deep pipeline.
TURN_SECONDS = 0.0005


class ServerConnection(asyncio.Protocol, ABC):
    """Base of the connection protocols: connection-set membership, reply queue, stop."""

    def __init__(self, state: ServerState, *, limited: bool = True) -> None:
        self.state = state
        self._limited = limited  # counts against state.limits.max_connections
        self._counted = False
        self._buffered = 0  # bytes its incomplete request holds of state.buffered
        self._last_read = 0.0  # loop time of the last bytes received (or of the connect)
        self._request_since: float | None = None  # first byte of an incomplete request
        self._stalled_since: float | None = None  # replies not taken by the peer since
        self._transport: asyncio.Transport | None = None
        self.reads = ReadGate()  # pauses and resumes the transport's reading, and knows why
        self._out: deque[Queued] = deque()
        self._last_pending: PendingReply | None = None
        self._tag: list[int] | None = None  # the newest LSN tag queued in _out
        self._closing = False  # a fatal protocol error or shutdown: read nothing more
        self.dirty = False  # in state.dirty, waiting for flush_dirty
        self.held = False  # in state.held, waiting for an applied LSN

    def hold(self, lsn: int) -> None:
        """The reply about to be queued may go out only once ``lsn`` is applied: raise the
        newest tag when its run waits in the same pending WAL batch, else queue a new tag."""
        tag = self._tag
        if tag is not None and tag[0] > self.state.acks.sealed_lsn:
            tag[0] = lsn
            return
        self._tag = tag = [lsn]
        self._out.append(tag)
        if not self.held:
            self.held = True
            self.state.held.append(self)

    def fail_held(self, ack_op: int, first_lsn: int, error: bytes) -> None:
        """The pushes from ``first_lsn`` on were never written (a full disk): release the
        tags waiting for them and turn their queued ack frames into ``error``."""
        failing = False
        queued: list[Queued] = []
        for item in self._out:
            if type(item) is list:
                if item[0] >= first_lsn:
                    failing = True
                    item[0] = 0
            elif failing and type(item) is bytes:
                item = fail_acks(item, ack_op, first_lsn, error)
            queued.append(item)
        self._out.clear()
        self._out.extend(queued)

    def hold_again(self) -> None:
        """After a flush: stay in ``state.held`` while the newest tag is not released."""
        tag = self._tag
        if tag is not None and tag[0] > self.state.acks.applied_lsn and not self.held:
            self.held = True
            self.state.held.append(self)

    def waiting(self) -> bool:
        """True while a reply of this connection waits for durability."""
        last = self._last_pending
        tag = self._tag
        return ((last is not None and last.data is None)
                or (tag is not None and tag[0] > self.state.acks.applied_lsn))

    def held_back(self) -> bool:
        """True while a request still being evaluated holds back every later one."""
        last = self._last_pending
        return last is not None and last.holds_all and last.data is None

    def admit(self) -> bool:
        """Count this connection against ``connections.max`` (from its accept: a TLS
        listener calls this before the handshake); False when the cap is reached."""
        state = self.state
        if not self._limited or self._counted:
            return True
        state.start_sweeps()
        limit = state.limits.max_connections
        if 0 < limit <= state.counted:
            return False
        state.counted += 1
        self._counted = True
        return True

    def release(self) -> None:
        """Stop counting this connection (it is gone)."""
        if self._counted:
            self._counted = False
            self.state.counted -= 1

    def hold_request(self, size: int) -> bool:
        """This connection's incomplete request now holds ``size`` bytes (0: none). False,
        holding nothing, when that would pass the server's budget for incomplete requests
        (the caller answers ``server_busy``)."""
        state = self.state
        total = state.buffered - self._buffered + size
        limit = state.limits.request_buffer_bytes
        if size > self._buffered and 0 < limit < total:
            state.buffered -= self._buffered
            self._buffered = 0
            return False
        state.buffered = total
        self._buffered = size
        return True

    def busy_error(self) -> BeavaError:
        """``server_busy``: a request that would pass the budget of incomplete requests."""
        limit = self.state.limits.request_buffer_bytes
        return BeavaError("server_busy", limit=limit,
                          message=f"incomplete requests already hold {self.state.buffered} "
                                  f"of the server's {limit} bytes for them; retry later")

    @property
    def data_plane(self) -> bool:
        """A data-plane connection (HTTP, framed TCP), not the admin sidecar's: counted
        against connections.max, timed out, and not read while the intake gate is shut (the
        sidecar keeps answering /health and /metrics during WAL backpressure)."""
        return self._limited

    def handshake_ended(self, waiter: asyncio.Future[None]) -> None:
        """TLS: the handshake is over; unless it made this connection, it is gone."""
        if not waiter.cancelled():
            waiter.exception()  # a failed handshake is the TLS layer's to report
        if self._transport is None:
            self.release()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        state = self.state
        state.connections.add(self)
        self._last_read = time.monotonic()
        if state.intake.shut and self.data_plane:
            self.reads.pause(INTAKE)
        self.reads.attach(transport)  # type: ignore[arg-type]
        if not self.admit():
            self._closing = True
            self.refuse(BeavaError("too_many_connections", limit=state.limits.max_connections))

    def received(self, request_started: bool, request_open: bool) -> None:
        """After bytes arrived: ``request_started`` when a request began in them,
        ``request_open`` while one is still incomplete (the request timeout runs from its
        first byte)."""
        now = self._last_read = time.monotonic()
        if not request_open:
            self._request_since = None
        elif request_started or self._request_since is None:
            self._request_since = now

    def check_timeouts(self, now: float) -> None:
        """The request and idle timeouts (``ServerState`` sweeps call this)."""
        if not self._limited or self._closing or self._transport is None:
            return
        limits = self.state.limits
        if self.writes_paused():  # the peer takes none of its replies
            if self._stalled_since is None:
                self._stalled_since = now
            elif 0 < limits.idle_timeout_s <= now - self._stalled_since:
                self._closing = True
                self._transport.abort()  # its unsent replies go: it was not reading them
                return
        else:
            self._stalled_since = None
        if self.reads.paused() or self.busy():
            # the server, not the client, holds things up: both clocks start again
            self._last_read = now
            if self._request_since is not None:
                self._request_since = now
            return
        since = self._request_since
        if since is not None:
            if 0 < limits.request_timeout_s <= now - since:
                self._closing = True
                self.refuse(BeavaError(
                    "request_timeout", limit_ms=int(limits.request_timeout_s * 1000),
                    message="request not complete within the request timeout"))
        elif 0 < limits.idle_timeout_s <= now - self._last_read:
            self.close()

    def busy(self) -> bool:
        """True while replies are queued or requests wait to be answered."""
        return bool(self._out) or self.waiting()

    def writes_paused(self) -> bool:
        """True while the transport holds more unsent replies than its high-water mark."""
        return self.reads.holds(WRITES)

    @abstractmethod
    def refuse(self, err: BeavaError) -> None:
        """Answer ``err`` and close (a connection over the cap, a request too slow)."""

    def connection_lost(self, exc: Exception | None) -> None:
        self.state.connections.discard(self)
        self.release()
        self.hold_request(0)
        self.reads.detach()
        self._transport = None

    def stop_reading(self) -> None:
        """Graceful shutdown: answer what was fully received; later bytes are read and
        dropped, so that closing the socket does not reset it (a close with unread input
        sends RST, which can destroy replies the client has not read yet)."""
        self._closing = True
        self.reads.linger()

    def _write_ready(self) -> asyncio.Transport | None:
        """Write the queued replies that are ready (up to the first pending one), in order.
        Returns the transport, or None once the connection is lost."""
        ready = take_ready(self._out, self.state.acks.applied_lsn)
        transport = self._transport
        if transport is not None and ready:
            transport.write(ready)
        return transport

    @abstractmethod
    def flush_ready(self) -> None:
        """Write the replies that are ready, in order (and whatever that lets go on)."""

    @abstractmethod
    def drain(self) -> bool:
        """Shutdown: answer every received request that does not wait for durability now;
        True while some still wait."""

    @abstractmethod
    def close(self) -> None:
        """Close once every queued reply has been written."""


def tls_accept(make: Callable[[], ServerConnection], context: ssl.SSLContext
               ) -> asyncio.BaseProtocol:
    """The protocol a TLS listener's accepted connection starts with: its TLS layer, which
    makes the connection ``make`` returns once the handshake is done.

    The connection counts against ``connections.max`` from the accept, so over the cap it is
    closed at once (no answer can be sent before a handshake); its handshake must end within
    the request timeout (asyncio's 60 s when that is off), and one that fails or is
    abandoned stops counting then. Counted only after their handshake, as asyncio's TLS
    servers count them, 80 peers that sent nothing to a server capped at 8 were all still
    open 7 s later."""
    conn = make()
    if not conn.admit():
        return _Closed()
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()
    waiter.add_done_callback(conn.handshake_ended)
    timeout = conn.state.limits.request_timeout_s
    protocol: asyncio.BaseProtocol = _tls_layer(loop)(
        loop, conn, context, waiter, server_side=True,
        ssl_handshake_timeout=timeout if timeout > 0 else None)
    return protocol


def _tls_layer(loop: asyncio.AbstractEventLoop) -> Callable[..., asyncio.BaseProtocol]:
    """The TLS protocol class of ``loop``'s own TLS servers (uvloop's, else asyncio's)."""
    import uvloop.loop

    if isinstance(loop, uvloop.loop.Loop):
        layer: Callable[..., asyncio.BaseProtocol] = uvloop.loop.SSLProtocol
        return layer
    from asyncio.sslproto import SSLProtocol

    return SSLProtocol


class _Closed(asyncio.Protocol):
    """A connection closed as soon as it is accepted."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()
