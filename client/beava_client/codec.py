"""Body encoding and decoding by content type (spec/wire.md §2.3): the one place that maps
CT_JSON / CT_MSGPACK to msgspec."""

from __future__ import annotations

from typing import Any

import msgspec

from .opcodes import CT_MSGPACK

Encoder = msgspec.json.Encoder | msgspec.msgpack.Encoder

_json_decode = msgspec.json.decode
_msgpack_decode = msgspec.msgpack.decode


def new_encoder(ct: int) -> Encoder:
    """A msgspec encoder for content type ``ct``."""
    return msgspec.msgpack.Encoder() if ct == CT_MSGPACK else msgspec.json.Encoder()


def decode_payload(payload: bytes, ct: int, decode_as: Any = Any) -> Any:
    """Decode a body by its content type byte, as ``decode_as`` (a type msgspec decodes
    to). ``msgspec.Raw`` takes the body as it came, unparsed (msgspec would walk all of it
    only to find where it ends: a scan page's megabyte is parsed once, by its reader)."""
    if decode_as is msgspec.Raw:
        return msgspec.Raw(payload)
    if ct == CT_MSGPACK:
        return _msgpack_decode(payload, type=decode_as)
    return _json_decode(payload, type=decode_as)


def encode_body(payload: Any, encoder: Encoder) -> bytes:
    """A request body: None is empty, bytes-like values are sent as they are, any other
    value is encoded with ``encoder``."""
    if payload is None:
        return b""
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return bytes(payload)
    return encoder.encode(payload)
