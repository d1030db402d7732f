"""What every server connection shares, framed TCP and HTTP alike.

Each connection belongs to the server's connection set while it is open (shutdown walks it:
``stop_reading``, then ``drain`` until nothing waits, then ``close``) and queues its replies
in arrival order in ``_out``, where a :class:`PendingReply` holds back the replies behind it.
"""

from __future__ import annotations

import asyncio
from collections import deque

from beava.protocol.reply_slots import PendingReply, take_ready


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
