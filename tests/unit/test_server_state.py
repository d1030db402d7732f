"""ServerState: each server's connections, deferred replies, intake gate and turn
scheduler are its own; two servers in one process share none of them."""

from __future__ import annotations

import asyncio
import importlib
import pkgutil
from collections import deque

import beava.protocol
from beava._fast.wire.frame_splitter import FrameSplitter
from beava.protocol.commands import FRAMED
from beava.protocol.dispatch import FrameDispatch, FrameHandler
from beava.protocol.reply_slots import PendingReply
from beava.protocol.server_state import IntakeGate, ServerState, TurnScheduler
from beava.protocol.tcp import TURN_CHECK_EVERY, FramedTcpProtocol
from beava_client.opcodes import CT_JSON
from tests.unit.fake_transport import FakeTransport, frame


def _pending_pushes() -> tuple[dict[str, FrameHandler], list[PendingReply]]:
    """Handlers whose pushes all wait (as in strict mode); the slots in push order."""
    slots: list[PendingReply] = []

    def push(ct: int, payload: bytes) -> PendingReply:
        slot = PendingReply()
        slot.payload = b"<ack " + payload + b">"
        slots.append(slot)
        return slot

    handlers: dict[str, FrameHandler] = {c.name: (lambda ct, payload: b"<reply>") for c in FRAMED}
    handlers["push"] = push
    return handlers, slots


def _connect(dispatch: FrameDispatch, state: ServerState
             ) -> tuple[FramedTcpProtocol, FakeTransport]:
    conn = FramedTcpProtocol(dispatch, 1 << 20, state)
    transport = FakeTransport()
    conn.connection_made(transport)
    return conn, transport


def test_two_servers_keep_their_connections_and_deferred_replies_apart() -> None:
    handlers, slots = _pending_pushes()
    dispatch = FrameDispatch(handlers)
    one, two = ServerState(), ServerState()
    conn_one, out_one = _connect(dispatch, one)
    conn_two, out_two = _connect(dispatch, two)
    assert one.connections == {conn_one} and two.connections == {conn_two}
    conn_one.data_received(frame(0x0010, CT_JSON, b"1"))
    conn_two.data_received(frame(0x0010, CT_JSON, b"2"))
    for slot in slots:
        slot()  # the durable batch covering both pushes
    assert one.dirty == [conn_one] and two.dirty == [conn_two]
    one.flush_dirty()
    assert (out_one.take(), out_two.take()) == (b"<ack 1>", b"")
    assert one.dirty == [] and two.dirty == [conn_two]
    two.flush_dirty()
    assert out_two.take() == b"<ack 2>"
    conn_one.connection_lost(None)
    assert one.connections == set() and two.connections == {conn_two}


def test_a_connection_is_flushed_once_per_batch() -> None:
    handlers, slots = _pending_pushes()
    state = ServerState()
    conn, transport = _connect(FrameDispatch(handlers), state)
    writes: list[bytes] = []
    transport.write = writes.append  # type: ignore[method-assign,assignment]
    conn.data_received(b"".join(frame(0x0010, CT_JSON, b"%d" % i) for i in range(3)))
    for slot in slots:
        slot()
    assert state.dirty == [conn]
    state.flush_dirty()
    assert writes == [b"<ack 0><ack 1><ack 2>"]


async def test_intake_gates_are_per_server() -> None:
    dispatch = FrameDispatch(_pending_pushes()[0])
    one, two = ServerState(), ServerState()
    _, out_one = _connect(dispatch, one)
    _, out_two = _connect(dispatch, two)
    one.intake.set(True)
    assert (out_one.reading, out_two.reading) == (False, True)
    _, late_one = _connect(dispatch, one)  # accepted while its server's gate is shut
    _, late_two = _connect(dispatch, two)
    assert (late_one.reading, late_two.reading) == (False, True)
    one.intake.set(False)
    assert out_one.reading and late_one.reading


async def test_turn_schedulers_are_per_server() -> None:
    """A connection with frames left over from its turn is resumed by its own server's
    scheduler."""
    dispatch = FrameDispatch(_pending_pushes()[0])
    one, two = ServerState(), ServerState()
    conn, transport = _connect(dispatch, one)
    conn._process(FrameSplitter().feed(frame(0x0000, CT_JSON) * (TURN_CHECK_EVERY * 4)), 0.0,
                  deadline=0.0)
    assert transport.take() == b"<reply>" * TURN_CHECK_EVERY
    assert len(one.turns._queue) == 1 and len(two.turns._queue) == 0
    for _ in range(10):
        await asyncio.sleep(0)
    assert transport.take() == b"<reply>" * (TURN_CHECK_EVERY * 3)
    assert len(one.turns._queue) == 0


