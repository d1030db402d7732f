"""PING frames per second over one pipelined framed-TCP connection.

A writer thread keeps ``depth`` frames in flight; the reader counts reply frames. The
client is plain sockets (no framing library) so the number is the server's transport
cost plus this loop.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

from bench.server_process import BenchServer

PING = struct.pack(">IHB", 3, 0x0000, 1)
REPLY_HEAD = 7


def run(addr: tuple[str, int], total: int, depth: int) -> float:
    sock = socket.create_connection(addr)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    window = threading.Semaphore(depth)
    batch = 256
    chunk = PING * batch

    def writer() -> None:
        sent = 0
        while sent < total:
            for _ in range(batch):
                window.acquire()
            sock.sendall(chunk)
            sent += batch

    started = time.perf_counter()
    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    received = 0
    buf = b""
    while received < total:
        data = sock.recv(1 << 20)
        if not data:
            raise RuntimeError("server closed the connection")
        buf += data
        pos = 0
        while len(buf) - pos >= 4:
            (length,) = struct.unpack_from(">I", buf, pos)
            if len(buf) - pos < 4 + length:
                break
            pos += 4 + length
            received += 1
            window.release()
        buf = buf[pos:]
    elapsed = time.perf_counter() - started
    sock.close()
    return total / elapsed


def main(total: int, depth: int) -> None:
    server = BenchServer("--memory-only")
    try:
        rate = run(server.tcp(), total, depth)
    finally:
        server.stop()
    print(f"PING over one pipelined connection (depth {depth}, {total} frames): "
          f"{rate:,.0f} frames/s")
