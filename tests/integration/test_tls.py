"""TLS on all three listeners, with certificates made at test time (trustme): the wire
clients (tcps://, https://, sync and async), the SDK and the admin sidecar, together with
tokens; mutual TLS refuses a client without a certificate."""

from __future__ import annotations

import asyncio
import http.client
import json
import select
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

import beava as bv
from beava_client import (
    AsyncHttpClient,
    AsyncTcpClient,
    AsyncTcpPool,
    ClientPool,
    TcpClient,
    TransportError,
    client_for_url,
)
from tests.support import BeavaProcess

TOKEN = "tls-admin-token-0000001"
READ_TOKEN = "tls-read-token-00000002"


@bv.event
class Ping:
    host: str
    rtt: float


@bv.table(key="host")
def Rtt(p: Ping) -> bv.Table:
    return p.group_by("host").agg(n=bv.count(), worst=bv.max("rtt"))


class Pki:
    def __init__(self, root: Path) -> None:
        self.ca = trustme.CA()
        server = self.ca.issue_cert("127.0.0.1", "localhost")
        self.cert, self.key, self.ca_file = root / "cert.pem", root / "key.pem", root / "ca.pem"
        server.cert_chain_pems[0].write_to_path(str(self.cert))
        server.private_key_pem.write_to_path(str(self.key))
        self.ca.cert_pem.write_to_path(str(self.ca_file))

    def context(self, client_cert: bool = False) -> ssl.SSLContext:
        context = ssl.create_default_context()
        self.ca.configure_trust(context)
        if client_cert:
            self.ca.issue_cert("client@example.test").configure_cert(context)
        return context


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_server(pki: Pki) -> Iterator[BeavaProcess]:
    proc = BeavaProcess("--tls-cert", str(pki.cert), "--tls-key", str(pki.key),
                        env={"BEAVA_AUTH_TOKENS": f"{TOKEN}:admin;{READ_TOKEN}:read"})
    yield proc
    proc.terminate()


def test_tls_is_logged(tls_server: BeavaProcess) -> None:
    assert "server.tls_enabled" in tls_server.kinds()


def test_sync_clients_over_tls(tls_server: BeavaProcess, pki: Pki) -> None:
    ca = str(pki.ca_file)
    tcps, https = f"tcps://{tls_server.addrs['tcp']}", f"https://{tls_server.addrs['http']}"
    with bv.App(tcps, token=TOKEN, ca=ca) as app:
        app.register(Ping, Rtt)
    for url in (tcps, https):
        with client_for_url(url, token=TOKEN, ca=ca) as client:
            assert repr(client).split()[1].startswith(url.split(":")[0])
            client.push("Ping", {"host": url, "rtt": 1.5})
            # enough rows for several TLS records per read
            client.push_many("Ping", [{"host": url, "rtt": float(i)} for i in range(2000)])
            assert client.get("Rtt", url) == {"n": 2001, "worst": 1999.0}
            assert len(client.batch_get([{"table": "Rtt", "key": url}] * 500)) == 500
    pool = ClientPool(lambda: TcpClient.from_url(tcps, token=READ_TOKEN, ca=ca), 2)
    try:
        assert pool.get("Rtt", tcps)["n"] == 2001
    finally:
        pool.close()


def test_plain_clients_cannot_talk_to_a_tls_server(tls_server: BeavaProcess, pki: Pki
                                                   ) -> None:
    with pytest.raises(TransportError), \
            TcpClient(*tls_server.tcp, token=TOKEN, timeout=3.0) as client:
        client.ping()
    with pytest.raises(TransportError):
        client_for_url(f"tcps://{tls_server.addrs['tcp']}", token=TOKEN).ping()  # untrusted


def test_async_clients_over_tls(tls_server: BeavaProcess, pki: Pki) -> None:
    ca = str(pki.ca_file)

    async def run() -> None:
        async with AsyncTcpClient.from_url(f"tcps://{tls_server.addrs['tcp']}", token=TOKEN,
                                           ca=ca) as tcp, \
                AsyncHttpClient.from_url(f"https://{tls_server.addrs['http']}", token=TOKEN,
                                         ca=ca) as web:
            await tcp.register({"nodes": []}, dry_run=True)
            await tcp.push("Ping", {"host": "async", "rtt": 2.0})
            await web.push("Ping", {"host": "async", "rtt": 3.0})
            rows = await asyncio.gather(*(tcp.get("Rtt", "async") for _ in range(50)))
            assert all(row == {"n": 2, "worst": 3.0} for row in rows)
            assert (await web.get("Rtt", "async"))["n"] == 2
        pool = AsyncTcpPool.from_url(f"tcps://{tls_server.addrs['tcp']}", size=2,
                                     token=READ_TOKEN, ca=ca)
        try:
            assert [(await pool.get("Rtt", "async"))["n"] for _ in range(4)] == [2] * 4
        finally:
            await pool.close()
        async with bv.AsyncApp(f"tcps://{tls_server.addrs['tcp']}", token=TOKEN,
                               ca=ca) as app:
            assert (await app.get("Rtt", "async"))["worst"] == 3.0

    asyncio.run(run())


