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
import ssl
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from .errors import BeavaError, ConnectionClosed, ProtocolError, Timeout, TransportError
from .frames import DEFAULT_MAX_FRAME_BYTES, Frame, FrameDecoder
from .lifecycle import DEFAULT_TIMEOUT, SyncClient, connect_errors
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
    scan_rows,
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
from .urls import DEFAULT_TCP_HOST, DEFAULT_TCP_PORT

T = TypeVar("T")

RECV_SIZE = 256 * 1024
_POLL_READ = select.POLLIN
_POLL_READ_WRITE = select.POLLIN | select.POLLOUT
# A TLS socket that cannot go on without the peer (its records are not complete yet)
_WOULD_BLOCK = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


class TcpClient(SyncClient, TcpClientBase):
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
    ``token``: sent in an OP_AUTH frame first on each connection (default ``$BEAVA_TOKEN``);
    a token the server refuses raises ServerError ``unauthenticated``. ``tls``: True (a
    ``tcps://`` URL) or an ``ssl.SSLContext``; ``ca``: the PEM file the server certificate
    is checked against (default ``$BEAVA_CA``, else the system's trust store).
    Thread-safe: calls on one client are serialised by a lock.
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
        self._sock: socket.socket | None = None
        self._poller: Any = None
        self._poll_mask = _POLL_READ
        self._decoder = FrameDecoder(max_frame_bytes)
        self._lock = threading.Lock()
        self._committed = False
        self._in_exchange = False

    # -- connection ----------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """True while a connection is open."""
        return self._sock is not None

    def _ensure_connection(self) -> None:
        if self._sock is not None:
            return
        address = self._address
        with connect_errors(address, self._timeout_message(f"connect to {address}")):
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
            with contextlib.suppress(OSError):  # latency only; never fatal
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._ssl is not None:  # the handshake, blocking within the timeout
                try:
                    sock = self._ssl.wrap_socket(sock, server_hostname=self.host)
                except BaseException:
                    sock.close()
                    raise
        # Non-blocking: every wait goes through one poll() so reads and writes interleave.
        sock.setblocking(False)
        poller = select.poll()
        poller.register(sock.fileno(), _POLL_READ)
        self._poll_mask = _POLL_READ
        self._sock = sock
        self._poller = poller
        self._decoder.clear()
        frame = self._auth_frame()
        if frame is not None:
            try:
                replies: list[Frame] = []
                self._exchange(iter(((frame, 1),)), replies.extend)
                self._check_auth_reply(replies[0])
            except BaseException:
                self._discard()
                raise
            self._committed = False  # the call's own request is not sent yet

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
        # decrypted records waiting in the TLS layer, which poll() does not see
        tls_pending = sock.pending if isinstance(sock, ssl.SSLSocket) else None
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
                    except _WOULD_BLOCK:
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
                        f"no reply from {self._address} within {self.timeout}s",
                    )
                if events[0][1] & ~select.POLLOUT:
                    try:
                        data = sock.recv(RECV_SIZE)
                        if tls_pending is not None:
                            while data and tls_pending():
                                data += sock.recv(RECV_SIZE)
                    except _WOULD_BLOCK:
                        continue
                    if not data:
                        raise ConnectionClosed(
                            "connection_closed",
                            f"{self._address} closed the connection with "
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
                "connection_failed", f"connection to {self._address} failed: {exc}"
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
                    self._ensure_connection()
                    return job()
                except Timeout:
                    self._discard()  # a reply may still come: FIFO matching is lost
                    raise
                except TransportError as exc:
                    self._discard()
                    if not self._may_retry(exc, retried=retried, sent=self._committed,
                                           safe=safe):
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
        if not any(flags & ~select.POLLOUT for _, flags in self._poller.poll(0)):
            return False
        sock = self._sock
        if isinstance(sock, ssl.SSLSocket):  # TLS records without data (a session ticket)
            try:
                sock.recv(1)
            except _WOULD_BLOCK:
                return False
            except OSError:
                return True
        return True

    def _replies(self, batches: Sequence[Batch], safe: bool) -> list[Frame]:
        """Send ``batches`` pipelined (under ``_run``) and return every reply in order."""

        def job() -> list[Frame]:
            replies: list[Frame] = []
            self._exchange(iter(batches), replies.extend)
            return replies

        return self._run(job, safe)

    def _roundtrip(self, frame: bytes, safe: bool) -> Frame:
        return self._replies(((frame, 1),), safe)[0]

    # -- requests ------------------------------------------------------------------------

    def request(
        self,
        op: int,
        payload: Any = None,
        *,
        ct: int | None = None,
        expect_op: int | None = DEFAULT_REPLY_OP,
        decode_as: Any = Any,
    ) -> Any:
        """Send one request and return the decoded reply body.

        ``expect_op``: the success reply opcode (default: the table of wire.md §2.4; None
        accepts any opcode but 0xFFFF). ``decode_as``: the type msgspec decodes the body to (say,
        a TypedDict whose rows are Structs); a body that does not fit it raises ServerError
        ``unparseable_reply``. Raises ServerError for error replies.
        """
        frame = self.encode_request(op, payload, ct=ct)
        reply = self._roundtrip(frame, op not in UNSAFE_OPS)
        return decode_reply(reply, expected_reply_op(op, expect_op), decode_as)

    def ping(self) -> dict[str, Any]:
        """``{"registry_version": N, "server_version": S}``."""
        reply: dict[str, Any] = self.request(OP_PING)
        return reply

    def register(
        self,
        payload: Mapping[str, Any] | Sequence[Any],
        *,
        force: bool = False,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Register ``{"nodes": [...]}`` (or a node list); returns the server's answer."""
        reply: dict[str, Any] = self.request(
            OP_REGISTER, register_body(payload, force, dry_run), ct=CT_JSON
        )
        return reply

    def reset(self) -> dict[str, Any]:
        """Reset the server (test mode only): ``{"registry_version": N, "reset": true}``."""
        reply: dict[str, Any] = self.request(OP_RESET, {})
        return reply

    def test_clock(self, now_ms: int | None) -> dict[str, Any]:
        """``{"now_ms": N}`` pins a test-mode server's clock at N (epoch ms; None returns it to the
        wall clock). An extension of this server: beava 0.0.6 has no test clock."""
        reply: dict[str, Any] = self.request(OP_TEST_CLOCK, {"now_ms": now_ms})
        return reply

    def get(self, table: str, key: Any = None, features: Sequence[str] | None = None) -> Any:
        """The row of ``key`` (sent unchanged; None = global row ``""``) in ``table``."""
        return self.request(OP_GET, get_body(table, key, features))

    def batch_get(self, requests: Iterable[Any]) -> list[Any]:
        """Rows for ``(table, key[, features])`` tuples or request mappings, in order;
        per-entry failures come back inline as ``{"error": {...}}``."""
        results: list[Any] = self.request(OP_BATCH_GET, batch_get_body(requests))["results"]
        return results

    def scan(self, table: str, cursor: str | None = None, *, limit: int | None = None,
             until: str | None = None, splits: int | None = None,
             arrays: bool = False, decode_as: Any = Any) -> dict[str, Any]:
        """One page of a table scan (an extension of this server, opcode 0x0025):
        ``{"rows": [...], "cursor": next or None, "entities": N, "registry_version": V}``,
        plus ``"columns"`` on the first page (cursor None) and ``"splits"`` when asked.
        Each row holds the entity's key columns and its features as GET reads them.
        ``limit``: rows per page (server default 1,000, at most 10,000); ``until``: stop
        before that cursor's position; ``splits``: also return that many cursors dividing
        the rest of the table (for parallel readers); ``arrays``: each row an array of its
        values in the order of the first page's ``columns`` (a smaller page: a row of maps
        names every column; fraud-team's widest table, 30% fewer bytes). ``decode_as``: the
        type the reply is decoded to (see ``request``), such as a TypedDict whose ``rows``
        are msgspec Structs, some fields of which are ``msgspec.Raw`` (left encoded)."""
        reply: dict[str, Any] = self.request(
            OP_SCAN, scan_body(table, cursor, limit, until, splits, arrays), decode_as=decode_as)
        return reply

    def describe(self) -> dict[str, Any]:
        """What the registry holds (an extension of this server, opcode 0x0026):
        ``{"version", "node_count", "nodes"}``, every node in registration order; events
        with their fields, tables with their keys and features (op, params, window)."""
        reply: dict[str, Any] = self.request(OP_DESCRIBE)
        return reply

    def scan_rows(self, table: str, *, limit: int | None = None, cursor: str | None = None,
                  until: str | None = None) -> Iterator[dict[str, Any]]:
        """Every row of ``table``, page by page (``scan`` with each next cursor). Rows of
        entities created while the scan runs come too if their position is still ahead."""
        return scan_rows(lambda c: self.scan(table, c, limit=limit, until=until), cursor)

    # -- pushes --------------------------------------------------------------------------

    def push(self, event: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Push one event: ``{"ack_lsn", "idempotent_replay", "registry_version"}``."""
        frame = self.push_encoder(event).encode(body)
        reply: dict[str, Any] = decode_reply(self._roundtrip(frame, False), OP_PUSH)
        return reply

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

        def job() -> PushResult:
            tally = PushTally(OP_PUSH)  # a retry (nothing sent yet) starts afresh
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
        rows, chunks = self._push_many_chunks(event, rows, chunk_size)
        if not chunks:
            return empty_push_result()
        if self._push_many_supported is False:
            return self.push_pipelined(event, rows)
        tally = PushManyTally()
        if self._push_many_supported is None:
            if not self._probe_push_many(self._roundtrip(chunks[0].data, False), tally):
                return self.push_pipelined(event, rows)
            chunks = chunks[1:]
            if not chunks:
                return tally.result()
        tally.add_frames(chunks, self._replies([(c.data, 1) for c in chunks], False))
        return tally.result()

    # -- generic pipelining ----------------------------------------------------------------

    def pipeline(self) -> Pipeline:
        """A queue of requests sent together (pipelined) by ``Pipeline.execute()``."""
        return Pipeline(self)


class Pipeline(PipelineBase):
    """Requests queued on a TcpClient and sent in one pipelined exchange.

    Each method queues one request and returns the pipeline (chainable). ``execute()``
    sends them, reads every reply, and returns the decoded bodies in order.
    """

    _client: TcpClient

    def execute(self, *, raise_on_error: bool = True) -> list[Any]:
        """Send the queued requests and return their replies in order. A failed request's
        slot holds its ServerError; with ``raise_on_error`` the first one is raised after
        every reply has been read. The queue is emptied either way."""
        frames, expect, safe = self._take()
        if not frames:
            return []
        client = self._client
        batches = join_frames(frames, default_batch_size(client.max_in_flight))
        return decode_replies(client._replies(batches, safe), expect, raise_on_error)
