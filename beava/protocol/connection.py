"""What every server connection shares, framed TCP and HTTP alike.

Each connection belongs to its server's :class:`ServerState`: to its connection set while it
is open (shutdown walks it: ``stop_reading``, then ``drain`` until nothing waits, then
``close``) and, while the intake gate is shut, it reads nothing. It queues its replies in
arrival order in ``_out``, where an LSN tag or a :class:`PendingReply` holds back the
replies behind it (``beava.protocol.reply_slots``).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections import deque

from beava.protocol.reply_slots import PendingReply, Queued, take_ready
from beava.protocol.server_state import ServerState


class ServerConnection(asyncio.Protocol, ABC):
    """Base of the connection protocols: connection-set membership, reply queue, stop."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self._transport: asyncio.Transport | None = None
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

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self.state.connections.add(self)
        if self.state.intake.shut:
            transport.pause_reading()  # type: ignore[attr-defined]

    def pause_intake(self) -> None:
        if self._transport is not None and not self._closing:
            self._transport.pause_reading()

    def resume_intake(self) -> None:
        self._resume_if_idle()

    def _resume_if_idle(self) -> None:
        """Read again unless something still holds the connection back."""
        if self._transport is not None and not self._closing and not self.state.intake.shut:
            self._transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.state.connections.discard(self)
        self._transport = None

    def stop_reading(self) -> None:
        """Graceful shutdown: answer what was fully received; later bytes are read and
        dropped, so that closing the socket does not reset it (a close with unread input
        sends RST, which can destroy replies the client has not read yet)."""
        self._closing = True
        if self._transport is not None:
            self._transport.resume_reading()

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
