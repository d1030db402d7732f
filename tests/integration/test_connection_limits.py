"""Connection limits (docs/limits.md): a client that sends a request slower than the
request timeout is answered `request_timeout` and closed (a 1 byte/s client used to hold
its connection forever); idle connections are closed; over the connection cap a new
connection is answered `too_many_connections` and closed while the admin sidecar and the
connections already open keep working."""

from __future__ import annotations

import json
import socket
import struct
import time

from beava_client.opcodes import OP_ERROR, OP_GET, OP_PING
from tests.register_payloads import table_node
from tests.support import BeavaProcess, FrameConn, frame, http_request


def error_code(reply: tuple[int, int, bytes] | None) -> str:
    assert reply is not None, "closed without an answer"
    op, _, payload = reply
    assert op == OP_ERROR, reply
    code: str = json.loads(payload)["error"]["code"]
    return code


def read_http(sock: socket.socket) -> bytes:
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def test_slow_requests_time_out_idle_connections_close_busy_ones_stay() -> None:
    server = BeavaProcess(env={"BEAVA_REQUEST_TIMEOUT_MS": "600",
                               "BEAVA_IDLE_TIMEOUT_MS": "1500"})
    try:
        # framed TCP: a PING frame dribbled one byte every 0.25 s never completes in time
        slow = FrameConn(server.tcp)
        started = time.monotonic()
        data = frame(OP_PING)
        for byte in data[:4]:
            slow.send(bytes([byte]))
            time.sleep(0.25)
        assert error_code(slow.recv_frame()) == "request_timeout"
        assert slow.is_closed()
        assert time.monotonic() - started < 5
        slow.close()
        # HTTP: a request line and headers at one byte per 0.1 s (slowloris)
        sock = socket.create_connection(server.http, timeout=10)
        started = time.monotonic()
        request = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
        try:
            for byte in request:
                sock.sendall(bytes([byte]))
                time.sleep(0.1)
                if time.monotonic() - started > 5:
                    break
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = read_http(sock)
        sock.close()
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert b'"request_timeout"' in answer and b"Connection: close" in answer
        assert time.monotonic() - started < 5
        # idle: a connection that sent one whole request and nothing since is closed
        idle = FrameConn(server.tcp)
        assert idle.request(OP_PING)[0] == OP_PING
        started = time.monotonic()
        assert idle.is_closed(timeout=8)
        assert 1.0 < time.monotonic() - started < 8
        idle.close()
        # a connection that keeps sending whole requests outlives both timeouts
        busy = FrameConn(server.tcp)
        for _ in range(12):
            assert busy.request(OP_PING)[0] == OP_PING
            time.sleep(0.2)
        busy.close()
        # a slow but steady sender of big frames: each one completes within the timeout
        steady = FrameConn(server.tcp)
        payload = json.dumps({"x": "y" * 200_000}).encode()
        for _ in range(3):
            head = struct.pack(">IHB", len(payload) + 3, OP_PING, 1)
            steady.send(head + payload[:100_000])
            time.sleep(0.3)
            steady.send(payload[100_000:])
            assert steady.recv_frame() is not None
        steady.close()
    finally:
        assert server.terminate() == 0


def test_connections_over_the_cap_are_refused_cleanly() -> None:
    server = BeavaProcess(env={"BEAVA_MAX_CONNECTIONS": "3"})
    try:
        held = [FrameConn(server.tcp) for _ in range(2)]
        web = socket.create_connection(server.http, timeout=10)
        for conn in held:
            assert conn.request(OP_PING)[0] == OP_PING
        over = FrameConn(server.tcp)
        refused = over.recv_frame()
        assert error_code(refused) == "too_many_connections"
        assert json.loads(refused[2])["error"]["limit"] == 3  # type: ignore[index]
        assert over.is_closed()
        over.close()
        status, _, body = http_request(server.http, "GET", "/health")
        assert status == 503 and json.loads(body)["error"]["code"] == "too_many_connections"
        # the admin sidecar is not counted; the connections already open keep working
        assert http_request(server.admin, "GET", "/health")[0] == 200
        web.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert web.recv(65536).startswith(b"HTTP/1.1 200 ")
        web.close()
        deadline = time.monotonic() + 5
        while http_request(server.http, "GET", "/health")[0] != 200:
            assert time.monotonic() < deadline, "a closed connection still counts"
            time.sleep(0.05)
        for conn in held:
            assert conn.request(OP_PING)[0] == OP_PING
            conn.close()
    finally:
        assert server.terminate() == 0


