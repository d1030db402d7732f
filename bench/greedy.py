"""``python -m bench greedy``: a second client's GET latency while slow or greedy clients
hold the server.

Each scenario starts its clients, lets them settle for a second, then measures sequential
GETs of one small row from a process of its own (``bench.get_sampler``):

- ``idle``: nobody else.
- ``slowloris``: connections on both ports that send one byte of a request every half
  second and never finish it (reconnecting when the server drops them).
- ``unread-pipeline``: a TCP and an HTTP client that pipeline reads of a 1 MB row as fast
  as the server takes them and never read a reply.
- ``batch-100k``: a client that sends BATCH_GETs of 100,000 keys back to back (it reads
  each answer).
- ``all``: the three at once.

The clients are plain threads here; the test ``tests/integration/test_greedy_clients.py``
uses them too.
"""

from __future__ import annotations

import json
import socket
import statistics
import struct
import threading
import time
import urllib.request
from collections.abc import Callable

from beava_client.opcodes import OP_BATCH_GET, OP_GET, OP_GET_RESPONSE, OP_PUSH_MANY
from bench.get_sampler import Sampler
from bench.loadgen import CT_JSON, frame

REGISTER = {"nodes": [
    {"kind": "event", "name": "E",
     "schema": {"fields": {"user": "str", "x": "f64"}, "optional_fields": ["blob"]}},
    {"kind": "derivation", "name": "T", "output_kind": "table", "upstreams": ["E"],
     "ops": [{"op": "group_by", "keys": ["user"], "agg": {
         "n": {"op": "count", "params": {}},
         "s": {"op": "sum", "params": {"field": "x", "window": "1h"}},
         "blob": {"op": "last", "params": {"field": "blob"}}}}],
     "table_primary_key": ["user"]},
]}
TABLE = "T"
SAMPLE_KEY = "u7"
BIG_KEY = "big"
USERS = 1000
BATCH_KEYS = 100_000
SCENARIOS = ("idle", "slowloris", "unread-pipeline", "batch-100k", "all")


def prepare(http_addr: str, tcp: tuple[str, int]) -> None:
    """Register the table, push one row per user and a 1 MB row under ``BIG_KEY``."""
    _post(http_addr, "/register", REGISTER)
    bodies: list[dict[str, object]] = [{"user": f"u{i}", "x": float(i)} for i in range(USERS)]
    bodies.append({"user": BIG_KEY, "x": 0.0, "blob": "b" * 1_000_000})
    with socket.create_connection(tcp) as sock:
        sock.sendall(frame(OP_PUSH_MANY, CT_JSON,
                           json.dumps({"event": "E", "bodies": bodies}).encode()))
        op, payload = _read_frame(sock)
    if op != OP_PUSH_MANY or json.loads(payload).get("errors"):
        raise RuntimeError(f"preparing the rows failed: {payload[:200]!r}")


