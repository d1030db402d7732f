"""The command table and what is derived from it: opcodes shared with the client, HTTP
routing (spec/wire.md §3.1-§3.4), the read-holding set, handler binding."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from beava.catalogue.errors import BeavaError
from beava.protocol.commands import (
    COMMANDS,
    FRAMED,
    ROUTED,
    SCOPE_GRANTS,
    STATE_READ_OPS,
    HandlerTableError,
    bind_handlers,
)
from beava.protocol.http_routes import resolve
from beava_client import opcodes as client_opcodes

BEAVA = Path(__file__).resolve().parents[2] / "beava"
BY_NAME = {c.name: c for c in COMMANDS}


# --- the table ------------------------------------------------------------------------------


def test_names_opcodes_and_paths_are_unique() -> None:
    assert len({c.name for c in COMMANDS}) == len(COMMANDS)
    ops = [c.op for c in COMMANDS if c.op is not None]
    assert len(set(ops)) == len(ops)
    paths = [p for c in COMMANDS for p in (*c.http_paths, *c.http_prefixes)]
    assert len(set(paths)) == len(paths)


def test_every_command_is_served_somewhere() -> None:
    for c in COMMANDS:
        assert c.op is not None or c.http_method is not None, c.name
        # a served opcode has a reply opcode; an unimplemented one has none
        assert (c.reply_op is not None) == c.framed, c.name
        assert bool(c.http_prefixes) == (c.http_params > 0), c.name


def test_spec_opcode_table() -> None:
    """spec/wire.md §2.4, row by row."""
    table = {c.op: (c.name, c.reply_op, c.implemented) for c in COMMANDS if c.op is not None}
    assert table == {
        0x0000: ("ping", 0x0000, True),
        0x0001: ("register", 0x0001, True),
        0x0002: ("auth", 0x0002, True),  # extension: access control (docs/wire.md)
        0x0010: ("push", 0x0010, True),
        0x0011: ("push_sync", None, False),
        0x0012: ("push_many", 0x0012, True),
        0x0020: ("get", 0x0023, True),
        0x0021: ("mget", 0x0023, True),
        0x0022: ("get_multi", 0x0023, True),
        0x0024: ("batch_get", 0x0023, True),
        0x0025: ("scan", 0x0023, True),  # extension (docs/wire.md)
        0x0026: ("describe", 0x0023, True),  # extension (docs/wire.md)
        0x0040: ("reset", 0x0023, True),
        0x0041: ("test_clock", 0x0041, True),  # extension (docs/wire.md)
        0x0042: ("backfill", 0x0042, True),  # extension (docs/wire.md)
        0x0043: ("cluster_map", 0x0043, True),  # extension: sharding (docs/wire.md)
        0x0044: ("cluster_fence", 0x0044, True),  # extension: sharding
    }
    assert BY_NAME["register"].content_types == {0x01}
    assert BY_NAME["ping"].content_types >= set(range(256))
    for name in ("push", "push_many", "get", "mget", "get_multi", "batch_get", "reset", "scan"):
        assert BY_NAME[name].content_types == {0x01, 0x02}, name


def test_access_scope_of_every_command() -> None:
    """The scope a token needs, per command (docs/wire.md, access control)."""
    assert {c.name: c.scope for c in COMMANDS} == {
        "auth": None, "health": None, "ready": None,
        "ping": "read", "get": "read", "mget": "read", "get_multi": "read",
        "batch_get": "read", "scan": "read", "legacy_get": "read", "describe": "read",
        "push": "write", "push_event": "write", "push_sync": "write", "push_many": "write",
        "register": "admin", "reset": "admin", "test_clock": "admin", "backfill": "admin",
        "cluster_map": "read", "cluster_fence": "admin",
    }
    assert SCOPE_GRANTS["admin"] == {"admin", "write", "read"}
    assert SCOPE_GRANTS["write"] == {"write", "read"}
    assert SCOPE_GRANTS["read"] == {"read"}


def test_read_holding_set_is_the_commands_that_read_state() -> None:
    assert {c.op for c in COMMANDS if c.reads_state and c.op is not None} == STATE_READ_OPS
    assert {0x0020, 0x0021, 0x0022, 0x0024, 0x0025} == STATE_READ_OPS
    assert {c.name for c in ROUTED if c.reads_state} == {"get", "batch_get", "legacy_get",
                                                         "scan"}


# --- client and server share the numbers ----------------------------------------------------


def test_client_names_every_request_opcode_of_the_table_alike() -> None:
    request_ops = {op for op, name in client_opcodes.OP_NAMES.items()
                   if name not in ("get_response", "error_response")}
    assert request_ops == {c.op for c in COMMANDS if c.op is not None}
    for c in COMMANDS:
        if c.op is not None:
            assert client_opcodes.OP_NAMES[c.op] == c.name


def test_client_expects_the_reply_opcodes_the_server_sends() -> None:
    assert {c.op: c.reply_op for c in FRAMED} == client_opcodes.REPLY_OP


def test_the_server_defines_no_opcode_numbers_of_its_own() -> None:
    """The numbers come from beava_client.opcodes; no module of the server restates one."""
    restated = [str(path.relative_to(BEAVA.parent)) for path in BEAVA.rglob("*.py")
                if re.search(r"^(OP|CT)_[A-Z_]+\s*=", path.read_text(), re.M)]
    assert restated == []


# --- handler binding ------------------------------------------------------------------------


def test_bind_handlers_wants_exactly_one_per_command() -> None:
    handlers = {c.name: c.name for c in FRAMED}
    assert bind_handlers(handlers, FRAMED) == handlers
    del handlers["mget"]
    with pytest.raises(HandlerTableError, match="mget"):
        bind_handlers(handlers, FRAMED)
    with pytest.raises(HandlerTableError, match="health"):
        bind_handlers({**{c.name: 0 for c in FRAMED}, "health": 0}, FRAMED)


# --- HTTP routing ---------------------------------------------------------------------------


def test_every_exact_path_routes_to_its_command() -> None:
    for c in ROUTED:
        for path in c.http_paths:
            assert c.http_method is not None
            for target in (path, path + "/", path + "?x=1", path + "//?a/b"):
                assert resolve(c.http_method, target) == (c, ()), target


@pytest.mark.parametrize(("method", "target", "name", "params"), [
    ("POST", "/push/Txn", "push_event", ("Txn",)),
    ("POST", "/push-sync/Txn", "push_event", ("Txn",)),
    ("POST", "/push-batch/Txn", "push_event", ("Txn",)),
    ("POST", "/push/a/b%20c", "push_event", ("a/b%20c",)),  # literal, may contain "/"
    ("POST", "/push/Txn/?q", "push_event", ("Txn",)),
    ("POST", "/push/", "push", ()),  # normalises to the verb route
    ("POST", "/push-sync/", "push", ()),
    ("POST", "/push-sync", "push", ()),
    ("GET", "/get/amount_sum/u1", "legacy_get", ("amount_sum", "u1")),
    ("GET", "/get/f/k/with/slash", "legacy_get", ("f", "k/with/slash")),
    ("GET", "/health", "health", ()),
    ("GET", "/describe", "describe", ()),
    ("GET", "/ready/", "ready", ()),
])
def test_routes(method: str, target: str, name: str, params: tuple[str, ...]) -> None:
    assert resolve(method, target) == (BY_NAME[name], params)


@pytest.mark.parametrize("target", [
    "/nope", "/get/x", "/get/x/", "/push-batch", "/push-batch/", "//ping", "/PING",
    "/registry", "/metrics", "/push_many/x", "/get//k", "",
])
def test_unknown_paths_are_not_found(target: str) -> None:
    for method in ("GET", "POST", "HEAD"):
        with pytest.raises(BeavaError) as info:
            resolve(method, target)
        assert info.value.body() == {"error": {"code": "not_found", "path": target}}
        assert info.value.status == 404


@pytest.mark.parametrize(("method", "target"), [
    ("GET", "/ping"), ("HEAD", "/ping"), ("GET", "/push"), ("GET", "/push/Txn"),
    ("PUT", "/register"), ("GET", "/get"), ("POST", "/get/a/b"), ("POST", "/health"),
    ("HEAD", "/ready"), ("DELETE", "/reset/?x"), ("GET", "/push_many"),
    ("GET", "/batch_get"), ("GET", "/push-batch/E"),
])
def test_known_paths_with_another_method_are_not_allowed(method: str, target: str) -> None:
    with pytest.raises(BeavaError) as info:
        resolve(method, target)
    assert info.value.body() == {
        "error": {"code": "method_not_allowed", "method": method, "path": target}}
    assert info.value.status == 405
