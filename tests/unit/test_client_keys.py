"""beava_client.keys.encode_key (spec/sdk.md §8.5)."""

from __future__ import annotations

import pytest

from beava_client.keys import encode_key


@pytest.mark.parametrize(
    ("key", "sent"),
    [
        (None, ""),
        ("alice", "alice"),
        ("alice|m1", "alice|m1"),
        (7, "7"),
        (-12, "-12"),
        (True, "true"),
        (False, "false"),
        (["alice", 7], "alice|7"),
        (("a", True, 3), "a|true|3"),
        (["a|b", "c"], ["a|b", "c"]),
        ([], ""),
    ],
)
def test_encode(key: object, sent: object) -> None:
    assert encode_key(key) == sent


@pytest.mark.parametrize("key", [1.5, {"a": 1}, ["a", 1.0], b"x", ["a", None]])
def test_rejected(key: object) -> None:
    with pytest.raises(TypeError):
        encode_key(key)
