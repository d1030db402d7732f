"""Spark connector test support: one local SparkSession for the whole run, and a framed-TCP
proxy in front of a real beava server that can drop a connection mid-stream or hide
OP_PUSH_MANY (to play a beava 0.0.6 server).

Test modules that need Spark call ``pytest.importorskip("pyspark")`` first, so without
pyspark they are skipped with that reason.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from beava_client.frames import FrameDecoder, encode_frame
from beava_client.opcodes import OP_PUSH_MANY

SPARK_MASTER = "local[2,4]"
"""Two worker threads, as ``local[2]``, but a failed task is tried up to 4 times (plain
``local[N]`` never retries a task) so that the fault tests see Spark's retry."""
UNKNOWN_OP = 0x0013  # an unassigned opcode: the server answers unknown_op (wire.md §2.5)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A SparkSession on ``local[2,4]`` shared by every Spark test."""
    pyspark_sql = pytest.importorskip("pyspark.sql", reason="pyspark is not installed")
    # Python workers must run this interpreter (it has beava_spark and beava_client).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # all Spark traffic stays on loopback
    session = (
        pyspark_sql.SparkSession.builder.master(SPARK_MASTER)
        .appName("beava-spark-tests")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("OFF")  # expected task failures would flood the log
    yield session
    session.stop()


class FaultProxy:
    """Forwards framed TCP between clients and a beava server on 127.0.0.1.

    - ``drop_after``: once a connection has forwarded that many request bytes, close the
      client's side; the server reads what was forwarded, then EOF (at most ``max_drops``
      times; None = never).
    - ``hide_push_many``: rewrite OP_PUSH_MANY requests to an unassigned opcode, so the
      server answers ``unknown_op`` as beava 0.0.6 does.
    Counts connections, drops and request frames per opcode.
    """

    def __init__(self, target: tuple[str, int], *, drop_after: int | None = None,
                 max_drops: int | None = 1, hide_push_many: bool = False) -> None:
        self.target = target
        self.drop_after = drop_after
        self.max_drops = max_drops
        self.hide_push_many = hide_push_many
        self.connections = 0
        self.drops = 0
        self.ops: Counter[int] = Counter()
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._closed = False
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"tcp://127.0.0.1:{self._listener.getsockname()[1]}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self._lock:
                self.connections += 1
                self._sockets += [client, upstream]
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._replies, args=(upstream, client), daemon=True).start()

    def _may_drop(self, forwarded: int) -> bool:
        if self.drop_after is None or forwarded < self.drop_after:
            return False
        with self._lock:
            if self.max_drops is not None and self.drops >= self.max_drops:
                return False
            self.drops += 1
            return True

    def _requests(self, client: socket.socket, upstream: socket.socket) -> None:
        decoder = FrameDecoder()
        forwarded = 0
        try:
            while data := client.recv(65536):
                out = bytearray()
                for op, ct, payload in decoder.feed(data):
                    with self._lock:
                        self.ops[op] += 1
                    if self.hide_push_many and op == OP_PUSH_MANY:
                        op = UNKNOWN_OP
                    out += encode_frame(op, ct, bytes(payload))
                if not out:
                    continue
                drop = self._may_drop(forwarded + len(out))
                if drop:
                    # The client loses its connection before any reply to this chunk can
                    # reach it (so it always has requests in flight when it sees the
                    # drop); the server gets a FIN after the forwarded requests. Closing
                    # the upstream socket outright could reset it while those requests
                    # are still unread, and the server would then apply none of them.
                    _close(client)
                upstream.sendall(out)
                forwarded += len(out)
                if drop:
                    with contextlib.suppress(OSError):
                        upstream.shutdown(socket.SHUT_WR)
                    return
        except OSError:
            pass
        _close(client, upstream)

    def _replies(self, upstream: socket.socket, client: socket.socket) -> None:
        deliver = True
        try:
            while data := upstream.recv(65536):
                if deliver:
                    try:
                        client.sendall(data)
                    except OSError:  # the client side was dropped: drain the server until
                        deliver = False  # it closes, so no reset cuts requests it has not read
        except OSError:
            pass
        _close(client, upstream)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            sockets = list(self._sockets)
        _close(*sockets)


def _close(*socks: socket.socket) -> None:
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()


@pytest.fixture
def make_proxy() -> Iterator[Any]:
    """``make_proxy(server, **options) -> FaultProxy``; every proxy is closed afterwards."""
    proxies: list[FaultProxy] = []

    def make(target: tuple[str, int], **options: Any) -> FaultProxy:
        proxy = FaultProxy(target, **options)
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()
