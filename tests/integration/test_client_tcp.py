"""beava_client.TcpClient against a live server (framed TCP)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from beava_client import (
    ClientPool,
    ConnectionClosed,
    Pipeline,
    ServerError,
    TcpClient,
    Timeout,
    TransportError,
)
from beava_client.frames import encode_frame
from beava_client.opcodes import OP_GET, OP_PING, OP_PUSH, OP_PUSH_SYNC, OP_RESET
from tests.support import BeavaProcess, codes_only

SEMVER = re.compile(r"^\d+\.\d+\.\d+")


@pytest.fixture
def client(clean_server: BeavaProcess) -> Iterator[TcpClient]:
    with TcpClient(*clean_server.tcp, timeout=10.0) as c:
        yield c


def test_ping(client: TcpClient) -> None:
    reply = client.ping()
    assert set(reply) == {"registry_version", "server_version"}
    assert isinstance(reply["registry_version"], int)
    assert SEMVER.match(reply["server_version"])


def test_reset_bumps_registry_version(client: TcpClient) -> None:
    before = client.ping()["registry_version"]
    assert client.reset() == {"registry_version": before + 1, "reset": True}
    assert client.ping()["registry_version"] == before + 1


def test_reset_in_msgpack_mode(clean_server: BeavaProcess) -> None:
    with TcpClient(*clean_server.tcp, content_type="msgpack") as c:
        before = c.ping()["registry_version"]
        assert c.reset() == {"registry_version": before + 1, "reset": True}


def test_unknown_op_is_a_server_error_and_connection_survives(client: TcpClient) -> None:
    with pytest.raises(ServerError) as info:
        client.request(0x0013, b"{}")
    err = info.value
    assert err.code == "unknown_op"
    assert err.op == 0xFFFF
    assert err.error["op"] == 0x13
    assert err.message == "opcode 0x0013 is not recognised by this server"
    assert err.status is None
    assert client.ping()["registry_version"] >= 0


def test_response_only_opcode_sent_by_client(client: TcpClient) -> None:
    with pytest.raises(ServerError) as info:
        client.request(0xFFFF)
    assert (info.value.code, info.value.error["op"]) == ("unknown_op", 65535)


def test_push_sync_not_implemented(client: TcpClient) -> None:
    with pytest.raises(ServerError) as info:
        client.request(OP_PUSH_SYNC, {})
    assert info.value.code == "op_not_implemented"
    assert info.value.error["op"] == 17


def test_malformed_push_envelope_gives_flat_unsupported(client: TcpClient) -> None:
    with pytest.raises(ServerError) as info:
        client.request(OP_PUSH, b"not json")
    assert info.value.code == "unsupported"
    assert info.value.body == {"code": "unsupported"}
    assert info.value.error == {"code": "unsupported"}
    assert str(info.value) == "[unsupported]"


def test_unsupported_content_type(client: TcpClient) -> None:
    with pytest.raises(ServerError) as info:
        client.request(OP_GET, b"{}", ct=0x07)
    assert info.value.code == "unsupported_content_type"
    assert info.value.message == "unsupported content_type: 0x07"
    # PING ignores the content type entirely
    assert "server_version" in client.request(OP_PING, b"garbage", ct=0x09)


def test_push_to_unknown_event_carries_registry_version(client: TcpClient) -> None:
    rv = client.ping()["registry_version"]
    with pytest.raises(ServerError) as info:
        client.push("Nope", {"a": 1})
    assert info.value.code == "event_not_found"
    assert codes_only(info.value.body) == {"error": {"code": "event_not_found"},
                                          "registry_version": rv}


def test_pipelining_a_thousand_pings(client: TcpClient) -> None:
    rv = client.ping()["registry_version"]
    pipe = client.pipeline()
    assert isinstance(pipe, Pipeline)
    for _ in range(1000):
        pipe.ping()
    assert len(pipe) == 1000
    replies = pipe.execute()
    assert len(replies) == 1000
    assert all(r["registry_version"] == rv for r in replies)
    assert len(pipe) == 0


def test_pipeline_keeps_fifo_order_across_errors(client: TcpClient) -> None:
    rv = client.ping()["registry_version"]
    pipe = client.pipeline().ping().request(0x0013).reset().ping()
    replies = pipe.execute(raise_on_error=False)
    assert replies[0]["registry_version"] == rv
    assert isinstance(replies[1], ServerError) and replies[1].code == "unknown_op"
    assert replies[2] == {"registry_version": rv + 1, "reset": True}
    assert replies[3]["registry_version"] == rv + 1


def test_pipeline_raises_first_error_after_draining(client: TcpClient) -> None:
    pipe = client.pipeline().request(0x0013).ping().request(0x0030).ping()
    with pytest.raises(ServerError) as info:
        pipe.execute()
    assert info.value.error["op"] == 0x13
    # every reply was read: the next request gets its own reply
    assert "server_version" in client.ping()


def test_push_pipelined_collects_per_row_errors(client: TcpClient) -> None:
    rv = client.ping()["registry_version"]
    result = client.push_pipelined("Nope", ({"i": i} for i in range(1000)), batch_size=100)
    assert result["acks"] == 0
    assert result["ack_lsn"] is None
    assert result["registry_version"] == rv
    assert [e["index"] for e in result["errors"]] == list(range(1000))
    assert {e["error"]["code"] for e in result["errors"]} == {"event_not_found"}


def test_push_many_probe_detects_the_extension(client: TcpClient) -> None:
    assert client.push_many_supported is None
    with pytest.raises(ServerError) as info:
        client.push_many("Nope", [{"a": 1}, {"a": 2}])
    assert info.value.code == "event_not_found"
    assert info.value.acked_before == 0
    assert client.push_many_supported is True
    assert client.push_many("Nope", []) == {
        "acks": 0, "ack_lsn": None, "errors": [], "registry_version": None,
    }


def test_oversized_request_is_refused_before_sending(client: TcpClient) -> None:
    with TcpClient(client.host, client.port, max_frame_bytes=64) as small:
        with pytest.raises(ValueError, match="max_frame_bytes=64"):
            small.push("E", {"s": "x" * 100})
        with pytest.raises(ValueError):
            small.request(OP_RESET, b"x" * 65)
        assert not small.connected or "server_version" in small.ping()


def test_frame_too_large_from_server_then_reconnects(clean_server: BeavaProcess) -> None:
    # The client accepts bigger frames than the server: the server answers frame_too_large
    # as soon as it reads the length, then closes the connection.
    with TcpClient(*clean_server.tcp, max_frame_bytes=8 * 1024 * 1024) as c:
        with pytest.raises(ServerError) as info:
            c.request(OP_PUSH, b"x" * (4 * 1024 * 1024 + 1))
        err = info.value
        assert err.code == "frame_too_large"
        assert err.error["limit"] == 4 * 1024 * 1024 + 3
        assert err.error["declared"] == 4 * 1024 * 1024 + 4
        # the closed connection is noticed and replaced before the next request
        assert "server_version" in c.ping()


def test_connect_refused_is_a_transport_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = TcpClient("127.0.0.1", port, timeout=2.0)
    with pytest.raises(TransportError) as info:
        c.ping()
    assert isinstance(info.value, ConnectionError)
    assert info.value.code == "connect_failed"
    assert not c.connected


def test_closed_client_refuses_calls(clean_server: BeavaProcess) -> None:
    c = TcpClient(*clean_server.tcp)
    c.ping()
    c.close()
    c.close()
    assert c.closed
    with pytest.raises(RuntimeError, match="client is closed"):
        c.ping()


def test_timeout_then_server_death() -> None:
    proc = BeavaProcess()
    try:
        c = TcpClient(*proc.tcp, timeout=0.5)
        c.ping()
        os.kill(proc.proc.pid, signal.SIGSTOP)
        try:
            with pytest.raises(Timeout) as info:
                c.ping()
            assert isinstance(info.value, TimeoutError)
            assert not c.connected  # discarded: the reply may still come
        finally:
            os.kill(proc.proc.pid, signal.SIGCONT)
        assert "server_version" in c.ping()  # a new connection
        proc.kill()
        with pytest.raises(TransportError):
            c.ping()
    finally:
        proc.kill()


def _break_connection_while_server_is_stopped(c: TcpClient, proc: BeavaProcess) -> None:
    """Stop the server, then make the client's next write fail (EPIPE) before the server
    can notice anything; the server resumes shortly after."""
    os.kill(proc.proc.pid, signal.SIGSTOP)
    assert c._sock is not None
    c._sock.shutdown(socket.SHUT_WR)
    threading.Timer(0.3, _resume, (proc.proc.pid,)).start()


def _resume(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


def test_reconnect_retries_a_safe_call_once() -> None:
    proc = BeavaProcess()
    try:
        c = TcpClient(*proc.tcp, reconnect=True, timeout=5.0)
        c.ping()
        _break_connection_while_server_is_stopped(c, proc)
        assert "server_version" in c.ping()
    finally:
        proc.kill()


def test_without_reconnect_the_failure_surfaces_once() -> None:
    proc = BeavaProcess()
    try:
        c = TcpClient(*proc.tcp, timeout=5.0)
        c.ping()
        _break_connection_while_server_is_stopped(c, proc)
        with pytest.raises(TransportError):
            c.ping()
        assert "server_version" in c.ping()
    finally:
        proc.kill()


def test_reconnect_never_retries_a_push_that_was_written() -> None:
    proc = BeavaProcess()
    try:
        c = TcpClient(*proc.tcp, reconnect=True, timeout=5.0)
        c.ping()
        _break_connection_while_server_is_stopped(c, proc)
        with pytest.raises(TransportError):
            c.push("E", {"a": 1})
    finally:
        proc.kill()


def test_server_closing_mid_pipeline_fails_the_call(clean_server: BeavaProcess) -> None:
    with TcpClient(*clean_server.tcp) as c:
        ping = encode_frame(OP_PING, 1)
        # a frame declaring length 0 makes the server answer frame_error and close
        blob = ping + ping + b"\x00\x00\x00\x00" + ping
        with pytest.raises(ConnectionClosed):
            c.push_frames([(blob, 4)])
        assert not c.connected
        assert "server_version" in c.ping()


# -- with a registry -------------------------------------------------------------------------

REGISTRY = {
    "nodes": [
        {"kind": "event", "name": "Txn",
         "schema": {"fields": {"user": "str", "amount": "f64"}, "optional_fields": []}},
        {"kind": "derivation", "name": "UserAgg", "output_kind": "table", "upstreams": ["Txn"],
         "table_primary_key": ["user"],
         "ops": [{"op": "group_by", "keys": ["user"],
                  "agg": {"n": {"op": "count", "params": {}},
                          "amt": {"op": "sum", "params": {"field": "amount"}}}}]},
    ]
}


def test_register_push_get_roundtrip(client: TcpClient) -> None:
    rv = client.ping()["registry_version"]
    reply = client.register(REGISTRY)
    assert reply["status"] == "ok"
    assert reply["added"] == ["Txn", "UserAgg"]
    assert reply["registry_version"] == rv + 1
    ack = client.push("Txn", {"user": "u1", "amount": 1.5})
    assert set(ack) == {"ack_lsn", "idempotent_replay", "registry_version"}
    assert ack["idempotent_replay"] is False and ack["registry_version"] == rv + 1
    assert client.get("UserAgg", "u1") == {"amt": 1.5, "n": 1}
    assert client.get("UserAgg", "u1", ["n"]) == {"n": 1}
    assert client.get("UserAgg", "cold") == {}
    assert client.batch_get([("UserAgg", "u1"), ("UserAgg", "cold", ["n"]), ("Nope", "u1")]) == [
        {"amt": 1.5, "n": 1},
        {},
        {"error": {"code": "unknown_table", "expected": ["UserAgg"], "got": "Nope",
                   "message": "table 'Nope' is not a registered aggregation; tables: "
                              "'UserAgg'"}},
    ]
    with pytest.raises(ServerError) as info:
        client.get("Nope", "u1")
    assert info.value.code == "unknown_table"
    with pytest.raises(ServerError) as info:
        client.get("UserAgg", "u1", ["zz"])
    assert info.value.code == "internal_error"
    assert info.value.reason == 'feature_not_found: missing=["zz"] table=UserAgg'


def test_msgpack_reads_and_pushes(clean_server: BeavaProcess) -> None:
    with TcpClient(*clean_server.tcp, content_type="msgpack") as c:
        c.register(REGISTRY)
        c.push("Txn", {"user": "m", "amount": 2.0})
        assert c.get("UserAgg", "m") == {"amt": 2.0, "n": 1}
        assert c.batch_get([("UserAgg", "m", ["amt"])]) == [{"amt": 2.0}]
        result = c.push_many("Txn", [{"user": "m", "amount": 1.0}] * 3)
        assert result["acks"] == 3 and result["errors"] == []
        assert c.get("UserAgg", "m", ["n"]) == {"n": 4}


def test_push_many_merges_chunks_and_rebases_indexes(client: TcpClient) -> None:
    client.register(REGISTRY)
    rows = [{"user": "a", "amount": 1.0}] * 5 + [{"user": 1}] + [{"user": "b", "amount": 2.0}]
    result = client.push_many("Txn", rows, chunk_size=2)
    assert client.push_many_supported is True
    assert result["acks"] == 6
    assert codes_only(result["errors"]) == [{"error": {"code": "invalid_event"}, "index": 5}]
    assert isinstance(result["ack_lsn"], int)
    assert result["registry_version"] == client.ping()["registry_version"]
    assert client.get("UserAgg", "a") == {"amt": 5.0, "n": 5}
    assert client.get("UserAgg", "b") == {"amt": 2.0, "n": 1}


def test_push_pipelined_read_your_writes(client: TcpClient) -> None:
    client.register(REGISTRY)
    rows = ({"user": f"u{i % 10}", "amount": 1.0} for i in range(5000))
    result = client.push_pipelined("Txn", rows, batch_size=64)
    assert result["acks"] == 5000 and result["errors"] == []
    last = client.push("Txn", {"user": "u0", "amount": 0.0})
    assert last["ack_lsn"] > result["ack_lsn"]
    assert client.get("UserAgg", "u3") == {"amt": 500.0, "n": 500}


def test_pipeline_mixes_pushes_and_reads_in_order(client: TcpClient) -> None:
    client.register(REGISTRY)
    pipe = client.pipeline()
    for i in range(3):
        pipe.push("Txn", {"user": "p", "amount": float(i)}).get("UserAgg", "p", ["n"])
    replies = pipe.execute()
    assert [r for r in replies[1::2]] == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert all("ack_lsn" in r for r in replies[0::2])


def test_register_force_and_dry_run(client: TcpClient) -> None:
    client.register(REGISTRY)
    only_event = {"nodes": REGISTRY["nodes"][:1]}
    with pytest.raises(ServerError) as info:
        client.register(only_event)
    assert info.value.code == "force_required"
    assert "diff" in info.value.error
    dry = client.register(only_event, dry_run=True)
    assert dry["would_apply"] is False
    forced = client.register(only_event, force=True)
    assert forced["status"] == "ok" and forced["removed"] == ["UserAgg"]


def test_register_error_carries_path_and_reason(client: TcpClient) -> None:
    table = {k: v for k, v in REGISTRY["nodes"][1].items() if k != "table_primary_key"}
    with pytest.raises(ServerError) as info:
        client.register([REGISTRY["nodes"][0], table])
    err = info.value
    assert err.code == "invalid_registration"
    assert err.path == "nodes[1].table_primary_key"
    assert err.reason
    assert str(err) == f"[invalid_registration] nodes[1].table_primary_key: {err.reason}"
    assert isinstance(err.body["registry_version"], int)


def test_client_pool_across_threads(clean_server: BeavaProcess) -> None:
    made: list[TcpClient] = []

    def factory() -> TcpClient:
        made.append(TcpClient(*clean_server.tcp))
        return made[-1]

    with ClientPool(factory, 3) as pool:
        rv = pool.ping()["registry_version"]
        with ThreadPoolExecutor(8) as ex:
            replies = list(ex.map(lambda _: pool.ping(), range(400)))
        assert [r["registry_version"] for r in replies] == [rv] * 400
        assert 1 <= len(made) <= 3
    assert all(c.closed for c in made)
