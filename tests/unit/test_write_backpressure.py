"""A client that pipelines reads (framed TCP or HTTP) and never reads the replies: once
its unsent replies pass the high-water mark, the connection stops reading AND stops
building replies for the requests it already read; they wait until the replies drain
(found: gigabytes of replies built for requests already read)."""

from __future__ import annotations

import asyncio

from beava._fast.wire.frame_splitter import encode_frame
from beava.protocol.connection import HIGH_WATER
from beava.protocol.dispatch import FrameDispatch, FrameHandler
from beava.protocol.http import TURN_BYTES as HTTP_TURN_BYTES
from beava.protocol.http import HttpProtocol, HttpRequest
from beava.protocol.server_state import ServerState
from beava.protocol.tcp import FramedTcpProtocol
from beava_client.opcodes import CT_JSON, OP_GET, OP_GET_RESPONSE
from tests.unit.fake_transport import FakeTransport, frame, split_frames
from tests.unit.test_protocol_dispatch import frame_handlers

ROW = b"x" * 50_000  # one big row per GET


class SlowPeerTransport(FakeTransport):
    """Unsent bytes pile up until ``drain``; past HIGH_WATER the protocol is told to pause
    writing, as asyncio transports do."""

    def __init__(self) -> None:
        super().__init__()
        self.protocol: FramedTcpProtocol | None = None
        self.paused = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        super().write(data)
        if not self.paused and len(self.written) > HIGH_WATER and self.protocol is not None:
            self.paused = True
            self.protocol.pause_writing()

    def drain(self) -> bytes:
        data = self.take()
        if self.paused and self.protocol is not None:
            self.paused = False
            self.protocol.resume_writing()
        return data


async def spin(times: int = 20) -> None:
    for _ in range(times):
        await asyncio.sleep(0)


async def test_replies_are_not_built_while_the_peer_does_not_read() -> None:
    calls: list[tuple[str, object, object]] = []
    handlers: dict[str, FrameHandler] = frame_handlers(calls)
    handlers["get"] = lambda ct, payload: (calls.append(("get", ct, payload)),
                                           encode_frame(OP_GET_RESPONSE, CT_JSON, ROW))[1]
    conn = FramedTcpProtocol(FrameDispatch(handlers), 1 << 20, ServerState())
    transport = SlowPeerTransport()
    transport.protocol = conn
    conn.connection_made(transport)
    total = 2000  # 100 MB of replies if all were built at once
    conn.data_received(frame(OP_GET, CT_JSON, b"{}") * total)
    await spin()
    built = len(calls)
    assert transport.paused and not transport.reading
    # The first turn is bounded by time (a fraction of a millisecond), not by bytes: it
    # builds what it can, and nothing more is built once the peer stops reading.
    assert built < total // 2
    await spin()
    assert len(calls) == built  # nothing more while the peer reads nothing
    replies = 0
    for _ in range(1000):
        # the protocol writes whole frames, so each drained chunk splits on its own
        chunk = transport.drain()
        replies += sum(1 for op, _, payload in split_frames(chunk)
                       if op == OP_GET_RESPONSE and payload == ROW)
        await spin(2)
        if len(calls) == total and not transport.written:
            break
    assert len(calls) == total and replies == total
    assert transport.reading


class SlowHttpPeer(FakeTransport):
    """SlowPeerTransport for an HttpProtocol."""

    def __init__(self, protocol: HttpProtocol) -> None:
        super().__init__()
        self.protocol = protocol
        self.paused = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        super().write(data)
        if not self.paused and len(self.written) > HIGH_WATER:
            self.paused = True
            self.protocol.pause_writing()

    def drain(self) -> bytes:
        data = self.take()
        if self.paused:
            self.paused = False
            self.protocol.resume_writing()
        return data


async def test_http_requests_wait_unanswered_while_the_peer_does_not_read() -> None:
    """One read of 2,000 pipelined GETs of a 50 KB row: the read's turn answers a bounded
    share of them (not the whole read, as long as the kernel takes the responses), the
    rest wait, unread input too, for later turns; once the peer's unsent responses pass
    the high-water mark, nothing more is answered until it reads."""
    answered: list[str] = []

    def respond(request: HttpRequest) -> bytes:
        answered.append(request.target)
        return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(ROW) + ROW

    conn = HttpProtocol(respond, lambda: b"", ServerState())
    transport = SlowHttpPeer(conn)
    conn.connection_made(transport)
    total = 2000  # 100 MB of responses if all were built at once
    conn.data_received(b"".join(b"GET /r%d HTTP/1.1\r\n\r\n" % i for i in range(total)))
    assert len(answered) <= HTTP_TURN_BYTES // len(ROW) + 1
    assert not transport.reading  # the parked requests are answered first
    for _ in range(200):
        if transport.paused:
            break
        await spin(1)
    assert transport.paused and not transport.reading
    built = len(answered)
    assert built < total // 2
    await spin()
    assert len(answered) == built  # nothing more while the peer reads nothing
    got = 0
    for _ in range(5000):
        got += transport.drain().count(b"HTTP/1.1 200 OK")
        await spin(1)
        if len(answered) == total and not transport.written:
            break
    assert answered == [f"/r{i}" for i in range(total)]  # every one, in order
    assert got == total and transport.reading
