"""Server URLs: ``tcp(s)://host[:port]`` (framed TCP, ``tcps``: over TLS) and
``http(s)://host[:port][/base]``."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_TCP_HOST = "127.0.0.1"
DEFAULT_TCP_PORT = 8081
_DEFAULT_PORTS = {"tcp": DEFAULT_TCP_PORT, "tcps": DEFAULT_TCP_PORT, "http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A parsed server address. ``base_path`` (HTTP only) is prefixed to every route."""

    scheme: str
    host: str
    port: int
    base_path: str = ""

    @property
    def is_tcp(self) -> bool:
        return self.scheme in ("tcp", "tcps")

    @property
    def is_http(self) -> bool:
        return self.scheme in ("http", "https")

    @property
    def tls(self) -> bool:
        return self.scheme in ("https", "tcps")

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.base_path}"


def parse_url(url: str) -> Endpoint:
    """Parse a server URL.

    ``tcp://host[:port]``: host defaults to 127.0.0.1, port to 8081 (spec/sdk.md §8.1);
    ``tcps://`` the same over TLS.
    ``http://`` / ``https://``: port defaults to 80 / 443; a path becomes ``base_path``.
    Any other scheme raises ``ValueError("unsupported URL scheme: 'ws'")``.
    """
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, got {type(url).__name__}")
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise ValueError(f"unsupported URL scheme: {scheme!r}")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"invalid port in URL {url!r}") from None
    host = parts.hostname or ""
    tcp = scheme in ("tcp", "tcps")
    if tcp:
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ValueError(f"a {scheme}:// URL takes no path, query or fragment: {url!r}")
        host = host or DEFAULT_TCP_HOST
    elif not host:
        raise ValueError(f"missing host in URL {url!r}")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"credentials in URLs are not supported: {url!r}")
    if not tcp and (parts.query or parts.fragment):
        raise ValueError(f"a base URL takes no query or fragment: {url!r}")
    base_path = parts.path.rstrip("/") if not tcp else ""
    return Endpoint(scheme, host, _DEFAULT_PORTS[scheme] if port is None else port, base_path)


def tcp_endpoint(url: str) -> Endpoint:
    """``parse_url`` for a client that only speaks framed TCP."""
    endpoint = parse_url(url)
    if not endpoint.is_tcp:
        raise ValueError(f"not a tcp:// or tcps:// URL: {url!r}")
    return endpoint


def http_endpoint(url: str) -> Endpoint:
    """``parse_url`` for a client that only speaks HTTP."""
    endpoint = parse_url(url)
    if not endpoint.is_http:
        raise ValueError(f"not an http:// or https:// URL: {url!r}")
    return endpoint
