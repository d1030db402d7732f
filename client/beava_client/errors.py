"""Client exceptions and the decoding of server error bodies (spec/wire.md §5)."""

from __future__ import annotations

from typing import Any

import msgspec

from .codec import decode_payload

UNPARSEABLE_TEXT_LIMIT = 200


class BeavaError(Exception):
    """Base of every client error.

    ``code``: the server's ``error.code`` (or a client code such as ``timeout``);
    ``path``/``reason``/``message``: the server's fields ("" when absent);
    ``status``: HTTP status (None on TCP); ``op``: reply opcode (TCP);
    ``body``: the whole decoded reply ({} when none); ``raw``: the reply bytes;
    ``error``: the error object (``body["error"]``, or ``body`` for flat envelopes).
    """

    def __init__(
        self,
        code: str,
        message: str = "",
        *,
        path: str = "",
        reason: str = "",
        status: int | None = None,
        op: int | None = None,
        body: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        raw: bytes = b"",
    ) -> None:
        super().__init__(message or reason or code)
        self.code = code
        self.message = message
        self.path = path
        self.reason = reason
        self.status = status
        self.op = op
        self.body = {} if body is None else body
        self.error = {"code": code} if error is None else error
        self.raw = raw

    @property
    def text(self) -> str:
        """The human text: ``reason`` if the server sent one, else ``message``."""
        return self.reason or self.message

    def __str__(self) -> str:
        text = self.text
        if self.path:
            return f"[{self.code}] {self.path}: {text}"
        return f"[{self.code}] {text}" if text else f"[{self.code}]"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"


class ServerError(BeavaError):
    """The server answered with an error (TCP op 0xFFFF, HTTP status other than 200), or
    with a reply the client cannot use (``unexpected_frame``, ``unparseable_reply``).
    The connection stays usable. ``acked_before`` is set by push_many when a whole chunk is
    rejected: the number of rows acknowledged by the chunks before it."""

    acked_before: int | None = None


class TransportError(BeavaError, ConnectionError):
    """The connection failed: refused, reset, closed, or sent bytes that are not a valid
    frame. The connection is discarded; a request in flight has an unknown outcome."""


class ConnectionClosed(TransportError):
    """The peer closed the connection (possibly in the middle of a reply)."""


class ProtocolError(TransportError):
    """The peer sent bytes that break the framing (bad length, unsolicited reply)."""


class Timeout(TransportError, TimeoutError):
    """No progress within the client's timeout. The connection is discarded (TCP sync,
    HTTP); the async TCP client keeps it and discards the late reply."""


def _str_field(obj: dict[str, Any], name: str) -> str:
    value = obj.get(name)
    return value if isinstance(value, str) else ""


def error_from_reply(
    payload: bytes,
    *,
    status: int | None = None,
    op: int | None = None,
    ct: int = 0x01,
) -> ServerError:
    """Build the ServerError for an error reply body (any envelope family of wire.md §5.1).

    ``error`` is ``body["error"]`` when that is an object, else the body itself (the flat
    ``{"code":"unsupported"}`` form). A body that is not a JSON object gives
    ``code="unparseable_error"`` with the first 200 characters as message.
    """
    raw = bytes(payload)
    try:
        body = decode_payload(raw, ct)
    except (msgspec.DecodeError, UnicodeDecodeError):
        body = None
    if not isinstance(body, dict):
        text = raw[:UNPARSEABLE_TEXT_LIMIT * 4].decode("utf-8", "replace")
        return ServerError(
            "unparseable_error",
            text[:UNPARSEABLE_TEXT_LIMIT],
            status=status,
            op=op,
            raw=raw,
        )
    inner = body.get("error")
    err = inner if isinstance(inner, dict) else body
    code = err.get("code")
    if not isinstance(code, str) or not code:
        code = "unknown"
    return ServerError(
        code,
        _str_field(err, "message"),
        path=_str_field(err, "path"),
        reason=_str_field(err, "reason"),
        status=status,
        op=op,
        body=body,
        error=err,
        raw=raw,
    )


def unexpected_reply(op: int, expected: int, payload: bytes, ct: int) -> ServerError:
    """The error for a reply whose opcode is neither the expected one nor 0xFFFF: the
    body's own ``error.code`` if it carries one, else ``unexpected_frame``."""
    err = error_from_reply(payload, op=op, ct=ct)
    if err.code in ("unparseable_error", "unknown"):
        return ServerError(
            "unexpected_frame",
            f"expected reply op 0x{expected:04x}, got 0x{op:04x}",
            op=op,
            body=err.body,
            raw=err.raw,
        )
    return err
