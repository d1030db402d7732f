"""Push-side validation (spec/wire.md §6.2-§6.5) against a real registered schema."""

from __future__ import annotations

import datetime
import json
import math
import struct
import sys
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beava._fast.intake.intake import CheckerEntry
from beava._fast.intake.push_check import EventChecker
from beava._fast.intake.push_pass import apply_records
from beava.catalogue.errors import BeavaError
from beava.durability import wal_format as wf
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


# -- check_msgpack: the strict push pass's check from a body's bytes ------------------------

NAMES = ["user", "amount", "qty", "ok", "blob", "currency", "note", "extra", "zz", "event_time",
         "us\ter", ""]
FINITE_FLOATS = st.floats(allow_nan=False, allow_infinity=False)
NON_FINITE = [math.nan, math.inf, -math.inf]
PLAIN_VALUES = st.one_of(st.integers(-(2**63), 2**63 - 1), FINITE_FLOATS,
                         st.booleans(), st.text(alphabet=st.characters(min_codepoint=0x20,
                                                                       max_codepoint=0x7e)))
WIRE_INTS = st.integers(-(2**63), 2**64 - 1)  # what MessagePack can carry
ANY_VALUES = st.one_of(PLAIN_VALUES, st.none(), WIRE_INTS, st.binary(), st.text(), st.floats(),
                       st.lists(WIRE_INTS, max_size=2),
                       st.dictionaries(st.text(max_size=3), WIRE_INTS, max_size=2))


def checker_of(events):
    return events["Txn"].checker


def settled_row(checker: EventChecker, body: bytes) -> dict[str, Any] | None:
    """The row the checker builds from the MessagePack ``body``'s bytes as the push pass
    reads a durable event record (``apply_records``), or None when it leaves the body to
    the decoder and check()."""
    data = bytearray(wf.encode_record(1, wf.RECORD_EVENT, wf.BODY_MSGPACK, 0, 1, b"E", body))
    fed: list[dict[str, Any] | None] = []
    entry = CheckerEntry("E", SimpleNamespace(dedupe_key=None), checker, 0)
    apply_records({"E": (lambda row, _now: fed.append(row),)}, {"E": entry}, ["E"],
                  data, 0, 0, 1, 0.0, lambda _body: None, msgspec.json.decode)
    return fed[0]


def accepts_unchanged(checker: EventChecker, body: bytes) -> bool:
    """Whether the checker settles ``body`` from its bytes (the push pass then skips
    check())."""
    return settled_row(checker, body) is not None


def settled_unchanged(checker, body: bytes) -> bool:
    """What check() says of the decoded body: accepted, and nothing filled in or widened."""
    try:
        fields = msgspec.msgpack.decode(body)
    except msgspec.DecodeError:
        return False
    if type(fields) is not dict:
        return False
    before = msgspec.msgpack.encode(fields)
    return checker.check(fields) is None and msgspec.msgpack.encode(fields) == before


def same_row(checker, body: bytes) -> None:
    """The row the checker builds from a settled body is msgspec's decoding of it: the
    same keys in the same order, equal values of the same types; its keys are the interned
    declared names."""
    row = settled_row(checker, body)
    expected = msgspec.msgpack.decode(body)
    assert list(row) == list(expected)
    assert [(type(v), v) for v in row.values()] == [(type(v), v) for v in expected.values()]
    assert all(key is sys.intern(key) for key in row)


def raw_map(pairs: list[tuple[bytes, bytes]], header: bytes | None = None) -> bytes:
    """A MessagePack map of already encoded keys and values (duplicates allowed)."""
    head = header if header is not None else bytes([0x80 | len(pairs)])
    return head + b"".join(k + v for k, v in pairs)


@given(st.dictionaries(st.sampled_from(NAMES), ANY_VALUES, max_size=9))
@settings(max_examples=400, deadline=None)
def test_bytes_check_accepts_only_what_check_accepts_unchanged(events, body):
    checker = checker_of(events)
    encoded = msgspec.msgpack.encode(body)
    if accepts_unchanged(checker, encoded):
        assert settled_unchanged(checker, encoded)
        same_row(checker, encoded)
    else:
        assert settled_row(checker, encoded) is None