def test_a_client_that_never_reads_its_replies_is_dropped_after_the_idle_timeout() -> None:
    server = BeavaProcess(env={"BEAVA_IDLE_TIMEOUT_MS": "1000"})
    try:
        register = {"nodes": [
            {"kind": "event", "name": "E",
             "schema": {"fields": {"user": "str"}, "optional_fields": ["j"]}},
            table_node({"last_j": {"op": "last", "params": {"field": "j"}}}, name="T",
                       up="E")]}
        status, _, raw = http_request(server.http, "POST", "/register",
                                      json.dumps(register).encode(),
                                      {"Content-Type": "application/json"})
        assert status == 200, raw
        status, _, raw = http_request(server.http, "POST", "/push/E", json.dumps(
            {"user": "u1", "j": "x" * 1_000_000}).encode(),
                                      {"Content-Type": "application/json"})
        assert status == 200, raw
        greedy = socket.socket()
        greedy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        greedy.connect(server.tcp)
        replies = 200  # about 200 MB of replies, of which it reads none for a while
        greedy.sendall(frame(OP_GET, 1, b'{"table": "T", "key": "u1"}') * replies)
        time.sleep(3)
        # the server dropped it with its unsent replies: far fewer bytes arrive, then the end
        greedy.settimeout(10)
        received = 0
        try:
            while chunk := greedy.recv(1 << 20):
                received += len(chunk)
        except ConnectionResetError:
            pass
        greedy.close()
        assert received < replies * 1_000_000 // 2, received
        other = FrameConn(server.tcp)
        assert other.request(OP_PING)[0] == OP_PING
        other.close()
    finally:
        assert server.terminate() == 0


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_incomplete_requests_are_held_within_the_server_budget() -> None:
    """64 connections each send the first 768 KiB of a 1 MiB frame to a server whose
    budget for incomplete requests is 8 MiB: the requests past the budget are answered
    `server_busy` and closed as their heads arrive, the server's memory stays bounded, a
    new large request (framed TCP or HTTP) is refused too; once the senders finish or
    close, large requests are served again."""
    budget = 8 * 1024 * 1024
    server = BeavaProcess(env={"BEAVA_REQUEST_BUFFER_BYTES": str(budget)})
    size = 1024 * 1024
    big = frame(OP_PING, 1, b" " * size)
    senders: list[FrameConn] = []
    try:
        FrameConn(server.tcp).request(OP_PING)  # the server is warm
        before = rss_bytes(server.proc.pid)
        for _ in range(64):
            conn = FrameConn(server.tcp)
            conn.send(big[:768 * 1024])
            senders.append(conn)
        time.sleep(0.5)
        grown = rss_bytes(server.proc.pid) - before
        admitted = []
        for conn in senders:
            conn.sock.settimeout(0.2)
            try:
                reply = conn.recv_frame()
            except TimeoutError:
                admitted.append(conn)  # still sending its request: held within the budget
                continue
            refused = json.loads(reply[2])["error"] if reply is not None else {}
            assert (refused.get("code"), refused.get("limit")) == ("server_busy", budget)
            conn.sock.settimeout(5)
            assert conn.is_closed()
        assert 1 <= len(admitted) <= budget // size, len(admitted)
        assert grown < budget + 16 * 1024 * 1024, grown
        # new large requests while the budget is held: refused on both transports
        late = FrameConn(server.tcp)
        late.send(big[:4096])
        assert error_code(late.recv_frame()) == "server_busy"
        late.close()
        head = (f"POST /ping HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {size}\r\n\r\n").encode()
        web = socket.create_connection(server.http, timeout=10)
        web.sendall(head)
        answer = read_http(web)
        web.close()
        assert answer.startswith(b"HTTP/1.1 503 "), answer
        assert b'"server_busy"' in answer and b"Connection: close" in answer
        # one sender finishes its request: it is answered, and its bytes are free again
        admitted[0].sock.settimeout(10)
        admitted[0].send(big[768 * 1024:])
        assert (admitted[0].recv_frame() or (0,))[0] == OP_PING
        for conn in senders:
            conn.close()
        deadline = time.monotonic() + 10
        while True:
            retry = FrameConn(server.tcp)
            retry.send(big)
            reply = retry.recv_frame()
            retry.close()
            if reply is not None and reply[0] == OP_PING:
                break
            assert time.monotonic() < deadline, reply
            time.sleep(0.1)
        status, _, body = http_request(server.http, "POST", "/ping", b" " * size,
                                       {"Content-Type": "application/json"})
        assert status == 200, body
    finally:
        for conn in senders:
            conn.close()
        assert server.terminate() == 0
