"""``bv.App`` and ``bv.AsyncApp`` (spec/sdk.md §8-§9): the DSL-aware face over the wire
clients of ``beava_client``, plus embed mode (spawning a private local server).

The App adds what the wire clients deliberately leave out: compiling descriptors, checking
push bodies (finite floats), the canonical key encoding, and mapping server errors to
``RegistrationError``. Transport failures propagate as ``bv.TransportError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import re
import threading
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, NoReturn, Protocol

from beava.dsl.compiler import compile_register_payload
from beava.errors import FeatureNotFoundError, PushError, ReadError, RegistrationError
from beava.launcher import EmbeddedServer
from beava_client import (
    AsyncHttpClient,
    AsyncShardedClient,
    AsyncTcpClient,
    AsyncTcpPool,
    ClientPool,
    HttpClient,
    ServerError,
    ShardedClient,
    TcpClient,
    encode_key,
    parse_url,
)
from beava_client.messages import PUSH_MANY_MAX_BODIES
from beava_client.urls import Endpoint

__all__ = ["App", "AsyncApp"]

_EMBED_REQUIRES_WITH = (
    "Embed mode requires use as a context manager: `with bv.App() as app:` (or pass a "
    "url such as 'tcp://127.0.0.1:8081' to use a running server)"
)
_ASYNC_EMBED_REQUIRES_WITH = (
    "Embed mode requires use as a context manager: `async with bv.AsyncApp() as app:` (or "
    "pass a url such as 'tcp://127.0.0.1:8081' to use a running server)"
)


# -- argument checks and error mapping -------------------------------------------------------


def _check_options(timeout: float, pool_size: int, max_in_flight: int | None) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds, got {type(timeout).__name__}")
    if not timeout > 0:
        raise ValueError(f"timeout must be positive, got {timeout!r}")
    if isinstance(pool_size, bool) or not isinstance(pool_size, int):
        raise TypeError(f"pool_size must be an int, got {type(pool_size).__name__}")
    if pool_size < 1:
        raise ValueError(f"pool_size must be >= 1, got {pool_size}")
    if max_in_flight is not None:
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int):
            raise TypeError("max_in_flight must be an int")
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
    return float(timeout)


ShardMapSource = str | os.PathLike[str]


def _endpoint(url: str | None, shard_map: ShardMapSource | None, test_mode: bool,
              pool_size: int) -> Endpoint | None:
    if shard_map is not None:
        if url is not None:
            raise ValueError("pass either url (one server) or shard_map (a sharded server), "
                             "not both")
        if pool_size != 1:
            raise ValueError("pool_size applies to one server; with shard_map each shard "
                             "has one connection")
        if not isinstance(shard_map, (str, os.PathLike)):
            raise TypeError(f"shard_map must be a map file's path or a shard's URL, got "
                            f"{type(shard_map).__name__}")
    if url is None and shard_map is None:
        return None
    endpoint = parse_url(url) if url is not None else None  # ValueError for a bad scheme
    if test_mode:
        warnings.warn(
            "test_mode only applies to embed mode (no url); it has no effect on a running "
            "server",
            UserWarning,
            stacklevel=4,  # _endpoint <- _AppBase.__init__ <- App/AsyncApp.__init__ <- caller
        )
    return endpoint


def _check_event_name(event_name: object) -> None:
    if not isinstance(event_name, str):
        raise TypeError(f"event name must be a str, got {type(event_name).__name__}")


_SCALARS = frozenset((str, int, bool, type(None)))


def _check_row(fields: object) -> dict[str, Any]:
    """A push body as a dict: str keys, JSON values, finite floats (the JSON encoder would
    turn NaN and infinities into ``null``). Runs once per pushed row: plain scalars take
    one set lookup, everything else the slow path."""
    if not isinstance(fields, Mapping):
        raise TypeError(f"event fields must be a mapping, got {type(fields).__name__}")
    for key, value in fields.items():
        if type(key) is not str and not isinstance(key, str):
            raise TypeError(f"event field names must be str, got {key!r}")
        kind = type(value)
        if kind in _SCALARS or (kind is float and value - value == 0.0):
            continue  # x - x is NaN for NaN and +-inf
        _check_nested(key, value)
    return fields if type(fields) is dict else dict(fields)


def _check_nested(key: str, value: Any) -> None:
    if isinstance(value, float):
        if value - value != 0.0:
            raise ValueError(f"field {key!r}: {value!r} is not a finite number")
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_nested(key, item)
    elif isinstance(value, Mapping):
        for name, item in value.items():
            if not isinstance(name, str):
                raise TypeError(f"field {key!r}: nested keys must be str, got {name!r}")
            _check_nested(key, item)
    elif not isinstance(value, (str, int)) and value is not None:
        raise TypeError(
            f"field {key!r}: {type(value).__name__} values are not JSON-encodable"
        )


def _check_chunk_size(chunk_size: object) -> int:
    if (isinstance(chunk_size, bool) or not isinstance(chunk_size, int)
            or not 1 <= chunk_size <= PUSH_MANY_MAX_BODIES):
        raise ValueError(f"chunk_size must be an int in [1, {PUSH_MANY_MAX_BODIES}], got "
                         f"{chunk_size!r}")
    return chunk_size


def _features(features: Iterable[str] | None) -> list[str] | None:
    if features is None:
        return None
    if isinstance(features, str):
        raise TypeError("features must be a list of feature names, not a str")
    names = list(features)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"feature names must be str, got {name!r}")
    return names


def _get_args(table: object, key: Any, features: Iterable[str] | None) -> tuple[Any, ...]:
    if not isinstance(table, str):
        raise TypeError(f"table name must be a str, got {type(table).__name__}")
    return table, encode_key(key), _features(features)


def _batch_entries(requests: Iterable[Any]) -> list[tuple[Any, ...]]:
    entries: list[tuple[Any, ...]] = []
    for entry in requests:
        if not isinstance(entry, tuple) or len(entry) not in (2, 3):
            raise TypeError(
                f"batch_get entries must be (table, key) or (table, key, features) tuples, "
                f"got {entry!r}"
            )
        table, key, features = entry if len(entry) == 3 else (*entry, None)
        entries.append(_get_args(table, key, features))
    return entries


# Codes of a push refused for its data, and of a read naming what is not registered.
_PUSH_CODES = frozenset({
    "invalid_event", "unknown_field_v0", "unknown_field_event_time_v0", "event_not_found",
    "control_character_in_string", "invalid_push_many", "batch_too_large",
})
_READ_CODES = frozenset({"unknown_table", "key_parse_failure", "feature_not_found",
                         "key_not_found"})


def _error_class(err: ServerError) -> type[RegistrationError]:
    if err.code in _PUSH_CODES:
        return PushError
    if err.error.get("detail") == "feature_not_found":
        return FeatureNotFoundError
    if err.code in _READ_CODES:
        return ReadError
    return RegistrationError


_NODE_PATH = re.compile(r"nodes\[(\d+)\]")


def _named_path(path: str, nodes: Sequence[Any]) -> str:
    """A register error's ``nodes[i]...`` path with the descriptor's name for ``nodes[i]``
    (``Bad.ops[0].agg.s.params.field``), the form of the SDK's own checks; any other
    path as it is. The wire path stays in ``details``."""
    found = _NODE_PATH.match(path)
    if found is None:
        return path
    index = int(found.group(1))
    node = nodes[index] if index < len(nodes) else None
    name = node.get("name") if isinstance(node, Mapping) else None
    return name + path[found.end():] if isinstance(name, str) else path


def _raise_server_error(err: ServerError, nodes: Sequence[Any] = ()) -> NoReturn:
    """Re-raise a server-reported error as ``RegistrationError`` (sdk.md §8.6), or as the
    subclass saying what kind of mistake it is (``PushError``, ``ReadError``). ``nodes``:
    the registered payload's, to name the descriptor a register error's path points at."""
    details = dict(err.body)
    if err.acked_before is not None:
        details["acked_before"] = err.acked_before
    message = err.reason or err.message
    hint = err.error.get("hint")
    if isinstance(hint, str) and hint and hint not in message:
        message = f"{message} ({hint})" if message else hint
    raise _error_class(err)(
        code=err.code, path=_named_path(err.path, nodes), message=message, details=details
    ) from err


class _ServerErrors:
    """``with _SERVER_ERRORS:`` around a request (``with _ServerErrors(nodes):`` around a
    register): a ``ServerError`` leaves it as the SDK's error (``_raise_server_error``),
    anything else unchanged. The one mapping of both ``App`` and ``AsyncApp`` (a plain
    ``with`` holds across an ``await``)."""

    def __init__(self, nodes: Sequence[Any] = ()) -> None:
        self._nodes = nodes

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None,
                 tb: TracebackType | None) -> None:
        if isinstance(err, ServerError):
            _raise_server_error(err, self._nodes)


_SERVER_ERRORS = _ServerErrors()


# -- what App and AsyncApp share ---------------------------------------------------------------


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_ONE_MS = datetime.timedelta(milliseconds=1)


def _epoch_ms(when: int | datetime.datetime) -> int:
    """Epoch milliseconds of an int (as is) or a datetime (a naive one is UTC)."""
    if isinstance(when, datetime.datetime):
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.UTC)
        return (when - _EPOCH) // _ONE_MS
    if isinstance(when, bool) or not isinstance(when, int):
        raise TypeError(f"expected epoch milliseconds (int) or a datetime, got {when!r}")
    return when


class _AppBase:
    """The checked options and embed-mode state of ``App`` and ``AsyncApp``.

    ``_closed`` stays True until the subclass has finished constructing (``__del__`` may
    run on a failed init); the subclass sets it to False last.
    """

    _repr_name = ""

    def __init__(
        self,
        url: str | None,
        *,
        timeout: float,
        test_mode: bool,
        reconnect: bool,
        pool_size: int,
        max_in_flight: int | None = None,
        token: str | None = None,
        ca: str | None = None,
        shard_map: ShardMapSource | None = None,
    ) -> None:
        self._closed = True
        self._token = token
        self._ca = ca
        self._timeout = _check_options(timeout, pool_size, max_in_flight)
        self._endpoint = _endpoint(url, shard_map, test_mode, pool_size)
        self._shard_map = shard_map
        self._test_mode = test_mode
        self._reconnect = reconnect
        self._pool_size = pool_size
        self._server: EmbeddedServer | None = None
        self._entered = False
        self._pinned_ms: int | None = None  # the test clock this App last set

    def _client_kwargs(self, endpoint: Endpoint | None) -> dict[str, Any]:
        """What every client of this App is made with (``token=None``: ``$BEAVA_TOKEN``);
        a sharded client takes the TLS of its map's URL or transport."""
        kwargs = {"timeout": self._timeout, "reconnect": self._reconnect, "token": self._token,
                  "ca": self._ca}
        return kwargs if endpoint is None else {**kwargs, "tls": endpoint.tls}

    def _pin(self, when: int | datetime.datetime | None) -> int | None:
        """The ``now_ms`` to send for ``set_time(when)``, remembered for ``advance``."""
        self._pinned_ms = None if when is None else _epoch_ms(when)
        return self._pinned_ms

    def _advanced(self, days: float, hours: float, minutes: float, seconds: float,
                  milliseconds: float) -> int:
        """The ``now_ms`` for ``advance(...)``: from the time last set, else from now."""
        step = datetime.timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds,
                                  milliseconds=milliseconds) // _ONE_MS
        base = self._pinned_ms if self._pinned_ms is not None else time.time_ns() // 1_000_000
        self._pinned_ms = base + step
        return self._pinned_ms

    def __repr__(self) -> str:
        where = "embed" if self._endpoint is None else str(self._endpoint)
        if self._shard_map is not None:
            where = f"shard_map={os.fspath(self._shard_map)}"
        return f"<{self._repr_name} {where}{' closed' if self._closed else ''}>"


