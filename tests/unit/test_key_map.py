"""The entity key -> slot map (beava._fast.ops.key_map): inline ASCII keys, long and non-ASCII
keys compared through the stored key, growth, and loading a slot order."""

from __future__ import annotations

import pytest

from beava._fast.ops.key_map import KeyMap
from beava._fast.ops.ops_core import COLUMNS
from beava._fast.ops.table_kernel import TableKernel


def count_kernel() -> TableKernel:
    return TableKernel(("k",), [("n", COLUMNS["count"]("n", None, None, {}, None), 0)], [],
                       None)


def test_slots_are_dense_in_insertion_order_across_growth() -> None:
    kernel = count_kernel()
    keys = [f"user-{i}" for i in range(5000)]
    keys += ["x" * 16, "x" * 17, "y" * 300, "é", "é" * 40, "日本|東京", "", "x" * 15]
    for key in keys:
        kernel.apply({"k": key}, 1)
    kernel.apply({"k": "user-3"}, 2)
    m = kernel.keys
    assert len(m) == len(keys)
    assert m.names == keys
    for slot, key in enumerate(keys):
        assert m.get(key) == slot
    # same length, same first 16 bytes, different tail; a prefix; other scripts
    for absent in ["x" * 16 + "y", "y" * 299 + "x", "é" * 39 + "e", "user-5000", "user-",
                   "日本|大阪", "X" * 16]:
        assert m.get(absent) is None
        assert m.get(absent, -1) == -1
    assert kernel.read(m.get("user-3"), 3) == {"n": 2}
    assert m.nbytes() >= len(keys) * 32


def test_from_keys_keeps_the_order_and_refuses_repeats_and_non_strings() -> None:
    m = KeyMap.from_keys(["b", "a", "c" * 40])
    assert (m.get("b"), m.get("a"), m.get("c" * 40), len(m)) == (0, 1, 2, 3)
    with pytest.raises(ValueError, match="repeats"):
        KeyMap.from_keys(["a", "b", "a"])
    with pytest.raises(ValueError, match="not a str"):
        KeyMap.from_keys(["a", 7])  # type: ignore[list-item]
    assert len(KeyMap()) == 0 and KeyMap().get("a") is None
