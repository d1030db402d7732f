"""HTTP/1.1 JSON clients for the data-plane routes (spec/wire.md §3), stdlib only:
``HttpClient`` on ``http.client`` (keep-alive), ``AsyncHttpClient`` on asyncio streams
(keep-alive pool of up to ``pool_size`` connections)."""

from __future__ import annotations

import asyncio
import http.client
import ssl
import threading
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Self

import msgspec

from .codec import encode_body
from .errors import (
    BeavaError,
    ConnectionClosed,
    ProtocolError,
    ServerError,
    Timeout,
    TransportError,
    error_from_reply,
)
from .lifecycle import (
    DEFAULT_TIMEOUT,
    AsyncClient,
    ClientBase,
    SyncClient,
    check_count,
    connect_errors,
)
from .messages import (
    DEFAULT_CHUNK_SIZE,
    HTTP_MAX_BODY_BYTES,
    PushEncoders,
    PushManyChunk,
    batch_get_body,
    encode_push_many_chunks,
    get_body,
    register_body,
    scan_body,
    scan_rows,
)
from .results import PushManyTally, PushResult, empty_push_result, merge_push_outcomes
from .security import bearer_headers, client_ssl_context, resolve_token
from .urls import http_endpoint

DEFAULT_HTTP_HOST = "127.0.0.1"
DEFAULT_HTTP_PORT = 8080
JSON_CONTENT_TYPE = "application/json"
HTTP_PUSH_MANY_UNSUPPORTED_CODES = frozenset(("not_found", "method_not_allowed"))
"""HTTP error codes meaning the server has no POST /push_many (spec/sdk.md §8.4)."""

_JSON_ENCODER = msgspec.json.Encoder()
_json_decode = msgspec.json.decode
_MAX_HEADER_BYTES = 64 * 1024


class HttpResponse(msgspec.Struct, frozen=True):
    """A raw response: status, headers (lower-case names), body bytes."""

    status: int
    headers: dict[str, str]
    body: bytes


def decode_response(response: HttpResponse, decode_as: Any = Any) -> Any:
    """The JSON body of a 200 response decoded as ``decode_as`` (a type msgspec decodes to);
    ServerError (with ``status``) otherwise."""
    if response.status == 200:
        try:
            return _json_decode(response.body, type=decode_as)
        except msgspec.DecodeError as exc:
            raise ServerError(
                "unparseable_reply", f"HTTP 200 body is not JSON: {exc}", status=200,
                raw=response.body,
            ) from None
    raise error_from_reply(response.body, status=response.status)


def _base_path(base_path: str) -> str:
    base_path = base_path.rstrip("/")
    if base_path and not base_path.startswith("/"):
        base_path = "/" + base_path
    return base_path


