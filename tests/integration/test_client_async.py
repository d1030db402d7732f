"""beava_client.AsyncTcpClient / AsyncTcpPool against a live server."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

import pytest

from beava_client import (
    AsyncTcpClient,
    AsyncTcpPool,
    ConnectionClosed,
    ServerError,
    Timeout,
    TransportError,
)
from tests.integration.test_client_tcp import REGISTRY
from tests.support import BeavaProcess


async def test_ping_and_reset(clean_server: BeavaProcess) -> None:
    async with AsyncTcpClient(*clean_server.tcp) as c:
        rv = (await c.ping())["registry_version"]
        assert await c.reset() == {"registry_version": rv + 1, "reset": True}
        assert (await c.ping())["registry_version"] == rv + 1


async def test_concurrent_coroutines_share_one_connection(clean_server: BeavaProcess) -> None:
    async with AsyncTcpClient(*clean_server.tcp, max_in_flight=64) as c:
        rv = (await c.ping())["registry_version"]
        replies = await asyncio.gather(*(c.ping() for _ in range(1000)))
        assert [r["registry_version"] for r in replies] == [rv] * 1000
        conn = c._conn
        assert conn is not None and conn.credits == 64 and not conn.waiters


async def test_fifo_matching_with_mixed_results(clean_server: BeavaProcess) -> None:
    async with AsyncTcpClient(*clean_server.tcp) as c:
        rv = (await c.ping())["registry_version"]
        results = await asyncio.gather(
            c.ping(), c.request(0x0013), c.reset(), c.request(0x0099), c.ping(),
            return_exceptions=True,
        )
        assert results[0]["registry_version"] == rv
        assert isinstance(results[1], ServerError) and results[1].error["op"] == 0x13
        assert results[2] == {"registry_version": rv + 1, "reset": True}
        assert isinstance(results[3], ServerError) and results[3].error["op"] == 0x99
        assert results[4]["registry_version"] == rv + 1


async def test_pipeline_a_thousand_pings(clean_server: BeavaProcess) -> None:
    async with AsyncTcpClient(*clean_server.tcp) as c:
        pipe = c.pipeline()
        for _ in range(1000):
            pipe.ping()
        replies = await pipe.execute()
        assert len(replies) == 1000 and all("server_version" in r for r in replies)
        replies = await c.pipeline().ping().request(0x0013).ping().execute(raise_on_error=False)
        assert isinstance(replies[1], ServerError) and replies[1].code == "unknown_op"
        with pytest.raises(ServerError):
            await c.pipeline().request(0x0013).ping().execute()


async def test_cancelled_request_keeps_its_fifo_slot(clean_server: BeavaProcess) -> None:
    async with AsyncTcpClient(*clean_server.tcp) as c:
        rv = (await c.ping())["registry_version"]
        task = asyncio.create_task(c.request(0x0013))
        await asyncio.sleep(0)  # the request is queued for writing
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        # the unknown_op reply is read and dropped; this ping gets the ping reply
        assert (await c.ping())["registry_version"] == rv


async def test_push_pipelined_and_push_many_errors(clean_server: BeavaProcess) -> None:
    async with AsyncTcpClient(*clean_server.tcp, max_in_flight=100) as c:
        result = await c.push_pipelined("Nope", [{"i": i} for i in range(500)])
        assert result["acks"] == 0
        assert [e["index"] for e in result["errors"]] == list(range(500))
        assert {e["error"]["code"] for e in result["errors"]} == {"event_not_found"}
        with pytest.raises(ServerError) as info:
            await c.push_many("Nope", [{"a": 1}] * 3, chunk_size=1)
        assert info.value.code == "event_not_found"
        assert info.value.acked_before == 0
        assert c.push_many_supported is True


async def test_pool_round_robin(clean_server: BeavaProcess) -> None:
    async with AsyncTcpPool(*clean_server.tcp, size=4) as pool:
        replies = await asyncio.gather(*(pool.ping() for _ in range(100)))
        assert all("server_version" in r for r in replies)
        assert all(c.connected for c in pool.clients)
        assert len({id(c._conn) for c in pool.clients}) == 4


async def test_timeout_keeps_connection_and_drops_late_reply() -> None:
    proc = BeavaProcess()
    try:
        async with AsyncTcpClient(*proc.tcp, timeout=0.5) as c:
            rv = (await c.ping())["registry_version"]
            os.kill(proc.proc.pid, signal.SIGSTOP)
            try:
                with pytest.raises(Timeout) as info:
                    await c.reset()
                assert isinstance(info.value, TimeoutError)
            finally:
                os.kill(proc.proc.pid, signal.SIGCONT)
            # the late reset reply is dropped; the connection is still in sync
            assert (await c.ping())["registry_version"] == rv + 1
    finally:
        proc.kill()


async def test_connection_loss_fails_every_request_in_flight() -> None:
    proc = BeavaProcess()
    try:
        c = AsyncTcpClient(*proc.tcp, timeout=10.0)
        await c.ping()
        os.kill(proc.proc.pid, signal.SIGSTOP)
        tasks = [asyncio.create_task(c.ping()) for _ in range(10)]
        await asyncio.sleep(0.05)
        proc.kill()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(r, ConnectionClosed) for r in results)
        with pytest.raises(TransportError):
            await c.ping()
        await c.close()
        with pytest.raises(RuntimeError, match="client is closed"):
            await c.ping()
    finally:
        proc.kill()


async def test_bulk_pushes_then_reads(clean_server: BeavaProcess) -> None:
    async with AsyncTcpPool(*clean_server.tcp, size=4, max_in_flight=256,
                            content_type="msgpack") as pool:
        await pool.register(REGISTRY)
        shards = [[{"user": f"s{i}", "amount": 1.0}] * 2000 for i in range(4)]
        results = await asyncio.gather(
            *(c.push_pipelined("Txn", rows) for c, rows in zip(pool.clients, shards, strict=True))
        )
        assert [r["acks"] for r in results] == [2000] * 4
        many = await pool.clients[0].push_many("Txn", [{"user": "s0", "amount": 2.0}] * 2500)
        assert many["acks"] == 2500 and many["errors"] == []
        rows = await pool.batch_get([("UserAgg", f"s{i}") for i in range(4)])
        assert rows == [{"amt": 7000.0, "n": 4500}] + [{"amt": 2000.0, "n": 2000}] * 3
        enc = pool.clients[1].push_encoder("Txn")
        frames = list(enc.batches([{"user": "f", "amount": 1.0}] * 300, 100))
        result = await pool.clients[1].push_frames(frames)
        assert result["acks"] == 300
        assert await pool.get("UserAgg", "f", ["n"]) == {"n": 300}


async def test_reconnect_retries_safe_requests_only() -> None:
    proc = BeavaProcess()
    pid = proc.proc.pid
    try:
        async with AsyncTcpClient(*proc.tcp, reconnect=True, timeout=10.0) as c:
            await c.ping()
            os.kill(pid, signal.SIGSTOP)
            ping = asyncio.create_task(c.ping())
            push = asyncio.create_task(c.push("E", {"a": 1}))
            await asyncio.sleep(0.05)  # both written, no reply while the server is stopped
            conn = c._conn
            assert conn is not None and conn.transport is not None
            conn.transport.abort()  # the connection drops with both requests in flight
            await asyncio.sleep(0.05)
            os.kill(pid, signal.SIGCONT)
            assert "server_version" in await ping  # retried on a new connection
            with pytest.raises(ConnectionClosed):
                await push  # may have reached the server: never retried
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        proc.kill()
