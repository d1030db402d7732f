"""Thread-safe pool of synchronous clients (TCP or HTTP): each call checks one client out
exclusively, so threads never share a connection (spec/sdk.md §8.7)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

from .http import HttpClient
from .lifecycle import check_count
from .messages import scan_rows
from .results import PushResult
from .tcp import TcpClient

C = TypeVar("C", TcpClient, HttpClient)


class ClientPool(Generic[C]):
    """Up to ``size`` clients made by ``factory`` on demand; idle ones are reused (most
    recently used first). ``with pool.client() as c:`` checks one out for several calls."""

    def __init__(self, factory: Callable[[], C], size: int) -> None:
        check_count(size, "pool size")
        self._factory: Callable[[], C] = factory
        self.size = size
        self._idle: list[C] = []
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._closed = False

    @contextmanager
    def client(self) -> Iterator[C]:
        """Check out a client (waits while ``size`` are busy)."""
        if self._closed:
            raise RuntimeError("pool is closed")
        self._slots.acquire()
        try:
            with self._lock:
                client = self._idle.pop() if self._idle else None
            if client is None:
                client = self._factory()
            try:
                yield client
            finally:
                with self._lock:
                    if self._closed:
                        client.close()
                    else:
                        self._idle.append(client)
        finally:
            self._slots.release()

    def close(self) -> None:
        """Close every client (busy ones when they are returned). Idempotent."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for client in idle:
            client.close()

    def __enter__(self) -> ClientPool[C]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def ping(self) -> dict[str, Any]:
        with self.client() as c:
            return c.ping()

    def register(
        self, payload: Mapping[str, Any] | Sequence[Any], *, force: bool = False,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        with self.client() as c:
            return c.register(payload, force=force, dry_run=dry_run)

    def reset(self) -> dict[str, Any]:
        with self.client() as c:
            return c.reset()

    def test_clock(self, now_ms: int | None) -> dict[str, Any]:
        with self.client() as c:
            return c.test_clock(now_ms)

    def get(self, table: str, key: Any = None, features: Sequence[str] | None = None) -> Any:
        with self.client() as c:
            return c.get(table, key, features)

    def batch_get(self, requests: Iterable[Any]) -> list[Any]:
        with self.client() as c:
            return c.batch_get(requests)

    def describe(self) -> dict[str, Any]:
        with self.client() as c:
            return c.describe()

    def scan(self, table: str, cursor: str | None = None, *, limit: int | None = None,
             until: str | None = None, splits: int | None = None,
             decode_as: Any = Any) -> dict[str, Any]:
        with self.client() as c:
            return c.scan(table, cursor, limit=limit, until=until, splits=splits,
                          decode_as=decode_as)

    def scan_rows(self, table: str, *, limit: int | None = None, cursor: str | None = None,
                  until: str | None = None) -> Iterator[dict[str, Any]]:
        """Every row of ``table``; each page borrows a client of the pool."""
        return scan_rows(lambda c: self.scan(table, c, limit=limit, until=until), cursor)

    def push(self, event: str, body: Mapping[str, Any]) -> dict[str, Any]:
        with self.client() as c:
            return c.push(event, body)

    def push_many(
        self, event: str, rows: Iterable[Mapping[str, Any]], *, chunk_size: int = 1000
    ) -> PushResult:
        with self.client() as c:
            return c.push_many(event, rows, chunk_size=chunk_size)