class GreedyClients:
    """The clients of one scenario, each a thread until :meth:`stop`. ``counts`` tells
    what they did (so a caller can see they were really at it)."""

    def __init__(self, http: tuple[str, int], tcp: tuple[str, int], scenario: str) -> None:
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
        self._http, self._tcp = http, tcp
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}
        runners: list[Callable[[], None]] = []
        if scenario in ("slowloris", "all"):
            runners += [self._slowloris] * 4
        if scenario in ("unread-pipeline", "all"):
            runners += [self._unread_tcp, self._unread_http]
        if scenario in ("batch-100k", "all"):
            runners.append(self._batches)
        self._threads = [threading.Thread(target=r, daemon=True) for r in runners]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _count(self, what: str, n: int = 1) -> None:
        with self._lock:
            self.counts[what] = self.counts.get(what, 0) + n

    def _slowloris(self, conns: int = 25) -> None:
        """``conns`` connections per port, one byte each every half second."""
        partial = {self._http: b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ",
                   self._tcp: frame(OP_GET, CT_JSON, b'{"table": "T", "key": "u1"}')}
        held: list[tuple[socket.socket, bytes]] = []
        try:
            while not self._stop.is_set():
                while len(held) < 2 * conns:
                    addr = self._http if len(held) % 2 else self._tcp
                    try:
                        held.append((socket.create_connection(addr, timeout=5), partial[addr]))
                        self._count("slowloris connections")
                    except OSError:
                        self._count("slowloris refused")
                        break
                kept = []
                for sock, rest in held:
                    try:
                        sock.send(rest[:1])
                        kept.append((sock, rest[1:] or b"a"))
                        self._count("slowloris bytes")
                    except OSError:  # dropped by the server: open another
                        sock.close()
                        self._count("slowloris dropped")
                held = kept
                self._stop.wait(0.5)
        finally:
            for sock, _ in held:
                sock.close()

    def _unread(self, request: bytes, addr: tuple[str, int], what: str) -> None:
        """Pipeline ``request`` on one connection without reading; reconnect when dropped."""
        burst = request * 64
        while not self._stop.is_set():
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(0.5)
            try:
                sock.connect(addr)
                self._count(f"{what} connections")
                while not self._stop.is_set():
                    try:
                        sent = sock.send(burst)
                    except TimeoutError:  # the server stopped reading us: back-pressure
                        self._count(f"{what} blocked sends")
                        continue
                    self._count(f"{what} requests sent", sent // len(request))
            except OSError:
                self._count(f"{what} dropped")
            finally:
                sock.close()

    def _unread_tcp(self) -> None:
        self._unread(frame(OP_GET, CT_JSON, json.dumps({"table": TABLE,
                                                        "key": BIG_KEY}).encode()),
                     self._tcp, "unread tcp")

    def _unread_http(self) -> None:
        self._unread(f"GET /get/{TABLE}/{BIG_KEY} HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
                     self._http, "unread http")

    def _batches(self) -> None:
        body = json.dumps({"requests": [{"table": TABLE, "key": f"u{i % USERS}"}
                                        for i in range(BATCH_KEYS)]}).encode()
        request = frame(OP_BATCH_GET, CT_JSON, body)
        with socket.create_connection(self._tcp) as sock:
            while not self._stop.is_set():
                sock.sendall(request)
                op, _ = _read_frame(sock)
                self._count("batches answered" if op == OP_GET_RESPONSE else "batches failed")


def run(scenarios: list[str], samples: int = 2000, settle_s: float = 1.0
        ) -> dict[str, dict[str, object]]:
    """Each scenario against a fresh server (the installed one, default settings):
    the second client's GET latency and what the greedy clients did."""
    from beava.launcher import split_addr
    from bench.server_process import BenchServer

    results: dict[str, dict[str, object]] = {}
    for scenario in scenarios:
        server = BenchServer("--memory-only")
        try:
            http = split_addr(server.addrs["http"])
            prepare(server.addrs["http"], server.tcp())
            clients = GreedyClients(http, server.tcp(), scenario)
            try:
                time.sleep(settle_s)
                latencies = Sampler(server.tcp(), TABLE, SAMPLE_KEY, samples).latencies()
            finally:
                clients.stop()
            results[scenario] = {"get": percentiles(latencies), "clients": clients.counts}
        finally:
            server.stop()
    return results


def percentiles(samples: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples)
    return {"p50_ms": round(statistics.median(ms), 3),
            "p99_ms": round(ms[max(0, int(len(ms) * 0.99) - 1)], 3),
            "max_ms": round(ms[-1], 3)}


def print_results(results: dict[str, dict[str, object]]) -> None:
    print(f"{'scenario':<16} {'GET p50 ms':>10} {'p99 ms':>8} {'max ms':>8}  greedy clients")
    for scenario, result in results.items():
        get = result["get"]
        assert isinstance(get, dict)
        print(f"{scenario:<16} {get['p50_ms']:>10.3f} {get['p99_ms']:>8.3f} "
              f"{get['max_ms']:>8.3f}  {json.dumps(result['clients'])}")


def _post(http_addr: str, path: str, doc: object) -> None:
    request = urllib.request.Request(f"http://{http_addr}{path}", json.dumps(doc).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        reply.read()


def _read_frame(sock: socket.socket) -> tuple[int, bytes]:
    head = _read_exactly(sock, 7)
    length, op, _ct = struct.unpack(">IHB", head)
    return op, _read_exactly(sock, length - 3)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise ConnectionError("server closed the connection")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)
