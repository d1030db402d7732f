"""The request flows of the sharded clients (beava_client.sharded_base), driven by a
scripted fake of the shards: who is sent what, what is retried, and what a refusal
leaves behind."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from beava.dsl.compiler import compile_register_payload
from beava_client import ConnectionClosed, ServerError
from beava_client.opcodes import OP_CLUSTER_FENCE
from beava_client.shard_routes import Routes
from beava_client.sharded_base import (
    REFRESH_MAP,
    REFRESH_ROUTES,
    Call,
    Flow,
    Send,
    ShardedBase,
    Sleep,
)
from beava_client.slots import Shard, ShardMap, slot, split_slots
from tests.card_pipeline import Card, CardMerchant, CardSpend


def _client(fence_wait: float = 5.0) -> ShardedBase:
    shards = [Shard(f"s{i}", (r,), f"127.0.0.1:{7100 + i}", f"http://127.0.0.1:{7200 + i}")
              for i, r in enumerate(split_slots(3))]
    client = ShardedBase(ShardMap(1, shards), fence_wait=fence_wait)
    client.routes = Routes(_payload()["nodes"], 1)
    return client


def _owner(client: ShardedBase, text: str) -> str:
    assert client.map is not None
    return client.map.owner(slot(text)).id


Reply = Callable[[str, Call], Any]


def _drive(flow: Flow[Any], reply: Reply) -> tuple[Any, list[Any]]:
    """Run ``flow`` answering each shard call with ``reply``; the result and the steps."""
    steps: list[Any] = []
    answer: Any = None
    try:
        while True:
            step = flow.send(answer)
            steps.append(step)
            answer = {sid: reply(sid, call) for sid, call in step.calls.items()} \
                if isinstance(step, Send) else None
    except StopIteration as stop:
        return stop.value, steps


def _ack(sid: str, call: Call) -> Any:
    return {"ack_lsn": 1, "idempotent_replay": False, "registry_version": 1}


def _err(code: str) -> ServerError:
    return ServerError(code, code, body={"error": {"code": code}}, error={"code": code})


def _body(user: str = "u1", merchant: str = "m1") -> dict[str, Any]:
    return {"user_id": user, "merchant": merchant, "amount": 1.0}


def _two_owner_body(client: ShardedBase) -> dict[str, Any]:
    """A body whose two tables' keys live on different shards."""
    for i in range(100):
        body = _body(f"u{i}")
        if _owner(client, f"u{i}") != _owner(client, f"u{i}|m1"):
            return body
    raise AssertionError("no such body")


def test_a_map_of_tls_shards_is_reached_over_tls() -> None:
    plain = _client()
    assert plain.transport == "tcp"
    assert plain.map is not None
    shards = [Shard(s.id, s.ranges, s.tcp, s.http, tcps=s.tcp) for s in plain.map.shards]
    secured = ShardedBase(ShardMap(1, shards))
    assert secured.transport == "tcps"
    assert secured.shard_url(shards[0]) == f"tcps://{shards[0].tcp}"
    assert ShardedBase(ShardMap(1, shards), transport="http").transport == "http"


def test_a_push_goes_once_to_each_owner() -> None:
    client = _client()
    body = _two_owner_body(client)
    result, steps = _drive(client.push_flow("Card", body), _ack)
    owners = {_owner(client, body["user_id"]), _owner(client, body["user_id"] + "|m1")}
    assert [set(s.calls) for s in steps] == [owners]
    assert set(result["ack_lsn"]) == owners


def test_wrong_shard_refreshes_the_map_and_resends_to_that_shard_only() -> None:
    client = _client()
    body = _two_owner_body(client)
    moved = _owner(client, body["user_id"])
    seen: list[str] = []

    def reply(sid: str, call: Call) -> Any:
        seen.append(sid)
        return _err("wrong_shard") if sid == moved and seen.count(sid) == 1 else _ack(sid, call)

    result, steps = _drive(client.push_flow("Card", body), reply)
    assert steps[1] == REFRESH_MAP
    assert set(steps[2].calls) == {moved}
    assert len(result["ack_lsn"]) == 2


def test_a_lost_connection_resends_to_that_shard_once() -> None:
    client = _client()
    body = _two_owner_body(client)
    lost = _owner(client, body["user_id"])
    seen: list[str] = []

    def reply(sid: str, call: Call) -> Any:
        seen.append(sid)
        if sid == lost and seen.count(sid) == 1:
            return ConnectionClosed("connection_closed", "gone")
        return _ack(sid, call)

    result, steps = _drive(client.push_flow("Card", body), reply)
    assert [set(s.calls) for s in steps][1:] == [{lost}]
    assert len(result["ack_lsn"]) == 2
    with pytest.raises(ConnectionClosed):  # a second failure is raised
        _drive(_client().push_flow("Card", body),
               lambda sid, call: ConnectionClosed("connection_closed", "gone"))


def test_push_many_resends_the_rows_of_a_lost_connection_once() -> None:
    client = _client()
    rows = [_body(f"u{i}") for i in range(30)]
    calls: dict[str, int] = {}

    def reply(sid: str, call: Call) -> Any:
        calls[sid] = calls.get(sid, 0) + 1
        if sid == "s1" and calls[sid] == 1:
            return ConnectionClosed("connection_closed", "gone")
        return {"acks": len(call.args[1]), "ack_lsn": 1, "errors": [],
                "registry_version": 1}

    result, steps = _drive(client.push_many_flow("Card", rows, 1000), reply)
    assert result["acks"] == 30 and result["errors"] == []
    assert set(steps[1].calls) == {"s1"}
    assert calls == {"s0": 1, "s1": 2, "s2": 1}


