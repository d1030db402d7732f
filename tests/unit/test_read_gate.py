"""ReadGate: a connection's socket is paused when its first reason not to read appears and
read again only when the last one is gone; while the connection lingers before its close
it is read whatever the reasons (unread input at close resets the socket)."""

from __future__ import annotations

import asyncio
import itertools
import re
from pathlib import Path

import pytest

import beava
from beava.protocol.dispatch import FrameDispatch
from beava.protocol.read_gate import INTAKE, PARKED, SLICED, WRITES, ReadGate
from beava.protocol.server_state import ServerState
from beava.protocol.tcp import FramedTcpProtocol
from beava_client.opcodes import CT_JSON, OP_GET, OP_PING, OP_PUSH
from tests.unit.fake_transport import FakeTransport, frame
from tests.unit.test_server_state import _pending_pushes

REASONS = (INTAKE, WRITES, PARKED, SLICED)


class CountingTransport(FakeTransport):
    """Counts the pause and resume calls the gate makes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def pause_reading(self) -> None:
        super().pause_reading()
        self.calls.append("pause")

    def resume_reading(self) -> None:
        super().resume_reading()
        self.calls.append("resume")


def _attached() -> tuple[ReadGate, CountingTransport]:
    gate = ReadGate()
    transport = CountingTransport()
    gate.attach(transport)  # no reason yet: nothing scheduled, no loop needed
    return gate, transport


@pytest.mark.parametrize("reason", REASONS)
def test_each_reason_alone_pauses_and_its_end_resumes(reason: int) -> None:
    gate, transport = _attached()
    gate.pause(reason)
    assert not transport.reading and gate.holds(reason) and gate.paused()
    gate.resume(reason)
    assert transport.reading and not gate.holds(reason) and not gate.paused()
    assert transport.calls == ["pause", "resume"]


@pytest.mark.parametrize("order", list(itertools.permutations(REASONS)))
def test_overlapping_reasons_resume_only_when_the_last_goes(order: tuple[int, ...]) -> None:
    gate, transport = _attached()
    for reason in REASONS:
        gate.pause(reason)
    for left, reason in enumerate(order, start=1):
        gate.resume(reason)
        assert transport.reading == (left == len(order))
    assert transport.calls == ["pause", "resume"]


def test_pausing_or_resuming_twice_changes_nothing() -> None:
    gate, transport = _attached()
    gate.resume(WRITES)  # not held: no call
    gate.pause(WRITES)
    gate.pause(WRITES)
    gate.pause(INTAKE)
    gate.resume(PARKED)  # not held: still paused
    assert not transport.reading
    gate.resume(WRITES)
    gate.resume(WRITES)
    assert not transport.reading  # INTAKE still holds
    gate.resume(INTAKE)
    gate.resume(INTAKE)
    assert transport.reading and transport.calls == ["pause", "resume"]


def test_a_lingering_connection_is_read_whatever_the_reasons() -> None:
    gate, transport = _attached()
    gate.pause(INTAKE)
    gate.linger()
    assert transport.reading
    gate.pause(WRITES)
    gate.resume(INTAKE)
    gate.resume(WRITES)
    gate.pause(PARKED)
    gate.linger()
    assert transport.reading and transport.calls == ["pause", "resume"]


def test_a_detached_gate_calls_no_transport() -> None:
    gate, transport = _attached()
    gate.detach()
    gate.pause(INTAKE)
    gate.linger()
    assert transport.calls == []


async def test_a_reason_held_at_attach_survives_a_loop_that_starts_reading_after_it() -> None:
    """uvloop starts reading once ``connection_made`` returns, undoing a pause made in it:
    the gate pauses again before the loop next polls; not once the reason is gone."""
    gate = ReadGate()
    transport = CountingTransport()
    gate.pause(INTAKE)
    gate.attach(transport)
    assert not transport.reading
    transport.reading = True  # what uvloop does after connection_made
    await asyncio.sleep(0)
    assert not transport.reading

    gate.resume(INTAKE)
    other = ReadGate()
    other.pause(INTAKE)
    other.attach(transport)
    other.resume(INTAKE)
    await asyncio.sleep(0)
    assert transport.reading


async def test_a_connection_paused_by_several_owners_reads_when_the_last_lets_go() -> None:
    """The server's intake gate, a peer not taking its replies and frames waiting for a
    later turn each stop the connection; only when all three have let go is it read."""
    handlers, _ = _pending_pushes()
    state = ServerState()
    conn = FramedTcpProtocol(FrameDispatch(handlers), 1 << 20, state)
    transport = FakeTransport()
    conn.connection_made(transport)
    state.turns.reads_deadline(0.0)  # this iteration's budget is spent: the pipeline waits
    conn.data_received(frame(OP_PUSH, CT_JSON, b"1") + frame(OP_PUSH, CT_JSON, b"2"))
    conn.pause_writing()
    state.intake.set(True)
    assert conn.reads.holds(PARKED) and not transport.reading
    conn.resume_writing()
    state.intake.set(False)
    assert conn.reads.holds(PARKED) and not transport.reading
    state.intake.set(True)
    for _ in range(10):  # the turn scheduler runs the parked pushes
        await asyncio.sleep(0)
    assert not conn.reads.holds(PARKED) and not transport.reading
    state.intake.set(False)
    assert transport.reading


async def test_a_connection_keeps_reading_through_shutdown_once_told_to_stop() -> None:
    """Shutdown: after ``stop_reading`` the connection reads and drops what arrives, so its
    close does not reset the socket; a read parked behind a pending push while the
    shutdown drains used to pause it again for good."""
    handlers, _ = _pending_pushes()
    state = ServerState()
    conn = FramedTcpProtocol(FrameDispatch(handlers), 1 << 20, state)
    transport = FakeTransport()
    conn.connection_made(transport)
    state.turns.reads_deadline(0.0)  # the pipeline waits for a later turn
    conn.data_received(frame(OP_PUSH, CT_JSON, b"1") + frame(OP_GET, CT_JSON, b"{}"))
    assert not transport.reading
    conn.stop_reading()
    assert transport.reading
    assert conn.drain()  # the push is handled; the GET waits for it (parked again)
    assert transport.reading
    conn.data_received(frame(OP_PING, CT_JSON))  # read and dropped: never answered
    assert transport.take() == b""


def test_only_the_read_gate_pauses_or_resumes_a_transports_reading() -> None:
    package = Path(beava.__file__).parent
    callers = sorted(
        str(path.relative_to(package)) for path in package.rglob("*.py")
        if path.name != "read_gate.py"
        and re.search(r"\.(pause|resume)_reading\(", path.read_text(encoding="utf-8")))
    assert callers == []
