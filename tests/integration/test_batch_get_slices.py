"""A BATCH_GET of 100,000 keys is served in slices (docs/limits.md): another client's GETs
are answered while it is in progress (it used to stall every client for about 0.6 s), its
answer is complete and in order, and the frames behind it on its own connection keep FIFO
and read-your-writes."""

from __future__ import annotations

import json
import socket
import threading
import time

from beava_client.opcodes import (
    OP_BATCH_GET,
    OP_GET,
    OP_GET_RESPONSE,
    OP_PUSH,
    OP_PUSH_MANY,
)
from tests.register_payloads import table_node
from tests.support import BeavaProcess, FrameConn, frame, http_request

REGISTER = {"nodes": [
    {"kind": "event", "name": "E", "schema": {"fields": {"user": "str", "x": "f64"}}},
    table_node({"n": {"op": "count"},
                "s": {"op": "sum", "params": {"field": "x", "window": "1h"}}},
               name="T", up="E"),
]}
KEYS = 100_000
USERS = 1000


def test_other_clients_are_answered_while_a_huge_batch_get_is_served() -> None:
    server = BeavaProcess()
    try:
        status, _, raw = http_request(server.http, "POST", "/register",
                                      json.dumps(REGISTER).encode(),
                                      {"Content-Type": "application/json"})
        assert status == 200, raw
        conn = FrameConn(server.tcp, timeout=60)
        bodies = [{"user": f"u{i}", "x": i} for i in range(USERS)]
        op, _, raw = conn.request(OP_PUSH_MANY, 1, json.dumps({"event": "E",
                                                               "bodies": bodies}).encode())
        assert op == OP_PUSH_MANY, raw
        batch = json.dumps({"requests": [{"table": "T", "key": f"u{i % USERS}"}
                                         for i in range(KEYS)]}).encode()
        answered: list[float] = []  # when the other client's GETs were answered
        stop = threading.Event()

        def other_client() -> None:
            other = FrameConn(server.tcp, timeout=60)
            while not stop.is_set():
                reply = other.request(OP_GET, 1, b'{"table": "T", "key": "u7"}')
                assert reply[0] == OP_GET_RESPONSE and json.loads(reply[2])["n"] == 1
                answered.append(time.monotonic())
                time.sleep(0.001)
            other.close()

        thread = threading.Thread(target=other_client)
        thread.start()
        try:
            while not answered:
                time.sleep(0.01)
            # behind the batch on the same connection: a push, then a read of it
            sent = time.monotonic()
            conn.send(frame(OP_BATCH_GET, 1, batch))
            time.sleep(0.05)  # arriving in a later read, while the batch is in its slices
            conn.send(frame(OP_PUSH, 1, b'{"event": "E", "body": {"user": "u3", "x": 1}}')
                      + frame(OP_GET, 1, b'{"table": "T", "key": "u3"}'))
            reply = conn.recv_frame()
            done = time.monotonic()
        finally:
            stop.set()
            thread.join()
        assert reply is not None and reply[0] == OP_GET_RESPONSE
        results = json.loads(reply[2])["results"]
        assert len(results) == KEYS
        assert all(row["n"] == 1 and row["s"] == float(i % USERS)
                   for i, row in enumerate(results))
        push_ack, get_reply = conn.recv_frame(), conn.recv_frame()
        assert push_ack is not None and push_ack[0] == OP_PUSH
        assert get_reply is not None and json.loads(get_reply[2])["n"] == 2
        during = [t for t in answered if sent < t < done]
        # liveness, not speed: the other client kept being answered during the batch (one
        # GET per slice of 2 ms at most would be hundreds; before slicing it was at most 1)
        assert len(during) >= 5, (len(during), done - sent)
        conn.close()
    finally:
        assert server.terminate() == 0


def _read_responses(sock: socket.socket, count: int) -> list[tuple[int, bytes]]:
    """``count`` pipelined HTTP responses (status, body) read off ``sock``."""
    buf = b""
    out: list[tuple[int, bytes]] = []
    while len(out) < count:
        head_end = buf.find(b"\r\n\r\n")
        if head_end >= 0:
            head = buf[:head_end].decode("latin-1")
            length = int(head.lower().split("content-length:")[1].split("\r\n")[0])
            if len(buf) >= head_end + 4 + length:
                out.append((int(head.split(" ")[1]), buf[head_end + 4:head_end + 4 + length]))
                buf = buf[head_end + 4 + length:]
                continue
        chunk = sock.recv(1 << 20)
        assert chunk, "connection closed"
        buf += chunk
    return out


def _post(path: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def test_http_requests_behind_a_sliced_batch_wait_for_it() -> None:
    server = BeavaProcess()
    try:
        status, _, raw = http_request(server.http, "POST", "/register",
                                      json.dumps(REGISTER).encode(),
                                      {"Content-Type": "application/json"})
        assert status == 200, raw
        status, _, raw = http_request(server.http, "POST", "/push/E",
                                      b'{"user": "u3", "x": 1}',
                                      {"Content-Type": "application/json"})
        assert status == 200, raw
        batch = json.dumps({"requests": [{"table": "T", "key": "u3"}] * KEYS}).encode()
        sock = socket.create_connection(server.http, timeout=60)
        sock.sendall(_post("/batch_get", batch) + _post("/push/E", b'{"user": "u3", "x": 1}'))
        time.sleep(0.05)  # in a later read, while the batch is in its slices
        sock.sendall(_post("/get", b'{"table": "T", "key": "u3"}'))
        (s1, batch_reply), (s2, _), (s3, get_reply) = _read_responses(sock, 3)
        sock.close()
        assert (s1, s2, s3) == (200, 200, 200)
        results = json.loads(batch_reply)["results"]
        assert len(results) == KEYS and all(row["n"] == 1 for row in results)
        assert json.loads(get_reply)["n"] == 2
    finally:
        assert server.terminate() == 0
