"""Deferred replies: keep strict FIFO while a push waits for the fsync covering it.

A request handler that cannot answer yet returns a :class:`PendingReply`; the connection
queues it in arrival order and writes replies only up to the first unresolved one. When
the durability log resolves a batch of replies, the connections they belong to are
marked dirty in their server's state and flushed together once
(:meth:`beava.protocol.server_state.ServerState.flush_dirty`), one write per connection.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from beava.protocol.connection import ServerConnection


class PendingReply:
    """A reply slot. ``payload`` is what ``fire()`` resolves it with (set before the
    callback can run: durable batches complete on a later loop turn)."""

    __slots__ = ("data", "conn", "payload")

    def __init__(self) -> None:
        self.data: bytes | None = None
        self.conn: ServerConnection | None = None  # set when the connection queues it
        self.payload = b""

    def fire(self) -> None:
        self.resolve(self.payload)

    def resolve(self, data: bytes) -> None:
        self.data = data
        conn = self.conn
        if conn is not None and not conn.dirty:
            conn.dirty = True
            conn.state.dirty.append(conn)


def take_ready(out: deque[bytes | PendingReply]) -> bytes:
    """Pop the replies at the head of ``out`` that are ready (up to the first unresolved
    one) and return them joined."""
    ready: list[bytes] = []
    while out:
        head = out[0]
        # type() is, not isinstance: one test per reply on the push path (mypy does not
        # narrow the else branch of it)
        if type(head) is PendingReply:
            if head.data is None:
                break
            ready.append(head.data)
        else:
            ready.append(head)  # type: ignore[arg-type]
        out.popleft()
    return ready[0] if len(ready) == 1 else b"".join(ready)
