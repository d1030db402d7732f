"""Test support: a real ``beava`` server process and raw framed-TCP helpers."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
BOUND_KINDS = {"server.http_bound": "http", "server.tcp_bound": "tcp",
               "server.admin_bound": "admin"}


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


class BeavaProcess:
    """A ``python -m beava`` child on OS-assigned ports; stdout is parsed and drained."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, memory_only: bool = True,
                 test_mode: bool = True, wait: bool = True, cwd: str | None = None) -> None:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("BEAVA_")}
        full_env.update({"BEAVA_LISTEN_ADDR": "127.0.0.1:0", "BEAVA_TCP_PORT": "0",
                         "BEAVA_ADMIN_ADDR": "127.0.0.1:0"})
        full_env.update(env or {})
        argv = [sys.executable, "-m", "beava", "--config", "/dev/null", *args]
        if memory_only:
            argv.append("--memory-only")
        if test_mode:
            argv.append("--test-mode")
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, env=full_env, cwd=cwd)
        self.lines: list[dict] = []
        self.raw_lines: list[str] = []
        self.addrs: dict[str, str] = {}
        self._bound = threading.Event()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        if wait:
            self.wait_bound()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            text = raw.decode("utf-8", "replace").rstrip("\n")
            self.raw_lines.append(text)
            try:
                line = json.loads(text)
            except ValueError:
                continue
            self.lines.append(line)
            kind = BOUND_KINDS.get(line.get("kind", ""))
            if kind:
                self.addrs[kind] = line["addr"]
            if line.get("kind") == "server.ready":
                self._bound.set()
        self._bound.set()

    def wait_bound(self, timeout: float = 10.0) -> None:
        if not self._bound.wait(timeout) or "tcp" not in self.addrs:
            self.kill()
            err = self.proc.stderr.read().decode() if self.proc.stderr else ""
            raise RuntimeError(f"beava did not start: {self.raw_lines} {err}")

    @property
    def http(self) -> tuple[str, int]:
        return split_addr(self.addrs["http"])

    @property
    def tcp(self) -> tuple[str, int]:
        return split_addr(self.addrs["tcp"])

    @property
    def admin(self) -> tuple[str, int]:
        return split_addr(self.addrs["admin"])

    @property
    def http_url(self) -> str:
        return f"http://{self.addrs['http']}"

    def kinds(self) -> list[str]:
        return [line.get("kind", "") for line in self.lines]

    def terminate(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self._reader.join(timeout)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


# framed TCP ------------------------------------------------------------------------------

def frame(op: int, ct: int = 1, payload: bytes = b"") -> bytes:
    return struct.pack(">IHB", len(payload) + 3, op, ct) + payload


class FrameConn:
    """A blocking framed-TCP connection for tests."""

    def __init__(self, addr: tuple[str, int], timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(addr, timeout=timeout)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read_exact(self, n: int) -> bytes | None:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv_frame(self) -> tuple[int, int, bytes] | None:
        """Next reply frame, or None when the server closed the connection."""
        head = self._read_exact(7)
        if head is None:
            return None
        length, op, ct = struct.unpack(">IHB", head)
        payload = self._read_exact(length - 3)
        if payload is None:
            return None
        return op, ct, payload

    def request(self, op: int, ct: int = 1, payload: bytes = b"") -> tuple[int, int, bytes]:
        self.send(frame(op, ct, payload))
        reply = self.recv_frame()
        assert reply is not None, "connection closed without a reply"
        return reply

    def is_closed(self, timeout: float = 5.0) -> bool:
        """True if the server closes the connection (EOF or reset) within ``timeout``."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
        return data == b""

    def close(self) -> None:
        self.sock.close()


def http_request(addr: tuple[str, int], method: str, path: str, body: bytes = b"",
                 headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 request on a fresh connection (stdlib http.client)."""
    import http.client

    conn = http.client.HTTPConnection(*addr, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()