def test_a_second_wrong_shard_is_raised() -> None:
    client = _client()
    with pytest.raises(ServerError, match="wrong_shard"):
        _drive(client.push_flow("Card", _body()), lambda sid, call: _err("wrong_shard"))


def test_a_fenced_shard_is_retried_after_a_wait_then_given_up() -> None:
    client = _client()
    calls: list[str] = []

    def reply(sid: str, call: Call) -> Any:
        calls.append(sid)
        return _err("shard_fenced") if len(calls) < 3 else _ack(sid, call)

    body = _body()
    _, steps = _drive(client.push_flow("Card", body), reply)
    assert any(isinstance(s, Sleep) for s in steps)
    with pytest.raises(ServerError, match="shard_fenced"):
        _drive(_client(fence_wait=0).push_flow("Card", body),
               lambda sid, call: _err("shard_fenced"))


def test_a_newer_registry_in_an_ack_describes_the_routes_again() -> None:
    client = _client()
    _, steps = _drive(client.push_flow("Card", _body()),
                      lambda sid, call: {**_ack(sid, call), "registry_version": 2})
    assert REFRESH_ROUTES in steps


def test_push_many_groups_rows_by_owner_and_reports_row_errors_in_caller_order() -> None:
    client = _client()
    rows = [_body(f"u{i}") for i in range(30)]
    bad = 17

    def reply(sid: str, call: Call) -> Any:
        sent = call.args[1]
        errors = [{"index": j, "error": {"code": "invalid_event"}}
                  for j, row in enumerate(sent) if row is rows[bad]]
        return {"acks": len(sent) - len(errors), "ack_lsn": 9, "errors": errors,
                "registry_version": 1}

    result, steps = _drive(client.push_many_flow("Card", rows, 1000), reply)
    (send,) = steps
    for sid, call in send.calls.items():
        for row in call.args[1]:
            assert sid in {_owner(client, row["user_id"]),
                           _owner(client, row["user_id"] + "|m1")}
    assert result["errors"] == [{"index": bad, "error": {"code": "invalid_event"}}]
    assert result["acks"] == 29


def test_batch_get_answers_in_request_order_and_rereads_moved_entries() -> None:
    client = _client()
    reads = [("CardSpend", f"u{i}") for i in range(12)]
    rounds: list[int] = []

    def reply(sid: str, call: Call) -> Any:
        rounds.append(1)
        out = []
        for table, key in call.args[0]:
            if key == "u3" and len(rounds) <= 3:
                out.append({"error": {"code": "wrong_shard"}})
            else:
                out.append({"key": key, "table": table})
        return out

    result, steps = _drive(client.batch_get_flow(reads), reply)
    assert [r["key"] for r in result] == [f"u{i}" for i in range(12)]
    assert REFRESH_MAP in steps


def _register_reply(fail: dict[tuple[str, str], str]) -> tuple[Reply, list[tuple[str, str]]]:
    log: list[tuple[str, str]] = []

    def reply(sid: str, call: Call) -> Any:
        if call.method == "request":
            kind = "fence" if call.args[1]["fenced"] else "unfence"
            assert call.args[0] == OP_CLUSTER_FENCE
        elif call.method == "register":
            kind = "dry_run" if call.kwargs.get("dry_run") else "register"
        else:
            kind = call.method
        log.append((kind, sid))
        code = fail.get((kind, sid))
        if code is not None:
            return _err(code)
        return {"registry_version": 2, "fenced": True}

    return reply, log


def _kinds(log: list[tuple[str, str]]) -> list[str]:
    out: list[str] = []
    for kind, _ in log:
        if not out or out[-1] != kind:
            out.append(kind)
    return out


def _payload() -> dict[str, Any]:
    payload: dict[str, Any] = compile_register_payload(Card, CardSpend, CardMerchant)
    return payload


def test_register_dry_runs_fences_registers_checks_and_unfences_every_shard() -> None:
    client = _client()
    reply, log = _register_reply({})
    _, steps = _drive(client.register_flow(_payload(), False, False), reply)
    assert _kinds(log) == ["dry_run", "fence", "register", "ping", "unfence"]
    assert all(len([x for x in log if x[0] == k]) == 3 for k in _kinds(log))
    assert steps[-1] == REFRESH_ROUTES


def test_a_dry_run_refusal_changes_nothing() -> None:
    reply, log = _register_reply({("dry_run", "s1"): "force_required"})
    with pytest.raises(ServerError, match="force_required"):
        _drive(_client().register_flow(_payload(), False, False), reply)
    assert _kinds(log) == ["dry_run"]


def test_a_shard_that_cannot_be_fenced_has_the_others_unfenced() -> None:
    reply, log = _register_reply({("fence", "s2"): "connection_failed"})
    with pytest.raises(ServerError, match="connection_failed"):
        _drive(_client().register_flow(_payload(), False, False), reply)
    assert [x for x in log if x[0] == "unfence"] == [("unfence", "s0"), ("unfence", "s1")]
    assert not [x for x in log if x[0] == "register"]


def test_a_register_applied_on_some_shards_only_leaves_every_shard_fenced() -> None:
    reply, log = _register_reply({("register", "s2"): "connection_failed"})
    with pytest.raises(ServerError) as caught:
        _drive(_client().register_flow(_payload(), False, False), reply)
    assert caught.value.code == "register_incomplete"
    assert "s2" not in str(caught.value).split("but not")[0]
    assert not [x for x in log if x[0] == "unfence"]


def test_diverging_versions_leave_every_shard_fenced() -> None:
    client = _client()

    def reply(sid: str, call: Call) -> Any:
        if call.method == "ping":
            return {"registry_version": 3 if sid == "s1" else 2}
        return {"registry_version": 2}

    with pytest.raises(ServerError, match="registry_diverged|different registry"):
        _drive(client.register_flow(_payload(), False, False), reply)
