"""What the connections of one server share (as uvicorn's ``ServerState``).

The server process creates one :class:`ServerState` and hands it to every connection it
accepts and to whoever resolves deferred replies (the durability log's batch callback,
shutdown). Nothing here is module-global, so two servers in one process keep apart.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from typing import TYPE_CHECKING, Protocol

from beava.protocol.read_gate import INTAKE
from beava.protocol.request_timings import RequestTimings

if TYPE_CHECKING:
    from beava.protocol.connection import ServerConnection
    from beava.protocol.reply_slots import PendingReply

# At most this much work per loop iteration for connections with frames left over from
# an earlier turn (see beava.protocol.tcp): between two rounds the loop polls the sockets.
ROUND_SECONDS = 0.00025
# At most this much work per loop iteration started by socket reads that begin with a
# push, all connections together: the pushes of such a read after that wait for a round,
# so a loop iteration stays short however many pipelines became readable at once.
READS_SECONDS = 0.00025


class AckSource(Protocol):
    """What decides when held acknowledgements may go out (the store's intake,
    beava._fast.intake.intake): ``hold_lsn`` is the LSN the latest deferred acknowledgement waits
    for (it changes only while a request handler runs), ``applied_lsn`` the last LSN
    reflected in state, and ``sealed_lsn`` the last LSN handed to the WAL worker (records
    above it share the pending batch)."""

    @property
    def hold_lsn(self) -> int: ...

    @property
    def applied_lsn(self) -> int: ...

    @property
    def sealed_lsn(self) -> int: ...


class NoAcks:
    """An :class:`AckSource` that never holds an acknowledgement back."""

    hold_lsn = 0
    applied_lsn = 0
    sealed_lsn = 0


class IntakeGate:
    """Durability backpressure (spec/durability.md §6.5): while shut, no client socket of
    the data plane is read (the ``INTAKE`` reason of each connection's read gate); requests
    already read are still answered, and the admin sidecar is read as ever."""

    def __init__(self, connections: set[ServerConnection]) -> None:
        self._connections = connections
        self.shut = False

    def set(self, shut: bool) -> None:
        self.shut = shut
        for conn in list(self._connections):
            if not conn.data_plane:
                continue
            if shut:
                conn.reads.pause(INTAKE)
            else:
                conn.reads.resume(INTAKE)


class Turned(Protocol):
    """A connection with requests left over from an earlier turn (framed TCP, HTTP)."""

    def next_turn(self, deadline: float) -> None: ...


class TurnScheduler:
    """Round-robin over connections with frames left from an earlier turn: one call per
    loop iteration, at most ROUND_SECONDS of work, then back to polling the sockets; and
    the budget of the work socket reads start in one loop iteration (READS_SECONDS)."""

    def __init__(self) -> None:
        self._queue: deque[Turned] = deque()
        self._scheduled = False
        self._reads_end = 0.0  # end of this loop iteration's read budget; 0.0: not begun
        self._loop: asyncio.AbstractEventLoop | None = None

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """The running loop (RuntimeError outside one), kept: asyncio.get_running_loop()
        makes a getpid() system call each time."""
        loop = self._loop
        if loop is None or not loop.is_running():
            loop = self._loop = asyncio.get_running_loop()
        return loop

    def reads_deadline(self, now: float) -> float:
        """When the work of this loop iteration's socket reads must end (its first read,
        at ``now``, starts the budget)."""
        end = self._reads_end
        if end == 0.0:
            try:
                loop = self._running_loop()
            except RuntimeError:  # called outside a loop (synchronously): no iterations
                return math.inf
            end = self._reads_end = now + READS_SECONDS
            # runs once this iteration's I/O callbacks are done: the next one starts afresh
            loop.call_soon(self._end_reads)
        return end

    def reads_spent(self, now: float) -> bool:
        """Whether pipelines read in this loop iteration have used up its budget (a read
        of other requests does not start one: an idle server schedules nothing more)."""
        return 0.0 < self._reads_end < now

    def _end_reads(self) -> None:
        self._reads_end = 0.0

    def add(self, conn: Turned) -> None:
        self._queue.append(conn)
        if not self._scheduled:
            self._scheduled = True
            self._running_loop().call_soon(self._round)

    def _round(self) -> None:
        self._scheduled = False
        queue = self._queue
        deadline = time.perf_counter() + ROUND_SECONDS
        for _ in range(len(queue)):
            queue.popleft().next_turn(deadline)  # re-queues itself if work is left
            if time.perf_counter() > deadline:
                break
        if queue and not self._scheduled:
            self._scheduled = True
            self._running_loop().call_soon(self._round)


class ConnectionLimits:
    """Limits on client connections (docs/limits.md); 0 switches one off.

    ``max_connections``: data-plane connections (HTTP and framed TCP together; the admin
    sidecar is not counted) open at once; one more is answered ``too_many_connections``
    and closed. ``request_timeout_s``: time from the first byte of a request (an HTTP
    request line, a frame's header) to its last; a request still incomplete then is
    answered ``request_timeout`` and the connection closed (a slowloris client). The clock
    stops while the server itself does not read the connection. ``idle_timeout_s``: a
    connection with nothing received, buffered or owed for that long is closed.
    ``request_buffer_bytes``: bytes of requests not yet complete, all connections together
    (each holds its declared length from its head on); a request whose head would pass it
    is answered ``server_busy`` and its connection closed."""

    __slots__ = ("max_connections", "request_timeout_s", "idle_timeout_s",
                 "request_buffer_bytes")

    def __init__(self, max_connections: int = 0, request_timeout_s: float = 0.0,
                 idle_timeout_s: float = 0.0, request_buffer_bytes: int = 0) -> None:
        self.max_connections = max_connections
        self.request_timeout_s = request_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.request_buffer_bytes = request_buffer_bytes

    def sweep_interval(self) -> float:
        """How often the timeouts are checked: a quarter of the shorter one, 1 s at most."""
        timeouts = [t for t in (self.request_timeout_s, self.idle_timeout_s) if t > 0]
        return min(1.0, min(timeouts) / 4) if timeouts else 0.0


class ServerState:
    """The open connections (shutdown walks them), the connections whose deferred replies
    were resolved since the last flush, the connections with replies held by an LSN tag,
    where acknowledgements are released from (``acks``), the intake gate, the turn
    scheduler, the connection limits with the count of connections they cap and the bytes
    of incomplete requests they bound, and the request latency histograms (``timings``)."""

    __slots__ = ("connections", "dirty", "held", "acks", "intake", "turns", "limits",
                 "counted", "buffered", "timings", "_sweeping")

    def __init__(self, acks: AckSource | None = None,
                 limits: ConnectionLimits | None = None) -> None:
        self.connections: set[ServerConnection] = set()
        self.dirty: list[ServerConnection] = []  # appended by PendingReply.resolve
        self.held: list[ServerConnection] = []  # appended by ServerConnection.hold
        self.acks: AckSource = acks if acks is not None else NoAcks()
        self.intake = IntakeGate(self.connections)
        self.turns = TurnScheduler()
        self.limits = limits if limits is not None else ConnectionLimits()
        self.counted = 0  # connections that count against limits.max_connections
        self.buffered = 0  # bytes held by incomplete requests (limits.request_buffer_bytes)
        self.timings = RequestTimings()
        self._sweeping = False

    def start_sweeps(self) -> None:
        """Check the connection timeouts periodically from now on (once per server)."""
        interval = self.limits.sweep_interval()
        if interval > 0 and not self._sweeping:
            self._sweeping = True
            asyncio.get_running_loop().call_later(interval, self._sweep, interval)

    def _sweep(self, interval: float) -> None:
        now = time.monotonic()
        for conn in list(self.connections):
            conn.check_timeouts(now)
        asyncio.get_running_loop().call_later(interval, self._sweep, interval)

    def fail_unwritten(self, ack_op: int, first_lsn: int, error: bytes,
                       slots: list[PendingReply]) -> None:
        """The pushes from ``first_lsn`` on were never written (a full disk): their held
        framed-TCP acks become ``error`` frames, their reply slots resolve with their
        failure, and everything that became ready is written."""
        for conn in self.held:
            conn.fail_held(ack_op, first_lsn, error)
        for slot in slots:
            slot.fail()
        self.flush_dirty()

    def flush_dirty(self) -> None:
        """Write every connection's replies that became ready (after a durable batch):
        one write per connection."""
        held = self.held
        if held:  # a connection still waiting re-enters the list for a later batch
            conns = held[:]
            held.clear()
            for conn in conns:
                conn.held = False
                conn.flush_ready()
                conn.hold_again()
        dirty = self.dirty
        while dirty:
            conns = dirty[:]
            dirty.clear()
            for conn in conns:
                conn.dirty = False
                conn.flush_ready()
