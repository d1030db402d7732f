"""Access control against a live server: bearer tokens with read / write / admin scopes on
HTTP, framed TCP (OP_AUTH first) and the admin sidecar; the clients and the SDK with
``token=``; a server without tokens unchanged."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

import beava as bv
from beava_client import (
    AsyncHttpClient,
    AsyncTcpClient,
    HttpClient,
    ServerError,
    TcpClient,
    client_for_url,
)
from beava_client.opcodes import (
    OP_AUTH,
    OP_ERROR,
    OP_GET,
    OP_GET_RESPONSE,
    OP_PING,
    OP_PUSH,
    OP_REGISTER,
    OP_RESET,
    OP_TEST_CLOCK,
)
from tests.support import BeavaProcess, FrameConn, frame, http_request

READ = "read-token-0000000001"
WRITE = "write-token-000000002"
ADMIN = "admin-token-000000003"
TOKENS = f"{READ}:read; {WRITE}:write;{ADMIN}:admin"
SCOPES = {READ: ["read"], WRITE: ["read", "write"], ADMIN: ["admin", "read", "write"]}


@bv.event
class Visit:
    user: str
    ms: float


@bv.table(key="user")
def Visits(v: Visit) -> bv.Table:
    return v.group_by("user").agg(n=bv.count(), total=bv.sum("ms"))


@pytest.fixture(scope="module")
def secured() -> Iterator[BeavaProcess]:
    proc = BeavaProcess(env={"BEAVA_AUTH_TOKENS": TOKENS})
    with bv.App(f"tcp://{proc.addrs['tcp']}", token=ADMIN) as app:
        app.register(Visit, Visits)
        app.push("Visit", {"user": "u1", "ms": 5.0})
    yield proc
    proc.terminate()


def j(value: Any) -> bytes:
    return json.dumps(value).encode()


# -- HTTP ---------------------------------------------------------------------------------

GET = ("POST", "/get", j({"table": "Visits", "key": "u1"}))
PING = ("POST", "/ping", b"{}")
PUSH = ("POST", "/push", j({"event": "Visit", "data": {"user": "u2", "ms": 1.0}}))
LEGACY_PUSH = ("POST", "/push/Visit", j({"user": "u2", "ms": 1.0}))
REGISTER = ("POST", "/register", j({"nodes": [], "dry_run": True}))
CLOCK = ("POST", "/test/clock", j({"now_ms": None}))
RESET = ("POST", "/reset", b"{}")
NEEDS = {"get": (GET, "read"), "ping": (PING, "read"), "push": (PUSH, "write"),
         "legacy_push": (LEGACY_PUSH, "write"), "register": (REGISTER, "admin"),
         "test_clock": (CLOCK, "admin")}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


@pytest.mark.parametrize("name", sorted(NEEDS))
def test_http_without_a_valid_token_is_401(secured: BeavaProcess, name: str) -> None:
    (method, path, body), _ = NEEDS[name]
    for headers in ({"Content-Type": "application/json"}, bearer("not-a-token-0000000000"),
                    {"Authorization": f"Basic {READ}"},
                    {"Authorization": "Bearer"}, bearer(READ + "x")):
        status, head, raw = http_request(secured.http, method, path, body, headers)
        assert status == 401, headers
        assert json.loads(raw)["error"]["code"] == "unauthenticated"
        assert head["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize("token", [READ, WRITE, ADMIN])
@pytest.mark.parametrize("name", sorted(NEEDS))
def test_http_scope_matrix(secured: BeavaProcess, token: str, name: str) -> None:
    (method, path, body), scope = NEEDS[name]
    status, _, raw = http_request(secured.http, method, path, body, bearer(token))
    if scope in SCOPES[token]:
        assert status == 200, raw
    else:
        assert status == 403
        assert json.loads(raw)["error"]["code"] == "forbidden"
        assert json.loads(raw)["error"]["scope"] == scope


def test_http_reset_needs_admin(secured: BeavaProcess) -> None:
    for token in (READ, WRITE):
        status, _, raw = http_request(secured.http, *RESET, bearer(token))
        assert (status, json.loads(raw)["error"]["scope"]) == (403, "admin")


def test_http_health_and_ready_stay_open(secured: BeavaProcess) -> None:
    assert http_request(secured.http, "GET", "/health")[0] == 200
    assert http_request(secured.http, "GET", "/ready")[0] == 200


def test_admin_sidecar_needs_admin(secured: BeavaProcess) -> None:
    for path in ("/health", "/ready", "/"):  # "/": the status page, which holds no data
        assert http_request(secured.admin, "GET", path)[0] == 200
    for path in ("/metrics", "/registry", "/entity", "/nothing"):
        status, _, raw = http_request(secured.admin, "GET", path)
        assert status == 401, path
        assert json.loads(raw)["error"]["code"] == "unauthenticated"
        for token in (READ, WRITE):
            status, _, raw = http_request(secured.admin, "GET", path, headers=bearer(token))
            assert (status, json.loads(raw)["error"]) == (403, {
                "code": "forbidden", "scope": "admin",
                "message": f"admin {path} needs a token with the 'admin' scope"})
    status, _, raw = http_request(secured.admin, "GET", "/metrics", headers=bearer(ADMIN))
    assert status == 200 and b"beava_registry_version" in raw
    status, _, raw = http_request(secured.admin, "GET", "/registry", headers=bearer(ADMIN))
    assert status == 200 and json.loads(raw)["version"] >= 1
    status, _, raw = http_request(secured.admin, "GET", "/entity?table=Visits&key=u1",
                                  headers=bearer(ADMIN))
    assert (status, json.loads(raw)) == (200, {"n": 1, "total": 5.0})


# -- framed TCP ---------------------------------------------------------------------------


def auth_frame(token: str, ct: int = 1) -> bytes:
    body = {"token": token}
    return frame(OP_AUTH, ct, j(body) if ct == 1 else msgspec.msgpack.encode(body))


def error_of(reply: tuple[int, int, bytes] | None) -> dict[str, Any]:
    assert reply is not None
    op, _, payload = reply
    assert op == OP_ERROR, payload
    error: dict[str, Any] = json.loads(payload)["error"]
    return error


GET_FRAME = frame(OP_GET, 1, j({"table": "Visits", "key": "u1"}))
PUSH_FRAME = frame(OP_PUSH, 1, j({"event": "Visit", "body": {"user": "u3", "ms": 2.0}}))


@pytest.mark.parametrize("first", [GET_FRAME, PUSH_FRAME, frame(OP_PING, 1, b"{}"),
                                   frame(0x0013, 1, b"{}"), auth_frame("wrong-token-0000000000"),
                                   frame(OP_AUTH, 1, b'{"tok":1}'), frame(OP_AUTH, 3, b"{}")])
def test_tcp_first_frame_must_authenticate(secured: BeavaProcess, first: bytes) -> None:
    conn = FrameConn(secured.tcp)
    try:
        # the frames after the refused one are never answered
        conn.send(first + auth_frame(ADMIN) + GET_FRAME + PUSH_FRAME)
        assert error_of(conn.recv_frame())["code"] == "unauthenticated"
        assert conn.recv_frame() is None  # closed
    finally:
        conn.close()


def test_tcp_auth_reply_and_pipelined_frames_in_the_same_write(secured: BeavaProcess) -> None:
    for token in (READ, WRITE, ADMIN):
        for ct in (1, 2):
            conn = FrameConn(secured.tcp)
            try:
                conn.send(auth_frame(token, ct) + GET_FRAME + frame(OP_PING, 1, b"{}"))
                op, reply_ct, payload = conn.recv_frame() or (0, 0, b"")
                assert (op, reply_ct) == (OP_AUTH, ct)
                decoded = json.loads(payload) if ct == 1 else msgspec.msgpack.decode(payload)
                assert decoded == {"scopes": SCOPES[token]}
                assert (conn.recv_frame() or (0,))[0] == OP_GET_RESPONSE
                assert (conn.recv_frame() or (0,))[0] == OP_PING
            finally:
                conn.close()


TCP_NEEDS = {
    "get": (GET_FRAME, "read"),
    "push": (PUSH_FRAME, "write"),
    "register": (frame(OP_REGISTER, 1, j({"nodes": [], "dry_run": True})), "admin"),
    "reset": (frame(OP_RESET, 1, b"{}"), "admin"),
    "test_clock": (frame(OP_TEST_CLOCK, 1, j({"now_ms": None})), "admin"),
}


@pytest.mark.parametrize("token", [READ, WRITE, ADMIN])
def test_tcp_scope_matrix_keeps_the_connection(secured: BeavaProcess, token: str) -> None:
    conn = FrameConn(secured.tcp)
    try:
        assert conn.request(OP_AUTH, 1, j({"token": token}))[0] == OP_AUTH
        for name, (request, scope) in TCP_NEEDS.items():
            if name == "reset" and scope in SCOPES[token]:
                continue  # would empty the shared server
            conn.send(request)
            reply = conn.recv_frame()
            assert reply is not None, name
            if scope in SCOPES[token]:
                assert reply[0] != OP_ERROR, (name, reply)
            else:
                assert error_of(reply) == {
                    "code": "forbidden", "scope": scope,
                    "message": f"{name} needs a token with the {scope!r} scope"}
        assert conn.request(OP_PING, 1, b"{}")[0] == OP_PING  # still open
    finally:
        conn.close()


def test_tcp_read_token_never_reaches_the_push_pass(secured: BeavaProcess) -> None:
    """A run of pushes (the compiled push pass takes such runs) on a read-only connection:
    every one is refused, none is applied."""
    with TcpClient(*secured.tcp, token=READ) as client:
        before = client.get("Visits", "u9")
    conn = FrameConn(secured.tcp)
    try:
        conn.request(OP_AUTH, 1, j({"token": READ}))
        push = frame(OP_PUSH, 1, j({"event": "Visit", "body": {"user": "u9", "ms": 1.0}}))
        conn.send(push * 40)
        for _ in range(40):
            assert error_of(conn.recv_frame())["code"] == "forbidden"
    finally:
        conn.close()
    with TcpClient(*secured.tcp, token=READ) as client:
        assert client.get("Visits", "u9") == before


def test_tcp_reauthentication_changes_scopes(secured: BeavaProcess) -> None:
    conn = FrameConn(secured.tcp)
    try:
        conn.request(OP_AUTH, 1, j({"token": READ}))
        assert error_of(conn.request(OP_PUSH, 1, PUSH_FRAME[7:]))["code"] == "forbidden"
        assert conn.request(OP_AUTH, 1, j({"token": WRITE}))[0] == OP_AUTH
        assert conn.request(OP_PUSH, 1, PUSH_FRAME[7:])[0] == OP_PUSH
        conn.send(auth_frame("wrong-token-0000000000"))
        assert error_of(conn.recv_frame())["code"] == "unauthenticated"
        assert conn.recv_frame() is None
    finally:
        conn.close()


def test_tcp_pipelined_reauth_to_a_weaker_token_takes_effect_at_once(secured: BeavaProcess
                                                                    ) -> None:
    """OP_AUTH with a read token and a push in one write on a write connection: the push
    sees the read routes (refused, not applied), though the turn began with the push pass."""
    with TcpClient(*secured.tcp, token=READ) as client:
        before = client.get("Visits", "reauth-weaker")
    push = frame(OP_PUSH, 1, j({"event": "Visit", "body": {"user": "reauth-weaker", "ms": 1.0}}))
    conn = FrameConn(secured.tcp)
    try:
        assert conn.request(OP_AUTH, 1, j({"token": WRITE}))[0] == OP_AUTH
        assert conn.request(OP_PUSH, 1, PUSH_FRAME[7:])[0] == OP_PUSH  # the push pass is on
        conn.send(push + auth_frame(READ) + push * 3)
        assert (conn.recv_frame() or (0,))[0] == OP_PUSH
        op, _, payload = conn.recv_frame() or (0, 0, b"")
        assert (op, json.loads(payload)) == (OP_AUTH, {"scopes": ["read"]})
        for _ in range(3):
            assert error_of(conn.recv_frame())["code"] == "forbidden"
        assert conn.request(OP_PING, 1, b"{}")[0] == OP_PING  # still open
    finally:
        conn.close()
    with TcpClient(*secured.tcp, token=READ) as client:
        after = client.get("Visits", "reauth-weaker")
    assert before == {} and after["n"] == 1  # the push before the re-auth alone


def test_tcp_pipelined_frames_after_a_refused_reauth_are_dropped(secured: BeavaProcess
                                                                 ) -> None:
    """An invalid OP_AUTH followed by three pushes in one write on a write connection: one
    ``unauthenticated``, then the close; none of the pushes is answered or applied."""
    with TcpClient(*secured.tcp, token=READ) as client:
        before = client.get("Visits", "reauth-refused")
    push = frame(OP_PUSH, 1, j({"event": "Visit", "body": {"user": "reauth-refused", "ms": 1.0}}))
    conn = FrameConn(secured.tcp)
    try:
        assert conn.request(OP_AUTH, 1, j({"token": WRITE}))[0] == OP_AUTH
        assert conn.request(OP_PUSH, 1, PUSH_FRAME[7:])[0] == OP_PUSH
        conn.send(auth_frame("wrong-token-0000000000") + push * 3)
        assert error_of(conn.recv_frame())["code"] == "unauthenticated"
        assert conn.recv_frame() is None  # closed, nothing else answered
    finally:
        conn.close()
    with TcpClient(*secured.tcp, token=READ) as client:
        assert client.get("Visits", "reauth-refused") == before


# -- clients and the SDK ------------------------------------------------------------------


def test_clients_send_their_token(secured: BeavaProcess, monkeypatch: pytest.MonkeyPatch
                                   ) -> None:
    tcp_url, http_url = f"tcp://{secured.addrs['tcp']}", secured.http_url
    for url in (tcp_url, http_url):
        with client_for_url(url, token=WRITE) as client:
            client.push("Visit", {"user": "c1", "ms": 1.0})
            assert client.get("Visits", "c1")["n"] >= 1
            with pytest.raises(ServerError) as info:
                client.reset()
            assert info.value.code == "forbidden"
        with pytest.raises(ServerError) as info, \
                client_for_url(url, token="wrong-token-0000000000") as bad:
            bad.ping()
        assert info.value.code == "unauthenticated"
        with pytest.raises(ServerError) as info, client_for_url(url, token="") as anonymous:
            anonymous.ping()
        assert info.value.code == "unauthenticated"
    monkeypatch.setenv("BEAVA_TOKEN", READ)
    with TcpClient(*secured.tcp) as client, HttpClient(*secured.http) as http:
        assert client.token == READ and http.token == READ
        assert client.ping()["registry_version"] >= 1
        assert http.get("Visits", "u1")["n"] >= 1


def test_tcp_client_reauthenticates_after_a_reconnect(secured: BeavaProcess) -> None:
    with TcpClient(*secured.tcp, token=READ, reconnect=True) as client:
        client.ping()
        assert client._sock is not None
        client._sock.close()  # the connection is lost; the next call opens one
        client._discard()
        assert client.get("Visits", "u1")["n"] >= 1


def test_async_clients_send_their_token(secured: BeavaProcess) -> None:
    async def run() -> None:
        async with AsyncTcpClient(*secured.tcp, token=WRITE) as tcp, \
                AsyncHttpClient(*secured.http, token=WRITE) as http:
            await tcp.push("Visit", {"user": "a1", "ms": 1.0})
            await http.push("Visit", {"user": "a1", "ms": 1.0})
            results = await asyncio.gather(*(tcp.get("Visits", "a1") for _ in range(20)))
            assert all(row["n"] == 2 for row in results)
            with pytest.raises(ServerError) as info:
                await tcp.register({"nodes": []}, dry_run=True)
            assert info.value.code == "forbidden"
        async with AsyncTcpClient(*secured.tcp, token="wrong-token-0000000000"):
            pass
    with pytest.raises(ServerError) as info:
        asyncio.run(run())
    assert info.value.code == "unauthenticated"


@pytest.mark.parametrize("scheme", ["tcp", "http"])
def test_sdk_app_with_token(secured: BeavaProcess, scheme: str) -> None:
    url = f"{scheme}://{secured.addrs[scheme]}"
    with bv.App(url, token=ADMIN) as app:
        app.register(Visit, Visits)
        app.push("Visit", {"user": f"sdk-{scheme}", "ms": 3.0})
        assert app.get("Visits", f"sdk-{scheme}")["total"] == 3.0
    with bv.App(url, token=READ) as reader, pytest.raises(bv.RegistrationError) as info:
        reader.push("Visit", {"user": "x", "ms": 1.0})
    assert info.value.code == "forbidden"


def test_async_sdk_app_with_token(secured: BeavaProcess) -> None:
    async def run() -> float:
        async with bv.AsyncApp(f"tcp://{secured.addrs['tcp']}", token=WRITE) as app:
            await app.push("Visit", {"user": "async-sdk", "ms": 4.0})
            row = await app.get("Visits", "async-sdk")
            return float(row["total"])
    assert asyncio.run(run()) == 4.0


# -- without tokens -----------------------------------------------------------------------


def test_without_tokens_nothing_changes_and_auth_is_accepted(clean_server: BeavaProcess
                                                             ) -> None:
    conn = FrameConn(clean_server.tcp)
    try:
        assert conn.request(OP_PING, 1, b"{}")[0] == OP_PING  # no OP_AUTH needed
        op, _, payload = conn.request(OP_AUTH, 1, j({"token": "anything"}))
        assert (op, json.loads(payload)) == (OP_AUTH, {"scopes": ["admin", "read", "write"]})
        assert error_of(conn.request(OP_AUTH, 1, b"[]"))["code"] == "unauthenticated"
        assert conn.request(OP_PING, 1, b"{}")[0] == OP_PING
    finally:
        conn.close()
    assert http_request(clean_server.admin, "GET", "/metrics")[0] == 200
    assert http_request(clean_server.http, *PING)[0] == 200
    with TcpClient(*clean_server.tcp, token="some-token-000000000") as client:
        assert client.ping()["registry_version"] >= 0


# -- start-up -----------------------------------------------------------------------------


def test_a_bad_token_file_stops_the_start(tmp_path: Any) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"{READ} read\n{WRITE} superuser\n")
    proc = BeavaProcess("--auth-token-file", str(path), wait=False)
    assert proc.proc.wait(timeout=20) == 1
    proc.join_output()
    text = proc.stderr_text()
    assert f"{path} line 2: unknown scope 'superuser'" in text
    assert READ not in text and WRITE not in text


def test_non_loopback_without_tokens_warns(tmp_path: Any) -> None:
    proc = BeavaProcess("--http-addr", "0.0.0.0:0")
    try:
        warned = [line for line in proc.lines if line.get("kind") == "server.auth_disabled"]
        assert len(warned) == 1 and "http" in str(warned[0])
    finally:
        proc.terminate()
    proc = BeavaProcess("--http-addr", "0.0.0.0:0", env={"BEAVA_AUTH_TOKENS": TOKENS})
    try:
        assert "server.auth_disabled" not in proc.kinds()
        assert "server.auth_enabled" in proc.kinds()
        assert all(READ not in line for line in proc.raw_lines)
    finally:
        proc.terminate()
