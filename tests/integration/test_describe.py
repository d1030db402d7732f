"""The describe command (OP 0x0026, GET /describe): App.describe() and AsyncApp.describe()
return what the admin sidecar's /registry lists."""

from __future__ import annotations

import asyncio
import json

import pytest

import beava as bv
from beava_client import TcpClient
from beava_client.opcodes import OP_DESCRIBE, OP_GET_RESPONSE
from tests.support import BeavaProcess, FrameConn, http_request


@bv.event
class Login:
    user_id: str
    ok: bool
    country: str | None


@bv.table(key="user_id")
def UserLogins(e: Login) -> bv.Table:
    return e.group_by("user_id").agg(logins=bv.count(window="1h"), fails=bv.count(
        where=~bv.col("ok")), last_country=bv.last("country"))


def admin_registry(server: BeavaProcess) -> dict[str, object]:
    status, _, raw = http_request(server.admin, "GET", "/registry")
    assert status == 200
    doc: dict[str, object] = json.loads(raw)
    return doc


@pytest.mark.parametrize("transport", ["http", "tcp"])
def test_app_describe_matches_admin_registry(clean_server: BeavaProcess,
                                             transport: str) -> None:
    url = (clean_server.http_url if transport == "http"
           else f"tcp://{clean_server.addrs['tcp']}")
    with bv.App(url) as app:
        assert app.describe()["nodes"] == []
        version = app.register(Login, UserLogins)["registry_version"]
        doc = app.describe()
    assert doc == admin_registry(clean_server)
    assert doc["version"] == version and doc["node_count"] == 2
    event, table = doc["nodes"]
    assert event["kind"] == "event" and event["name"] == "Login"
    assert event["fields"]["ok"] == "bool"
    assert table["kind"] == "table" and table["keys"] == ["user_id"]
    assert table["features"]["logins"] == {"op": "count", "params": {}, "window": "1h"}
    assert table["features"]["last_country"]["op"] == "last"


def test_async_app_and_raw_frame(clean_server: BeavaProcess) -> None:
    tcp_url = f"tcp://{clean_server.addrs['tcp']}"
    with bv.App(tcp_url) as app:
        app.register(Login, UserLogins)

    async def describe() -> dict[str, object]:
        async with bv.AsyncApp(tcp_url) as app:
            return await app.describe()

    assert asyncio.run(describe()) == admin_registry(clean_server)
    conn = FrameConn(clean_server.tcp)
    try:  # a body is not needed; a read scope is enough (docs/wire.md)
        op, ct, payload = conn.request(OP_DESCRIBE, 1, b"")
    finally:
        conn.close()
    assert (op, ct) == (OP_GET_RESPONSE, 1)
    assert json.loads(payload)["node_count"] == 2
    with TcpClient(*clean_server.tcp) as client:
        assert client.describe() == admin_registry(clean_server)
