"""Push-side validation (spec/wire.md §6.2-§6.5) against a real registered schema."""

from __future__ import annotations

import datetime
import json

import msgspec
import pytest

from beava.catalogue.errors import BeavaError
from beava.engine.registry import empty_registry, register
from beava.engine.state.push_validation import build_checkers, has_control_character, validate_push

NODES = [{"kind": "event", "name": "Txn",
          "schema": {"fields": {"user": "str", "amount": "f64", "qty": "i64", "ok": "bool",
                                "blob": "json", "currency": "str", "note": "str"},
                     "optional_fields": ["note", "extra"], "defaults": {"currency": "USD"}}}]


@pytest.fixture(scope="module")
def events():
    outcome = register(empty_registry(), json.dumps({"nodes": NODES}).encode())
    assert outcome.status == 200, outcome.body
    return build_checkers(outcome.registry.events)


def good() -> dict:
    return {"user": "u1", "amount": 1.5, "qty": 2, "ok": True, "blob": [1]}


def code_of(events, name, fields) -> str:
    with pytest.raises(BeavaError) as info:
        validate_push(name, fields, events)
    return info.value.code


def test_accepts_and_fills_defaults(events):
    spec, row = validate_push("Txn", good(), events)
    assert spec.name == "Txn"
    assert row["currency"] == "USD"
    _, row = validate_push("Txn", {**good(), "currency": None}, events)
    assert row["currency"] == "USD"
    _, row = validate_push("Txn", {**good(), "currency": "EUR"}, events)
    assert row["currency"] == "EUR"


def test_numeric_fields_take_ints_and_floats_but_not_bools(events):
    validate_push("Txn", {**good(), "amount": 3, "qty": 1.5}, events)
    assert code_of(events, "Txn", {**good(), "qty": True}) == "invalid_event"
    assert code_of(events, "Txn", {**good(), "amount": "3"}) == "invalid_event"


def test_strict_str_and_bool(events):
    assert code_of(events, "Txn", {**good(), "user": 42}) == "invalid_event"
    assert code_of(events, "Txn", {**good(), "user": b"u1"}) == "invalid_event"
    assert code_of(events, "Txn", {**good(), "ok": 1}) == "invalid_event"


def test_required_missing_or_null(events):
    body = good()
    del body["qty"]
    assert code_of(events, "Txn", body) == "invalid_event"
    assert code_of(events, "Txn", {**good(), "blob": None}) == "invalid_event"


def test_optional_fields_are_not_type_checked(events):
    validate_push("Txn", {**good(), "note": 5, "extra": None}, events)


def test_order_of_checks(events):
    assert code_of(events, "Txn", [1]) == "invalid_event"
    assert code_of(events, "Nope\n", [1]) == "invalid_event"
    assert code_of(events, "Nope\n", {}) == "control_character_in_string"
    assert code_of(events, "Nope", {"a": "x\u0085"}) == "control_character_in_string"
    assert code_of(events, "Nope", {}) == "event_not_found"
    assert code_of(events, "Txn", {**good(), "zz": 1}) == "unknown_field_v0"
    assert code_of(events, "Txn", {**good(), "zz": 1, "event_time": 5}) == \
        "unknown_field_event_time_v0"
    assert code_of(events, "Txn", {"zz": 1}) == "unknown_field_v0"


def test_control_characters_at_any_depth():
    assert has_control_character({"a": [{"b": "x\ty"}]})
    assert has_control_character({"k\x7f": 1})
    assert has_control_character(["\x9f"])
    assert not has_control_character({"a": ["é漢字", 1, 2.5, None, b"\x00"]})


def test_big_integers_become_floats(events):
    _, row = validate_push("Txn", {**good(), "qty": 2**70, "blob": {"x": [2**64]}}, events)
    assert row["qty"] == float(2**70) and isinstance(row["qty"], float)
    assert isinstance(row["blob"]["x"][0], float)


def test_integers_beyond_any_double_are_refused(events):
    # the spec widens integers beyond 64 bits to float; 10**400 has no float, and widening
    # it raised OverflowError (500 internal_error) after the checks had passed
    assert code_of(events, "Txn", {**good(), "qty": 10**400}) == "invalid_event"
    assert code_of(events, "Txn", {**good(), "amount": -(10**400)}) == "invalid_event"
    assert code_of(events, "Txn", {**good(), "blob": {"x": [1, 10**400]}}) == "invalid_event"
    assert code_of(events, "Txn", {**good(), "extra": 10**309}) == "invalid_event"
    # the largest integers that still round to a finite double are widened
    _, row = validate_push("Txn", {**good(), "qty": 2**1023, "blob": [-(2**1023)]}, events)
    assert row["qty"] == 2.0**1023 and row["blob"] == [-(2.0**1023)]


def test_timestamp_extension_is_refused_like_any_extension(events):
    # msgspec decodes MessagePack's timestamp extension (-1) to a datetime, not an Ext
    stamp = msgspec.msgpack.decode(msgspec.msgpack.encode(
        datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)))
    assert isinstance(stamp, datetime.datetime)
    assert code_of(events, "Txn", {**good(), "blob": stamp}) == "invalid_event"
    assert code_of(events, "Txn", {**good(), "note": [stamp]}) == "invalid_event"
    assert code_of(events, "Txn", {**good(), "extra": {"at": stamp}}) == "invalid_event"
    ext = msgspec.msgpack.Ext(1, b"x")
    assert code_of(events, "Txn", {**good(), "blob": {"e": ext}}) == "invalid_event"


def nested(depth: int, leaf: object = 1) -> object:
    """``depth`` containers, lists and maps taking turns, around ``leaf``."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


@pytest.mark.parametrize("field", ["blob", "note"])
def test_values_nest_at_most_64_containers_deep(events, field):
    _, row = validate_push("Txn", {**good(), field: nested(64)}, events)
    assert row[field] == nested(64)
    assert code_of(events, "Txn", {**good(), field: nested(65)}) == "invalid_event"
    # a thousand levels (an acknowledged push of that depth could not be replayed)
    assert code_of(events, "Txn", {**good(), field: nested(1000)}) == "invalid_event"


def test_map_keys_inside_values_must_be_strings(events):
    # MessagePack maps may have any keys; such a value could not be rendered in a reply
    assert code_of(events, "Txn", {**good(), "blob": {7: "x"}}) == "invalid_event"
    assert code_of(events, "Txn", {**good(), "note": [{"a": {(1, 2): 1}}]}) == "invalid_event"
    assert code_of(events, "Txn", {**good(), "blob": {b"k": 1}}) == "invalid_event"


def test_control_characters_win_over_unstorable_values(events):
    assert code_of(events, "Txn", {**good(), "blob": {7: "x\n"}}) == "control_character_in_string"
    assert code_of(events, "Txn", {**good(), "blob": nested(70), "zz": 1}) == "unknown_field_v0"
