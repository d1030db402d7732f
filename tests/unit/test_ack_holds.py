"""Framed-TCP acknowledgements held by LSN (beava.protocol.reply_slots): a strict push's ack
frame waits in its connection's queue behind a tag until the store's applied LSN reaches
it; strict FIFO and read holding (spec/wire.md §2.6) hold exactly as with reply slots."""

from __future__ import annotations

from beava.protocol.commands import FRAMED
from beava.protocol.dispatch import FrameDispatch, FrameHandler
from beava.protocol.reply_slots import PendingReply
from beava.protocol.server_state import ServerState
from beava.protocol.tcp import FramedTcpProtocol
from beava_client.opcodes import CT_JSON, OP_GET, OP_PING, OP_PUSH
from tests.unit.fake_transport import FakeTransport, frame


class Acks:
    """A strict store in miniature: each push takes the next LSN and holds its ack;
    ``seal`` hands the pending batch to the worker, ``apply`` makes it durable."""

    def __init__(self) -> None:
        self.last_lsn = 0
        self.hold_lsn = 0
        self.applied_lsn = 0
        self.sealed_lsn = 0

    def seal(self) -> None:
        self.sealed_lsn = self.last_lsn

    def apply(self, lsn: int) -> None:
        self.applied_lsn = lsn


def _server(acks: Acks) -> tuple[ServerState, FrameDispatch, list[int]]:
    reads: list[int] = []  # applied LSN seen by each GET when it ran

    def push(ct: int, payload: bytes) -> bytes:
        acks.last_lsn += 1
        acks.hold_lsn = acks.last_lsn
        return b"<ack " + payload + b">"

    def get(ct: int, payload: bytes) -> bytes:
        reads.append(acks.applied_lsn)
        return b"<get " + payload + b">"

    handlers: dict[str, FrameHandler] = {c.name: (lambda ct, payload: b"<reply>") for c in FRAMED}
    handlers["push"] = push
    handlers["get"] = get
    handlers["ping"] = lambda ct, payload: b"<pong>"
    return ServerState(acks), FrameDispatch(handlers), reads


def _connect(dispatch: FrameDispatch, state: ServerState
             ) -> tuple[FramedTcpProtocol, FakeTransport]:
    conn = FramedTcpProtocol(dispatch, 1 << 20, state)
    transport = FakeTransport()
    conn.connection_made(transport)
    return conn, transport


def test_acks_wait_for_their_lsn_and_replies_behind_them_keep_fifo() -> None:
    acks = Acks()
    state, dispatch, reads = _server(acks)
    conn, transport = _connect(dispatch, state)
    conn.data_received(frame(OP_PUSH, CT_JSON, b"1") + frame(OP_PUSH, CT_JSON, b"2")
                       + frame(OP_PING, CT_JSON))
    assert transport.take() == b""  # nothing applied: all three wait, pong included
    assert state.held == [conn]
    acks.seal()
    acks.apply(1)  # a batch that covers only push 1 cannot release the run ending at 2
    state.flush_dirty()
    assert transport.take() == b""
    assert state.held == [conn]
    acks.apply(2)
    state.flush_dirty()
    assert transport.take() == b"<ack 1><ack 2><pong>"
    assert state.held == [] and reads == []


def test_a_read_behind_an_unapplied_push_waits_for_it() -> None:
    acks = Acks()
    state, dispatch, reads = _server(acks)
    conn, transport = _connect(dispatch, state)
    conn.data_received(frame(OP_PUSH, CT_JSON, b"1") + frame(OP_GET, CT_JSON, b"k")
                       + frame(OP_PUSH, CT_JSON, b"2"))
    assert reads == [] and not transport.reading  # the GET is parked, reading paused
    assert acks.last_lsn == 1  # the push behind the GET is not run before it either
    acks.seal()
    acks.apply(1)
    state.flush_dirty()
    assert reads == [1]  # the GET ran once push 1 was applied, then push 2
    assert transport.take() == b"<ack 1><get k>"
    assert acks.last_lsn == 2 and state.held == [conn]
    acks.seal()
    acks.apply(2)
    state.flush_dirty()
    assert transport.take() == b"<ack 2>"
    assert transport.reading


def test_a_run_in_one_pending_batch_has_one_tag_and_a_sealed_batch_starts_a_new_one() -> None:
    acks = Acks()
    state, dispatch, _ = _server(acks)
    conn, transport = _connect(dispatch, state)
    conn.data_received(b"".join(frame(OP_PUSH, CT_JSON, b"%d" % i) for i in (1, 2, 3)))
    tags = [entry for entry in conn._out if type(entry) is list]
    assert tags == [[3]]  # one tag for the run, raised to its last LSN
    acks.seal()  # pushes 1-3 go to the worker; 4-5 wait in the next batch
    conn.data_received(frame(OP_PUSH, CT_JSON, b"4") + frame(OP_PUSH, CT_JSON, b"5"))
    tags = [entry for entry in conn._out if type(entry) is list]
    assert tags == [[3], [5]]
    acks.apply(3)  # the first batch's acks go out without waiting for the second
    state.flush_dirty()
    assert transport.take() == b"<ack 1><ack 2><ack 3>"
    acks.seal()
    acks.apply(5)
    state.flush_dirty()
    assert transport.take() == b"<ack 4><ack 5>"


def test_connections_are_released_independently_and_in_one_write_each() -> None:
    acks = Acks()
    state, dispatch, _ = _server(acks)
    one, out_one = _connect(dispatch, state)
    two, out_two = _connect(dispatch, state)
    writes: list[bytes] = []
    out_one.write = writes.append  # type: ignore[method-assign,assignment]
    one.data_received(frame(OP_PUSH, CT_JSON, b"a") + frame(OP_PUSH, CT_JSON, b"b"))
    acks.seal()
    two.data_received(frame(OP_PUSH, CT_JSON, b"c"))
    acks.apply(2)
    state.flush_dirty()
    assert writes == [b"<ack a><ack b>"] and out_two.take() == b""
    assert state.held == [two]
    acks.seal()
    acks.apply(3)
    state.flush_dirty()
    assert out_two.take() == b"<ack c>" and state.held == []


def test_tags_and_reply_slots_share_one_fifo() -> None:
    acks = Acks()
    state, dispatch, _ = _server(acks)
    slot = PendingReply()
    slot.payload = b"<many>"
    dispatch.routes[OP_PING] = (dispatch.routes[OP_PING][0], lambda ct, payload: slot)
    conn, transport = _connect(dispatch, state)
    conn.data_received(frame(OP_PING, CT_JSON) + frame(OP_PUSH, CT_JSON, b"1"))
    acks.seal()
    acks.apply(1)
    state.flush_dirty()
    assert transport.take() == b""  # the push's ack is behind the unresolved slot
    slot()
    state.flush_dirty()
    assert transport.take() == b"<many><ack 1>"


def test_shutdown_drain_runs_parked_reads_once_applied() -> None:
    acks = Acks()
    state, dispatch, reads = _server(acks)
    conn, transport = _connect(dispatch, state)
    conn.data_received(frame(OP_PUSH, CT_JSON, b"1") + frame(OP_GET, CT_JSON, b"k"))
    assert conn.drain() is True  # the GET still waits for durability
    acks.seal()
    acks.apply(1)
    state.flush_dirty()
    assert conn.drain() is False
    assert reads == [1] and transport.take() == b"<ack 1><get k>"
