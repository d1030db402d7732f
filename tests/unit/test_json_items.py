"""JsonItems: a JSON array taken a few items at a time gives back exactly its items."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beava._fast.wire.json_items import JsonItems

_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(alphabet=st.sampled_from('ab",[]{}\\:é\n ')),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(alphabet=st.sampled_from('k"]},\\'), max_size=3), inner,
                      max_size=3),
    max_leaves=12)


def taken(text: bytes, count: int) -> tuple[list[Any], int]:
    items = JsonItems(text)
    out: list[Any] = []
    chunks = 0
    while (chunk := items.take(count)) is not None:
        part = json.loads(chunk)
        assert 1 <= len(part) <= count
        out.extend(part)
        chunks += 1
    assert items.take(count) is None  # stays done
    return out, chunks


@settings(max_examples=300, deadline=None)
@given(st.lists(_VALUES, max_size=20), st.integers(1, 5), st.sampled_from([None, 1, 3]))
def test_chunks_give_back_the_items(values: list[Any], count: int, indent: int | None) -> None:
    text = json.dumps(values, indent=indent, ensure_ascii=False).encode()
    out, chunks = taken(text, count)
    assert out == values
    assert chunks == -(-len(values) // count)


@pytest.mark.parametrize(("text", "items"), [
    (b"[]", []), (b" \n[ ]\t", []), (b"[1]", [1]),
    (b'[ {"a": "],[{\\"}"} ,"x,]" , [[],{}] ]', [{"a": '],[{"}'}, "x,]", [[], {}]]),
    (b'["\\\\", "\\\\\\""]', ["\\", '\\"']),
])
def test_strings_escapes_and_nesting_never_end_an_item(text: bytes, items: list[Any]) -> None:
    for count in (1, 2, 10):
        assert taken(text, count)[0] == items


@pytest.mark.parametrize("text", [b"", b"  ", b"{}", b'"[1]"', b"1"])
def test_anything_but_an_array_is_refused(text: bytes) -> None:
    with pytest.raises(ValueError, match="not a JSON array"):
        JsonItems(text)
