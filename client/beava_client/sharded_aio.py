"""``AsyncShardedClient``: the asyncio client of a sharded beava (docs/sharding.md). It runs
the flows of ``sharded_base`` with one asyncio wire client per shard, the calls that go to
several shards at once gathered."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from . import async_client_for_url
from .aio import AsyncTcpClient
from .http import AsyncHttpClient
from .messages import DEFAULT_CHUNK_SIZE
from .shard_routes import Routes
from .sharded_base import (
    REFRESH_MAP,
    REFRESH_ROUTES,
    Call,
    Flow,
    Outcomes,
    Send,
    ShardedBase,
    Sleep,
)
from .slots import ShardMap

T = TypeVar("T")


class AsyncShardedClient(ShardedBase):
    """The asyncio counterpart of ``ShardedClient``: same arguments, methods, results and
    errors, every method a coroutine. Belongs to the event loop it is first used on."""

    def __init__(self, shard_map: str | os.PathLike[str] | ShardMap, *,
                 transport: str | None = None, fence_wait: float = 30.0,
                 **client_options: Any) -> None:
        super().__init__(shard_map, transport=transport, fence_wait=fence_wait,
                         **client_options)
        self._clients: dict[str, tuple[str, AsyncTcpClient | AsyncHttpClient]] = {}
        self._closed = False

    async def __aenter__(self) -> AsyncShardedClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def connect(self) -> None:
        """Fetch the map if need be and open a connection to every shard."""
        await self._run(self.on_all_flow(Call("connect")))

    async def close(self) -> None:
        """Close every shard's connection. Idempotent."""
        self._closed = True
        clients, self._clients = self._clients, {}
        for _, client in clients.values():
            await client.close()

    # -- running flows -------------------------------------------------------------------------

    async def _client(self, shard_id: str) -> AsyncTcpClient | AsyncHttpClient:
        if self._closed:
            raise RuntimeError("AsyncShardedClient is closed")
        url = self.shard_url(self._map().shard(shard_id))
        held = self._clients.get(shard_id)
        if held is not None and held[0] == url:
            return held[1]
        client = async_client_for_url(url, **self._options)
        self._clients[shard_id] = (url, client)
        if held is not None:
            await held[1].close()  # the shard moved
        return client

    async def _call(self, shard_id: str, call: Call) -> Any:
        client = await self._client(shard_id)
        return await getattr(client, call.method)(*call.args, **call.kwargs)

    async def _send(self, calls: Mapping[str, Call]) -> Outcomes:
        replies = await asyncio.gather(
            *(self._call(sid, call) for sid, call in calls.items()), return_exceptions=True)
        for reply in replies:
            if isinstance(reply, BaseException) and not isinstance(reply, Exception):
                raise reply  # cancellation and the like are not a shard's answer
        return dict(zip(calls, replies, strict=True))

    async def _run(self, flow: Flow[T]) -> T:
        if self.map is None:
            await self.refresh_map()
        try:
            step = next(flow)
            while True:
                reply: Any = None
                if isinstance(step, Send):
                    reply = await self._send(step.calls)
                elif isinstance(step, Sleep):
                    await asyncio.sleep(step.seconds)
                elif step == REFRESH_MAP:
                    await self.refresh_map()
                elif step == REFRESH_ROUTES:
                    self.routes = Routes.from_describe(await self._run(self.describe_flow()))
                step = flow.send(reply)
        except StopIteration as stop:
            result: T = stop.value
            return result

    async def refresh_map(self) -> ShardMap:
        """Read the shard map again: from the shards (the first that answers), else from
        the map file or URL it came from."""
        error: Exception | None = None
        if self.map is not None:
            for shard_id in self.shard_ids():
                try:
                    self.map = self.newer_map(await self._call(shard_id, self.map_call()))
                    return self.map
                except Exception as exc:  # noqa: BLE001  # try the next shard
                    error = exc
        if "://" in self._source:
            client = async_client_for_url(self._source, **self._options)
            try:
                call = self.map_call(self._source)
                self.map = self.newer_map(await getattr(client, call.method)(
                    *call.args, **call.kwargs))
            finally:
                await client.close()
        elif self._source:
            self.map = self.newer_map(ShardMap.load(self._source).to_dict())
        elif error is not None:
            raise error
        return self._map()

    # -- requests ------------------------------------------------------------------------------

    async def push(self, event: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """``ShardedClient.push``."""
        return await self._run(self.push_flow(event, body))

    async def push_many(self, event: str, rows: Iterable[Mapping[str, Any]], *,
                        chunk_size: int = DEFAULT_CHUNK_SIZE) -> dict[str, Any]:
        """``ShardedClient.push_many``."""
        return await self._run(self.push_many_flow(event, list(rows), chunk_size))

    async def get(self, table: str, key: Any = None,
                  features: Sequence[str] | None = None) -> Any:
        """``ShardedClient.get``."""
        return await self._run(self.get_flow(table, key, features))

    async def batch_get(self, requests: Iterable[Any]) -> list[Any]:
        """``ShardedClient.batch_get``."""
        return await self._run(self.batch_get_flow(list(requests)))

    async def register(self, payload: Mapping[str, Any] | Sequence[Any], *,
                       force: bool = False, dry_run: bool = False) -> dict[str, Any]:
        """``ShardedClient.register``."""
        return await self._run(self.register_flow(payload, force, dry_run))

    async def describe(self) -> dict[str, Any]:
        """``ShardedClient.describe``."""
        return await self._run(self.describe_flow())

    async def ping(self) -> dict[str, Any]:
        """``ShardedClient.ping``."""
        replies = await self._run(self.on_all_flow(Call("ping")))
        return {**replies[self.shard_ids()[0]], "shards": replies}

    async def reset(self) -> dict[str, Any]:
        """``ShardedClient.reset``."""
        replies = await self._run(self.on_all_flow(Call("reset")))
        self.routes = None
        return dict(replies[self.shard_ids()[0]])

    async def test_clock(self, now_ms: int | None) -> dict[str, Any]:
        """``ShardedClient.test_clock``."""
        replies = await self._run(self.on_all_flow(Call("test_clock", (now_ms,))))
        return dict(replies[self.shard_ids()[0]])
