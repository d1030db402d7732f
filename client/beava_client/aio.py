"""asyncio framed-TCP client and connection pool (spec/wire.md §2, spec/sdk.md §9).

Concurrent coroutines share one connection: requests are written in call order and
replies matched strictly FIFO, with at most ``max_in_flight`` requests outstanding. A
coroutine cancelled (or timed out) after its request was written keeps its FIFO slot: the
reply is read and dropped. Bulk pushes queue one waiter per batch of frames, not one
future per frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any

from .errors import ConnectionClosed, ProtocolError, Timeout, TransportError
from .frames import DEFAULT_MAX_FRAME_BYTES, Frame, FrameDecoder
from .lifecycle import DEFAULT_TIMEOUT, AsyncClient, check_count
from .messages import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_MAX_IN_FLIGHT,
    UNSAFE_OPS,
    Batch,
    batch_get_body,
    default_batch_size,
    get_body,
    join_frames,
    register_body,
    scan_body,
)
from .opcodes import (
    CT_JSON,
    DEFAULT_REPLY_OP,
    OP_BATCH_GET,
    OP_DESCRIBE,
    OP_GET,
    OP_PING,
    OP_PUSH,
    OP_REGISTER,
    OP_RESET,
    OP_SCAN,
    OP_TEST_CLOCK,
    expected_reply_op,
)
from .results import (
    PushManyTally,
    PushResult,
    PushTally,
    decode_replies,
    decode_reply,
    empty_push_result,
)
from .tcp_base import PipelineBase, TcpClientBase
from .urls import DEFAULT_TCP_HOST, DEFAULT_TCP_PORT, tcp_endpoint


def _retrieve(fut: asyncio.Future[Any]) -> None:
    # Bulk futures may fail after their caller stopped awaiting them (timeout, earlier
    # failure); reading the exception here keeps asyncio from logging it as unhandled.
    if not fut.cancelled():
        fut.exception()


def _fail_futures(futures: Iterable[asyncio.Future[Any]], exc: BaseException) -> None:
    for fut in futures:
        if not fut.done():
            fut.set_exception(exc)


class _Waiter:
    """Waiter for the next ``remaining`` replies; ``take(frames, i)`` consumes from
    ``frames[i]`` and returns the index after the last one taken."""

    __slots__ = ("future", "remaining")

    future: asyncio.Future[Any]
    remaining: int

    def fail(self, exc: BaseException) -> None:
        _fail_futures((self.future,), exc)


class _OneReply(_Waiter):
    """Waiter for one reply frame, delivered as the future's result."""

    __slots__ = ()

    def __init__(self, future: asyncio.Future[Frame]) -> None:
        self.future = future
        self.remaining = 1

    def take(self, frames: list[Frame], i: int) -> int:
        self.remaining = 0
        if not self.future.done():  # a cancelled caller's reply is dropped here
            self.future.set_result(frames[i])
        return i + 1


class _ManyReplies(_Waiter):
    """Waiter for ``count`` consecutive replies, handed to ``sink`` as they arrive."""

    __slots__ = ("sink",)

    def __init__(
        self, future: asyncio.Future[None], count: int, sink: Callable[[list[Frame]], None]
    ) -> None:
        self.future = future
        self.remaining = count
        self.sink = sink

    def take(self, frames: list[Frame], i: int) -> int:
        j = min(len(frames), i + self.remaining)
        self.sink(frames if i == 0 and j == len(frames) else frames[i:j])
        self.remaining -= j - i
        if not self.remaining and not self.future.done():
            self.future.set_result(None)
        return j


