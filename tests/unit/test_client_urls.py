"""beava_client.urls and the URL factories."""

from __future__ import annotations

import pytest

from beava_client import (
    AsyncHttpClient,
    AsyncTcpClient,
    HttpClient,
    TcpClient,
    async_client_for_url,
    client_for_url,
)
from beava_client.urls import Endpoint, parse_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("tcp://10.0.0.5:9000", Endpoint("tcp", "10.0.0.5", 9000)),
        ("tcp://db.local", Endpoint("tcp", "db.local", 8081)),
        ("tcp://:7000", Endpoint("tcp", "127.0.0.1", 7000)),
        ("tcp://", Endpoint("tcp", "127.0.0.1", 8081)),
        ("tcp://[::1]:8081", Endpoint("tcp", "::1", 8081)),
        ("http://127.0.0.1:8080", Endpoint("http", "127.0.0.1", 8080)),
        ("http://h", Endpoint("http", "h", 80)),
        ("https://h", Endpoint("https", "h", 443)),
        ("http://h:1/beava/", Endpoint("http", "h", 1, "/beava")),
        ("HTTP://H:2", Endpoint("http", "h", 2)),
    ],
)
def test_parse(url: str, expected: Endpoint) -> None:
    assert parse_url(url) == expected


def test_unsupported_scheme_message() -> None:
    with pytest.raises(ValueError) as info:
        parse_url("ws://h:1")
    assert str(info.value) == "unsupported URL scheme: 'ws'"


@pytest.mark.parametrize(
    "url", ["tcp://h:1/path", "http://", "tcp://h:99999", "http://u:p@h", "http://h/?q=1"]
)
def test_rejected(url: str) -> None:
    with pytest.raises(ValueError):
        parse_url(url)


def test_endpoint_properties() -> None:
    e = parse_url("https://[::1]:8443/x")
    assert e.tls and e.is_http and not e.is_tcp
    assert str(e) == "https://[::1]:8443/x"


def test_factories_pick_transport_without_io() -> None:
    tcp = client_for_url("tcp://127.0.0.1:1", timeout=2.0)
    assert isinstance(tcp, TcpClient)
    assert (tcp.host, tcp.port, tcp.timeout, tcp.connected) == ("127.0.0.1", 1, 2.0, False)
    http = client_for_url("http://127.0.0.1:1/base")
    assert isinstance(http, HttpClient)
    assert http.base_path == "/base"
    assert isinstance(async_client_for_url("tcp://x"), AsyncTcpClient)
    assert isinstance(async_client_for_url("https://x"), AsyncHttpClient)
    with pytest.raises(ValueError, match="not a tcp"):
        TcpClient.from_url("http://x")
