"""Request envelopes decoded with msgspec (spec/wire.md §2.5, §3.3, §10)."""

from __future__ import annotations

from typing import Any

import msgspec


class TcpPushJson(msgspec.Struct):
    """OP_PUSH JSON envelope: other top-level keys are ignored."""

    event: str
    body: msgspec.Raw


class TcpPushMsgpack(msgspec.Struct, forbid_unknown_fields=True):
    """OP_PUSH MessagePack envelope: exactly ``event`` and ``body``."""

    event: str
    body: Any


class PushMany(msgspec.Struct):
    event: str
    bodies: list[Any]


class BatchGetJson(msgspec.Struct):
    """A BATCH_GET body whose `requests` are checked but left encoded, to be decoded a few
    entries at a time (one pass over the bytes; any other body is decoded whole)."""

    requests: msgspec.Raw


class BatchGetMsgpack(msgspec.Struct):
    """The same for MessagePack, each entry left encoded."""

    requests: list[msgspec.Raw]


# What the decoders raise on a body that is not valid: a string that is not UTF-8 raises
# UnicodeDecodeError, not msgspec.DecodeError.
DECODE_ERRORS = (msgspec.DecodeError, UnicodeDecodeError)

tcp_push_json = msgspec.json.Decoder(TcpPushJson).decode
tcp_push_msgpack = msgspec.msgpack.Decoder(TcpPushMsgpack).decode
push_many_json = msgspec.json.Decoder(PushMany).decode
push_many_msgpack = msgspec.msgpack.Decoder(PushMany).decode
json_any = msgspec.json.Decoder().decode
# A JSON number beyond a double's range (1e999) is valid JSON that the decoders here refuse
# ("Number out of range"); a push body they refuse is decoded again by these, which read
# such a number as ±inf, so that the push checks refuse its field by name (spec/wire.md
# §6.3). Only a refused body pays for the float hook.
_wide_any = msgspec.json.Decoder(float_hook=float).decode
_wide_push_many = msgspec.json.Decoder(PushMany, float_hook=float).decode
msgpack_any = msgspec.msgpack.Decoder().decode
batch_get_json = msgspec.json.Decoder(BatchGetJson).decode
batch_get_msgpack = msgspec.msgpack.Decoder(BatchGetMsgpack).decode
encode_json = msgspec.json.Encoder(order="sorted").encode
encode_msgpack = msgspec.msgpack.Encoder(order="sorted").encode


def json_failure(payload: bytes, err: Exception) -> str:
    """Where decoding the JSON ``payload`` failed (``err``, one of :data:`DECODE_ERRORS`),
    for the message of the error that refuses it."""
    if not payload:
        return "the body is empty; expected a JSON object"
    if isinstance(err, UnicodeDecodeError):
        try:  # msgspec counts from the start of the string; count from the body's
            payload.decode("utf-8")
        except UnicodeDecodeError as exact:
            err = exact
        return f"the body is not valid UTF-8: {err.reason} at byte {err.start}"
    text = str(err)
    if text == "Input data was truncated":
        return f"the JSON ends early: the body stops after {len(payload)} bytes, inside a value"
    return f"the body is not valid JSON: {text.removeprefix('JSON is malformed: ')}"


def json_any_wide(payload: bytes | msgspec.Raw) -> Any:
    """A JSON push body or envelope, numbers beyond a double's range read as ±inf."""
    try:
        return json_any(payload)
    except msgspec.ValidationError:
        return _wide_any(payload)


def push_many_json_wide(payload: bytes) -> PushMany:
    """A JSON PUSH_MANY request, numbers beyond a double's range read as ±inf."""
    try:
        return push_many_json(payload)
    except msgspec.ValidationError:
        return _wide_push_many(payload)
