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


def test_long_dedupe_identities_are_kept_as_digests():
    # a 1 MiB dedupe key used to be kept whole in the dedupe cache for its whole window
    long_text = "k" * (1 << 20)
    kept = dedupe_keystr(long_text)
    assert len(kept) < 100 and kept.startswith("\x00")
    assert kept == dedupe_keystr("k" * (1 << 20))
    assert kept != dedupe_keystr("k" * ((1 << 20) - 1) + "j")
    assert dedupe_keystr(["k" * 200]) != dedupe_keystr("k" * 200)
    assert dedupe_keystr("k" * 128) == "k" * 128


def test_a_long_dedupe_key_still_deduplicates_and_is_cached_small():
    import json

    from beava.engine.store import FeatureStore

    store = FeatureStore()
    status, body = store.register(json.dumps({"nodes": [
        {"kind": "event", "name": "E", "schema": {"fields": {"id": "str"}},
         "dedupe_key": "id"}]}).encode())
    assert status == 200, body
    big = "i" * (1 << 20)
    first = store.push("E", {"id": big})
    again = store.push("E", {"id": big})
    other = store.push("E", {"id": big[:-1] + "j"})
    assert (first[2], again[2], other[2]) == (False, True, False)
    assert again[0] == first[0]
    assert max(len(key) for _, key in store._dedupe) < 100
