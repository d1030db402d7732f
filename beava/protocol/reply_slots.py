"""Deferred replies: keep strict FIFO while a push waits for the fsync covering it.

Two ways to hold a reply back, both kept in a connection's reply queue in arrival order:

* An LSN tag (framed-TCP pushes, the hot path): a one-element list ``[lsn]`` queued before
  a run of replies that may be written once the store's applied LSN reaches ``lsn``. One
  tag covers every reply of a run whose pushes share a pending WAL batch (the connection
  raises ``tag[0]`` as the run grows), so a strict push costs no object of its own.
* A :class:`PendingReply` slot (HTTP, PUSH_MANY): the handler returns it and the durability
  log's callback resolves it.

The connection writes replies only up to the first held one. After each durable batch the
connections with something to release are flushed together
(:meth:`beava.protocol.server_state.ServerState.flush_dirty`), one write per connection.
"""

from __future__ import annotations

from collections import deque
from time import perf_counter
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from beava._fast.timing.histogram import Histogram
    from beava.protocol.connection import ServerConnection


class PendingReply:
    """A reply slot. Called, it resolves with ``payload`` (set before the call can come:
    durable batches complete on a later loop turn); ``fail()`` resolves it with
    ``failure`` instead (the write it waited for failed)."""

    __slots__ = ("data", "conn", "payload", "failure", "holds_all", "timing")

    def __init__(self, holds_all: bool = False) -> None:
        self.data: bytes | None = None
        self.conn: ServerConnection | None = None  # set when the connection queues it
        self.payload = b""
        self.failure = b""
        # A request still being evaluated (a BATCH_GET served in slices): no later request
        # of its connection is evaluated before it is resolved (spec/wire.md §2.6).
        self.holds_all = holds_all
        # (histogram, perf_counter at the request's start): observed when resolved
        self.timing: tuple[Histogram, float] | None = None

    def __call__(self) -> None:
        self.resolve(self.payload)

    def fail(self) -> None:
        self.resolve(self.failure)

    def resolve(self, data: bytes) -> None:
        self.data = data
        timing = self.timing
        if timing is not None:
            timing[0].observe(perf_counter() - timing[1])
        conn = self.conn
        if conn is not None and not conn.dirty:
            conn.dirty = True
            conn.state.dirty.append(conn)


# A queued reply, an LSN tag holding back the replies behind it, or a reply slot.
Queued = bytes | list[int] | PendingReply


def take_ready(out: deque[Queued], applied_lsn: int) -> bytes:
    """Pop the replies at the head of ``out`` that are ready (up to the first unresolved
    slot or the first tag above ``applied_lsn``) and return them joined."""
    ready: list[bytes] = []
    while out:
        head = out[0]
        # type() is, not isinstance: one test per reply on the push path (mypy does not
        # narrow by it)
        kind = type(head)
        if kind is bytes:
            ready.append(head)  # type: ignore[arg-type]
        elif kind is list:
            if head[0] > applied_lsn:  # type: ignore[index]
                break
        else:
            data = head.data  # type: ignore[union-attr]
            if data is None:
                break
            ready.append(data)
        out.popleft()
    return ready[0] if len(ready) == 1 else b"".join(ready)


def fail_acks(data: bytes, ack_op: int, first_lsn: int, error: bytes) -> bytes:
    """``data`` (whole frames) with every ack frame (op ``ack_op``, JSON) whose
    ``ack_lsn`` is ``first_lsn`` or later replaced by ``error``: those pushes were never
    written (a full disk). Runs only then, never on the push path."""
    out = []
    offset = 0
    end = len(data)
    while offset < end:
        size = 4 + int.from_bytes(data[offset:offset + 4], "big")
        frame = data[offset:offset + size]
        if int.from_bytes(frame[4:6], "big") == ack_op and msgspec.json.decode(
                frame[7:])["ack_lsn"] >= first_lsn:
            frame = error
        out.append(frame)
        offset += size
    return b"".join(out)
