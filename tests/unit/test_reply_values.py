"""MessagePack reply values: non-finite floats become null at any depth (spec/wire.md §2.3)."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from beava._fast.wire.reply_values import finite_or_none

VALUES = st.recursive(
    st.one_of(st.floats(), st.integers(), st.text(max_size=3), st.booleans(), st.none()),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner,
                                                                max_size=4),
    max_leaves=20)


def expected(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: expected(v) for k, v in value.items()}
    if isinstance(value, list):
        return [expected(v) for v in value]
    return value


def non_finite_inside(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(non_finite_inside(v) for v in value.values())
    if isinstance(value, list):
        return any(non_finite_inside(v) for v in value)
    return False


def same(a: Any, b: Any) -> bool:
    """Equal, NaN-free on both sides, with the same types (True stays a bool, 1.0 a float)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@given(VALUES)
@settings(max_examples=300, deadline=None)
def test_non_finite_floats_become_none_at_any_depth(value):
    before = repr(value)
    out = finite_or_none(value)
    assert same(out, expected(value))
    assert repr(value) == before  # the input is never changed in place
    if not non_finite_inside(value):
        assert out is value  # nothing to rewrite: no copy


def test_only_containers_on_the_way_to_a_non_finite_float_are_copied():
    histogram = {str(h): 1.0 for h in range(168)}
    row = {"h": histogram, "q": [0.5, math.inf], "m": {"x": {"y": -math.inf}}, "n": math.nan}
    out = finite_or_none(row)
    assert out == {"h": histogram, "q": [0.5, None], "m": {"x": {"y": None}}, "n": None}
    assert out["h"] is histogram and out is not row
    assert row["q"] == [0.5, math.inf] and row["m"]["x"]["y"] == -math.inf
