"""``ShardedClient``: the synchronous client of a sharded beava (docs/sharding.md). It runs
the flows of ``sharded_base`` with one wire client per shard and a thread per shard for
the calls that go to several shards at once."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from . import client_for_url
from .http import HttpClient
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
from .tcp import TcpClient

T = TypeVar("T")


class ShardedClient(ShardedBase):
    """A client of every shard of a sharded beava, with the methods of ``TcpClient``'s
    that make sense over several shards: ``push``, ``push_many``, ``get``, ``batch_get``,
    ``register``, ``describe``, ``ping``, ``reset``, ``test_clock``.

    ``shard_map``: a ShardMap, a map file, or any shard's URL (the map is fetched from it
    on first use). A push goes to the owners of its tables' keys in parallel; reads go to
    their key's owner; ``register`` fences, registers and unfences every shard
    (``ShardedBase.register_flow``). Thread-safe. See ``ShardedBase`` for the options;
    the others (``timeout``, ``token``, ``ca``, ``reconnect``, ``content_type``...) go to
    each shard's client.
    """

    def __init__(self, shard_map: str | os.PathLike[str] | ShardMap, *,
                 transport: str | None = None, fence_wait: float = 30.0,
                 **client_options: Any) -> None:
        super().__init__(shard_map, transport=transport, fence_wait=fence_wait,
                         **client_options)
        self._clients: dict[str, tuple[str, TcpClient | HttpClient]] = {}
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> ShardedClient:
        self.connect()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def connect(self) -> None:
        """Fetch the map if need be and open a connection to every shard."""
        self._run(self._connect_flow())

    def _connect_flow(self) -> Flow[None]:
        yield from self.on_all_flow(Call("connect"))

    def close(self) -> None:
        """Close every shard's connection. Idempotent."""
        with self._lock:
            self._closed = True
            clients, self._clients = self._clients, {}
            pool, self._pool = self._pool, None
        for _, client in clients.values():
            client.close()
        if pool is not None:
            pool.shutdown(wait=False)

    # -- running flows -------------------------------------------------------------------------

    def _client(self, shard_id: str) -> TcpClient | HttpClient:
        url = self.shard_url(self._map().shard(shard_id))
        with self._lock:
            if self._closed:
                raise RuntimeError("ShardedClient is closed")
            held = self._clients.get(shard_id)
            if held is not None and held[0] == url:
                return held[1]
            client = client_for_url(url, **self._options)
            self._clients[shard_id] = (url, client)
        if held is not None:
            held[1].close()  # the shard moved
        return client

    def _call(self, shard_id: str, call: Call) -> Any:
        return getattr(self._client(shard_id), call.method)(*call.args, **call.kwargs)

    def _send(self, calls: Mapping[str, Call]) -> Outcomes:
        if len(calls) == 1:
            ((shard_id, call),) = calls.items()
            try:
                return {shard_id: self._call(shard_id, call)}
            except Exception as exc:  # noqa: BLE001  # the flow decides
                return {shard_id: exc}
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(len(self._map().shards),
                                                thread_name_prefix="beava-shard")
            pool = self._pool
        futures = {sid: pool.submit(self._call, sid, call) for sid, call in calls.items()}
        out: Outcomes = {}
        for shard_id, future in futures.items():
            try:
                out[shard_id] = future.result()
            except Exception as exc:  # noqa: BLE001  # the flow decides
                out[shard_id] = exc
        return out

    def _run(self, flow: Flow[T]) -> T:
        if self.map is None:
            self.refresh_map()
        try:
            step = next(flow)
            while True:
                reply: Any = None
                if isinstance(step, Send):
                    reply = self._send(step.calls)
                elif isinstance(step, Sleep):
                    time.sleep(step.seconds)
                elif step == REFRESH_MAP:
                    self.refresh_map()
                elif step == REFRESH_ROUTES:
                    self.routes = Routes.from_describe(self._run(self.describe_flow()))
                step = flow.send(reply)
        except StopIteration as stop:
            result: T = stop.value
            return result

    def refresh_map(self) -> ShardMap:
        """Read the shard map again: from the shards (the first that answers), else from
        the map file or URL it came from."""
        error: Exception | None = None
        if self.map is not None:
            for shard_id in self.shard_ids():
                try:
                    self.map = self.newer_map(self._call(shard_id, self.map_call()))
                    return self.map
                except Exception as exc:  # noqa: BLE001  # try the next shard
                    error = exc
        if "://" in self._source:
            with client_for_url(self._source, **self._options) as client:
                call = self.map_call(self._source)
                self.map = self.newer_map(getattr(client, call.method)(*call.args,
                                                                       **call.kwargs))
        elif self._source:
            self.map = self.newer_map(ShardMap.load(self._source).to_dict())
        elif error is not None:
            raise error
        return self._map()

    # -- requests ------------------------------------------------------------------------------

    def push(self, event: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Push one event to the owners of its tables' keys: ``{"ack_lsn": {shard: lsn},
        "idempotent_replay", "registry_version"}``."""
        return self._run(self.push_flow(event, body))

    def push_many(self, event: str, rows: Iterable[Mapping[str, Any]], *,
                  chunk_size: int = DEFAULT_CHUNK_SIZE) -> dict[str, Any]:
        """Push rows grouped by owner: ``{"acks", "ack_lsn": {shard: lsn}, "errors":
        [{"index", "error"}], "registry_version"}``."""
        return self._run(self.push_many_flow(event, list(rows), chunk_size))

    def get(self, table: str, key: Any = None, features: Sequence[str] | None = None) -> Any:
        """The row of ``key`` in ``table``, from the key's owner."""
        return self._run(self.get_flow(table, key, features))

    def batch_get(self, requests: Iterable[Any]) -> list[Any]:
        """Rows for ``(table, key[, features])`` tuples or request mappings, in order."""
        return self._run(self.batch_get_flow(list(requests)))

    def register(self, payload: Mapping[str, Any] | Sequence[Any], *, force: bool = False,
                 dry_run: bool = False) -> dict[str, Any]:
        """Register on every shard, fenced (``ShardedBase.register_flow``); the first
        shard's answer."""
        return self._run(self.register_flow(payload, force, dry_run))

    def describe(self) -> dict[str, Any]:
        """What the registry holds (every shard holds the same)."""
        return self._run(self.describe_flow())

    def ping(self) -> dict[str, Any]:
        """The first shard's answer, with every shard's under ``"shards"``."""
        replies = self._run(self.on_all_flow(Call("ping")))
        return {**replies[self.shard_ids()[0]], "shards": replies}

    def reset(self) -> dict[str, Any]:
        """Reset every shard (test mode only)."""
        replies = self._run(self.on_all_flow(Call("reset")))
        self.routes = None
        return dict(replies[self.shard_ids()[0]])

    def test_clock(self, now_ms: int | None) -> dict[str, Any]:
        """Pin every shard's clock (test mode only); see ``TcpClient.test_clock``."""
        replies = self._run(self.on_all_flow(Call("test_clock", (now_ms,))))
        return dict(replies[self.shard_ids()[0]])
