"""Merged results of bulk pushes: one shape for push_many and pipelined pushes.

``{"acks": int, "ack_lsn": int | None, "errors": [{"index": i, "error": {...}}],
"registry_version": int | None}`` (spec/sdk.md §8.4), with ``index`` the position of the
row in the caller's sequence.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from .codec import decode_payload
from .errors import ServerError, error_from_reply, unexpected_reply
from .frames import Frame
from .messages import PushManyChunk
from .opcodes import OP_ERROR, OP_PUSH_MANY

PushResult = dict[str, Any]


def empty_push_result() -> PushResult:
    """The result of pushing no rows."""
    return {"acks": 0, "ack_lsn": None, "errors": [], "registry_version": None}


class PushTally:
    """Accumulates the replies of pipelined single pushes (op ``ok_op`` = ack).

    Acks are only counted while replies stream in; the last ack is decoded once, in
    ``result()``, for ``ack_lsn`` and ``registry_version``.
    """

    __slots__ = (
        "acks", "errors", "seen", "_ok_op", "_offset",
        "_last_ack", "_last_ack_at", "_last_rv", "_last_rv_at",
    )

    def __init__(self, ok_op: int, offset: int = 0) -> None:
        self.acks = 0
        self.errors: list[dict[str, Any]] = []
        self.seen = 0
        self._ok_op = ok_op
        self._offset = offset
        self._last_ack: tuple[bytes, int] | None = None
        self._last_ack_at = -1
        self._last_rv: int | None = None
        self._last_rv_at = -1

    def feed(self, frames: list[Frame]) -> None:
        """Account for consecutive reply frames."""
        ok_op = self._ok_op
        seen = self.seen
        acks = 0
        last = None
        last_at = -1
        for op, ct, payload in frames:
            if op == ok_op:
                acks += 1
                last = (payload, ct)
                last_at = seen
            else:
                self._error(seen, op, ct, payload)
            seen += 1
        self.seen = seen
        if acks:
            self.acks += acks
            self._last_ack = last
            self._last_ack_at = last_at

    def _error(self, index: int, op: int, ct: int, payload: bytes) -> None:
        if op == OP_ERROR:
            err = error_from_reply(payload, op=op, ct=ct)
            error = err.error
        else:
            error = {"code": "unexpected_frame", "op": op}
            err = None
        self.errors.append({"index": self._offset + index, "error": error})
        if err is not None:
            rv = err.body.get("registry_version")
            if isinstance(rv, int) and not isinstance(rv, bool):
                self._last_rv = rv
                self._last_rv_at = index

    def result(self) -> PushResult:
        """The merged result so far."""
        ack_lsn = None
        rv = self._last_rv
        if self._last_ack is not None:
            try:
                ack = decode_payload(*self._last_ack)
            except msgspec.DecodeError:
                ack = {}
            if isinstance(ack, dict):
                ack_lsn = ack.get("ack_lsn")
                if self._last_ack_at > self._last_rv_at or rv is None:
                    rv = ack.get("registry_version", rv)
        return {"acks": self.acks, "ack_lsn": ack_lsn, "errors": self.errors,
                "registry_version": rv}


class PushManyTally:
    """Merges OP_PUSH_MANY / POST /push_many replies of consecutive chunks."""

    __slots__ = ("acks", "ack_lsn", "errors", "registry_version")

    def __init__(self) -> None:
        self.acks = 0
        self.ack_lsn: Any = None
        self.errors: list[dict[str, Any]] = []
        self.registry_version: Any = None

    def add(self, reply: dict[str, Any], start: int) -> None:
        """Merge one chunk reply whose first row has index ``start``."""
        self.acks += reply.get("acks", 0)
        if reply.get("ack_lsn") is not None:
            self.ack_lsn = reply["ack_lsn"]
        for entry in reply.get("errors") or ():
            rebased = dict(entry)
            rebased["index"] = entry.get("index", 0) + start
            self.errors.append(rebased)
        if "registry_version" in reply:
            self.registry_version = reply["registry_version"]

    def add_frames(self, chunks: Sequence[PushManyChunk], frames: Sequence[Frame]) -> None:
        """Merge the OP_PUSH_MANY reply frames of ``chunks``, in order. A chunk rejected as
        a whole raises its ServerError with ``acked_before`` set."""
        for chunk, frame in zip(chunks, frames, strict=True):
            try:
                reply = decode_reply(frame, OP_PUSH_MANY)
            except ServerError as err:
                err.acked_before = self.acks
                raise
            self.add(reply, chunk.start)

    def result(self) -> PushResult:
        """The merged result."""
        return {"acks": self.acks, "ack_lsn": self.ack_lsn, "errors": self.errors,
                "registry_version": self.registry_version}


def merge_push_outcomes(outcomes: Iterable[tuple[int, Any]]) -> PushResult:
    """Merge ``(index, ack dict or ServerError)`` pairs of single pushes (HTTP
    ``push_each``) into the push_many result shape."""
    acks = 0
    ack_lsn = None
    errors: list[dict[str, Any]] = []
    registry_version = None
    for index, outcome in outcomes:
        if isinstance(outcome, ServerError):
            errors.append({"index": index, "error": outcome.error})
            rv = outcome.body.get("registry_version")
        else:
            acks += 1
            ack_lsn = outcome.get("ack_lsn", ack_lsn)
            rv = outcome.get("registry_version")
        if rv is not None:
            registry_version = rv
    return {"acks": acks, "ack_lsn": ack_lsn, "errors": errors,
            "registry_version": registry_version}


def decode_reply(frame: Frame, expect_op: int | None, decode_as: Any = Any) -> Any:
    """Decode a reply frame: its body (as ``decode_as``, a type msgspec decodes to) when
    the opcode is ``expect_op`` (any non-error opcode when None); raise ServerError for
    0xFFFF or any other opcode, or a body that does not decode as ``decode_as``."""
    op, ct, payload = frame
    if op == expect_op or (expect_op is None and op != OP_ERROR):
        try:
            return decode_payload(payload, ct, decode_as)
        except msgspec.DecodeError as exc:
            raise ServerError(
                "unparseable_reply", f"reply op 0x{op:04x}: {exc}", op=op, raw=bytes(payload)
            ) from None
    if op == OP_ERROR:
        raise error_from_reply(payload, op=op, ct=ct)
    raise unexpected_reply(op, expect_op if expect_op is not None else op, payload, ct)


def decode_replies(
    frames: Sequence[Frame], expect_ops: Sequence[int | None], raise_on_error: bool
) -> list[Any]:
    """Decode pipelined replies in order (see ``decode_reply``); a failed request's slot
    holds its ServerError, and with ``raise_on_error`` the first one is raised once all
    are decoded."""
    results: list[Any] = []
    first_error: ServerError | None = None
    for frame, op in zip(frames, expect_ops, strict=True):
        try:
            results.append(decode_reply(frame, op))
        except ServerError as err:
            results.append(err)
            if first_error is None:
                first_error = err
    if raise_on_error and first_error is not None:
        raise first_error
    return results
