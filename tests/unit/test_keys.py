"""Canonical key strings (spec/operators.md §1)."""

from __future__ import annotations

import pytest

from beava.engine.state.keys import dedupe_keystr, fmt_f64_debug, keystr


@pytest.mark.parametrize("value,text", [
    (42.0, "42.0"), (1e16, "1e16"), (1.5e-7, "1.5e-7"), (0.1, "0.1"), (-0.0, "-0.0"),
    (float("nan"), "NaN"), (float("inf"), "inf"), (float("-inf"), "-inf"),
    (1e15, "1000000000000000.0"),
])
def test_fmt_f64_debug(value, text):
    assert fmt_f64_debug(value) == text


def test_keystr():
    assert keystr("a|b") == "a|b"
    assert keystr(-12) == "-12"
    assert keystr(True) == "true" and keystr(False) == "false"
    assert keystr(None) is None


def test_dedupe_identity():
    assert dedupe_keystr("1") == dedupe_keystr(1)
    assert dedupe_keystr(1) != dedupe_keystr(1.0)
    assert dedupe_keystr({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'
