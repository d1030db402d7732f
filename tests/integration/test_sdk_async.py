"""bv.AsyncApp end to end over http://, tcp:// and embed mode (spec/sdk.md §9)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

import beava as bv
from tests.support import BeavaProcess


@bv.event
class Visit:
    user_id: str
    seconds: float


@bv.table(key="user_id")
def UserVisits(v: Visit) -> bv.Table:
    return v.group_by("user_id").agg(visits=bv.count(), seconds=bv.sum("seconds"))


@bv.table
def AllVisits(v: Visit) -> bv.Table:
    return v.agg(all_visits=bv.count(window="forever"))


@pytest.fixture(params=["http", "tcp", "tcp-pool", "embed"])
async def app(request: pytest.FixtureRequest) -> AsyncIterator[bv.AsyncApp]:
    if request.param == "embed":
        async with bv.AsyncApp(test_mode=True) as embedded:
            yield embedded
        return
    server: BeavaProcess = request.getfixturevalue("clean_server")
    url = server.http_url if request.param == "http" else f"tcp://{server.addrs['tcp']}"
    pool = 3 if request.param == "tcp-pool" else 1
    async with bv.AsyncApp(url, pool_size=pool, max_in_flight=16) as remote:
        yield remote


async def test_register_push_get(app: bv.AsyncApp) -> None:
    answer = await app.register(UserVisits, AllVisits)
    assert answer["added"] == ["Visit", "UserVisits", "AllVisits"]
    await app.push("Visit", {"user_id": "u1", "seconds": 1.5})
    assert await app.get("UserVisits", "u1") == {"visits": 1, "seconds": 1.5}
    assert await app.get("AllVisits") == {"all_visits": 1}
    rows = await app.batch_get([("UserVisits", "u1", ["visits"]), ("Nope", "x"),
                                ("UserVisits", "u2")])
    assert rows[0] == {"visits": 1}
    assert rows[1]["error"]["code"] == "unknown_table"
    assert rows[2] == {}
    assert (await app.ping())["registry_version"] >= 1


async def test_concurrent_pushes_are_all_applied(app: bv.AsyncApp) -> None:
    await app.register(UserVisits, AllVisits)
    await asyncio.gather(*(app.push("Visit", {"user_id": f"u{i % 5}", "seconds": 2.0})
                           for i in range(200)))
    assert await app.get("AllVisits") == {"all_visits": 200}
    rows = await asyncio.gather(*(app.get("UserVisits", f"u{i}") for i in range(5)))
    assert rows == [{"visits": 40, "seconds": 80.0}] * 5


async def test_push_many_in_row_order(app: bv.AsyncApp) -> None:
    await app.register(UserVisits, AllVisits)
    rows = [{"user_id": "u1", "seconds": float(i)} for i in range(50)]
    rows[17] = {"user_id": "u1"}
    result = await app.push_many("Visit", rows, chunk_size=7)
    assert result["acks"] == 49
    assert [e["index"] for e in result["errors"]] == [17]
    assert await app.get("UserVisits", "u1") == {"visits": 49,
                                                 "seconds": float(sum(range(50)) - 17)}


async def test_errors(app: bv.AsyncApp) -> None:
    await app.register(UserVisits)
    with pytest.raises(bv.RegistrationError) as info:
        await app.push("Nope", {"a": 1})
    assert info.value.code == "event_not_found"
    with pytest.raises(ValueError):
        await app.push("Visit", {"user_id": "u1", "seconds": float("inf")})
    with pytest.raises(bv.RegistrationError) as info:
        await app.get("Nope", "x")
    assert info.value.code == "unknown_table"
    with pytest.raises(TypeError):
        await app.get("UserVisits", 1.5)


async def test_reset(app: bv.AsyncApp) -> None:
    await app.register(UserVisits)
    await app.push("Visit", {"user_id": "u1", "seconds": 1.0})
    assert await app.reset() is None
    with pytest.raises(bv.RegistrationError):
        await app.get("UserVisits", "u1")


async def test_close_is_final(clean_server: BeavaProcess) -> None:
    app = bv.AsyncApp(f"tcp://{clean_server.addrs['tcp']}")
    assert "registry_version" in await app.ping()  # usable without `async with`
    await app.close()
    await app.close()
    with pytest.raises(RuntimeError, match="App is closed"):
        await app.ping()


async def test_embed_mode_requires_async_with() -> None:
    app = bv.AsyncApp()
    with pytest.raises(RuntimeError) as info:
        await app.ping()
    assert str(info.value).startswith("Embed mode requires use as a context manager")
    await app.close()