class _HttpCommon(ClientBase):
    """Configuration, request bodies and the push_many fallback rule shared by the sync and
    async HTTP clients."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        base_path: str,
        tls: bool | ssl.SSLContext,
        timeout: float,
        reconnect: bool,
        token: str | None,
        ca: str | None,
    ) -> None:
        super().__init__(timeout=timeout, reconnect=reconnect)
        self.host = host
        self.port = port
        self.base_path = _base_path(base_path)
        self.tls = tls
        self.token = resolve_token(token)
        self._auth_headers = bearer_headers(self.token)
        self._ssl = client_ssl_context(tls, ca)
        self._push_encoders = PushEncoders(field="data", op=None)
        host_text = f"[{host}]" if ":" in host else host
        default_port = 443 if tls else 80
        self._host_header = host_text if port == default_port else f"{host_text}:{port}"

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> Self:
        """A client for ``http(s)://host[:port][/base]``."""
        endpoint = http_endpoint(url)
        return cls(endpoint.host, endpoint.port,
                   **{"base_path": endpoint.base_path, "tls": endpoint.tls, **kwargs})

    def __repr__(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"<{type(self).__name__} {scheme}://{self._host_header}{self.base_path}>"

    def _ssl_context(self) -> ssl.SSLContext | None:
        return self._ssl

    def _connect_errors(self) -> AbstractContextManager[None]:
        """Context turning a failed connect into Timeout / TransportError."""
        host = self._host_header
        return connect_errors(host, f"connect to {host} timed out")

    def _timeout(self, method: str, target: str) -> Timeout:
        return Timeout("timeout", self._timeout_message(f"{method} {target}"))

    @staticmethod
    def _body(payload: Any) -> bytes:
        """``payload`` as a request body: bytes as they are, None empty, else JSON."""
        return encode_body(payload, _JSON_ENCODER)

    def _push_body(self, event: str, body: Mapping[str, Any]) -> bytes:
        return self._push_encoders.get(event).encode(body)

    @staticmethod
    def _push_many_chunks(
        event: str, rows: Iterable[Mapping[str, Any]], chunk_size: int
    ) -> tuple[list[Any], list[PushManyChunk]]:
        """``rows`` as a list (kept for a fallback to ``push_each``) and its POST
        /push_many bodies, all encoded before anything is sent."""
        rows = rows if isinstance(rows, list) else list(rows)
        chunks = encode_push_many_chunks(
            event, rows, chunk_size=chunk_size, max_payload=HTTP_MAX_BODY_BYTES, framed=False
        )
        return rows, chunks

    def _lacks_push_many(self, err: ServerError, tally: PushManyTally) -> bool:
        """Whether ``err``, the answer to a POST /push_many, means the server has no such
        route (the first answer only); this client then uses ``push_each`` for good.
        Otherwise the route exists and ``err`` (to be raised) gets ``acked_before``."""
        if self._push_many_supported is None and err.code in HTTP_PUSH_MANY_UNSUPPORTED_CODES:
            self._push_many_supported = False
            return True
        self._push_many_supported = True  # the route exists; this chunk was refused
        err.acked_before = tally.acks
        return False


class HttpClient(SyncClient, _HttpCommon):
    """Synchronous HTTP client (one keep-alive connection, calls serialised by a lock).

    Same methods and results as ``TcpClient`` where the route exists; ``ping()`` answers
    ``{"pong": true, "registry_version": N}``. Errors: ServerError with ``status``.
    ``reconnect=True`` retries a failed safe call (every call but push/push_many) once.
    ``token``: sent as ``Authorization: Bearer`` (default ``$BEAVA_TOKEN``); ``tls``: True
    (an ``https://`` URL) or an ``ssl.SSLContext``; ``ca``: the PEM file the server
    certificate is checked against (default ``$BEAVA_CA``, else the system's trust store).
    """

    def __init__(
        self,
        host: str = DEFAULT_HTTP_HOST,
        port: int = DEFAULT_HTTP_PORT,
        *,
        base_path: str = "",
        tls: bool | ssl.SSLContext = False,
        timeout: float = DEFAULT_TIMEOUT,
        reconnect: bool = False,
        token: str | None = None,
        ca: str | None = None,
    ) -> None:
        super().__init__(host, port, base_path=base_path, tls=tls, timeout=timeout,
                         reconnect=reconnect, token=token, ca=ca)
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()

    def _ensure_connection(self) -> None:
        self._connection()

    def _connection(self) -> http.client.HTTPConnection:
        conn = self._conn
        if conn is None or conn.sock is None:
            context = self._ssl_context()
            if context is not None:
                conn = http.client.HTTPSConnection(
                    self.host, self.port, timeout=self.timeout, context=context
                )
            else:
                conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            with self._connect_errors():
                conn.connect()
            self._conn = conn
        return conn

    def _discard(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def send(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        *,
        headers: Mapping[str, str] | None = None,
        safe: bool = True,
    ) -> HttpResponse:
        """One raw request to ``base_path + path``; any status is returned, not raised."""
        all_headers = {"Content-Type": JSON_CONTENT_TYPE, **self._auth_headers}
        if headers:
            all_headers.update(headers)
        target = self.base_path + path
        with self._lock:
            self._check_open()
            retried = False
            while True:
                written = False
                try:
                    conn = self._connection()
                    written = True
                    conn.request(method, target, body=body, headers=all_headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    response = HttpResponse(
                        resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
                    )
                    if resp.will_close:
                        self._discard()
                    return response
                except BeavaError as exc:
                    error: BeavaError = exc
                except TimeoutError:
                    error = self._timeout(method, target)
                except http.client.RemoteDisconnected as exc:
                    error = ConnectionClosed("connection_closed", f"{method} {target}: {exc}")
                except OSError as exc:
                    error = TransportError("connection_failed", f"{method} {target}: {exc}")
                except http.client.HTTPException as exc:
                    error = ProtocolError("http_protocol_error", f"{method} {target}: {exc!r}")
                self._discard()
                if not self._may_retry(error, retried=retried, sent=written, safe=safe):
                    raise error
                retried = True

    def request(
        self, method: str, path: str, payload: Any = None, *, safe: bool = True,
        decode_as: Any = Any,
    ) -> Any:
        """Send ``payload`` (JSON-encoded unless bytes) and return the 200 body decoded as
        ``decode_as`` (see ``TcpClient.request``); other statuses raise ServerError."""
        return decode_response(self.send(method, path, self._body(payload), safe=safe),
                               decode_as)

    def ping(self) -> dict[str, Any]:
        """``{"pong": true, "registry_version": N}``."""
        reply: dict[str, Any] = self.request("POST", "/ping", b"{}")
        return reply

    def health(self) -> dict[str, Any]:
        """``GET /health`` → ``{"status": "ok"}``."""
        reply: dict[str, Any] = self.request("GET", "/health")
        return reply

    def register(
        self,
        payload: Mapping[str, Any] | Sequence[Any],
        *,
        force: bool = False,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """``POST /register``; returns the server's answer."""
        reply: dict[str, Any] = self.request(
            "POST", "/register", register_body(payload, force, dry_run)
        )
        return reply

    def reset(self) -> dict[str, Any]:
        """``POST /reset`` (test mode only): ``{"registry_version": N, "reset": true}``."""
        reply: dict[str, Any] = self.request("POST", "/reset", b"{}")
        return reply

    def test_clock(self, now_ms: int | None) -> dict[str, Any]:
        """``POST /test/clock``: ``{"now_ms": N}`` pins a test-mode server's clock at N
        (epoch ms; None returns it to the wall clock). An extension of this server: beava
        0.0.6 has no test clock."""
        reply: dict[str, Any] = self.request("POST", "/test/clock", {"now_ms": now_ms})
        return reply

    def get(self, table: str, key: Any = None, features: Sequence[str] | None = None) -> Any:
        """``POST /get``: the row of ``key`` (sent unchanged; None = ``""``)."""
        return self.request("POST", "/get", get_body(table, key, features))

    def batch_get(self, requests: Iterable[Any]) -> list[Any]:
        """``POST /batch_get``: rows in request order, per-entry errors inline."""
        results: list[Any] = self.request("POST", "/batch_get", batch_get_body(requests))["results"]
        return results

    def scan(self, table: str, cursor: str | None = None, *, limit: int | None = None,
             until: str | None = None, splits: int | None = None,
             arrays: bool = False, decode_as: Any = Any) -> dict[str, Any]:
        """``POST /scan``: one page of a table scan (see TcpClient.scan)."""
        reply: dict[str, Any] = self.request(
            "POST", "/scan", scan_body(table, cursor, limit, until, splits, arrays),
            decode_as=decode_as)
        return reply

    def describe(self) -> dict[str, Any]:
        """``GET /describe``: what the registry holds (see TcpClient.describe)."""
        reply: dict[str, Any] = self.request("GET", "/describe")
        return reply

    def scan_rows(self, table: str, *, limit: int | None = None, cursor: str | None = None,
                  until: str | None = None) -> Iterator[dict[str, Any]]:
        """Every row of ``table``, page by page (see TcpClient.scan_rows)."""
        return scan_rows(lambda c: self.scan(table, c, limit=limit, until=until), cursor)

    def push(self, event: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /push`` ``{"event", "data"}``: the ack (a replay is only marked by the
        ``X-Beava-Idempotent-Replay`` header, see ``send``)."""
        reply: dict[str, Any] = self.request(
            "POST", "/push", self._push_body(event, body), safe=False
        )
        return reply

    def push_each(self, event: str, bodies: Iterable[Mapping[str, Any]]) -> PushResult:
        """One ``POST /push`` per body, in order; result shape of ``push_many``."""

        def outcomes() -> Iterable[tuple[int, Any]]:
            for index, body in enumerate(bodies):
                try:
                    yield index, self.push(event, body)
                except ServerError as err:
                    yield index, err

        return merge_push_outcomes(outcomes())

    def push_many(
        self,
        event: str,
        rows: Iterable[Mapping[str, Any]],
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> PushResult:
        """``POST /push_many`` in chunks (at most ``chunk_size`` rows, 4 MiB); merged result.
        A first answer ``not_found``/``method_not_allowed`` (a server without the
        extension) switches this client to ``push_each`` for good. A chunk rejected as a
        whole raises ServerError with ``acked_before``."""
        rows, chunks = self._push_many_chunks(event, rows, chunk_size)
        if not chunks:
            return empty_push_result()
        if self._push_many_supported is False:
            return self.push_each(event, rows)
        tally = PushManyTally()
        for chunk in chunks:
            try:
                reply = self.request("POST", "/push_many", chunk.data, safe=False)
            except ServerError as err:
                if self._lacks_push_many(err, tally):
                    return self.push_each(event, rows)
                raise
            self._push_many_supported = True
            tally.add(reply, chunk.start)
        return tally.result()


class _StreamConn:
    """One keep-alive HTTP/1.1 connection on asyncio streams."""

    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        self.writer.close()


class AsyncHttpClient(AsyncClient, _HttpCommon):
    """asyncio HTTP client with a keep-alive pool of up to ``pool_size`` connections;
    each request uses one connection exclusively. Same methods as ``HttpClient``, as
    coroutines."""

    def __init__(
        self,
        host: str = DEFAULT_HTTP_HOST,
        port: int = DEFAULT_HTTP_PORT,
        *,
        base_path: str = "",
        tls: bool | ssl.SSLContext = False,
        timeout: float = DEFAULT_TIMEOUT,
        reconnect: bool = False,
        pool_size: int = 1,
        token: str | None = None,
        ca: str | None = None,
    ) -> None:
        super().__init__(host, port, base_path=base_path, tls=tls, timeout=timeout,
                         reconnect=reconnect, token=token, ca=ca)
        self.pool_size = check_count(pool_size, "pool_size")
        self._idle: list[_StreamConn] = []
        self._slots: asyncio.Semaphore | None = None

    async def connect(self) -> None:
        """Open one connection now (otherwise the first call does)."""
        self._check_open()
        if not self._idle:
            self._idle.append(await self._open())

    async def close(self) -> None:
        """Close idle connections; busy ones close when their request ends. Idempotent."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    async def _open(self) -> _StreamConn:
        with self._connect_errors():
            async with asyncio.timeout(self.timeout):
                reader, writer = await asyncio.open_connection(
                    self.host, self.port, ssl=self._ssl_context(), limit=_MAX_HEADER_BYTES
                )
        return _StreamConn(reader, writer)

    async def send(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        *,
        headers: Mapping[str, str] | None = None,
        safe: bool = True,
    ) -> HttpResponse:
        """One raw request to ``base_path + path``; any status is returned, not raised."""
        self._check_open()
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.pool_size)
        target = self.base_path + path
        head = [f"{method} {target} HTTP/1.1", f"Host: {self._host_header}",
                f"Content-Type: {JSON_CONTENT_TYPE}", f"Content-Length: {len(body)}"]
        for name, value in {**self._auth_headers, **(headers or {})}.items():
            head.append(f"{name}: {value}")
        request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        async with self._slots:
            retried = False
            while True:
                written = False
                conn = None
                try:
                    async with asyncio.timeout(self.timeout):
                        conn = self._idle.pop() if self._idle else await self._open()
                        written = True
                        conn.writer.write(request)
                        await conn.writer.drain()
                        response, keep = await self._read_response(conn.reader, method)
                    if keep and not self._closed:
                        self._idle.append(conn)
                    else:
                        conn.close()
                    return response
                except BeavaError as exc:
                    error: BeavaError = exc
                except TimeoutError:
                    error = self._timeout(method, target)
                except asyncio.IncompleteReadError:
                    error = ConnectionClosed("connection_closed",
                                             f"{method} {target}: connection closed mid-response")
                except (asyncio.LimitOverrunError, ValueError) as exc:
                    error = ProtocolError("http_protocol_error", f"{method} {target}: {exc}")
                except OSError as exc:
                    error = TransportError("connection_failed", f"{method} {target}: {exc}")
                if conn is not None:
                    conn.close()
                if not self._may_retry(error, retried=retried, sent=written, safe=safe):
                    raise error
                retried = True

    @staticmethod
    async def _read_response(
        reader: asyncio.StreamReader, method: str
    ) -> tuple[HttpResponse, bool]:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            version, _, rest = lines[0].partition(" ")
            status = int(rest.split(" ", 1)[0])
            headers: dict[str, str] = {}
            for line in lines[1:]:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            if status != 100:  # "100 Continue" precedes the real response
                break
        if method == "HEAD" or status in (204, 304):
            body = b""
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            parts = []
            while True:
                size_line = await reader.readuntil(b"\r\n")
                size = int(size_line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while (await reader.readuntil(b"\r\n")) != b"\r\n":
                        pass  # trailers
                    break
                parts.append(await reader.readexactly(size))
                await reader.readexactly(2)
            body = b"".join(parts)
        elif "content-length" in headers:
            body = await reader.readexactly(int(headers["content-length"]))
        else:
            return HttpResponse(status, headers, await reader.read()), False
        connection = headers.get("connection", "").lower()
        keep = connection != "close" and (version != "HTTP/1.0" or connection == "keep-alive")
        return HttpResponse(status, headers, body), keep

    async def request(
        self, method: str, path: str, payload: Any = None, *, safe: bool = True,
        decode_as: Any = Any,
    ) -> Any:
        """Send ``payload`` (JSON-encoded unless bytes); the 200 body decoded as
        ``decode_as`` (see ``TcpClient.request``), else ServerError."""
        return decode_response(await self.send(method, path, self._body(payload), safe=safe),
                               decode_as)

    async def ping(self) -> dict[str, Any]:
        """``{"pong": true, "registry_version": N}``."""
        reply: dict[str, Any] = await self.request("POST", "/ping", b"{}")
        return reply

    async def health(self) -> dict[str, Any]:
        """``GET /health`` → ``{"status": "ok"}``."""
        reply: dict[str, Any] = await self.request("GET", "/health")
        return reply

    async def register(
        self,
        payload: Mapping[str, Any] | Sequence[Any],
        *,
        force: bool = False,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """``POST /register``; returns the server's answer."""
        reply: dict[str, Any] = await self.request(
            "POST", "/register", register_body(payload, force, dry_run)
        )
        return reply

    async def reset(self) -> dict[str, Any]:
        """``POST /reset`` (test mode only)."""
        reply: dict[str, Any] = await self.request("POST", "/reset", b"{}")
        return reply

    async def test_clock(self, now_ms: int | None) -> dict[str, Any]:
        """``POST /test/clock`` (test mode only; see HttpClient.test_clock)."""
        reply: dict[str, Any] = await self.request("POST", "/test/clock", {"now_ms": now_ms})
        return reply

    async def get(
        self, table: str, key: Any = None, features: Sequence[str] | None = None
    ) -> Any:
        """``POST /get``: the row of ``key``."""
        return await self.request("POST", "/get", get_body(table, key, features))

    async def batch_get(self, requests: Iterable[Any]) -> list[Any]:
        """``POST /batch_get``: rows in request order, per-entry errors inline."""
        reply = await self.request("POST", "/batch_get", batch_get_body(requests))
        results: list[Any] = reply["results"]
        return results

    async def scan(self, table: str, cursor: str | None = None, *, limit: int | None = None,
                   until: str | None = None, splits: int | None = None,
                   arrays: bool = False, decode_as: Any = Any) -> dict[str, Any]:
        """``POST /scan``: one page of a table scan (see TcpClient.scan)."""
        reply: dict[str, Any] = await self.request(
            "POST", "/scan", scan_body(table, cursor, limit, until, splits, arrays),
            decode_as=decode_as)
        return reply

    async def describe(self) -> dict[str, Any]:
        """``GET /describe``: what the registry holds (see TcpClient.describe)."""
        reply: dict[str, Any] = await self.request("GET", "/describe")
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

    async def push(self, event: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /push`` ``{"event", "data"}``: the ack."""
        reply: dict[str, Any] = await self.request(
            "POST", "/push", self._push_body(event, body), safe=False
        )
        return reply

    async def push_each(self, event: str, bodies: Iterable[Mapping[str, Any]]) -> PushResult:
        """One ``POST /push`` per body, in order; result shape of ``push_many``."""
        outcomes: list[tuple[int, Any]] = []
        for index, body in enumerate(bodies):
            try:
                outcomes.append((index, await self.push(event, body)))
            except ServerError as err:
                outcomes.append((index, err))
        return merge_push_outcomes(outcomes)

    async def push_many(
        self,
        event: str,
        rows: Iterable[Mapping[str, Any]],
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> PushResult:
        """``POST /push_many`` in chunks; see ``HttpClient.push_many``."""
        rows, chunks = self._push_many_chunks(event, rows, chunk_size)
        if not chunks:
            return empty_push_result()
        if self._push_many_supported is False:
            return await self.push_each(event, rows)
        tally = PushManyTally()
        for chunk in chunks:
            try:
                reply = await self.request("POST", "/push_many", chunk.data, safe=False)
            except ServerError as err:
                if self._lacks_push_many(err, tally):
                    return await self.push_each(event, rows)
                raise
            self._push_many_supported = True
            tally.add(reply, chunk.start)
        return tally.result()
