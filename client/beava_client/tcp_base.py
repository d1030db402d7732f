"""What the blocking (``tcp``) and asyncio (``aio``) framed-TCP clients share
(spec/wire.md §2): configuration, request encoding, the push_many probe, and the request
queue of pipelines. Each client adds its own socket I/O."""

from __future__ import annotations

import ssl
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Self

from .codec import Encoder, encode_body, new_encoder
from .errors import error_from_reply
from .frames import Frame, check_payload_size, encode_frame
from .lifecycle import ClientBase, check_count
from .messages import (
    PUSH_MANY_UNSUPPORTED_CODES,
    UNSAFE_OPS,
    EnvelopeEncoder,
    PushEncoders,
    PushManyChunk,
    batch_get_body,
    encode_push_many_chunks,
    get_body,
    register_body,
)
from .opcodes import (
    CT_JSON,
    CT_MSGPACK,
    DEFAULT_REPLY_OP,
    OP_AUTH,
    OP_BATCH_GET,
    OP_ERROR,
    OP_GET,
    OP_PING,
    OP_PUSH,
    OP_PUSH_MANY,
    OP_REGISTER,
    OP_RESET,
    content_type_code,
    expected_reply_op,
)
from .results import PushManyTally, decode_reply
from .security import client_ssl_context, resolve_token
from .urls import tcp_endpoint


class TcpClientBase(ClientBase, ABC):
    """Configuration and request encoding of one framed-TCP client (arguments: see
    ``TcpClient``)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout: float,
        content_type: int | str,
        max_in_flight: int,
        max_frame_bytes: int,
        reconnect: bool,
        token: str | None = None,
        tls: bool | ssl.SSLContext = False,
        ca: str | None = None,
    ) -> None:
        super().__init__(timeout=timeout, reconnect=reconnect)
        self.token = resolve_token(token)
        self.tls = tls
        self._ssl = client_ssl_context(tls, ca)
        self.max_in_flight = check_count(max_in_flight, "max_in_flight")
        self.host = host
        self.port = port
        self.content_type = content_type_code(content_type)
        self.max_frame_bytes = max_frame_bytes
        self._encoders: dict[int, Encoder] = {
            CT_JSON: new_encoder(CT_JSON), CT_MSGPACK: new_encoder(CT_MSGPACK),
        }
        self._push_encoders = PushEncoders(
            ct=self.content_type, op=OP_PUSH, max_payload=max_frame_bytes
        )

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> Self:
        """A client for ``tcp://host[:port]`` (``tcps://``: over TLS)."""
        endpoint = tcp_endpoint(url)
        return cls(endpoint.host, endpoint.port, **{"tls": endpoint.tls, **kwargs})

    @property
    @abstractmethod
    def connected(self) -> bool:
        """True while a connection is open."""

    @property
    def _address(self) -> str:
        return f"{self.host}:{self.port}"

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("connected" if self.connected else "idle")
        scheme = "tcps" if self._ssl is not None else "tcp"
        return f"<{type(self).__name__} {scheme}://{self._address} {state}>"

    def _auth_frame(self) -> bytes | None:
        """The OP_AUTH frame each new connection starts with (None without a token)."""
        if self.token is None:
            return None
        return self.encode_request(OP_AUTH, {"token": self.token}, ct=CT_JSON)

    @staticmethod
    def _check_auth_reply(reply: Frame) -> None:
        """Raise ServerError (``unauthenticated``) unless ``reply`` accepts the token."""
        decode_reply(reply, OP_AUTH)

    def encode_request(self, op: int, payload: Any = None, *, ct: int | None = None) -> bytes:
        """One request frame; ``payload`` bytes are sent as is, other values encoded with
        ``ct`` (default: the client's content type), None is an empty payload. A payload
        above ``max_frame_bytes`` raises ValueError."""
        ct = self.content_type if ct is None else ct
        data = encode_body(payload, self._encoders.get(ct) or new_encoder(ct))
        check_payload_size(len(data), self.max_frame_bytes)
        return encode_frame(op, ct, data)

    def push_encoder(self, event: str, ct: int | None = None) -> EnvelopeEncoder:
        """The (cached) OP_PUSH frame encoder for ``event``."""
        return self._push_encoders.get(event, ct)

    def _push_many_chunks(
        self, event: str, rows: Iterable[Mapping[str, Any]], chunk_size: int
    ) -> tuple[list[Any], list[PushManyChunk]]:
        """``rows`` as a list (kept for a fallback to single pushes) and its OP_PUSH_MANY
        frames, all encoded before anything is sent."""
        rows = rows if isinstance(rows, list) else list(rows)
        chunks = encode_push_many_chunks(
            event, rows, ct=self.content_type, chunk_size=chunk_size,
            max_payload=self.max_frame_bytes,
        )
        return rows, chunks

    def _probe_push_many(self, first: Frame, tally: PushManyTally) -> bool:
        """Read the reply to the first OP_PUSH_MANY chunk this client sends and record
        whether the server has the op (for good): False for ``unknown_op`` /
        ``op_not_implemented``; True once the reply is merged into ``tally`` (its rows
        start at 0). Any other refusal raises ServerError with ``acked_before=0``."""
        op, ct, payload = first
        if op == OP_ERROR:
            err = error_from_reply(payload, op=op, ct=ct)
            if err.code in PUSH_MANY_UNSUPPORTED_CODES:
                self._push_many_supported = False
                return False
            self._push_many_supported = True  # the op is known; this chunk was refused
            err.acked_before = 0
            raise err
        tally.add(decode_reply(first, OP_PUSH_MANY), 0)
        self._push_many_supported = True
        return True


