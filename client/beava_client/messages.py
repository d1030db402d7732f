"""Request bodies and their encoders: push envelopes, push_many chunks, reads, register.

Push encoders precompute the envelope bytes around the body per event name and content
type, and encode each body straight into the outgoing buffer (``msgspec`` ``encode_into``),
so a pipelined batch of N pushes costs one buffer and N body encodes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import msgspec

from .codec import new_encoder
from .frames import HEADER, HEADER_SIZE, MIN_LENGTH
from .opcodes import CT_JSON, CT_MSGPACK, OP_BACKFILL, OP_PUSH, OP_PUSH_MANY

PUSH_MANY_MAX_BODIES = 10_000
DEFAULT_MAX_IN_FLIGHT = 1024
ENCODER_CACHE_LIMIT = 256
UNSAFE_OPS = frozenset((OP_PUSH, OP_PUSH_MANY, OP_BACKFILL))
"""Requests that are never retried once they may have reached the server."""
PUSH_MANY_UNSUPPORTED_CODES = frozenset(("unknown_op", "op_not_implemented"))
"""TCP error codes meaning the server has no OP_PUSH_MANY (spec/sdk.md §8.4)."""
DEFAULT_CHUNK_SIZE = 1000
HTTP_MAX_BODY_BYTES = 4 * 1024 * 1024

_json_encode = msgspec.json.encode
_msgpack_encode = msgspec.msgpack.encode
_pack_header_into = HEADER.pack_into
_pack_u32_into = struct.Struct(">I").pack_into


Batch = tuple[bytes | bytearray, int]
"""``(frames, count)``: ``count`` complete frames concatenated."""


def default_batch_size(max_in_flight: int) -> int:
    """Frames per write in bulk pipelines: a quarter of the window keeps the pipe full."""
    return max(1, min(256, max_in_flight // 4))


def _msgpack_key(name: str) -> bytes:
    return _msgpack_encode(name)


class EnvelopeEncoder:
    """Encodes ``{"event": name, <field>: body}`` for one event name and content type.

    With ``op`` set, every output is a complete frame (7-byte header included);
    with ``op=None`` it is a bare body (HTTP).
    """

    __slots__ = ("_enc", "_head", "_tail", "_op", "_ct", "max_payload")

    def __init__(
        self,
        event: str,
        *,
        field: str = "body",
        ct: int = CT_JSON,
        op: int | None = OP_PUSH,
        max_payload: int | None = None,
    ) -> None:
        if not isinstance(event, str):
            raise TypeError(f"event name must be a str, got {type(event).__name__}")
        self._enc = new_encoder(ct)
        if ct == CT_MSGPACK:
            # fixmap(2) {"event": name, field: body}: the server requires exactly these keys.
            envelope = b"\x82" + _msgpack_key("event") + _msgpack_encode(event)
            envelope += _msgpack_key(field)
            self._tail = b""
        else:
            envelope = b'{"event":' + _json_encode(event) + b',"' + field.encode() + b'":'
            self._tail = b"}"
        reserve = bytes(HEADER_SIZE) if op is not None else b""
        head = bytearray(reserve + envelope)
        if op is not None:
            _pack_header_into(head, 0, 0, op, ct)
        self._head = bytes(head)
        self._op = op
        self._ct = ct
        self.max_payload = max_payload

    def encode(self, body: Any) -> bytes:
        """One frame (or body) for ``body``."""
        buf = bytearray()
        self.append(buf, body)
        return bytes(buf)

    def append(self, buf: bytearray, body: Any) -> None:
        """Append one frame (or body) for ``body`` to ``buf``."""
        start = len(buf)
        buf += self._head
        self._enc.encode_into(body, buf, -1)
        buf += self._tail
        if self._op is not None:
            self._seal(buf, start)

    def _seal(self, buf: bytearray, start: int) -> None:
        length = len(buf) - start - 4
        if self.max_payload is not None and length - MIN_LENGTH > self.max_payload:
            del buf[start:]
            raise ValueError(
                f"push frame payload of {length - MIN_LENGTH} bytes exceeds "
                f"max_frame_bytes={self.max_payload}"
            )
        _pack_u32_into(buf, start, length)

    def batches(self, bodies: Iterable[Any], batch_size: int) -> Iterator[Batch]:
        """Yield ``(frames, count)``: ``count`` consecutive frames concatenated, at most
        ``batch_size`` per batch, encoded lazily (frames only: requires ``op``)."""
        if self._op is None:
            raise TypeError("batches() needs an encoder built with an opcode")
        # The per-body loop is inlined: it is the bulk push hot path.
        head = self._head
        tail = self._tail
        encode_into = self._enc.encode_into
        limit = (self.max_payload if self.max_payload is not None else 1 << 62) + MIN_LENGTH
        pack = _pack_u32_into
        buf = bytearray()
        count = 0
        for body in bodies:
            start = len(buf)
            buf += head
            encode_into(body, buf, -1)
            if tail:
                buf += tail
            length = len(buf) - start - 4
            if length > limit:
                self._seal(buf, start)  # raises ValueError
            pack(buf, start, length)
            count += 1
            if count == batch_size:
                yield buf, count  # never touched again: no copy needed
                buf = bytearray()
                count = 0
        if count:
            yield buf, count


class PushEncoders:
    """A client's EnvelopeEncoders by event name (and content type), built on first use.
    Emptied when it holds ``ENCODER_CACHE_LIMIT``: a flood of distinct names must not grow
    memory."""

    __slots__ = ("_by_key", "_field", "_ct", "_op", "_max_payload")

    def __init__(
        self,
        *,
        field: str = "body",
        ct: int = CT_JSON,
        op: int | None = OP_PUSH,
        max_payload: int | None = None,
    ) -> None:
        self._by_key: dict[str, EnvelopeEncoder] = {}
        self._field = field
        self._ct = ct
        self._op = op
        self._max_payload = max_payload

    def get(self, event: str, ct: int | None = None) -> EnvelopeEncoder:
        """The encoder for ``event`` in content type ``ct`` (default: the cache's own)."""
        ct = self._ct if ct is None else ct
        key = event if ct == self._ct else f"{ct}:{event}"
        enc = self._by_key.get(key)
        if enc is None:
            if len(self._by_key) >= ENCODER_CACHE_LIMIT:
                self._by_key.clear()
            enc = EnvelopeEncoder(
                event, field=self._field, ct=ct, op=self._op, max_payload=self._max_payload
            )
            self._by_key[key] = enc
        return enc


def join_frames(frames: Sequence[bytes], size: int) -> list[Batch]:
    """Complete frames as batches of at most ``size``, each one joined buffer."""
    batches: list[Batch] = []
    for i in range(0, len(frames), size):
        group = frames[i : i + size]
        batches.append((b"".join(group), len(group)))
    return batches


class PushManyChunk(msgspec.Struct, frozen=True):
    """One encoded push_many request: ``data`` (a frame, or an HTTP body), the index in the
    caller's rows of its first row, and its number of rows."""

    data: bytes
    start: int
    count: int


def encode_push_many_chunks(
    event: str,
    rows: Iterable[Any],
    *,
    ct: int = CT_JSON,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    max_payload: int = HTTP_MAX_BODY_BYTES,
    framed: bool = True,
) -> list[PushManyChunk]:
    """Encode ``rows`` into consecutive ``{"event", "bodies"}`` requests (spec/wire.md §10,
    spec/sdk.md §8.4): at most ``chunk_size`` rows and ``max_payload`` payload bytes each.

    Everything is encoded before anything is sent, so a row too large for any chunk raises
    ValueError with nothing sent. ``framed``: each chunk is an OP_PUSH_MANY frame; else a
    bare body (always JSON for HTTP).
    """
    if not isinstance(event, str):
        raise TypeError(f"event name must be a str, got {type(event).__name__}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
        raise TypeError("chunk_size must be an int")
    if not 1 <= chunk_size <= PUSH_MANY_MAX_BODIES:
        raise ValueError(f"chunk_size must be in [1, {PUSH_MANY_MAX_BODIES}], got {chunk_size}")
    reserve = HEADER_SIZE if framed else 0
    enc = new_encoder(ct)
    if ct == CT_MSGPACK:
        # The array length is patched per chunk, so the 32-bit array form is always used.
        head = (
            b"\x82" + _msgpack_key("event") + _msgpack_encode(event)
            + _msgpack_key("bodies") + b"\xdd\x00\x00\x00\x00"
        )
        tail = b""
        sep = b""
    else:
        head = b'{"event":' + _json_encode(event) + b',"bodies":['
        tail = b"]}"
        sep = b","
    head = bytes(reserve) + head
    count_at = len(head) - 4
    fixed = len(head) - reserve + len(tail)
    chunks: list[PushManyChunk] = []

    def finish(buf: bytearray, start: int, count: int) -> None:
        buf += tail
        if ct == CT_MSGPACK:
            _pack_u32_into(buf, count_at, count)
        if framed:
            _pack_header_into(buf, 0, len(buf) - 4, OP_PUSH_MANY, ct)
        chunks.append(PushManyChunk(bytes(buf), start, count))

    buf = bytearray(head)
    start = 0
    count = 0
    for index, row in enumerate(rows):
        if count == chunk_size:
            finish(buf, start, count)
            buf = bytearray(head)
            start = index
            count = 0
        mark = len(buf)
        if count:
            buf += sep
        enc.encode_into(row, buf, -1)
        if len(buf) - reserve + len(tail) > max_payload:
            row_bytes = bytes(buf[mark + (len(sep) if count else 0) :])
            if count == 0 or fixed + len(row_bytes) > max_payload:
                raise ValueError(
                    f"row {index} encodes to {len(row_bytes)} bytes: too large for one "
                    f"push_many request of at most {max_payload} bytes"
                )
            del buf[mark:]
            finish(buf, start, count)
            buf = bytearray(head)
            buf += row_bytes
            start = index
            count = 0
        count += 1
    if count:
        finish(buf, start, count)
    return chunks


def register_body(
    payload: Mapping[str, Any] | Sequence[Any], force: bool = False, dry_run: bool = False
) -> dict[str, Any]:
    """The register request: ``payload`` is ``{"nodes": [...], ...}`` or the node list.
    ``force``/``dry_run`` set the flag to ``true``; when False the payload's own value stays."""
    if isinstance(payload, Mapping):
        body = dict(payload)
    elif isinstance(payload, Sequence) and not isinstance(payload, (str, bytes, bytearray)):
        body = {"nodes": list(payload)}
    else:
        raise TypeError("register payload must be a mapping or a sequence of nodes")
    if force:
        body["force"] = True
    if dry_run:
        body["dry_run"] = True
    return body


def get_body(table: str, key: Any, features: Sequence[str] | None) -> dict[str, Any]:
    """``{"table", "key", "features"?}``; ``key=None`` reads the global row (``""``)."""
    body: dict[str, Any] = {"table": table, "key": "" if key is None else key}
    if features is not None:
        body["features"] = list(features)
    return body


def scan_body(table: str, cursor: str | None, limit: int | None, until: str | None,
              splits: int | None, arrays: bool = False) -> dict[str, Any]:
    """A table scan request (an extension of this server): ``{"table", "cursor"}`` and the
    optional ``limit``, ``until`` and ``splits`` when given, ``"arrays": true`` when
    ``arrays`` (each row an array of its values, in the order of the first page's
    ``columns``)."""
    if not isinstance(table, str):
        raise TypeError(f"scan table must be a str, got {table!r}")
    body: dict[str, Any] = {"table": table, "cursor": cursor}
    if limit is not None:
        body["limit"] = limit
    if until is not None:
        body["until"] = until
    if splits is not None:
        body["splits"] = splits
    if arrays:
        body["arrays"] = True
    return body


def scan_rows(
    fetch: Callable[[str | None], Mapping[str, Any]], cursor: str | None = None
) -> Iterator[dict[str, Any]]:
    """Every row of a scan: pages from ``fetch(cursor)`` until a page has no next cursor."""
    while True:
        page = fetch(cursor)
        yield from page["rows"]
        cursor = page["cursor"]
        if cursor is None:
            return


def batch_get_body(requests: Iterable[Any]) -> dict[str, Any]:
    """``{"requests": [...]}`` from entries that are mappings (sent as given) or tuples
    ``(table, key)`` / ``(table, key, features)``."""
    entries: list[Any] = []
    for entry in requests:
        if isinstance(entry, Mapping):
            entries.append(entry)
        elif isinstance(entry, tuple) and len(entry) in (2, 3):
            entries.append(get_body(entry[0], entry[1], entry[2] if len(entry) == 3 else None))
        else:
            raise TypeError(
                "batch_get entries must be mappings or (table, key[, features]) tuples, "
                f"got {entry!r}"
            )
    return {"requests": entries}