class _Connection(asyncio.Protocol):
    """One framed TCP connection: FIFO reply matching, in-flight credits, write flow
    control."""

    def __init__(self, name: str, max_in_flight: int, max_frame_bytes: int) -> None:
        self.name = name
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder(max_frame_bytes)
        self.waiters: deque[_OneReply | _ManyReplies] = deque()
        self.max_in_flight = max_in_flight
        self.credits = max_in_flight
        self.credit_waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        self.failure: TransportError | None = None
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        # Requests written in one loop iteration (by any number of coroutines) are joined
        # into one transport.write: one syscall instead of one per request.
        self._out: list[bytes | bytearray] | None = None

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, AttributeError):  # latency only
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.decoder.feed(data)
        except ProtocolError as exc:
            self.abort(exc)
            return
        if not frames:
            return
        n = len(frames)
        i = 0
        waiters = self.waiters
        while i < n:
            if not waiters:
                self.abort(ProtocolError(
                    "unsolicited_reply", f"{self.name} sent more replies than requests"
                ))
                return
            waiter = waiters[0]
            i = waiter.take(frames, i)
            if not waiter.remaining:
                waiters.popleft()
        self._release(n)

    def connection_lost(self, exc: Exception | None) -> None:
        detail = f": {exc}" if exc else ""
        self._fail(ConnectionClosed(
            "connection_closed", f"{self.name} closed the connection{detail}"
        ))

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        waiters, self._drain_waiters = self._drain_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    # -- used by the client ----------------------------------------------------------------

    @property
    def usable(self) -> bool:
        return self.failure is None and self.transport is not None

    async def acquire(self, count: int) -> None:
        """Wait for ``count`` in-flight credits (FIFO among waiters)."""
        if self.failure is not None:
            raise self.failure
        if self.credits >= count and not self.credit_waiters:
            self.credits -= count
            return
        fut = asyncio.get_running_loop().create_future()
        entry = (count, fut)
        self.credit_waiters.append(entry)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._release(count)  # granted, but the caller is gone
            else:
                with contextlib.suppress(ValueError):
                    self.credit_waiters.remove(entry)
                self._wake()
            raise

    def _release(self, count: int) -> None:
        self.credits += count
        if self.credit_waiters:
            self._wake()

    def _wake(self) -> None:
        waiters = self.credit_waiters
        while waiters and waiters[0][0] <= self.credits:
            count, fut = waiters.popleft()
            if fut.done():
                continue
            self.credits -= count
            fut.set_result(None)

    def send(self, data: bytes | bytearray, waiter: _OneReply | _ManyReplies) -> None:
        """Queue one request (or batch) for writing and its waiter; no await in between,
        so write order and waiter order always agree."""
        if self.failure is not None:
            raise self.failure
        self.waiters.append(waiter)
        out = self._out
        if out is None:
            self._out = [data]
            asyncio.get_running_loop().call_soon(self._flush)
        else:
            out.append(data)

    def _flush(self) -> None:
        out, self._out = self._out, None
        if out and self.failure is None and self.transport is not None:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    async def drain(self) -> None:
        """Wait while the transport's write buffer is above its high-water mark."""
        if self._out is not None:
            self._flush()
        if self._write_paused and self.failure is None:
            fut = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(fut)
            await fut

    def abort(self, exc: TransportError) -> None:
        """Fail everything outstanding and drop the connection."""
        self._fail(exc)
        if self.transport is not None:
            self.transport.abort()

    def _fail(self, exc: TransportError) -> None:
        if self.failure is None:
            self.failure = exc
        exc = self.failure
        waiters, self.waiters = self.waiters, deque()
        for waiter in waiters:
            waiter.fail(exc)
        credit_waiters, self.credit_waiters = self.credit_waiters, deque()
        _fail_futures((fut for _, fut in credit_waiters), exc)
        self._out = None
        drain_waiters, self._drain_waiters = self._drain_waiters, []
        _fail_futures(drain_waiters, exc)
        self.decoder.clear()


