"""Errors that say what to fix, end to end over HTTP and framed TCP: every mistake of the
error table in the issue this answers gets the field, the expected and received type, the
nearest registered names, and an SDK class that still is a ``RegistrationError``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import beava as bv
from tests.support import BeavaProcess


@bv.event
class Payment:
    user_id: str
    amount: float
    card: str
    approved: bool


@bv.table(key="user_id")
def UserSpend(p: Payment) -> bv.Table:
    return p.group_by("user_id").agg(spend_1h=bv.sum("amount", window="1h"), n=bv.count())


def payment(**over: object) -> dict[str, object]:
    return {"user_id": "u1", "amount": 12.5, "card": "c1", "approved": True, **over}


@pytest.fixture(params=["http", "tcp"])
def app(request: pytest.FixtureRequest, clean_server: BeavaProcess) -> Iterator[bv.App]:
    url = (clean_server.http_url if request.param == "http"
           else f"tcp://{clean_server.addrs['tcp']}")
    with bv.App(url) as client:
        client.register(Payment, UserSpend)
        yield client


def push_error(app: bv.App, event: str, fields: dict[str, object]) -> bv.PushError:
    with pytest.raises(bv.PushError) as info:
        app.push(event, fields)
    assert isinstance(info.value, bv.RegistrationError)  # beava 0.0.6's class still catches it
    return info.value


@pytest.mark.parametrize(("fields", "field", "expected", "got", "text"), [
    (payment(amount="12.50"), "amount", "f64", "str",
     "field 'amount' is declared f64 and takes a number; got str '12.50'"),
    ({"user_id": "u1", "card": "c1", "approved": True}, "amount", "f64", "missing",
     "required field 'amount' (f64) is missing"),
    (payment(amount=None), "amount", "f64", "null", "got null"),
    (payment(user_id=7), "user_id", "str", "int", "field 'user_id' is declared str"),
    (payment(approved="yes"), "approved", "bool", "str", "takes a boolean"),
])
def test_invalid_event_names_field_and_types(app: bv.App, fields: dict[str, object],
                                             field: str, expected: str, got: str,
                                             text: str) -> None:
    err = push_error(app, "Payment", fields)
    assert err.code == "invalid_event"
    assert (err.field, err.expected, err.got) == (field, expected, got)
    assert text in str(err)


def test_unknown_field_names_it_and_the_declared_ones(app: bv.App) -> None:
    err = push_error(app, "Payment", payment(amout=3))
    assert err.code == "unknown_field_v0"
    assert err.field == "amout"
    assert err.expected == ["amount", "approved", "card", "user_id"]
    assert "event 'Payment' has no field 'amout'" in str(err)
    assert "did you mean 'amount'?" in str(err)


def test_unknown_event_time_field_in_push_and_batch(app: bv.App) -> None:
    err = push_error(app, "Payment", payment(event_time=1))
    assert err.code == "unknown_field_event_time_v0"
    assert err.field == "event_time" and "processing time" in (err.hint or "")
    out = app.push_many("Payment", [payment(), payment(event_time=1), payment(extra=1)])
    assert out["acks"] == 1
    first, second = (e["error"] for e in out["errors"])
    assert (first["code"], first["field"]) == ("unknown_field_event_time_v0", "event_time")
    assert (second["code"], second["field"]) == ("unknown_field_v0", "extra")
    assert "declared fields: 'amount', 'approved', 'card', 'user_id'" in second["message"]


def test_event_not_found_names_the_nearest(app: bv.App) -> None:
    err = push_error(app, "Paymnet", payment())
    assert err.code == "event_not_found"
    assert err.got == "Paymnet" and err.expected == ["Payment"]
    assert "no event 'Paymnet' is registered; did you mean 'Payment'?" in str(err)
    with pytest.raises(bv.PushError) as info:
        app.push_many("paymen", [payment()])
    assert info.value.expected == ["Payment"]


def test_unknown_table_names_the_nearest(app: bv.App) -> None:
    with pytest.raises(bv.ReadError) as info:
        app.get("UserSpnd", "u1")
    err = info.value
    assert isinstance(err, bv.RegistrationError) and err.code == "unknown_table"
    assert err.got == "UserSpnd" and err.expected == ["UserSpend"]
    assert "did you mean 'UserSpend'?" in str(err)
    with pytest.raises(bv.ReadError, match="is an event, not a table.*'UserSpend'"):
        app.get("Payment", "u1")
    [entry] = app.batch_get([("usersped", "u1")])
    assert entry["error"]["code"] == "unknown_table"
    assert entry["error"]["expected"] == ["UserSpend"]


def test_unknown_feature_is_a_lookup_error_with_the_nearest(app: bv.App) -> None:
    with pytest.raises(bv.FeatureNotFoundError) as info:
        app.get("UserSpend", "u1", features=["spend_1hr"])
    err = info.value
    assert isinstance(err, LookupError) and isinstance(err, bv.RegistrationError)
    assert err.code == "internal_error"  # the wire code beava 0.0.6 clients expect
    assert err.missing == ["spend_1hr"] and err.expected == ["n", "spend_1h"]
    assert str(err) == ('[internal_error] feature_not_found: missing=["spend_1hr"] '
                        "table=UserSpend (did you mean 'spend_1h'?)")


def test_force_required_summarises_the_diff(app: bv.App) -> None:
    with pytest.raises(bv.RegistrationError) as info:
        app.register(Payment)  # registering part of the pipeline drops the rest
    err = info.value
    assert err.code == "force_required"
    assert "force=true: removes 'UserSpend'." in err.message
    assert "include every descriptor still in use, or pass force=True" in err.message
    assert err.details["error"]["diff"]["destructive"]  # the diff itself is still there


def test_sum_over_a_str_field_is_refused_at_register(app: bv.App) -> None:
    @bv.table(key="user_id")
    def CardSum(p: Payment) -> bv.Table:
        return p.group_by("user_id").agg(card_total=bv.sum("card"))

    with pytest.raises(bv.RegistrationError) as info:
        app.register(Payment, UserSpend, CardSum)
    assert info.value.code == "aggregation_field_not_numeric"
    assert "'card' is str" in info.value.message
