"""Synchronous framed-TCP client (spec/wire.md §2): one persistent connection, strict FIFO,
pipelining with a bounded in-flight window.

All socket I/O goes through one loop (``_exchange``) that writes whole batches of frames
with one ``send`` each, reads up to 256 KiB per ``recv`` and splits every frame it holds,
and never blocks on a write while replies are waiting to be read (the server stops
reading when its output buffer is full, so a blocking writer could deadlock).
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from .errors import (
    BeavaError,
    ConnectionClosed,
    ProtocolError,
    ServerError,
    Timeout,
    TransportError,
    error_from_reply,
)
from .frames import DEFAULT_MAX_FRAME_BYTES, Frame, FrameDecoder, check_payload_size, encode_frame
from .messages import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_MAX_IN_FLIGHT,
    ENCODER_CACHE_LIMIT,
    PUSH_MANY_UNSUPPORTED_CODES,
    UNSAFE_OPS,
    Batch,
    EnvelopeEncoder,
    batch_get_body,
    default_batch_size,
    encode_push_many_chunks,
    get_body,
    new_encoder,
    register_body,
)
from .opcodes import (
    CT_JSON,
    OP_BATCH_GET,
    OP_ERROR,
    OP_GET,
    OP_PING,
    OP_PUSH,
    OP_PUSH_MANY,
    OP_REGISTER,
    OP_RESET,
    REPLY_OP,
    content_type_code,
)
from .results import PushManyTally, PushResult, PushTally, decode_reply, empty_push_result
from .urls import DEFAULT_TCP_HOST, DEFAULT_TCP_PORT, parse_url

T = TypeVar("T")

RECV_SIZE = 256 * 1024
_POLL_READ = select.POLLIN
_POLL_READ_WRITE = select.POLLIN | select.POLLOUT


class TcpClient:
    """Framed TCP client for one server.

    The connection opens on ``connect()``, ``with``, or the first call, and is reused.
    After a transport failure it is discarded and the failing call raises; the next call
    opens a new one. ``reconnect=True`` also retries a failed call once on a new connection
    when that is safe: ping, get, batch_get, register, reset, or any call that failed
    before a request was handed to the socket (spec/sdk.md §8.7).

    ``timeout``: seconds for connect and for each wait on the socket. ``content_type``:
    ``"json"`` or ``"msgpack"`` for push, push_many, reads and reset (register is always
    JSON). ``max_in_flight``: pipelining window (requests sent but not answered).
    ``max_frame_bytes``: largest request payload sent and reply payload accepted.
    Thread-safe: calls on one client are serialised by a lock.
    """

    def __init__(
        self,
        host: str = DEFAULT_TCP_HOST,
        port: int = DEFAULT_TCP_PORT,
        *,
        timeout: float = 30.0,
        content_type: int | str = CT_JSON,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        reconnect: bool = False,
    ) -> None:
        if not timeout or timeout <= 0:
            raise ValueError("timeout must be a positive number of seconds")
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        self.host = host
        self.port = port
        self.timeout = float(timeout)
        self.content_type = content_type_code(content_type)
        self.max_in_flight = max_in_flight
        self.max_frame_bytes = max_frame_bytes
        self.reconnect = reconnect
        self._sock: socket.socket | None = None
        self._poller: Any = None
        self._poll_mask = _POLL_READ
        self._decoder = FrameDecoder(max_frame_bytes)
        self._lock = threading.Lock()
        self._closed = False
        self._committed = False
        self._in_exchange = False
        self._push_many_supported: bool | None = None
        self._encoder = new_encoder(self.content_type)
        self._json_encoder = new_encoder(CT_JSON)
        self._push_encoders: dict[str, EnvelopeEncoder] = {}

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> TcpClient:
        """A client for ``tcp://host[:port]``."""
        endpoint = parse_url(url)
        if not endpoint.is_tcp:
            raise ValueError(f"not a tcp:// URL: {url!r}")
        return cls(endpoint.host, endpoint.port, **kwargs)

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True after ``close()``."""
        return self._closed

    @property
    def connected(self) -> bool:
        """True while a connection is open."""
        return self._sock is not None

    @property
    def push_many_supported(self) -> bool | None:
        """Whether the server accepts OP_PUSH_MANY (None until the first push_many)."""
        return self._push_many_supported

    def connect(self) -> None:
        """Open the connection now (otherwise the first call does)."""
        with self._lock:
            self._check_open()
            if self._sock is None:
                self._connect()

    def close(self) -> None:
        """Close the connection. Idempotent; later calls raise RuntimeError."""
        self._closed = True
        with self._lock:
            self._discard()

    def __enter__(self) -> TcpClient:
        self.connect()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("connected" if self._sock else "idle")
        return f"<TcpClient tcp://{self.host}:{self.port} {state}>"

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("client is closed")

    def _connect(self) -> None:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except TimeoutError:
            raise Timeout(
                "timeout", f"connect to {self.host}:{self.port} timed out after {self.timeout}s"
            ) from None
        except OSError as exc:
            raise TransportError(
                "connect_failed", f"cannot connect to {self.host}:{self.port}: {exc}"
            ) from exc
        with contextlib.suppress(OSError):  # latency only; never fatal
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # Non-blocking: every wait goes through one poll() so reads and writes interleave.
        sock.setblocking(False)
        poller = select.poll()
        poller.register(sock.fileno(), _POLL_READ)
        self._poll_mask = _POLL_READ
        self._sock = sock
        self._poller = poller
        self._decoder.clear()

    def _discard(self) -> None:
        self._in_exchange = False
        sock = self._sock
        self._sock = None
        self._poller = None
        self._decoder.clear()
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    # -- the I/O loop --------------------------------------------------------------------

    def _exchange(self, batches: Iterator[Batch], sink: Callable[[list[Frame]], None]) -> None:
        """Send every batch and hand every reply to ``sink`` in order, keeping at most
        ``max_in_flight`` requests unanswered. An exception raised by ``batches`` stops the
        sending; it is re-raised once every reply already due has been read."""
        sock = self._sock
        poller = self._poller
        assert sock is not None and poller is not None
        fd = sock.fileno()
        decoder = self._decoder
        window = self.max_in_flight
        timeout_ms = max(1, int(self.timeout * 1000))
        out: deque[memoryview] = deque()
        in_flight = 0
        pending: Batch | None = None
        exhausted = False
        source_error: BaseException | None = None
        self._in_exchange = True
        try:
            while True:
                while not exhausted:
                    if pending is None:
                        try:
                            pending = next(batches)
                        except StopIteration:
                            exhausted = True
                            break
                        except Exception as exc:  # encoding failed: drain, then re-raise
                            source_error = exc
                            exhausted = True
                            break
                        self._committed = True
                    if in_flight and in_flight + pending[1] > window:
                        break
                    out.append(memoryview(pending[0]))
                    in_flight += pending[1]
                    pending = None
                if not in_flight:
                    break
                while out:
                    head = out[0]
                    try:
                        sent = sock.send(head)
                    except BlockingIOError:
                        break
                    if sent == len(head):
                        out.popleft()
                    else:
                        out[0] = head[sent:]
                        break
                want = _POLL_READ_WRITE if out else _POLL_READ
                if want != self._poll_mask:
                    poller.modify(fd, want)
                    self._poll_mask = want
                events = poller.poll(timeout_ms)
                if not events:
                    raise Timeout(
                        "timeout",
                        f"no reply from {self.host}:{self.port} within {self.timeout}s",
                    )
                if events[0][1] & ~select.POLLOUT:
                    try:
                        data = sock.recv(RECV_SIZE)
                    except BlockingIOError:
                        continue
                    if not data:
                        raise ConnectionClosed(
                            "connection_closed",
                            f"{self.host}:{self.port} closed the connection with "
                            f"{in_flight} request(s) unanswered",
                        )
                    frames = decoder.feed(data)
                    if frames:
                        if len(frames) > in_flight:
                            raise ProtocolError(
                                "unsolicited_reply", "the server sent more replies than requests"
                            )
                        in_flight -= len(frames)
                        sink(frames)
        except BeavaError:
            raise
        except OSError as exc:
            raise TransportError(
                "connection_failed", f"connection to {self.host}:{self.port} failed: {exc}"
            ) from exc
        self._in_exchange = False
        if source_error is not None:
            raise source_error

    def _run(self, job: Callable[[], T], safe: bool) -> T:
        """Run ``job`` (which calls ``_exchange``) under the lock, on an open connection,
        with the reconnect rule of the class docstring."""
        with self._lock:
            self._check_open()
            retried = False
            while True:
                self._committed = False
                try:
                    if self._sock is not None and self._readable_while_idle():
                        # Readable while nothing is in flight: the server closed this
                        # connection (e.g. after frame_too_large, or it restarted).
                        self._discard()
                    if self._sock is None:
                        self._connect()
                    return job()
                except Timeout:
                    self._discard()  # a reply may still come: FIFO matching is lost
                    raise
                except TransportError:
                    self._discard()
                    if retried or not self.reconnect or (self._committed and not safe):
                        raise
                    retried = True
                except BaseException:
                    # Interrupted mid-exchange (e.g. KeyboardInterrupt): replies are left
                    # unread, so FIFO matching is lost. (An encoding error has drained them.)
                    if self._in_exchange:
                        self._in_exchange = False
                        self._discard()
                    raise

    def _readable_while_idle(self) -> bool:
        return any(flags & ~select.POLLOUT for _, flags in self._poller.poll(0))

    def _roundtrip(self, frame: bytes, safe: bool) -> Frame:
        def job() -> Frame:
            box: list[Frame] = []
            self._exchange(iter(((frame, 1),)), box.extend)
            return box[0]

        return self._run(job, safe)

    # -- generic requests ----------------------------------------------------------------

    def _payload(self, payload: Any, ct: int) -> bytes:
        if payload is None:
            return b""
        if isinstance(payload, (bytes, bytearray, memoryview)):
            data = bytes(payload)
        elif ct == self.content_type:
            data = self._encoder.encode(payload)
        else:
            data = new_encoder(ct).encode(payload)
        check_payload_size(len(data), self.max_frame_bytes)
        return data

    def encode_request(self, op: int, payload: Any = None, *, ct: int | None = None) -> bytes:
        """One request frame; ``payload`` bytes are sent as is, other values encoded with
        ``ct`` (default: the client's content type), None is an empty payload."""
        ct = self.content_type if ct is None else ct
        return encode_frame(op, ct, self._payload(payload, ct))

    def request(
        self,
        op: int,
        payload: Any = None,
        *,
        ct: int | None = None,
        expect_op: int | None = -1,
    ) -> Any:
        """Send one request and return the decoded reply body.

        ``expect_op``: the success reply opcode (default: the table of wire.md §2.4; None
        accepts any opcode but 0xFFFF). Raises ServerError for error replies.
        """
        if expect_op == -1:
            expect_op = REPLY_OP.get(op)
        frame = self.encode_request(op, payload, ct=ct)
        return decode_reply(self._roundtrip(frame, op not in UNSAFE_OPS), expect_op)

    def ping(self) -> dict[str, Any]:
        """``{"registry_version": N, "server_version": S}``."""
        return self.request(OP_PING)

    def register(
        self,
        payload: Mapping[str, Any] | Sequence[Any],
        *,
        force: bool = False,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Register ``{"nodes": [...]}`` (or a node list); returns the server's answer."""
        body = self._json_encoder.encode(register_body(payload, force, dry_run))
        return self.request(OP_REGISTER, body, ct=CT_JSON)

    def reset(self) -> dict[str, Any]:
        """Reset the server (test mode only): ``{"registry_version": N, "reset": true}``."""
        return self.request(OP_RESET, b"{}" if self.content_type == CT_JSON else b"\x80")

    def get(self, table: str, key: Any = None, features: Sequence[str] | None = None) -> Any:
        """The row of ``key`` (sent unchanged; None = global row ``""``) in ``table``."""
        return self.request(OP_GET, get_body(table, key, features))

    def batch_get(self, requests: Iterable[Any]) -> list[Any]:
        """Rows for ``(table, key[, features])`` tuples or request mappings, in order;
        per-entry failures come back inline as ``{"error": {...}}``."""
        return self.request(OP_BATCH_GET, batch_get_body(requests))["results"]

    # -- pushes --------------------------------------------------------------------------

    def push_encoder(self, event: str, ct: int | None = None) -> EnvelopeEncoder:
        """The (cached) OP_PUSH frame encoder for ``event``."""
        ct = self.content_type if ct is None else ct
        cache_key = event if ct == self.content_type else f"{ct}:{event}"
        enc = self._push_encoders.get(cache_key)
        if enc is None:
            if len(self._push_encoders) >= ENCODER_CACHE_LIMIT:
                self._push_encoders.clear()
            enc = EnvelopeEncoder(event, ct=ct, op=OP_PUSH, max_payload=self.max_frame_bytes)
            self._push_encoders[cache_key] = enc
        return enc

    def push(self, event: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Push one event: ``{"ack_lsn", "idempotent_replay", "registry_version"}``."""
        frame = self.push_encoder(event).encode(body)
        return decode_reply(self._roundtrip(frame, False), OP_PUSH)

    def push_pipelined(
        self, event: str, bodies: Iterable[Mapping[str, Any]], *, batch_size: int | None = None
    ) -> PushResult:
        """Push every body as its own OP_PUSH, pipelined (window ``max_in_flight``, one write
        per ``batch_size`` frames). Per-row errors are returned, not raised:
        ``{"acks", "ack_lsn", "errors": [{"index", "error"}], "registry_version"}``.

        A body whose frame exceeds ``max_frame_bytes`` raises ValueError after the replies
        of the bodies before it have been read (those were sent)."""
        encoder = self.push_encoder(event)
        size = batch_size or default_batch_size(self.max_in_flight)
        return self.push_frames(encoder.batches(bodies, size))

    def push_frames(self, batches: Iterable[Batch]) -> PushResult:
        """Send pre-encoded OP_PUSH frames, ``(frames, count)`` per batch, pipelined; same
        result as ``push_pipelined`` (indexes count frames from 0)."""
        tally = PushTally(OP_PUSH)

        def job() -> PushResult:
            nonlocal tally
            tally = PushTally(OP_PUSH)
            self._exchange(iter(batches), tally.feed)
            return tally.result()

        return self._run(job, False)

    def push_many(
        self,
        event: str,
        rows: Iterable[Mapping[str, Any]],
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> PushResult:
        """Push rows with OP_PUSH_MANY in chunks of at most ``chunk_size`` rows and
        ``max_frame_bytes`` bytes, pipelined; merged result as ``push_pipelined``.

        The first call probes the server with one chunk: ``unknown_op`` or
        ``op_not_implemented`` (a server without the extension) switches this client to
        pipelined single pushes for good. A chunk rejected as a whole raises ServerError
        with ``acked_before`` set (replies of later chunks are read first)."""
        rows = rows if isinstance(rows, list) else list(rows)
        chunks = encode_push_many_chunks(
            event, rows, ct=self.content_type, chunk_size=chunk_size,
            max_payload=self.max_frame_bytes,
        )
        if not chunks:
            return empty_push_result()
        if self._push_many_supported is False:
            return self.push_pipelined(event, rows)
        tally = PushManyTally()
        if self._push_many_supported is None:
            op, ct, payload = first = self._roundtrip(chunks[0].data, False)
            if op == OP_ERROR:
                err = error_from_reply(payload, op=op, ct=ct)
                if err.code in PUSH_MANY_UNSUPPORTED_CODES:
                    self._push_many_supported = False
                    return self.push_pipelined(event, rows)
                self._push_many_supported = True  # the op is known; this chunk was refused
                err.acked_before = 0
                raise err
            tally.add(decode_reply(first, OP_PUSH_MANY), 0)
            self._push_many_supported = True
            chunks = chunks[1:]
            if not chunks:
                return tally.result()

        def job() -> list[Frame]:
            replies: list[Frame] = []
            self._exchange(iter([(c.data, 1) for c in chunks]), replies.extend)
            return replies

        for chunk, frame in zip(chunks, self._run(job, False), strict=True):
            try:
                reply = decode_reply(frame, OP_PUSH_MANY)
            except ServerError as err:
                err.acked_before = tally.acks
                raise
            tally.add(reply, chunk.start)
        return tally.result()

    # -- generic pipelining ----------------------------------------------------------------

    def pipeline(self) -> Pipeline:
        """A queue of requests sent together (pipelined) by ``Pipeline.execute()``."""
        return Pipeline(self)

    def _execute(self, frames: list[bytes], safe: bool) -> list[Frame]:
        size = default_batch_size(self.max_in_flight)

        def batches() -> Iterator[Batch]:
            for i in range(0, len(frames), size):
                group = frames[i : i + size]
                yield b"".join(group), len(group)

        def job() -> list[Frame]:
            replies: list[Frame] = []
            self._exchange(batches(), replies.extend)
            return replies

        return self._run(job, safe)


class Pipeline:
    """Requests queued on a TcpClient and sent in one pipelined exchange.

    Each method queues one request and returns the pipeline (chainable). ``execute()``
    sends them, reads every reply, and returns the decoded bodies in order.
    """

    def __init__(self, client: TcpClient) -> None:
        self._client = client
        self._frames: list[bytes] = []
        self._expect: list[int | None] = []
        self._safe = True

    def __len__(self) -> int:
        return len(self._frames)

    def request(
        self, op: int, payload: Any = None, *, ct: int | None = None, expect_op: int | None = -1
    ) -> Pipeline:
        """Queue any request (see ``TcpClient.request``)."""
        self._frames.append(self._client.encode_request(op, payload, ct=ct))
        self._expect.append(REPLY_OP.get(op) if expect_op == -1 else expect_op)
        if op in UNSAFE_OPS:
            self._safe = False
        return self

    def ping(self) -> Pipeline:
        return self.request(OP_PING)

    def register(
        self, payload: Mapping[str, Any] | Sequence[Any], *, force: bool = False,
        dry_run: bool = False,
    ) -> Pipeline:
        body = self._client._json_encoder.encode(register_body(payload, force, dry_run))
        return self.request(OP_REGISTER, body, ct=CT_JSON)

    def push(self, event: str, body: Mapping[str, Any]) -> Pipeline:
        self._frames.append(self._client.push_encoder(event).encode(body))
        self._expect.append(OP_PUSH)
        self._safe = False
        return self

    def get(self, table: str, key: Any = None, features: Sequence[str] | None = None) -> Pipeline:
        return self.request(OP_GET, get_body(table, key, features))

    def batch_get(self, requests: Iterable[Any]) -> Pipeline:
        return self.request(OP_BATCH_GET, batch_get_body(requests))

    def reset(self) -> Pipeline:
        return self.request(OP_RESET, {})

    def execute(self, *, raise_on_error: bool = True) -> list[Any]:
        """Send the queued requests and return their replies in order. A failed request's
        slot holds its ServerError; with ``raise_on_error`` the first one is raised after
        every reply has been read. The queue is emptied either way."""
        frames, expect, safe = self._frames, self._expect, self._safe
        self._frames, self._expect, self._safe = [], [], True
        if not frames:
            return []
        results: list[Any] = []
        first_error: ServerError | None = None
        for frame, op in zip(self._client._execute(frames, safe), expect, strict=True):
            try:
                results.append(decode_reply(frame, op))
            except ServerError as err:
                results.append(err)
                if first_error is None:
                    first_error = err
        if raise_on_error and first_error is not None:
            raise first_error
        return results