@given(st.fixed_dictionaries({"user": st.text(alphabet="abc", min_size=1),
                              "amount": FINITE_FLOATS | st.integers(-5, 2**63 - 1),
                              "qty": st.integers(-(2**63), 2**63 - 1),
                              "ok": st.booleans(), "blob": PLAIN_VALUES,
                              "currency": st.sampled_from(["USD", "EUR"])},
                             optional={"note": PLAIN_VALUES, "extra": PLAIN_VALUES}))
@settings(max_examples=200, deadline=None)
def test_bytes_check_settles_flat_bodies_of_declared_names(events, body):
    checker = checker_of(events)
    encoded = msgspec.msgpack.encode(body)
    assert settled_unchanged(checker, encoded)
    assert accepts_unchanged(checker, encoded)
    same_row(checker, encoded)


def test_bytes_check_leaves_the_rest_to_check(events):
    checker = checker_of(events)
    pack = msgspec.msgpack.encode
    base = {**good(), "blob": 1, "currency": "USD"}
    assert accepts_unchanged(checker, pack(base))
    pairs = [(pack(k), pack(v)) for k, v in base.items()]
    refused = {
        "a default to fill": pack({k: v for k, v in base.items() if k != "currency"}),
        "a default for nil": pack({**base, "currency": None}),
        "a required field missing": pack({k: v for k, v in base.items() if k != "qty"}),
        "a required field of another type": pack({**base, "user": 5}),
        "a bool for a number": pack({**base, "qty": True}),
        "an undeclared field": pack({**base, "zz": 1}),
        "a control character": pack({**base, "note": "a\tb"}),
        "DEL": pack({**base, "note": "a\x7f"}),
        "non-ASCII text (decoded and checked by check())": pack({**base, "note": "é"}),
        "a nested value": pack({**base, "blob": [1]}),
        "binary": pack({**base, "blob": b"x"}),
        "an extension": pack({**base, "blob": msgspec.msgpack.Ext(1, b"x")}),
        "uint 64 beyond int 64 (widened)": pack({**base, "qty": 2**63}),
        "a duplicate key": raw_map(pairs + [(pack("note"), pack(1)), (pack("note"), pack(2))]),
        "a duplicate key, same value": raw_map(pairs + [pairs[0]]),
        "trailing bytes": pack(base) + b"\x01",
        "cut short": pack(base)[:-1],
        "not a map": pack([1, 2]),
        "a key that is not a string": raw_map(pairs + [(pack(1), pack(1))]),
        "an empty body": b"",
    }
    for why, body in refused.items():
        assert not accepts_unchanged(checker, body), why
    # other layouts of the same map: map 16, str 8 keys and values, float 32, every int width
    assert accepts_unchanged(checker, raw_map(pairs, b"\xde\x00" + bytes([len(pairs)])))
    same_row(checker, raw_map(pairs, b"\xde\x00" + bytes([len(pairs)])))
    long_key = [(b"\xd9\x04user", b"\xd9\x02u1")] + pairs[1:]
    assert accepts_unchanged(checker, raw_map(long_key))
    same_row(checker, raw_map(long_key))
    for number in (b"\xca\x3f\xc0\x00\x00", b"\xcc\x05", b"\xcd\x01\x00", b"\xce\0\0\1\0",
                   b"\xcf" + (2**63 - 1).to_bytes(8, "big"), b"\xd0\xfb", b"\xd1\xff\x00",
                   b"\xd2\xff\0\0\0", b"\xd3" + (1).to_bytes(8, "big"), b"\xe0", b"\x7f"):
        varied = [(k, number if k == pack("qty") else v) for k, v in pairs]
        assert accepts_unchanged(checker, raw_map(varied)), number
        assert settled_unchanged(checker, raw_map(varied)), number
        same_row(checker, raw_map(varied))


