"""Whether a connection's socket is read, and why not (as uvicorn's ``FlowControl``).

Several things stop a connection from reading, independently of each other: the server's
intake gate (durability backpressure), a peer that does not take its replies, requests
already read that wait for a later turn, a request served in slices. Each owns one reason
bit of the connection's :class:`ReadGate`; the transport is paused when the first reason
appears and resumed only when none is left, so no reason's end undoes another's pause.
Once the connection closes, :meth:`ReadGate.linger` reads (and the connection drops)
whatever still arrives, whatever the reasons: closing a socket with unread input resets
it and can destroy replies the peer has not read yet.
"""

from __future__ import annotations

import asyncio

# The reasons a connection is not read (bits of ReadGate's set).
INTAKE = 1  # the server's intake gate is shut (spec/durability.md §6.5)
WRITES = 2  # the peer leaves more replies unread than the high-water mark
PARKED = 4  # requests already read wait for a later turn or for a pending reply
SLICED = 8  # a request served in slices holds back every later one (HTTP)


class ReadGate:
    """One connection's reasons not to read; pauses and resumes its transport."""

    __slots__ = ("_reasons", "_transport", "_lingering")

    def __init__(self) -> None:
        self._reasons = 0
        self._transport: asyncio.Transport | None = None
        self._lingering = False

    def attach(self, transport: asyncio.Transport) -> None:
        """The connection is made: pause its transport if a reason already holds. uvloop
        starts reading once ``connection_made`` returns, undoing a pause made in it, so the
        pause is made again before the loop next polls the socket."""
        self._transport = transport
        if self._reasons:
            transport.pause_reading()
            asyncio.get_running_loop().call_soon(self._pause_again)

    def _pause_again(self) -> None:
        transport = self._transport
        if transport is not None and self._reasons and not self._lingering:
            transport.pause_reading()

    def detach(self) -> None:
        """The connection is lost: nothing more to pause or resume."""
        self._transport = None

    def pause(self, reason: int) -> None:
        """Stop reading for ``reason`` (if it already holds, nothing changes)."""
        before = self._reasons
        self._reasons = before | reason
        transport = self._transport
        if not before and transport is not None and not self._lingering:
            transport.pause_reading()

    def resume(self, reason: int) -> None:
        """``reason`` no longer holds: read again if no other reason does."""
        before = self._reasons
        if not before & reason:
            return
        self._reasons = before & ~reason
        transport = self._transport
        if not self._reasons and transport is not None and not self._lingering:
            transport.resume_reading()

    def holds(self, reason: int) -> bool:
        """Whether ``reason`` (a bit, or several or-ed: any of them) keeps reading paused."""
        return bool(self._reasons & reason)

    def paused(self) -> bool:
        """Whether any reason holds (while lingering the socket is read nonetheless)."""
        return self._reasons != 0

    def linger(self) -> None:
        """The connection is closing: read from now on, whatever the reasons, so that
        input that still arrives is taken (and dropped) before the socket is closed."""
        if self._lingering:
            return
        self._lingering = True
        if self._transport is not None:
            self._transport.resume_reading()