def test_admin_sidecar_over_tls(tls_server: BeavaProcess, pki: Pki) -> None:
    host, port = tls_server.admin
    conn = http.client.HTTPSConnection(host, port, context=pki.context(), timeout=10)
    try:
        conn.request("GET", "/health")
        assert conn.getresponse().read() == b'{"status":"ok"}'
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        assert response.status == 401
        response.read()
        conn.request("GET", "/registry", headers={"Authorization": f"Bearer {TOKEN}"})
        response = conn.getresponse()
        assert response.status == 200 and "version" in json.loads(response.read())
    finally:
        conn.close()


def test_env_token_and_ca(tls_server: BeavaProcess, pki: Pki,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BEAVA_TOKEN", READ_TOKEN)
    monkeypatch.setenv("BEAVA_CA", str(pki.ca_file))
    with bv.App(f"https://{tls_server.addrs['http']}") as app:
        assert app.get("Rtt", "async")["n"] == 2


def test_mutual_tls_needs_a_client_certificate(pki: Pki) -> None:
    proc = BeavaProcess("--tls-cert", str(pki.cert), "--tls-key", str(pki.key),
                        "--tls-client-ca", str(pki.ca_file))
    try:
        tcps = f"tcps://{proc.addrs['tcp']}"
        with pytest.raises(TransportError), \
                TcpClient.from_url(tcps, ca=str(pki.ca_file), timeout=5.0) as anonymous:
            anonymous.ping()
        host, port = proc.http
        raw = socket.create_connection((host, port), timeout=5)
        with pytest.raises((ssl.SSLError, ConnectionError)), \
                pki.context().wrap_socket(raw, server_hostname=host) as tls:
            tls.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            if not tls.recv(100):
                raise ConnectionError("closed")
        with TcpClient.from_url(tcps, tls=pki.context(client_cert=True)) as client:
            assert client.ping()["registry_version"] == 0
        with client_for_url(f"https://{proc.addrs['http']}",
                            tls=pki.context(client_cert=True)) as web:
            assert web.ping()["pong"] is True
    finally:
        proc.terminate()


def client_hello(pki: Pki) -> bytes:
    """The first flight of a real TLS client: its ClientHello."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = pki.context().wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True


def test_stalled_handshakes_count_against_the_cap_and_time_out(pki: Pki) -> None:
    """80 peers that send nothing or half a ClientHello to a TLS server capped at 8: the
    ones past the cap are closed at once (a connection counts from its accept, not from
    the end of its handshake), the others when the request timeout ends their handshake;
    then a real client connects."""
    proc = BeavaProcess("--tls-cert", str(pki.cert), "--tls-key", str(pki.key),
                        env={"BEAVA_MAX_CONNECTIONS": "8", "BEAVA_REQUEST_TIMEOUT_MS": "4000"})
    hello = client_hello(pki)
    stalled: list[socket.socket] = []
    try:
        started = time.monotonic()
        for index in range(80):
            sock = socket.create_connection(proc.tcp, timeout=10)
            if index % 2:
                sock.sendall(hello[:len(hello) // 2])
            stalled.append(sock)
        open_at: dict[socket.socket, float] = {sock: started for sock in stalled}
        closed_after: dict[socket.socket, float] = {}
        while open_at and time.monotonic() - started < 30:
            readable, _, _ = select.select(list(open_at), [], [], 0.1)
            for sock in readable:
                if closed_by_peer(sock):
                    closed_after[sock] = time.monotonic() - started
                    del open_at[sock]
        assert not open_at, f"{len(open_at)} stalled handshakes still open after 30 s"
        times = sorted(closed_after.values())
        # past the cap: closed at once, well before the 4 s handshake bound
        assert len([t for t in times if t < 2.0]) >= 72, times
        # the 8 counted ones: by the request timeout (not asyncio's 60 s)
        assert times[-1] < 4.0 + 6.0, times
        with TcpClient.from_url(f"tcps://{proc.addrs['tcp']}", ca=str(pki.ca_file),
                                timeout=5.0) as client:
            assert client.ping()["registry_version"] == 0
    finally:
        for sock in stalled:
            sock.close()
        proc.terminate()
