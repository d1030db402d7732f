"""What every server connection shares, framed TCP and HTTP alike.

Each connection belongs to the server's connection set while it is open (shutdown walks it:
``stop_reading``, then ``drain`` until nothing waits, then ``close``) and queues its replies
in arrival order in ``_out``, where a :class:`PendingReply` holds back the replies behind it.
"""

from __future__ import annotations

import asyncio
from collections import deque

from beava.protocol.reply_slots import PendingReply, take_ready


class IntakeGate:
    """Durability backpressure (spec/durability.md §6.5): while shut, no client socket of
    the data plane is read; requests already read are still answered."""

    def __init__(self) -> None:
        self.shut = False

    def set(self, shut: bool, connections: set) -> None:
        self.shut = shut
        for conn in list(connections):
            if shut:
                conn.pause_intake()
            else:
                conn.resume_intake()


intake = IntakeGate()


class ServerConnection(asyncio.Protocol):
    """Base of the connection protocols: connection-set membership, reply queue, stop."""

    def __init__(self, connections: set) -> None:
        self._connections = connections
        self._transport: asyncio.Transport | None = None
        self._out: deque[bytes | PendingReply] = deque()
        self._last_pending: PendingReply | None = None
        self._closing = False  # a fatal protocol error or shutdown: read nothing more
        self.dirty = False  # queued for flush_dirty (reply_slots)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._connections.add(self)
        if intake.shut:
            transport.pause_reading()  # type: ignore[attr-defined]

    def pause_intake(self) -> None:
        if self._transport is not None and not self._closing:
            self._transport.pause_reading()

    def resume_intake(self) -> None:
        self._resume_if_idle()

    def _resume_if_idle(self) -> None:
        """Read again unless something still holds the connection back."""
        if self._transport is not None and not self._closing and not intake.shut:
            self._transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.discard(self)
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
        ready = take_ready(self._out)
        transport = self._transport
        if transport is not None and ready:
            transport.write(ready)
        return transport
