"""Framed-TCP connection protocol (spec/wire.md §2).

One :class:`FramedTcpProtocol` per connection. Everything one ``data_received`` brings is
split into frames (Cython: one Frames per read, no object per frame; a handler other than
the push pass gets its payload as bytes), each frame goes to its command's handler (looked
up in the :class:`FrameDispatch` routes derived from the command table) in arrival order,
and the replies of that read go out in one ``transport.write``: strict FIFO with no
per-frame syscalls. A push waiting for its fsync raises the store's ``hold_lsn``: its ack frame is
queued behind an LSN tag (one per run of acks in the same pending batch); a handler may
also return a :class:`PendingReply` (PUSH_MANY). Replies behind either wait, and a read
behind them is parked until they are released, so a read always observes the earlier
pushes of its connection (spec/wire.md §2.6).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections import deque

from beava._fast.wire.frame_splitter import (
    FRAME_TOO_LARGE,
    FRAME_TOO_SHORT,
    Frames,
    FrameSplitter,
    join_frames,
)
from beava.catalogue.errors import BeavaError
from beava.protocol.commands import STATE_READ_OPS
from beava.protocol.connection import HIGH_WATER, LOW_WATER, TURN_SECONDS, ServerConnection
from beava.protocol.dispatch import FrameDispatch, error_frame
from beava.protocol.read_gate import PARKED, WRITES
from beava.protocol.reply_slots import PendingReply
from beava.protocol.server_state import ServerState
from beava_client.opcodes import OP_PUSH

TURN_CHECK_EVERY = 16  # frames between clock reads
# Input drained after our FIN before the socket is closed: at shutdown, and after a fatal
# framing error, when the peer is likely still sending the rest of the frame it announced
# (up to 4 MiB on a busy machine). A peer that closes its side ends the wait at once.
CLOSE_LINGER_SECONDS = 0.2
FATAL_LINGER_SECONDS = 2.0


def _frame_too_large(declared: int, limit: int) -> bytes:
    return error_frame(BeavaError(
        "frame_too_large", declared=declared, limit=limit,
        message=f"declared frame length {declared} exceeds limit {limit}"))


def _frame_too_short(declared: int) -> bytes:
    return error_frame(BeavaError(
        "frame_error", message=f"declared frame length {declared} is below the minimum 3"))


class FramedTcpProtocol(ServerConnection):
    """Reads frames, answers them in order, closes on fatal framing errors."""

    def __init__(self, dispatch: FrameDispatch, max_payload: int, state: ServerState) -> None:
        super().__init__(state)
        self._dispatch = dispatch
        self._splitter = FrameSplitter(max_payload)
        self._parked: deque[Frames] = deque()  # the frames of reads, in order
        self._turn_scheduled = False
        self._close_after = False  # close once every queued reply is written
        self._linger = CLOSE_LINGER_SECONDS
        self._eof_sent = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.set_write_buffer_limits(high=HIGH_WATER, low=LOW_WATER)  # type: ignore[attr-defined]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        started = time.perf_counter()
        splitter = self._splitter
        frames = splitter.feed(data)
        held = splitter.reserved
        if held != self._buffered and not self.hold_request(held):
            self.refuse(self.busy_error())  # nothing of this read is answered
            return
        self.received(bool(frames), held > 0)
        if frames:
            if self._parked:  # never overtake frames that are still waiting
                self._parked.append(frames)
                return
            if self.held_back():  # nor a request still evaluated in slices
                self._park(frames)
                return
            deadline = started + TURN_SECONDS
            turns = self.state.turns
            if frames.op(0) == OP_PUSH:  # a pipeline: it shares this iteration's budget
                reads_end = turns.reads_deadline(started)
                if started > reads_end:  # spent: its turn comes in a round
                    self._defer(frames)
                    return
                deadline = min(deadline, reads_end)
            elif turns.reads_spent(started):
                deadline = started  # a request (a GET, say) is answered: a few frames
            self._process(frames, started, deadline)

    def _process(self, frames: Frames, started: float,
                 deadline: float | None = None) -> None:
        """Handle ``frames`` in order until ``deadline`` (perf_counter; None = no limit);
        leftovers wait for this connection's next turn. Runs of pushes go to the dispatch's
        compiled push pass, which checks the deadline itself. Any other handler may change
        the routes (OP_AUTH replaces them in place, push pass included) or end the
        connection: after one ran, the push pass is looked up again, and nothing more is
        handled once the connection is to close. The turn's pushes are timed together from
        ``started`` (when their socket read or turn began) until the turn's replies are
        written; any other request from its handler's start to its reply
        (beava.protocol.request_timings)."""
        out = self._out
        dispatch = self._dispatch
        routes = dispatch.routes
        push_run = dispatch.push_run
        timings = self.state.timings
        pushes = 0  # push frames handled by the push pass in this turn
        acks = self.state.acks
        # A handler whose reply must wait for an LSN raises acks.hold_lsn to it.
        seen = acks.hold_lsn
        # Durable batches complete in order, so the newest held reply is released last.
        pending = self.waiting()
        index = 0
        count = len(frames)
        while index < count:
            if (index % TURN_CHECK_EVERY == 0 and index and deadline is not None
                    and time.perf_counter() > deadline):  # cheapest test first: per frame
                self._defer(frames[index:])
                break
            op = frames.op(index)
            if op == OP_PUSH and push_run is not None:
                replies = bytearray()
                done = push_run(frames, index, count, replies,
                                0.0 if deadline is None else deadline)
                if done > index:
                    pushes += done - index
                    index = done
                    if acks.hold_lsn != seen:
                        seen = acks.hold_lsn
                        self.hold(seen)
                        pending = True
                    out.append(bytes(replies))
                    if (index < count and deadline is not None and frames.op(index) == OP_PUSH
                            and time.perf_counter() > deadline):
                        # the pass stopped at the deadline: leave the rest for a later turn
                        self._defer(frames[index:])
                        break
                    continue
            index += 1
            if pending and op in STATE_READ_OPS:
                self._park(frames[index - 1:])
                break
            _, ct, payload = frames[index - 1]  # a handler's payload is a bytes of its own
            route = routes.get(op)
            if route is not None and ct in route[0]:
                began = time.perf_counter()
                try:
                    reply = route[1](ct, payload)
                except Exception as exc:  # answered with an error frame, connection kept
                    reply = dispatch.failed(exc)
                timings.finish(timings.by_op[op], began, reply)
                push_run = dispatch.push_run
            elif op == FRAME_TOO_LARGE:  # framing errors are no opcode: tested only here
                out.append(_frame_too_large(ct, self._splitter.max_payload + 3))
                self._fatal()
                break
            elif op == FRAME_TOO_SHORT:
                out.append(_frame_too_short(ct))
                self._fatal()
                break
            else:
                reply = dispatch.refuse(op, ct)
            if acks.hold_lsn != seen:
                seen = acks.hold_lsn
                self.hold(seen)
                pending = True
            if type(reply) is PendingReply and reply.data is None:
                reply.conn = self
                self._last_pending = reply
                pending = True
                if reply.holds_all:  # evaluated in slices: what follows waits for it
                    out.append(reply)
                    if index < count:
                        self._park(frames[index:])
                    break
            out.append(reply)
            if self._close_after:  # refused for good (OP_AUTH): the rest goes unread
                break
        self.flush_ready()
        if pushes:
            timings.push.observe(time.perf_counter() - started, pushes)

    def next_turn(self, deadline: float) -> None:
        """Continue with frames left over from this connection's previous turn."""
        self._turn_scheduled = False
        if self._parked and not self.writes_paused() and not self._waiting_for_pending():
            self._run_parked(time.perf_counter(), deadline)

    def _run_parked(self, started: float, deadline: float | None) -> None:
        """Handle the parked frames (as ``_process``); the socket is read again once none
        is left waiting."""
        frames = join_frames(self._parked)
        self._parked.clear()
        self._process(frames, started, deadline)
        if not self._parked:
            self.reads.resume(PARKED)

    def _schedule_turn(self) -> None:
        """Run the parked frames in a later round of the server's turn scheduler (once)."""
        if not self._turn_scheduled:
            self._turn_scheduled = True
            self.state.turns.add(self)

    def _defer(self, frames: Frames) -> None:
        """Leave ``frames`` for a later turn of this connection."""
        self._park(frames)
        self._schedule_turn()

    def _waiting_for_pending(self) -> bool:
        return self.held_back() or (self._parked[0].op(0) in STATE_READ_OPS and self.waiting())

    def _park(self, frames: Frames) -> None:
        """Leave ``frames`` (not empty) waiting; read nothing more until they are handled."""
        self._parked.append(frames)
        self.reads.pause(PARKED)

    def end_after_replies(self) -> None:
        """Read nothing more; close once the replies queued so far are written (a
        connection refused for good, e.g. by access control)."""
        self._fatal()

    def refuse(self, err: BeavaError) -> None:
        """Answer ``err`` in an error frame, then close as after a framing error."""
        self._out.append(error_frame(err))
        self._fatal()
        self.flush_ready()

    def busy(self) -> bool:
        return bool(self._parked) or self.writes_paused() or super().busy()

    def _fatal(self) -> None:
        self._closing = True
        self._close_after = True
        self._linger = FATAL_LINGER_SECONDS
        self._parked.clear()
        self.reads.resume(PARKED)

    def flush_ready(self) -> None:
        """Write the replies that are ready, in order; resume parked work when possible."""
        if self._write_ready() is None or self._out:
            return
        if self._parked and not self._turn_scheduled and not self.reads.holds(WRITES):
            started = time.perf_counter()
            self._run_parked(started, started + TURN_SECONDS)
        elif self._close_after:
            self._half_close()

    def pause_writing(self) -> None:
        """The peer does not read its replies fast enough: read nothing more, and build no
        more replies for frames already read (they wait in ``_parked``) until the unsent
        replies drain below LOW_WATER. A pipeliner that never reads holds at most about
        HIGH_WATER plus one turn's replies."""
        self.reads.pause(WRITES)

    def resume_writing(self) -> None:
        if self.reads.holds(WRITES):
            self.reads.resume(WRITES)
            if self._parked:
                self._schedule_turn()

    def drain(self) -> bool:
        """Shutdown: run every received frame that is not waiting for a pending push now,
        without turn limits. True if frames are still waiting (for durability)."""
        if self._parked and not self._waiting_for_pending():
            self._turn_scheduled = False
            self._run_parked(time.perf_counter(), None)
        return bool(self._parked)

    def close(self) -> None:
        """Close once every queued reply has been written."""
        self._close_after = True
        if self._transport is not None and not self._out and not self._parked:
            self._half_close()

    def _half_close(self) -> None:
        """Send FIN after the queued replies, keep draining input for a moment, then close:
        closing with unread input would reset the connection and could destroy replies the
        peer has not read yet (an error frame before frame_too_large's close, say)."""
        transport = self._transport
        if transport is None or self._eof_sent:
            return
        self._eof_sent = True
        self.reads.linger()
        if transport.can_write_eof():
            transport.write_eof()
        asyncio.get_running_loop().call_later(self._linger, transport.close)