# -- the synchronous App ----------------------------------------------------------------------


class _Backend(Protocol):
    def ping(self) -> dict[str, Any]: ...

    def describe(self) -> dict[str, Any]: ...

    def register(
        self, payload: Mapping[str, Any] | Sequence[Any], *, force: bool = ...,
        dry_run: bool = ...,
    ) -> dict[str, Any]: ...

    def reset(self) -> dict[str, Any]: ...

    def test_clock(self, now_ms: int | None) -> dict[str, Any]: ...

    def get(self, table: str, key: Any = ..., features: Sequence[str] | None = ...) -> Any: ...

    def batch_get(self, requests: Iterable[Any]) -> list[Any]: ...

    def push(self, event: str, body: Mapping[str, Any]) -> dict[str, Any]: ...

    def push_many(
        self, event: str, rows: Iterable[Mapping[str, Any]], *, chunk_size: int = ...
    ) -> dict[str, Any]: ...

    def close(self) -> None: ...


class App(_AppBase):
    """A client of one beava server, or of a sharded one.

    ``url``: ``tcp://host[:port]`` (framed TCP), ``http(s)://host[:port]`` (HTTP/JSON),
    ``tcps://`` (framed TCP over TLS), or ``None`` for embed mode (a private local server
    started on ``with`` and stopped on close). ``shard_map`` instead of ``url``: a shard
    map file, or any shard's URL, for a sharded server (``beava_client.ShardedClient``;
    docs/sharding.md). The constructor does no I/O. Thread-safe; ``pool_size`` connections
    at most. ``token``: the server's access token (default ``$BEAVA_TOKEN``); ``ca``: PEM
    file to verify a TLS server with (default ``$BEAVA_CA``).
    """

    _repr_name = "bv.App"

    def __init__(
        self,
        url: str | None = None,
        *,
        timeout: float = 30.0,
        test_mode: bool = False,
        reconnect: bool = False,
        pool_size: int = 1,
        token: str | None = None,
        ca: str | None = None,
        shard_map: ShardMapSource | None = None,
    ) -> None:
        super().__init__(url, timeout=timeout, test_mode=test_mode, reconnect=reconnect,
                         pool_size=pool_size, token=token, ca=ca, shard_map=shard_map)
        self._backend: _Backend | None = None
        self._lock = threading.Lock()
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> App:
        with self._lock:
            if self._closed:
                raise RuntimeError("App is closed")
            self._entered = True
        try:
            backend = self._client()
            if isinstance(backend, (TcpClient, HttpClient, ShardedClient)):
                backend.connect()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def close(self) -> None:
        """Close the connections (embed mode: also stop the server). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            backend, self._backend = self._backend, None
            server, self._server = self._server, None
        try:
            if backend is not None:
                backend.close()
        finally:
            if server is not None:
                server.stop()

    def _client(self) -> _Backend:
        backend = self._backend
        if backend is not None:
            return backend
        with self._lock:
            if self._closed:
                raise RuntimeError("App is closed")
            if self._backend is None:
                self._backend = self._open()
            return self._backend

    def _open(self) -> _Backend:
        if self._shard_map is not None:
            return ShardedClient(self._shard_map, **self._client_kwargs(None))
        endpoint = self._endpoint
        if endpoint is None:
            if not self._entered:
                raise RuntimeError(_EMBED_REQUIRES_WITH)
            server = EmbeddedServer(test_mode=self._test_mode)
            server.start()
            self._server = server
            endpoint = parse_url(server.tcp_url)
        kwargs = self._client_kwargs(endpoint)
        if endpoint.is_tcp:
            host, port = endpoint.host, endpoint.port
            if self._pool_size == 1:
                return TcpClient(host, port, **kwargs)
            return ClientPool(lambda: TcpClient(host, port, **kwargs), self._pool_size)
        http_kwargs = {"base_path": endpoint.base_path, **kwargs}
        if self._pool_size == 1:
            return HttpClient(endpoint.host, endpoint.port, **http_kwargs)
        return ClientPool(
            lambda: HttpClient(endpoint.host, endpoint.port, **http_kwargs), self._pool_size
        )

    # -- requests ----------------------------------------------------------------------------

    def register(
        self, *descriptors: Any, force: bool = False, dry_run: bool = False
    ) -> dict[str, Any]:
        """Register the pipeline (the whole desired registry); returns the server's answer."""
        payload = compile_register_payload(*descriptors, force=force, dry_run=dry_run)
        with _ServerErrors(payload["nodes"]):
            return self._client().register(payload)

    def push(self, event_name: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        """Push one event: ``{"ack_lsn", "idempotent_replay", "registry_version"}``."""
        _check_event_name(event_name)
        body = _check_row(fields)
        with _SERVER_ERRORS:
            return self._client().push(event_name, body)

    def push_many(
        self, event_name: str, rows: Iterable[Mapping[str, Any]], *, chunk_size: int = 1000
    ) -> dict[str, Any]:
        """Push rows in batches: ``{"acks", "ack_lsn", "errors": [{"index", "error"}],
        "registry_version"}``; per-row errors are returned, not raised."""
        _check_event_name(event_name)
        size = _check_chunk_size(chunk_size)
        bodies = [_check_row(row) for row in rows]
        with _SERVER_ERRORS:
            return self._client().push_many(event_name, bodies, chunk_size=size)

    def get(
        self, table: str, key: Any = None, features: Sequence[str] | None = None
    ) -> dict[str, Any]:
        """The feature row of ``key`` (``None``: the global row); ``{}`` when unknown."""
        args = _get_args(table, key, features)
        with _SERVER_ERRORS:
            row: dict[str, Any] = self._client().get(*args)
        return row

    def batch_get(self, requests: Iterable[tuple[Any, ...]]) -> list[dict[str, Any]]:
        """Rows for ``(table, key)`` / ``(table, key, features)`` tuples, in order;
        per-entry errors come back inline as ``{"error": {...}}``."""
        entries = _batch_entries(requests)
        with _SERVER_ERRORS:
            return self._client().batch_get(entries)

    def ping(self) -> dict[str, Any]:
        """Liveness and ``registry_version``."""
        with _SERVER_ERRORS:
            return self._client().ping()

    def describe(self) -> dict[str, Any]:
        """What the server's registry holds, as its admin ``/registry`` lists it:
        ``{"version", "node_count", "nodes"}``; events with their fields, tables with
        their keys and features (op, params, window)."""
        with _SERVER_ERRORS:
            return self._client().describe()

    def reset(self) -> None:
        """Drop every registered descriptor and all state (servers in test mode only).
        The test clock returns to the wall clock too."""
        with _SERVER_ERRORS:
            self._client().reset()
        self._pinned_ms = None

    def set_time(self, when: int | datetime.datetime | None) -> None:
        """Pin the server's clock (test mode only): pushes are applied at ``when`` and reads
        are answered as of ``when`` (epoch milliseconds, or a datetime; a naive one is UTC).
        ``None`` returns to the wall clock. So windowed features can be tested exactly."""
        with _SERVER_ERRORS:
            self._client().test_clock(self._pin(when))

    def advance(self, *, days: float = 0, hours: float = 0, minutes: float = 0,
                seconds: float = 0, milliseconds: float = 0) -> None:
        """Move the pinned clock forward (from the time last set, else from now)."""
        with _SERVER_ERRORS:
            self._client().test_clock(
                self._advanced(days, hours, minutes, seconds, milliseconds))


# -- the asyncio App ----------------------------------------------------------------------------


class _AsyncBackend(Protocol):
    async def ping(self) -> dict[str, Any]: ...

    async def describe(self) -> dict[str, Any]: ...

    async def register(
        self, payload: Mapping[str, Any] | Sequence[Any], *, force: bool = ...,
        dry_run: bool = ...,
    ) -> dict[str, Any]: ...

    async def reset(self) -> dict[str, Any]: ...

    async def test_clock(self, now_ms: int | None) -> dict[str, Any]: ...

    async def get(
        self, table: str, key: Any = ..., features: Sequence[str] | None = ...
    ) -> Any: ...

    async def batch_get(self, requests: Iterable[Any]) -> list[Any]: ...

    async def push(self, event: str, body: Mapping[str, Any]) -> dict[str, Any]: ...

    async def push_many(
        self, event: str, rows: Iterable[Mapping[str, Any]], *, chunk_size: int = ...
    ) -> dict[str, Any]: ...

    async def connect(self) -> None: ...

    async def close(self) -> None: ...


class AsyncApp(_AppBase):
    """The asyncio counterpart of ``App``: same arguments (``shard_map`` too: then
    ``beava_client.AsyncShardedClient``), results and errors, every method a coroutine.
    Concurrent calls share pipelined TCP connections (at most ``max_in_flight``
    outstanding each; ``pool_size`` connections round-robin). Embed mode requires
    ``async with``. Belongs to the event loop it is first used on."""

    _repr_name = "bv.AsyncApp"

    def __init__(
        self,
        url: str | None = None,
        *,
        timeout: float = 30.0,
        test_mode: bool = False,
        reconnect: bool = False,
        pool_size: int = 1,
        max_in_flight: int = 256,
        token: str | None = None,
        ca: str | None = None,
        shard_map: ShardMapSource | None = None,
    ) -> None:
        super().__init__(url, timeout=timeout, test_mode=test_mode, reconnect=reconnect,
                         pool_size=pool_size, max_in_flight=max_in_flight, token=token, ca=ca,
                         shard_map=shard_map)
        self._max_in_flight = max_in_flight
        self._backend: _AsyncBackend | None = None
        self._closed = False

    async def __aenter__(self) -> AsyncApp:
        if self._closed:
            raise RuntimeError("App is closed")
        self._entered = True
        try:
            if self._endpoint is None and self._shard_map is None and self._server is None:
                server = EmbeddedServer(test_mode=self._test_mode)
                self._server = server
                await asyncio.to_thread(server.start)
            await self._client().connect()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __del__(self) -> None:
        server = getattr(self, "_server", None)
        if server is not None:
            with contextlib.suppress(Exception):
                server.stop()

    async def close(self) -> None:
        """Close the connections (embed mode: also stop the server). Idempotent."""
        if self._closed:
            return
        self._closed = True
        backend, self._backend = self._backend, None
        server, self._server = self._server, None
        try:
            if backend is not None:
                await backend.close()
        finally:
            if server is not None:
                await asyncio.to_thread(server.stop)

    def _client(self) -> _AsyncBackend:
        backend = self._backend
        if backend is not None:
            return backend
        if self._closed:
            raise RuntimeError("App is closed")
        if self._shard_map is not None:
            options = self._client_kwargs(None)
            source = os.fspath(self._shard_map)
            if "://" not in source or parse_url(source).is_tcp:  # HTTP has no window
                options["max_in_flight"] = self._max_in_flight
            sharded = AsyncShardedClient(self._shard_map, **options)
            self._backend = sharded
            return sharded
        endpoint = self._endpoint
        if endpoint is None:
            if not self._entered or self._server is None:
                raise RuntimeError(_ASYNC_EMBED_REQUIRES_WITH)
            endpoint = parse_url(self._server.tcp_url)
        kwargs = self._client_kwargs(endpoint)
        fresh: _AsyncBackend
        if endpoint.is_tcp:
            kwargs["max_in_flight"] = self._max_in_flight
            if self._pool_size == 1:
                fresh = AsyncTcpClient(endpoint.host, endpoint.port, **kwargs)
            else:
                fresh = AsyncTcpPool(endpoint.host, endpoint.port, size=self._pool_size, **kwargs)
        else:
            fresh = AsyncHttpClient(
                endpoint.host, endpoint.port, base_path=endpoint.base_path,
                pool_size=self._pool_size, **kwargs,
            )
        self._backend = fresh
        return fresh

    async def register(
        self, *descriptors: Any, force: bool = False, dry_run: bool = False
    ) -> dict[str, Any]:
        """Register the pipeline; see ``App.register``."""
        payload = compile_register_payload(*descriptors, force=force, dry_run=dry_run)
        with _ServerErrors(payload["nodes"]):
            return await self._client().register(payload)

    async def push(self, event_name: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        """Push one event; see ``App.push``."""
        _check_event_name(event_name)
        body = _check_row(fields)
        with _SERVER_ERRORS:
            return await self._client().push(event_name, body)

    async def push_many(
        self, event_name: str, rows: Iterable[Mapping[str, Any]], *, chunk_size: int = 1000
    ) -> dict[str, Any]:
        """Push rows in pipelined batches; see ``App.push_many``."""
        _check_event_name(event_name)
        size = _check_chunk_size(chunk_size)
        bodies = [_check_row(row) for row in rows]
        with _SERVER_ERRORS:
            return await self._client().push_many(event_name, bodies, chunk_size=size)

    async def get(
        self, table: str, key: Any = None, features: Sequence[str] | None = None
    ) -> dict[str, Any]:
        """The feature row of ``key``; see ``App.get``."""
        args = _get_args(table, key, features)
        with _SERVER_ERRORS:
            row: dict[str, Any] = await self._client().get(*args)
        return row

    async def batch_get(self, requests: Iterable[tuple[Any, ...]]) -> list[dict[str, Any]]:
        """Rows for several reads, in order; see ``App.batch_get``."""
        entries = _batch_entries(requests)
        with _SERVER_ERRORS:
            return await self._client().batch_get(entries)

    async def ping(self) -> dict[str, Any]:
        """Liveness and ``registry_version``."""
        with _SERVER_ERRORS:
            return await self._client().ping()

    async def describe(self) -> dict[str, Any]:
        """What the server's registry holds (see ``App.describe``)."""
        with _SERVER_ERRORS:
            return await self._client().describe()

    async def reset(self) -> None:
        """Drop every registered descriptor and all state (test mode only); the test clock
        returns to the wall clock too."""
        with _SERVER_ERRORS:
            await self._client().reset()
        self._pinned_ms = None

    async def set_time(self, when: int | datetime.datetime | None) -> None:
        """``App.set_time``: pin the server's clock (test mode only)."""
        with _SERVER_ERRORS:
            await self._client().test_clock(self._pin(when))

    async def advance(self, *, days: float = 0, hours: float = 0, minutes: float = 0,
                      seconds: float = 0, milliseconds: float = 0) -> None:
        """``App.advance``: move the pinned clock forward."""
        with _SERVER_ERRORS:
            await self._client().test_clock(
                self._advanced(days, hours, minutes, seconds, milliseconds))
