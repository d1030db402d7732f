"""Pipelined multi-connection framed-TCP load generator.

Frames are encoded before the clock starts; each connection keeps up to ``depth`` pushes
in flight and writes them in chunks, and replies are counted by walking their length
prefixes (an error frame, op 0xFFFF, is counted as an error). The generator runs on
uvloop in this process, so it shares the machine's cores with the server it measures.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

import msgspec

OP_PING = 0x0000
OP_PUSH = 0x0010
OP_GET = 0x0020
OP_ERROR = 0xFFFF
CT_JSON = 0x01
CT_MSGPACK = 0x02
CHUNK = 64  # frames per write


def frame(op: int, ct: int, payload: bytes) -> bytes:
    return struct.pack(">IHB", len(payload) + 3, op, ct) + payload


def push_frames(event: str, bodies: list[dict[str, Any]], content: str = "msgpack"
                ) -> list[bytes]:
    if content == "msgpack":
        enc, ct = msgspec.msgpack.encode, CT_MSGPACK
    else:
        enc, ct = msgspec.json.encode, CT_JSON
    return [frame(OP_PUSH, ct, enc({"event": event, "body": b})) for b in bodies]


def chunks(frames: list[bytes], size: int = CHUNK) -> list[tuple[bytes, int]]:
    return [(b"".join(frames[i:i + size]), len(frames[i:i + size]))
            for i in range(0, len(frames), size)]


@dataclass
class BlastResult:
    replies: int
    errors: int
    seconds: float
    first_error: bytes = b""

    @property
    def rate(self) -> float:
        return self.replies / self.seconds if self.seconds else 0.0


class _Conn(asyncio.Protocol):
    def __init__(self, blast: _Blast, offset: int) -> None:
        self.blast = blast
        self.next = offset
        self.in_flight = 0
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.done = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.fill()

    def fill(self) -> None:
        blast = self.blast
        out = []
        while self.in_flight + CHUNK <= blast.depth and not blast.stopping:
            data, n = blast.chunks[self.next % len(blast.chunks)]
            self.next += 1
            if blast.limit is not None:
                if blast.sent >= blast.limit:
                    break
                blast.sent += n
            out.append(data)
            self.in_flight += n
        if out and self.transport is not None:
            self.transport.write(b"".join(out))
        if self.in_flight == 0 and not self.done.done():
            self.done.set_result(None)

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        pos = 0
        count = 0
        end = len(buf)
        blast = self.blast
        while end - pos >= 7:
            length = int.from_bytes(buf[pos:pos + 4], "big")
            if end - pos < 4 + length:
                break
            if buf[pos + 4] == 0xFF and buf[pos + 5] == 0xFF:
                blast.errors += 1
                if not blast.first_error:
                    blast.first_error = buf[pos + 7:pos + 4 + length]
            pos += 4 + length
            count += 1
        self.buf = buf[pos:]
        self.in_flight -= count
        blast.replies += count
        self.fill()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(ConnectionError("server closed the connection"))


class _Blast:
    def __init__(self, chunk_list: list[tuple[bytes, int]], depth: int,
                 limit: int | None) -> None:
        self.chunks = chunk_list
        self.depth = max(depth, CHUNK)
        self.limit = limit
        self.sent = 0
        self.replies = 0
        self.errors = 0
        self.first_error = b""
        self.stopping = False


async def blast(addr: tuple[str, int], frames: list[bytes], *, connections: int, depth: int,
                seconds: float | None = None, total: int | None = None,
                stop: asyncio.Event | None = None) -> BlastResult:
    """Push for ``seconds`` or until ``stop`` is set (cycling through ``frames``), or
    exactly ``total`` frames in order (``connections`` should then be 1 to keep per-key
    order)."""
    loop = asyncio.get_running_loop()
    state = _Blast(chunks(frames), depth, total)
    per_conn = max(1, len(state.chunks) // connections)
    started = time.perf_counter()
    conns = []
    for i in range(connections):
        _, proto = await loop.create_connection(lambda i=i: _Conn(state, i * per_conn), *addr)
        conns.append(proto)
    timed = seconds is not None or stop is not None
    if timed:
        if stop is not None:
            await stop.wait()
        else:
            await asyncio.sleep(seconds or 0.0)
        state.stopping = True
        elapsed = time.perf_counter() - started
        replies = state.replies
    await asyncio.gather(*(c.done for c in conns))
    if not timed:
        elapsed = time.perf_counter() - started
        replies = state.replies
    for c in conns:
        if c.transport is not None:
            c.transport.close()
    return BlastResult(replies, state.errors, elapsed, state.first_error)


def request(sock: socket.socket, data: bytes) -> tuple[int, bytes]:
    """One blocking round trip on ``sock``."""
    sock.sendall(data)
    head = _read(sock, 7)
    length, op, _ct = struct.unpack(">IHB", head)
    return op, _read(sock, length - 3)


def _read(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("server closed the connection")
        buf += chunk
    return buf


def get_latencies(addr: tuple[str, int], table: str, key: str, count: int) -> list[float]:
    """Sequential OP_GET round trips (msgpack) for one key; seconds each."""
    sock = socket.create_connection(addr)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    data = frame(OP_GET, CT_MSGPACK, msgspec.msgpack.encode({"table": table, "key": key}))
    out = []
    for _ in range(count):
        t0 = time.perf_counter()
        op, payload = request(sock, data)
        out.append(time.perf_counter() - t0)
        if op == OP_ERROR:
            raise RuntimeError(f"GET failed: {payload!r}")
    sock.close()
    return out