class PipelineBase:
    """The request queue of a pipeline: each method queues one request frame and returns
    the pipeline (chainable); ``execute()`` is the client's."""

    def __init__(self, client: TcpClientBase) -> None:
        self._client = client
        self._frames: list[bytes] = []
        self._expect: list[int | None] = []
        # Whether every queued request may be retried on a new connection (reconnect rule).
        self._safe = True

    def __len__(self) -> int:
        return len(self._frames)

    def _queue(self, frame: bytes, expect_op: int | None, safe: bool) -> Self:
        self._frames.append(frame)
        self._expect.append(expect_op)
        if not safe:
            self._safe = False
        return self

    def _take(self) -> tuple[list[bytes], list[int | None], bool]:
        """Empty the queue: its frames, their reply opcodes, and whether all are safe."""
        taken = self._frames, self._expect, self._safe
        self._frames, self._expect, self._safe = [], [], True
        return taken

    def request(
        self,
        op: int,
        payload: Any = None,
        *,
        ct: int | None = None,
        expect_op: int | None = DEFAULT_REPLY_OP,
    ) -> Self:
        """Queue any request (see ``TcpClient.request``)."""
        frame = self._client.encode_request(op, payload, ct=ct)
        return self._queue(frame, expected_reply_op(op, expect_op), op not in UNSAFE_OPS)

    def ping(self) -> Self:
        return self.request(OP_PING)

    def register(
        self, payload: Mapping[str, Any] | Sequence[Any], *, force: bool = False,
        dry_run: bool = False,
    ) -> Self:
        return self.request(OP_REGISTER, register_body(payload, force, dry_run), ct=CT_JSON)

    def push(self, event: str, body: Mapping[str, Any]) -> Self:
        return self._queue(self._client.push_encoder(event).encode(body), OP_PUSH, False)

    def get(self, table: str, key: Any = None, features: Sequence[str] | None = None) -> Self:
        return self.request(OP_GET, get_body(table, key, features))

    def batch_get(self, requests: Iterable[Any]) -> Self:
        return self.request(OP_BATCH_GET, batch_get_body(requests))

    def reset(self) -> Self:
        return self.request(OP_RESET, {})
