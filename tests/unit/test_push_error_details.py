"""The informative keys of refused pushes (engine/state/push_validation.py) and the
nearest-name helper, without a server."""

from __future__ import annotations

from typing import Any

import pytest
from msgspec.msgpack import Ext

from beava.catalogue.errors import BeavaError, nearest_names
from beava.engine.registry import EventSpec
from beava.engine.state.push_validation import build_checkers, validate_push

SPEC = EventSpec(name="Txn", fields={"user": "str", "amount": "f64", "blob": "json"},
                 required=frozenset({"user", "amount"}), optional=frozenset({"blob", "note"}),
                 defaults={}, dedupe_key=None, dedupe_window_ms=0, cold_after_ms=None,
                 schema={})
CHECKERS = build_checkers({"Txn": SPEC})


def refused(fields: Any, event: str = "Txn") -> BeavaError:
    with pytest.raises(BeavaError) as info:
        validate_push(event, fields, CHECKERS)
    return info.value


def test_unstorable_values_name_the_field() -> None:
    err = refused({"user": "u", "amount": 1.0, "blob": {"a": [Ext(1, b"x")]}})
    assert err.code == "invalid_event" and err.fields["field"] == "blob"
    assert "MessagePack extension" in err.fields["message"]
    err = refused({"user": "u", "amount": 1.0, "blob": {"a": {3: 1}}})
    assert "a map key that is not a string (3)" in err.fields["message"]


def test_several_unknown_fields_and_a_body_that_is_not_a_map() -> None:
    err = refused({"user": "u", "amount": 1.0, "b": 1, "a": 2})
    assert err.code == "unknown_field_v0" and err.fields["field"] == ["b", "a"]
    assert err.fields["expected"] == ["amount", "blob", "note", "user"]
    assert "has no fields 'b', 'a'" in err.fields["message"]
    err = refused([1, 2])
    assert (err.code, err.fields["got"], err.fields["expected"]) == ("invalid_event", "array",
                                                                   "map")


def test_the_accepted_path_is_unchanged() -> None:
    spec, row = validate_push("Txn", {"user": "u", "amount": 2}, CHECKERS)
    assert spec is SPEC and row == {"user": "u", "amount": 2}


def test_nearest_names() -> None:
    names = ["UserSpend", "UserLogins", "Merchant"]
    assert nearest_names("UserSpnd", names) == ["UserSpend"]
    assert nearest_names("merchant", names) == ["Merchant"]
    assert nearest_names("zzz", names) == []
