"""beava_client.HttpClient / AsyncHttpClient against a live server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from beava_client import AsyncHttpClient, HttpClient, ServerError, TransportError
from beava_client.http import decode_response
from tests.integration.test_client_tcp import REGISTRY
from tests.support import BeavaProcess, codes_only


@pytest.fixture
def client(clean_server: BeavaProcess) -> Iterator[HttpClient]:
    with HttpClient.from_url(clean_server.http_url, timeout=10.0) as c:
        yield c


def test_ping_and_health(client: HttpClient) -> None:
    reply = client.ping()
    assert reply["pong"] is True
    assert isinstance(reply["registry_version"], int)
    assert client.health() == {"status": "ok"}


def test_reset(client: HttpClient) -> None:
    rv = client.ping()["registry_version"]
    assert client.reset() == {"registry_version": rv + 1, "reset": True}


def test_keep_alive_reuses_one_connection(client: HttpClient) -> None:
    client.ping()
    sock = client._conn.sock if client._conn else None
    assert sock is not None
    for _ in range(20):
        client.ping()
    assert client._conn is not None and client._conn.sock is sock


def test_not_found_keeps_raw_target(client: HttpClient) -> None:
    with pytest.raises(ServerError) as info:
        client.request("POST", "/nope/?x=1")
    err = info.value
    assert (err.code, err.path, err.status) == ("not_found", "/nope/?x=1", 404)
    assert err.body == {"error": {"code": "not_found", "path": "/nope/?x=1"}}
    assert err.op is None


def test_method_not_allowed(client: HttpClient) -> None:
    with pytest.raises(ServerError) as info:
        client.request("GET", "/ping")
    assert info.value.code == "method_not_allowed"
    assert info.value.status == 405
    assert info.value.error == {"code": "method_not_allowed", "method": "GET", "path": "/ping"}


def test_push_errors(client: HttpClient) -> None:
    with pytest.raises(ServerError) as info:
        client.push("Nope", {"a": 1})
    assert (info.value.code, info.value.status) == ("event_not_found", 404)
    assert codes_only(info.value.body) == {"error": {"code": "event_not_found"}}
    with pytest.raises(ServerError) as info:
        client.request("POST", "/push", b"nope", safe=False)
    assert (info.value.code, info.value.status) == ("invalid_json_body", 400)


def test_register_media_type_error(client: HttpClient) -> None:
    rv = client.ping()["registry_version"]
    response = client.send("POST", "/register", b'{"nodes":[]}',
                           headers={"Content-Type": "text/plain"})
    assert response.status == 415
    assert response.headers["content-type"] == "application/json"
    with pytest.raises(ServerError) as info:
        decode_response(response)
    err = info.value
    assert (err.code, err.path, err.reason) == (
        "unsupported_media_type", "/register", "expected application/json")
    assert err.body["registry_version"] == rv


def test_push_many_probe_and_push_each(client: HttpClient) -> None:
    with pytest.raises(ServerError) as info:
        client.push_many("Nope", [{"a": 1}])
    assert info.value.code == "event_not_found"
    assert info.value.acked_before == 0
    assert client.push_many_supported is True
    result = client.push_each("Nope", [{"a": 1}, {"a": 2}])
    assert result["acks"] == 0
    assert codes_only(result["errors"]) == [
        {"index": 0, "error": {"code": "event_not_found"}},
        {"index": 1, "error": {"code": "event_not_found"}},
    ]


def test_connect_refused() -> None:
    c = HttpClient("127.0.0.1", 1, timeout=2.0)
    with pytest.raises(TransportError) as info:
        c.ping()
    assert info.value.code == "connect_failed"


async def test_async_http_client(clean_server: BeavaProcess) -> None:
    async with AsyncHttpClient.from_url(clean_server.http_url, pool_size=4) as c:
        replies = await asyncio.gather(*(c.ping() for _ in range(50)))
        assert all(r["pong"] is True for r in replies)
        assert len(c._idle) <= 4
        rv = replies[0]["registry_version"]
        assert await c.reset() == {"registry_version": rv + 1, "reset": True}
        assert await c.health() == {"status": "ok"}
        with pytest.raises(ServerError) as info:
            await c.request("GET", "/nope")
        assert (info.value.code, info.value.status, info.value.path) == (
            "not_found", 404, "/nope")
        with pytest.raises(ServerError) as info:
            await c.push("Nope", {})
        assert info.value.code == "event_not_found"
        response = await c.send("POST", "/ping", b"{}", headers={"Connection": "close"})
        assert response.status == 200
        assert response.headers["connection"] == "close"
        assert (await c.ping())["pong"] is True


def test_register_push_get_over_http(client: HttpClient) -> None:
    assert client.register(REGISTRY)["status"] == "ok"
    ack = client.push("Txn", {"user": "h", "amount": 3.0})
    assert ack["idempotent_replay"] is False and isinstance(ack["ack_lsn"], int)
    result = client.push_many("Txn", [{"user": "h", "amount": 1.0}, {"user": 5}], chunk_size=1)
    assert result["acks"] == 1
    assert codes_only(result["errors"]) == [{"error": {"code": "invalid_event"}, "index": 1}]
    assert client.get("UserAgg", "h") == {"amt": 4.0, "n": 2}
    assert client.batch_get([("UserAgg", "h", ["n"]), ("UserAgg", "x")]) == [{"n": 2}, {}]
    with pytest.raises(ServerError) as info:
        client.get("UserAgg", "h", ["zz"])
    assert (info.value.code, info.value.status) == ("internal_error", 500)


async def test_async_http_register_push_get(clean_server: BeavaProcess) -> None:
    async with AsyncHttpClient(*clean_server.http, pool_size=2) as c:
        await c.register(REGISTRY)
        acks = await asyncio.gather(*(c.push("Txn", {"user": "a", "amount": 1.0})
                                      for _ in range(10)))
        assert len({a["ack_lsn"] for a in acks}) == 10
        result = await c.push_many("Txn", [{"user": "a", "amount": 1.0}] * 5)
        assert result["acks"] == 5
        assert await c.get("UserAgg", "a") == {"amt": 15.0, "n": 15}