async def test_reads_after_the_loop_iterations_budget_wait_for_a_round() -> None:
    """Once the reads of a loop iteration have used its budget, a pipeline read later in
    it is parked (its socket no longer read) and run by a round of the turn scheduler; a
    request at the head of a read is still answered at once."""
    handlers: dict[str, FrameHandler] = {c.name: (lambda ct, payload: b"<reply>") for c in FRAMED}
    handlers["push"] = lambda ct, payload: b"<ack " + payload + b">"
    dispatch = FrameDispatch(handlers)
    state = ServerState()
    pipeline, pipeline_out = _connect(dispatch, state)
    reader, reader_out = _connect(dispatch, state)
    state.turns.reads_deadline(0.0)  # this iteration's budget began long ago
    pipeline.data_received(b"".join(frame(0x0010, CT_JSON, b"%d" % i) for i in range(3)))
    assert pipeline_out.take() == b"" and not pipeline_out.reading
    reader.data_received(frame(0x0000, CT_JSON, b"") + frame(0x0010, CT_JSON, b"r"))
    assert reader_out.take() == b"<reply><ack r>"
    for _ in range(10):
        await asyncio.sleep(0)
    assert pipeline_out.take() == b"<ack 0><ack 1><ack 2>" and pipeline_out.reading
    # a later loop iteration has a budget of its own: a read is run at once
    pipeline.data_received(frame(0x0010, CT_JSON, b"3"))
    assert pipeline_out.take() == b"<ack 3>"


def test_no_module_of_the_protocol_package_holds_mutable_state() -> None:
    state_types = (list, dict, set, bytearray, deque, ServerState, IntakeGate, TurnScheduler,
                   PendingReply)
    found = []
    for info in pkgutil.iter_modules(beava.protocol.__path__):
        module = importlib.import_module(f"beava.protocol.{info.name}")
        for name, value in vars(module).items():
            if not name.startswith("__") and isinstance(value, state_types):
                found.append(f"{info.name}.{name}")
    assert found == []


def test_a_connection_accepted_while_the_intake_is_shut_is_not_read_under_uvloop() -> None:
    """uvloop starts reading a connection after ``connection_made`` returns, which undoes a
    pause made inside it: a request sent at once by a connection accepted while the gate is
    shut must still wait for the gate."""
    import uvloop

    dispatch = FrameDispatch(_pending_pushes()[0])
    state = ServerState()
    state.intake.set(True)

    async def main() -> tuple[bytes, bytes]:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: FramedTcpProtocol(dispatch, 1 << 20, state), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(frame(0x0000, CT_JSON, b"{}"))  # a PING, sent with the connect
        await writer.drain()
        try:
            early = await asyncio.wait_for(reader.read(100), 0.3)
        except TimeoutError:
            early = b""  # nothing answered while the gate is shut
        state.intake.set(False)
        late = await asyncio.wait_for(reader.read(100), 10)
        writer.close()
        server.close()
        return early, late

    early, late = uvloop.run(main())
    assert early == b""
    assert late.endswith(b"<reply>")


async def test_the_intake_gate_holds_the_data_plane_not_the_admin_sidecar() -> None:
    """During WAL backpressure /health and /metrics still answer: the gate pauses data-plane
    connections only, those open when it shuts and those accepted while it is shut."""
    from beava.protocol.http import HttpProtocol

    state = ServerState()

    def admin() -> tuple[HttpProtocol, FakeTransport]:
        conn = HttpProtocol(lambda request: b"", lambda err: b"", state, limited=False)
        transport = FakeTransport()
        conn.connection_made(transport)
        return conn, transport

    dispatch = FrameDispatch(_pending_pushes()[0])
    _, data = _connect(dispatch, state)
    _, sidecar = admin()
    state.intake.set(True)
    _, late_sidecar = admin()
    _, late_data = _connect(dispatch, state)
    assert (data.reading, late_data.reading) == (False, False)
    assert sidecar.reading and late_sidecar.reading
    state.intake.set(False)
    assert data.reading and late_data.reading and sidecar.reading
