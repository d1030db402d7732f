"""What every client shares about its connection (spec/sdk.md §8.7): argument checks, the
closed state, the reconnect rule, connect-failure errors, and ``connect``/``close``/``with``.
The transport-specific I/O stays in each client."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Self

from .errors import BeavaError, Timeout, TransportError

DEFAULT_TIMEOUT = 30.0


def check_count(value: int, name: str) -> int:
    """``value`` if it is at least 1 (a window or pool size), else ValueError."""
    if value < 1:
        raise ValueError(f"{name} must be >= 1")
    return value


@contextmanager
def connect_errors(address: str, timeout_message: str) -> Iterator[None]:
    """Turn a failed connect to ``address`` into Timeout (code ``timeout``) or
    TransportError (code ``connect_failed``)."""
    try:
        yield
    except TimeoutError:
        raise Timeout("timeout", timeout_message) from None
    except OSError as exc:
        raise TransportError("connect_failed", f"cannot connect to {address}: {exc}") from exc


class ClientBase:
    """Timeout, reconnect rule, closed state and push_many support of one client."""

    def __init__(self, *, timeout: float, reconnect: bool) -> None:
        if not timeout or timeout <= 0:
            raise ValueError("timeout must be a positive number of seconds")
        self.timeout = float(timeout)
        self.reconnect = reconnect
        self._closed = False
        self._push_many_supported: bool | None = None

    @property
    def closed(self) -> bool:
        """True after ``close()``."""
        return self._closed

    @property
    def push_many_supported(self) -> bool | None:
        """Whether the server has the push_many extension (None until the first
        push_many)."""
        return self._push_many_supported

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("client is closed")

    def _may_retry(self, error: BeavaError, *, retried: bool, sent: bool, safe: bool) -> bool:
        """The reconnect rule: with ``reconnect=True`` a call failed by ``error`` is tried
        once more on a new connection, unless it timed out, or its request may have reached
        the server (``sent``) and is not safe to repeat."""
        return (
            self.reconnect and not retried and not isinstance(error, Timeout)
            and (safe or not sent)
        )

    def _timeout_message(self, subject: str) -> str:
        return f"{subject} timed out after {self.timeout}s"


class SyncClient(ClientBase, ABC):
    """``connect``/``close``/``with`` of a blocking client whose calls hold ``_lock``."""

    _lock: threading.Lock

    @abstractmethod
    def _ensure_connection(self) -> None:
        """Open the connection unless one is open (caller holds the lock)."""

    @abstractmethod
    def _discard(self) -> None:
        """Close and forget the connection, if any (caller holds the lock)."""

    def connect(self) -> None:
        """Open the connection now (otherwise the first call does)."""
        with self._lock:
            self._check_open()
            self._ensure_connection()

    def close(self) -> None:
        """Close the connection. Idempotent; later calls raise RuntimeError."""
        self._closed = True
        with self._lock:
            self._discard()

    def __enter__(self) -> Self:
        self.connect()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncClient(ClientBase, ABC):
    """``async with`` of an asyncio client: ``connect()`` on entry, ``close()`` on exit."""

    @abstractmethod
    async def connect(self) -> None:
        """Open a connection now (otherwise the first call does)."""

    @abstractmethod
    async def close(self) -> None:
        """Close the client. Idempotent; later calls raise RuntimeError."""

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