class AsyncTcpClient(AsyncClient, TcpClientBase):
    """asyncio framed TCP client for one server (one pipelined connection).

    Same methods, arguments and results as ``TcpClient``, as coroutines. The connection
    opens on ``connect()``, ``async with``, or the first call. After a transport failure
    every request in flight on it fails with TransportError and the next call opens a new
    connection; ``reconnect=True`` retries a failed call once when safe (ping, get,
    batch_get, register, reset, or a request not yet written). ``timeout`` bounds connect
    and each wait (for a credit or a reply). Belongs to the event loop it first runs on.
    """

    def __init__(
        self,
        host: str = DEFAULT_TCP_HOST,
        port: int = DEFAULT_TCP_PORT,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        content_type: int | str = CT_JSON,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        reconnect: bool = False,
        token: str | None = None,
        tls: bool | ssl.SSLContext = False,
        ca: str | None = None,
    ) -> None:
        super().__init__(
            host, port, timeout=timeout, content_type=content_type,
            max_in_flight=max_in_flight, max_frame_bytes=max_frame_bytes, reconnect=reconnect,
            token=token, tls=tls, ca=ca,
        )
        self._conn: _Connection | None = None
        self._connect_lock: asyncio.Lock | None = None
        self._probe_lock: asyncio.Lock | None = None

    # -- connection ----------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """True while a connection is open."""
        return self._conn is not None and self._conn.usable

    async def connect(self) -> None:
        """Open the connection now (otherwise the first call does)."""
        await self._open()

    async def close(self) -> None:
        """Close the connection; requests in flight fail. Idempotent; later calls raise
        RuntimeError."""
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.abort(ConnectionClosed("connection_closed", "client closed"))

    async def _connection(self) -> _Connection:
        self._check_open()
        conn = self._conn
        if conn is not None and conn.usable:
            return conn
        if self._connect_lock is None:
            self._connect_lock = asyncio.Lock()
        async with self._connect_lock:
            conn = self._conn
            if conn is not None and conn.usable:
                return conn
            self._check_open()
            name = self._address
            loop = asyncio.get_running_loop()
            try:
                _, conn = await loop.create_connection(
                    lambda: _Connection(name, self.max_in_flight, self.max_frame_bytes),
                    self.host,
                    self.port,
                    ssl=self._ssl,
                    server_hostname=self.host if self._ssl is not None else None,
                )
            except OSError as exc:
                raise TransportError("connect_failed", f"cannot connect to {name}: {exc}") from exc
            frame = self._auth_frame()
            if frame is not None:  # the token first: nothing else uses the connection yet
                fut: asyncio.Future[Frame] = loop.create_future()
                conn.credits -= 1
                conn.send(frame, _OneReply(fut))
                try:
                    self._check_auth_reply(await fut)
                except BaseException:
                    self._discard(conn)
                    raise
            self._conn = conn
            return conn

    async def _open(self) -> _Connection:
        """The connection, opened within the timeout; with ``reconnect`` a failed connect
        is tried once more."""
        try:
            async with asyncio.timeout(self.timeout):
                try:
                    return await self._connection()
                except TransportError:
                    if not self.reconnect:
                        raise
                    return await self._connection()
        except TimeoutError as exc:
            if isinstance(exc, Timeout):
                raise
            raise self._timeout_error("connect to") from None

    def _discard(self, conn: _Connection) -> None:
        if self._conn is conn:
            self._conn = None
        if conn.failure is None:
            conn.abort(ConnectionClosed("connection_closed", "connection discarded"))

    def _timeout_error(self, what: str) -> Timeout:
        return Timeout("timeout", self._timeout_message(f"{what} {self._address}"))

    # -- single requests -------------------------------------------------------------------

    async def _acquire_slot(self) -> _Connection:
        """Slow path of ``_roundtrip``: open the connection and/or wait for a credit."""
        try:
            async with asyncio.timeout(self.timeout):
                conn = await self._connection()
                await conn.acquire(1)
                return conn
        except TimeoutError as exc:
            if isinstance(exc, Timeout):
                raise
            raise self._timeout_error("request to") from None

    async def _roundtrip(self, frame: bytes, safe: bool) -> Frame:
        loop = asyncio.get_running_loop()
        retried = False
        while True:
            conn = self._conn
            written = False
            try:
                if (conn is not None and conn.failure is None and conn.credits
                        and not conn.credit_waiters and not self._closed):
                    conn.credits -= 1  # fast path: no await before the write
                else:
                    conn = await self._acquire_slot()
                fut: asyncio.Future[Frame] = loop.create_future()
                conn.send(frame, _OneReply(fut))
                written = True
                # A bare timer on the reply future is much cheaper than asyncio.timeout();
                # on expiry the waiter keeps its FIFO slot and the late reply is dropped.
                timer = loop.call_later(self.timeout, self._expire, fut)
                try:
                    reply = await fut
                finally:
                    timer.cancel()
                if conn._write_paused:
                    await conn.drain()
                return reply
            except Timeout:
                raise  # the connection stays: the late reply is dropped when it comes
            except TransportError as exc:
                if conn is not None:
                    self._discard(conn)
                if not self._may_retry(exc, retried=retried, sent=written, safe=safe):
                    raise
                retried = True

    def _expire(self, fut: asyncio.Future[Frame]) -> None:
        if not fut.done():
            fut.set_exception(self._timeout_error("request to"))

    async def request(
        self,
        op: int,
        payload: Any = None,
        *,
        ct: int | None = None,
        expect_op: int | None = DEFAULT_REPLY_OP,
        decode_as: Any = Any,
    ) -> Any:
        """Send one request and return the decoded reply body (see ``TcpClient.request``)."""
        frame = self.encode_request(op, payload, ct=ct)
        reply = await self._roundtrip(frame, op not in UNSAFE_OPS)
        return decode_reply(reply, expected_reply_op(op, expect_op), decode_as)

    async def ping(self) -> dict[str, Any]:
        """``{"registry_version": N, "server_version": S}``."""
        reply: dict[str, Any] = await self.request(OP_PING)
        return reply

    async def register(
        self,
        payload: Mapping[str, Any] | Sequence[Any],
        *,
        force: bool = False,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Register ``{"nodes": [...]}`` (or a node list); returns the server's answer."""
        reply: dict[str, Any] = await self.request(
            OP_REGISTER, register_body(payload, force, dry_run), ct=CT_JSON
        )
        return reply

    async def reset(self) -> dict[str, Any]:
        """Reset the server (test mode only): ``{"registry_version": N, "reset": true}``."""
        reply: dict[str, Any] = await self.request(OP_RESET, {})
        return reply

    async def test_clock(self, now_ms: int | None) -> dict[str, Any]:
        """``{"now_ms": N}`` pins a test-mode server's clock at N (epoch ms; None returns it to the
        wall clock). An extension of this server: beava 0.0.6 has no test clock."""
        reply: dict[str, Any] = await self.request(OP_TEST_CLOCK, {"now_ms": now_ms})
        return reply

    async def get(
        self, table: str, key: Any = None, features: Sequence[str] | None = None
    ) -> Any:
        """The row of ``key`` (sent unchanged; None = global row ``""``) in ``table``."""
        return await self.request(OP_GET, get_body(table, key, features))

    async def batch_get(self, requests: Iterable[Any]) -> list[Any]:
        """Rows for ``(table, key[, features])`` tuples or request mappings, in order."""
        results: list[Any] = (await self.request(OP_BATCH_GET, batch_get_body(requests)))["results"]
        return results

    async def scan(self, table: str, cursor: str | None = None, *, limit: int | None = None,
                   until: str | None = None, splits: int | None = None,
                   arrays: bool = False, decode_as: Any = Any) -> dict[str, Any]:
        """One page of a table scan, opcode 0x0025 (see TcpClient.scan)."""
        reply: dict[str, Any] = await self.request(
            OP_SCAN, scan_body(table, cursor, limit, until, splits, arrays), decode_as=decode_as)
        return reply

    async def describe(self) -> dict[str, Any]:
        """What the registry holds, opcode 0x0026 (see TcpClient.describe)."""
        reply: dict[str, Any] = await self.request(OP_DESCRIBE)
        return reply

    async def scan_rows(self, table: str, *, limit: int | None = None,
                        cursor: str | None = None, until: str | None = None
                        ) -> AsyncIterator[dict[str, Any]]:
        """Every row of ``table``, page by page (see TcpClient.scan_rows)."""
        while True:
            page = await self.scan(table, cursor, limit=limit, until=until)
            for row in page["rows"]:
                yield row
            cursor = page["cursor"]
            if cursor is None:
                return

    # -- pushes --------------------------------------------------------------------------

    async def push(self, event: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Push one event: ``{"ack_lsn", "idempotent_replay", "registry_version"}``."""
        frame = self.push_encoder(event).encode(body)
        reply: dict[str, Any] = decode_reply(await self._roundtrip(frame, False), OP_PUSH)
        return reply

    async def push_pipelined(
        self, event: str, bodies: Iterable[Mapping[str, Any]], *, batch_size: int | None = None
    ) -> PushResult:
        """Push every body as its own OP_PUSH, pipelined; see ``TcpClient.push_pipelined``."""
        size = min(batch_size or default_batch_size(self.max_in_flight), self.max_in_flight)
        return await self.push_frames(self.push_encoder(event).batches(bodies, size))

    async def push_frames(self, batches: Iterable[Batch]) -> PushResult:
        """Send pre-encoded OP_PUSH frames, ``(frames, count)`` per batch with ``count <=
        max_in_flight``, pipelined; result as ``push_pipelined``."""
        tally = PushTally(OP_PUSH)
        await self._stream(batches, tally.feed)
        return tally.result()

    async def _stream(self, batches: Iterable[Batch], sink: Callable[[list[Frame]], None]) -> None:
        """Send batches within the in-flight window; every reply goes to ``sink`` in order.
        An exception from ``batches`` is raised once the replies already due are in."""
        loop = asyncio.get_running_loop()
        futures: deque[asyncio.Future[None]] = deque()
        source_error: Exception | None = None
        conn = None
        try:
            conn = await self._open()
            iterator = iter(batches)
            while True:
                try:
                    blob, count = next(iterator)
                except StopIteration:
                    break
                except Exception as exc:  # encoding failed: collect what was sent, re-raise
                    source_error = exc
                    break
                if count > self.max_in_flight:
                    source_error = ValueError(
                        f"a batch of {count} frames exceeds max_in_flight={self.max_in_flight}"
                    )
                    break
                async with asyncio.timeout(self.timeout):
                    await conn.acquire(count)
                fut: asyncio.Future[None] = loop.create_future()
                fut.add_done_callback(_retrieve)
                conn.send(blob, _ManyReplies(fut, count, sink))
                futures.append(fut)
                while futures and futures[0].done():
                    futures.popleft().result()
                async with asyncio.timeout(self.timeout):
                    await conn.drain()
            while futures:
                async with asyncio.timeout(self.timeout):
                    await futures[0]
                futures.popleft()
        except TransportError:
            if conn is not None:
                self._discard(conn)
            raise
        except TimeoutError as exc:
            if isinstance(exc, Timeout):
                raise
            raise self._timeout_error("pipeline to") from None
        if source_error is not None:
            raise source_error

    async def push_many(
        self,
        event: str,
        rows: Iterable[Mapping[str, Any]],
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> PushResult:
        """Push rows with OP_PUSH_MANY chunks, pipelined; see ``TcpClient.push_many``
        (same probe and fallback to pipelined single pushes)."""
        rows, chunks = self._push_many_chunks(event, rows, chunk_size)
        if not chunks:
            return empty_push_result()
        tally = PushManyTally()
        if self._push_many_supported is None:
            if self._probe_lock is None:
                self._probe_lock = asyncio.Lock()
            async with self._probe_lock:
                if self._push_many_supported is None:
                    first = await self._roundtrip(chunks[0].data, False)
                    if self._probe_push_many(first, tally):
                        chunks = chunks[1:]
        if self._push_many_supported is False:
            return await self.push_pipelined(event, rows)
        replies: list[Frame] = []
        await self._stream([(c.data, 1) for c in chunks], replies.extend)
        tally.add_frames(chunks, replies)
        return tally.result()

    # -- generic pipelining ----------------------------------------------------------------

    def pipeline(self) -> AsyncPipeline:
        """A queue of requests sent together by ``await AsyncPipeline.execute()``."""
        return AsyncPipeline(self)


class AsyncPipeline(PipelineBase):
    """Requests queued on an AsyncTcpClient and sent in one pipelined exchange; the
    methods mirror ``Pipeline`` (chainable, synchronous queuing)."""

    _client: AsyncTcpClient

    async def execute(self, *, raise_on_error: bool = True) -> list[Any]:
        """Send the queued requests; replies in order (see ``Pipeline.execute``)."""
        frames, expect, _ = self._take()  # nothing is retried: the safe flag is moot
        if not frames:
            return []
        client = self._client
        replies: list[Frame] = []
        await client._stream(
            join_frames(frames, default_batch_size(client.max_in_flight)), replies.extend
        )
        return decode_replies(replies, expect, raise_on_error)


class AsyncTcpPool:
    """``size`` AsyncTcpClient connections to one server, used round-robin.

    Each call goes to the next connection; a bulk call (push_pipelined, push_frames,
    push_many) stays on one connection so its rows keep their order. ``clients`` exposes
    the connections for callers that spread work themselves (e.g. one task per connection).
    """

    def __init__(
        self,
        host: str = DEFAULT_TCP_HOST,
        port: int = DEFAULT_TCP_PORT,
        *,
        size: int = 4,
        **client_kwargs: Any,
    ) -> None:
        check_count(size, "pool size")
        self.clients = [AsyncTcpClient(host, port, **client_kwargs) for _ in range(size)]
        self._next = 0

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> AsyncTcpPool:
        """A pool for ``tcp://host[:port]`` (``tcps://``: over TLS)."""
        endpoint = tcp_endpoint(url)
        return cls(endpoint.host, endpoint.port, **{"tls": endpoint.tls, **kwargs})

    def client(self) -> AsyncTcpClient:
        """The next connection, round-robin."""
        clients = self.clients
        client = clients[self._next]
        self._next = (self._next + 1) % len(clients)
        return client

    async def connect(self) -> None:
        """Open every connection."""
        await asyncio.gather(*(c.connect() for c in self.clients))

    async def close(self) -> None:
        """Close every connection."""
        for c in self.clients:
            await c.close()

    async def __aenter__(self) -> AsyncTcpPool:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def request(self, op: int, payload: Any = None, **kwargs: Any) -> Any:
        return await self.client().request(op, payload, **kwargs)

    async def ping(self) -> dict[str, Any]:
        return await self.client().ping()

    async def register(
        self, payload: Mapping[str, Any] | Sequence[Any], *, force: bool = False,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        return await self.client().register(payload, force=force, dry_run=dry_run)

    async def reset(self) -> dict[str, Any]:
        return await self.client().reset()

    async def test_clock(self, now_ms: int | None) -> dict[str, Any]:
        return await self.client().test_clock(now_ms)

    async def get(
        self, table: str, key: Any = None, features: Sequence[str] | None = None
    ) -> Any:
        return await self.client().get(table, key, features)

    async def batch_get(self, requests: Iterable[Any]) -> list[Any]:
        return await self.client().batch_get(requests)

    async def scan(self, table: str, cursor: str | None = None, *, limit: int | None = None,
                   until: str | None = None, splits: int | None = None,
                   arrays: bool = False, decode_as: Any = Any) -> dict[str, Any]:
        return await self.client().scan(table, cursor, limit=limit, until=until,
                                        splits=splits, arrays=arrays, decode_as=decode_as)

    async def describe(self) -> dict[str, Any]:
        return await self.client().describe()

    def scan_rows(self, table: str, *, limit: int | None = None, cursor: str | None = None,
                  until: str | None = None) -> AsyncIterator[dict[str, Any]]:
        return self.client().scan_rows(table, limit=limit, cursor=cursor, until=until)

    async def push(self, event: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self.client().push(event, body)

    async def push_pipelined(
        self, event: str, bodies: Iterable[Mapping[str, Any]], *, batch_size: int | None = None
    ) -> PushResult:
        return await self.client().push_pipelined(event, bodies, batch_size=batch_size)

    async def push_frames(self, batches: Iterable[Batch]) -> PushResult:
        return await self.client().push_frames(batches)

    async def push_many(
        self, event: str, rows: Iterable[Mapping[str, Any]], *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> PushResult:
        return await self.client().push_many(event, rows, chunk_size=chunk_size)

