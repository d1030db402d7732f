"""beava-client: wire-level clients for the beava feature server.

Framed TCP (``TcpClient``, ``AsyncTcpClient``, ``AsyncTcpPool``) and HTTP
(``HttpClient``, ``AsyncHttpClient``), pipelining, structured errors. Depends only on
msgspec; knows nothing of the server engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

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
from .tcp import Pipeline, TcpClient
from .urls import Endpoint, parse_url

__version__ = "0.1.0"

_T = TypeVar("_T")
_H = TypeVar("_H")

__all__ = [
    "CT_JSON",
    "CT_MSGPACK",
    "AsyncHttpClient",
    "AsyncPipeline",
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
    "ServerError",
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


def _client_for(url: str, tcp_class: Callable[..., _T], http_class: Callable[..., _H],
                kwargs: dict[str, Any]) -> _T | _H:
    endpoint = parse_url(url)
    if endpoint.is_tcp:
        return tcp_class(endpoint.host, endpoint.port, **kwargs)
    return http_class(
        endpoint.host, endpoint.port, base_path=endpoint.base_path, tls=endpoint.tls, **kwargs
    )


def client_for_url(url: str, **kwargs: Any) -> TcpClient | HttpClient:
    """A synchronous client for ``tcp://…`` or ``http(s)://…`` (no I/O until first use)."""
    return _client_for(url, TcpClient, HttpClient, kwargs)


def async_client_for_url(url: str, **kwargs: Any) -> AsyncTcpClient | AsyncHttpClient:
    """An asyncio client for ``tcp://…`` or ``http(s)://…`` (no I/O until first use)."""
    return _client_for(url, AsyncTcpClient, AsyncHttpClient, kwargs)
