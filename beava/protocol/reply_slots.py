"""Deferred replies: keep strict FIFO while a push waits for the fsync covering it.

A request handler that cannot answer yet returns a :class:`PendingReply`; the connection
queues it in arrival order and writes replies only up to the first unresolved one. When
the durability log resolves a batch of replies, the connections they belong to are
marked dirty and flushed together once (``flush_dirty``), one write per connection.
"""

from __future__ import annotations

from collections import deque
from typing import Any

_dirty: list[Any] = []


class PendingReply:
    """A reply slot. ``payload`` is what ``fire()`` resolves it with (set before the
    callback can run: durable batches complete on a later loop turn)."""

    __slots__ = ("data", "conn", "payload")

    def __init__(self) -> None:
        self.data: bytes | None = None
        self.conn: Any = None
        self.payload = b""

    def fire(self) -> None:
        self.resolve(self.payload)

    def resolve(self, data: bytes) -> None:
        self.data = data
        conn = self.conn
        if conn is not None and not conn.dirty:
            conn.dirty = True
            _dirty.append(conn)


def take_ready(out: deque[bytes | PendingReply]) -> bytes:
    """Pop the replies at the head of ``out`` that are ready (up to the first unresolved
    one) and return them joined."""
    ready = []
    while out:
        head = out[0]
        if type(head) is PendingReply:
            if head.data is None:
                break
            ready.append(head.data)
        else:
            ready.append(head)
        out.popleft()
    return ready[0] if len(ready) == 1 else b"".join(ready)


def flush_dirty() -> None:
    """Write every connection's replies that became ready (after a durable batch)."""
    while _dirty:
        conns = _dirty[:]
        _dirty.clear()
        for conn in conns:
            conn.dirty = False
            conn.flush_ready()
