"""JSON text of MessagePack values written byte by byte (beava._fast.wire.msgpack_json) is
the text msgspec gives the decoded values: every type a reply holds, integers of every
width, text needing escapes, nesting; values holding floats (and other types) go through
msgspec itself."""

from __future__ import annotations

import math

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from beava._fast.wire.msgpack_json import json_texts

pack = msgspec.msgpack.Encoder(order="sorted").encode


def expected(value: object) -> str | None:
    return None if value is None else msgspec.json.encode(value).decode()


EDGES = [0, 1, 31, 32, 127, 128, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1,
         2**32, 2**63 - 1, 2**63, 2**64 - 1]


@pytest.mark.parametrize("value", [
    *EDGES, *[-e for e in EDGES if e <= 2**63], -33, -129, -32769, -(2**31) - 1,
    None, True, False, "", "a" * 31, "a" * 32, "a" * 256, "a" * 65536,
    "é€😀\x7f\u2028/", "".join(map(chr, range(0x20))) + '"\\', [], list(range(20)),
    {"b": [1, None, {"c": "x"}], "a": {}}, {str(i): i for i in range(200)},
    1.5, [1, 2.5], {"x": math.inf}, b"bytes",
])
def test_values_read_as_msgspec_writes_them(value: object) -> None:
    assert json_texts([pack(value)]) == [expected(msgspec.msgpack.decode(pack(value)))]


JSON_LIKE = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats() | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=40)


@given(st.lists(JSON_LIKE, max_size=5))
def test_any_values_read_as_msgspec_writes_them(values: list[object]) -> None:
    raws = [msgspec.Raw(pack(v)) for v in values]
    assert json_texts(raws) == [expected(msgspec.msgpack.decode(pack(v))) for v in values]


def test_bytes_that_are_not_one_value_fail_as_msgspec_does() -> None:
    for broken in (b"", b"\x92\x01", b"\xc1", b"\x01\x02"):
        with pytest.raises(msgspec.DecodeError):
            json_texts([broken])
