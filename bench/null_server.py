"""A framed-TCP server that answers every frame with a fixed push ack and does no work.

Measures the load generator's own ceiling on this machine (client and server share the
cores): ``python -m bench.null_server`` prints ``{"addr": "127.0.0.1:PORT"}`` and serves.
"""

from __future__ import annotations

import asyncio
import json
import sys

from beava._fast.wire.frame_splitter import FrameSplitter, encode_frame

ACK = encode_frame(0x0010, 0x01, b'{"ack_lsn":1,"idempotent_replay":false,"registry_version":1}')


class NullProtocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.splitter = FrameSplitter()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        frames = self.splitter.feed(data)
        if frames and self.transport is not None:
            self.transport.write(ACK * len(frames))


async def serve() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(NullProtocol, "127.0.0.1", 0, backlog=1024)
    host, port = server.sockets[0].getsockname()[:2]
    sys.stdout.write(json.dumps({"addr": f"{host}:{port}"}) + "\n")
    sys.stdout.flush()
    await server.serve_forever()


if __name__ == "__main__":
    import uvloop

    uvloop.run(serve())
