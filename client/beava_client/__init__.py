"""beava-client: wire-level clients for the beava feature server.

Framed TCP (``TcpClient``, ``AsyncTcpClient``, ``AsyncTcpPool``) and HTTP
(``HttpClient``, ``AsyncHttpClient``), pipelining, structured errors; ``ShardedClient``
and ``AsyncShardedClient`` for a sharded server (one wire client per shard). Depends only on
msgspec; knows nothing of the server engine.

The names are loaded lazily, on first access: the server imports ``beava_client.opcodes``
(its opcode numbers) and must not pay for asyncio and the clients at start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, TypeVar

__version__ = "0.1.0"

__all__ = [
    "CT_JSON",
    "CT_MSGPACK",
    "AsyncHttpClient",
    "AsyncPipeline",
    "AsyncShardedClient",
    "AsyncTcpClient",
    "AsyncTcpPool",
    "BeavaError",
    "ClientPool",
    "ConnectionClosed",
    "Endpoint",
    "EnvelopeEncoder",
    "FrameDecoder",
    "HttpClient",
    "HttpResponse",
    "Pipeline",
    "ProtocolError",
    "RoutingError",
    "ServerError",
    "ShardedClient",
    "TcpClient",
    "Timeout",
    "TransportError",
    "__version__",
    "async_client_for_url",
    "client_for_url",
    "encode_frame",
    "encode_key",
    "encode_push_many_chunks",
    "error_from_reply",
    "parse_url",
]

# public name -> submodule that defines it
_MODULES: dict[str, str] = {
    "AsyncPipeline": "aio",
    "AsyncTcpClient": "aio",
    "AsyncTcpPool": "aio",
    "BeavaError": "errors",
    "ConnectionClosed": "errors",
    "ProtocolError": "errors",
    "ServerError": "errors",
    "Timeout": "errors",
    "TransportError": "errors",
    "error_from_reply": "errors",
    "FrameDecoder": "frames",
    "encode_frame": "frames",
    "AsyncHttpClient": "http",
    "HttpClient": "http",
    "HttpResponse": "http",
    "encode_key": "keys",
    "EnvelopeEncoder": "messages",
    "encode_push_many_chunks": "messages",
    "CT_JSON": "opcodes",
    "CT_MSGPACK": "opcodes",
    "ClientPool": "pool",
    "Pipeline": "tcp",
    "RoutingError": "shard_routes",
    "ShardedClient": "sharded",
    "AsyncShardedClient": "sharded_aio",
    "TcpClient": "tcp",
    "Endpoint": "urls",
    "parse_url": "urls",
}

if TYPE_CHECKING:
    from collections.abc import Callable

    from .aio import AsyncPipeline, AsyncTcpClient, AsyncTcpPool
    from .errors import (
        BeavaError,
        ConnectionClosed,
        ProtocolError,
        ServerError,
        Timeout,
        TransportError,
        error_from_reply,
    )
    from .frames import FrameDecoder, encode_frame
    from .http import AsyncHttpClient, HttpClient, HttpResponse
    from .keys import encode_key
    from .messages import EnvelopeEncoder, encode_push_many_chunks
    from .opcodes import CT_JSON, CT_MSGPACK
    from .pool import ClientPool
    from .shard_routes import RoutingError
    from .sharded import ShardedClient
    from .sharded_aio import AsyncShardedClient
    from .tcp import Pipeline, TcpClient
    from .urls import Endpoint, parse_url

_T = TypeVar("_T")
_H = TypeVar("_H")


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULES})


def _client_for(url: str, tcp_class: Callable[..., _T], http_class: Callable[..., _H],
                kwargs: dict[str, Any]) -> _T | _H:
    from .urls import parse_url

    endpoint = parse_url(url)
    kwargs = {"tls": endpoint.tls, **kwargs}
    if endpoint.is_tcp:
        return tcp_class(endpoint.host, endpoint.port, **kwargs)
    return http_class(endpoint.host, endpoint.port, base_path=endpoint.base_path, **kwargs)


def client_for_url(url: str, **kwargs: Any) -> TcpClient | HttpClient:
    """A synchronous client for ``tcp(s)://…`` or ``http(s)://…`` (no I/O until first use);
    ``token=``, ``ca=`` and the other keyword arguments go to the client."""
    from .http import HttpClient
    from .tcp import TcpClient

    return _client_for(url, TcpClient, HttpClient, kwargs)


def async_client_for_url(url: str, **kwargs: Any) -> AsyncTcpClient | AsyncHttpClient:
    """An asyncio client for ``tcp(s)://…`` or ``http(s)://…`` (no I/O until first use)."""
    from .aio import AsyncTcpClient
    from .http import AsyncHttpClient

    return _client_for(url, AsyncTcpClient, AsyncHttpClient, kwargs)
