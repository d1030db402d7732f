"""Hypothesis strategies and settings shared by the fuzz suite.

Example counts are small by default (CI); ``BEAVA_FUZZ_SCALE=N`` multiplies every count by
N for a longer run (``BEAVA_FUZZ_SCALE=50 pytest tests/fuzz``).
"""

from __future__ import annotations

import datetime
import os
import re
from typing import Any

import msgspec
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

SCALE = max(1, int(os.environ.get("BEAVA_FUZZ_SCALE", "1")))


def fuzz_settings(examples: int) -> settings:
    return settings(max_examples=examples * SCALE, deadline=None, derandomize=SCALE == 1,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


# An internal error that no handler meant: an exception that escaped as "<Type>: ...".
UNMEANT = re.compile(r"^[A-Za-z_.]*(Error|Exception|Warning|Interrupt|Exit)\b")

EDGE_INTS = [0, 1, -1, 2**31, 2**53 + 1, 2**63 - 1, -(2**63), 2**63, 2**64 - 1, -(2**63) - 1,
             2**64, 10**308, 10**309, -(10**400), 10**400, 2**1023, 2**1024]
EDGE_TEXT = ["", "|", "a|b", "%7C", "\x00", "\n", "\x7f", "\x85", "é", "漢字", "\U0001F600",
             "\u2028", "null", "NaN", "-0", " ", "\ufeff"]


def ints(msgpack: bool) -> st.SearchStrategy[int]:
    """Integers around every boundary the server cares about; MessagePack carries 64 bits."""
    values = st.one_of(st.integers(), st.sampled_from(EDGE_INTS),
                       st.integers(-(2**70), 2**70))
    if msgpack:
        return values.filter(lambda v: -(2**63) <= v <= 2**64 - 1)
    return values


def scalars(msgpack: bool) -> st.SearchStrategy[Any]:
    options = [st.none(), st.booleans(), ints(msgpack),
               st.floats(allow_nan=msgpack, allow_infinity=msgpack),
               st.text(max_size=12), st.sampled_from(EDGE_TEXT)]
    if msgpack:  # what only MessagePack can carry: bytes, extensions, timestamps
        options += [st.binary(max_size=8),
                    st.builds(msgspec.msgpack.Ext, st.integers(-128, 127), st.binary(max_size=4)),
                    st.datetimes(timezones=st.just(datetime.UTC))]
    return st.one_of(*options)


def nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def values(msgpack: bool) -> st.SearchStrategy[Any]:
    """Any value a client could send: scalars, containers of them, deep nesting."""
    keys: st.SearchStrategy[Any] = st.one_of(st.text(max_size=6), st.sampled_from(EDGE_TEXT))
    if msgpack:  # MessagePack map keys may be anything
        keys = st.one_of(keys, st.integers(-5, 5), st.booleans(), st.binary(max_size=2))
    tree = st.recursive(scalars(msgpack),
                        lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                st.dictionaries(keys, inner, max_size=4)),
                        max_leaves=24)
    deep = st.builds(nested, st.integers(55, 70), scalars(msgpack))
    return st.one_of(tree, tree, tree, deep)


def encode_json(value: Any) -> bytes:
    """JSON text of a JSON-safe value (integers of any size as digits)."""
    import json

    return json.dumps(value, allow_nan=False).encode()


def encode_msgpack(value: Any) -> bytes:
    return msgspec.msgpack.encode(value)


# JSON texts a decoder may meet that json.dumps never writes
ODD_JSON = st.sampled_from([
    b'"\\ud800"', b'"\\udfff\\ud800"', b"1e400", b"-1e400", b"1" + b"0" * 400, b"-0",
    b"1.0e-400", b'"\\u0000"', b"[" * 3000 + b"]" * 3000, b'{"a":1,"a":2}', b"\xff",
    b'"\xc3\x28"', b"NaN", b"Infinity", b"[1,]", b"{}", b"[]", b"null", b"true",
    b"123456789012345678901234567890", b"0.1e99999", b"\xef\xbb\xbf{}",
])