def test_bytes_check_reads_names_whatever_the_last_body_was():
    """The checker guesses each key from the body it read last; a body with other keys, in
    another order, or a key differing from a declared name in one byte (names of 1-20
    bytes, around the one- and two-word compares) is read as if nothing were guessed."""
    names = ["a", "abcdefg", "abcdefgh", "abcdefghi", "abcdefghijklmnop", "abcdefghijklmnopq",
             "abcdefghijklmnopqrst"]
    checker = EventChecker({name: "i64" for name in names}, [], names[:1], {})
    pack = msgspec.msgpack.encode
    bodies = [{name: i for i, name in enumerate(names)},
              {name: i for i, name in enumerate(reversed(names))},
              {"a": 1, "abcdefgh": 2},
              {"abcdefghijklmnop": 3, "a": 4},
              {"a": 5}]
    for _ in range(2):
        for body in bodies:
            assert accepts_unchanged(checker, pack(body))
            same_row(checker, pack(body))
            for name in body:  # in its place: the last byte changed, one short, one more
                for key in (name[:-1] + "!", name[:-1], name + "!"):
                    if key not in names:
                        changed = pack({key if k == name else k: v for k, v in body.items()})
                        assert not accepts_unchanged(checker, changed), key
                        assert settled_row(checker, changed) is None
                        assert accepts_unchanged(checker, pack(body))  # the guesses again


def test_non_finite_floats_are_refused_in_any_field(events):
    """NaN and ±Infinity in a required f64 or i64 field, an optional one (typed or not) or a
    json field: invalid_event naming the field (spec/wire.md §6.3); inside a value they are
    not looked at."""
    for field in ("amount", "qty", "blob", "note", "extra"):
        for value, got in zip(NON_FINITE, ("NaN", "Infinity", "-Infinity"), strict=True):
            with pytest.raises(BeavaError) as info:
                validate_push("Txn", {**good(), field: value}, events)
            assert info.value.code == "invalid_event"
            assert info.value.fields["field"] == field and info.value.fields["got"] == got
            assert info.value.fields["message"] == \
                f"field {field!r}: expected a finite number, got {got}"
    # an undeclared field is that first; a value of another type is that first
    assert code_of(events, "Txn", {**good(), "zz": math.nan}) == "unknown_field_v0"
    with pytest.raises(BeavaError) as info:
        validate_push("Txn", {**good(), "user": math.inf}, events)
    assert info.value.fields["expected"] == "str" and info.value.fields["got"] == "float"
    validate_push("Txn", {**good(), "blob": [math.nan, {"x": math.inf}]}, events)
    validate_push("Txn", {**good(), "amount": 1.7976931348623157e308, "qty": -5e-324}, events)


def float_bytes(value: float, width: int) -> bytes:
    """``value`` as a MessagePack float 32 or float 64."""
    return b"\xca" + struct.pack(">f", value) if width == 32 else b"\xcb" + struct.pack(">d", value)


@given(st.fixed_dictionaries({"user": st.text(alphabet="abc", min_size=1),
                              "amount": FINITE_FLOATS, "qty": st.integers(-5, 5),
                              "ok": st.booleans(), "blob": PLAIN_VALUES,
                              "currency": st.sampled_from(["USD", "EUR"])},
                             optional={"note": PLAIN_VALUES, "extra": PLAIN_VALUES}),
       st.data())
@settings(max_examples=200, deadline=None)
def test_both_paths_refuse_a_non_finite_float_in_any_field(events, body, data):
    """A flat body the bytes check settles, one of its fields replaced by NaN or ±Infinity
    as a float 32 or a float 64 (payloads and signs of NaN varied): the bytes check leaves
    it to check(), which refuses it naming the field."""
    checker = checker_of(events)
    field = data.draw(st.sampled_from(sorted(body)))
    bits = data.draw(st.sampled_from([0x7FF0000000000000, 0xFFF0000000000000,
                                      0x7FF8000000000000, 0xFFF8000000000001,
                                      0x7FF0000000000001, 0x7FFFFFFFFFFFFFFF]))
    value = struct.unpack(">d", bits.to_bytes(8, "big"))[0]
    width = data.draw(st.sampled_from([32, 64]))
    pack = msgspec.msgpack.encode
    encoded = raw_map([(pack(k), float_bytes(value, width) if k == field else pack(v))
                       for k, v in body.items()])
    assert accepts_unchanged(checker, pack(body))
    assert not accepts_unchanged(checker, encoded)
    assert settled_row(checker, encoded) is None
    fields = msgspec.msgpack.decode(encoded)
    assert not math.isfinite(fields[field])
    assert checker.check(dict(fields)) == "invalid_event"
    with pytest.raises(BeavaError) as info:
        validate_push("Txn", fields, events)
    assert info.value.code == "invalid_event" and info.value.fields["field"] == field
