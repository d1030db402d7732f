"""beava_client's package surface loads lazily: ``beava_client.opcodes`` (what the server
imports) brings in nothing else of the client, and every public name still resolves."""

from __future__ import annotations

import json
import subprocess
import sys

import beava_client

CLIENT_MODULES = ("aio", "errors", "frames", "http", "keys", "messages", "pool", "tcp", "urls")


def _modules_after(code: str) -> list[str]:
    """The beava_client modules and whether asyncio is loaded after running ``code`` in a
    fresh interpreter."""
    probe = (f"{code}\nimport sys, json\n"
             "print(json.dumps(sorted(m for m in sys.modules "
             "if m.startswith('beava_client') or m == 'asyncio')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    modules: list[str] = json.loads(out)
    return modules


def test_importing_the_opcodes_loads_nothing_else() -> None:
    assert _modules_after("import beava_client.opcodes") == ["beava_client",
                                                            "beava_client.opcodes"]


def test_the_server_does_not_load_the_clients() -> None:
    loaded = _modules_after("import beava.server.process")
    assert "beava_client.opcodes" in loaded
    assert not [m for m in loaded if m.split(".")[-1] in CLIENT_MODULES]


def test_every_public_name_resolves_from_its_module() -> None:
    for name in beava_client.__all__:
        value = getattr(beava_client, name)
        assert value is not None, name
    assert beava_client.CT_MSGPACK == 0x02
    assert beava_client.TcpClient.__module__ == "beava_client.tcp"
    assert set(beava_client.__all__) <= set(dir(beava_client))


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        beava_client.NoSuchClient  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchClient" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_client_for_url_picks_the_transport() -> None:
    assert type(beava_client.client_for_url("tcp://127.0.0.1:1")).__name__ == "TcpClient"
    assert type(beava_client.client_for_url("http://127.0.0.1:1")).__name__ == "HttpClient"
    client = beava_client.async_client_for_url("http://127.0.0.1:1")
    assert type(client).__name__ == "AsyncHttpClient"
