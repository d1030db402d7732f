"""A client that pipelines reads and never reads the replies: once its unsent replies pass
the high-water mark, the connection stops reading AND stops building replies for the frames
it already read; they wait until the replies drain (issue: 3.5 GB of replies to frames
already read)."""

from __future__ import annotations

import asyncio

from beava._fast.frame_splitter import encode_frame
from beava.protocol.dispatch import FrameDispatch, FrameHandler
from beava.protocol.server_state import ServerState
from beava.protocol.tcp import HIGH_WATER, FramedTcpProtocol
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
