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
from pathlib import Path
from typing import Any

from beava.launcher import ServerProcess, installed_server_command, split_addr
from beava_client.slots import ShardMap

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
# In-repository copies of the project's shared sets (each folder's README says so).
CONFORMANCE_VECTORS = TESTS / "conformance" / "vectors"
CONFORMANCE_RUNNER = TESTS / "conformance" / "runner.py"
SPEC = REPO / "spec"  # the contract (docs/reference/index.md)


class BeavaProcess:
    """A beava server child on OS-assigned ports (``python -P -m beava``: the installed
    package, which with the editable install is this checkout); inherited ``BEAVA_*``
    variables are dropped. stdout is parsed and kept (``lines``, ``raw_lines``, ``addrs``),
    the last lines of stderr too (``stderr_text()``)."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, memory_only: bool = True,
                 test_mode: bool = True, wait: bool = True, cwd: str | None = None) -> None:
        flags = [*args]
        if memory_only:
            flags.append("--memory-only")
        if test_mode:
            flags.append("--test-mode")
        self.server = ServerProcess(flags, command=installed_server_command(), env=env,
                                    inherit_beava=False, cwd=cwd)
        self.server.start()
        self.proc: subprocess.Popen[bytes] = self.server.proc
        self.started_at = self.server.started_at
        self.lines: list[dict[str, Any]] = self.server.lines
        self.raw_lines: list[str] = self.server.raw_lines
        self.addrs: dict[str, str] = self.server.addrs
        if wait:
            self.wait_bound()

    def wait_bound(self, timeout: float = 10.0) -> None:
        """Wait for ``server.ready`` or the end of stdout (a server that exits after binding,
        say during recovery, returns here too); the TCP listener must have been bound."""
        ended = self.server.wait_until(lambda: self.server.ready, timeout) \
            or self.server.output_ended
        if not ended or "tcp" not in self.addrs:
            raise self.server.start_failure(timeout, "its TCP address and readiness")

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
        return self.server.kinds()

    def stderr_text(self) -> str:
        """The last lines of the server's stderr (the launcher keeps a bounded tail); once
        the server has exited, up to its very end."""
        return "\n".join(self.server.stderr_tail())

    def join_output(self, timeout: float = 5.0) -> None:
        """Wait until stdout and stderr have been read to their end (the process ended)."""
        self.server.join_output(timeout)

    def terminate(self, timeout: float = 10.0) -> int:
        """SIGTERM and wait (SIGKILL after ``timeout`` s); the exit code."""
        return self.server.stop(timeout)

    def kill(self) -> None:
        self.server.kill()


class BeavaCluster:
    """``beava cluster up --test-mode`` on ``data_dir`` (durable; ``args``: more options):
    ``ready`` is its ``cluster.ready`` line, ``map`` the shard map, ``map_file`` the map's
    file."""

    def __init__(self, data_dir: Path, shards: int = 3, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("BEAVA_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "beava", "cluster", "up", "--shards", str(shards),
             "--data-dir", str(data_dir), "--test-mode", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        assert self.proc.stdout is not None
        line: list[bytes] = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()))
        reader.start()
        reader.join(120)
        assert line and line[0], self.proc.stderr.read().decode() if self.proc.poll() else ""
        self.ready: dict[str, Any] = json.loads(line[0])
        self.map = ShardMap.from_dict(self.ready["map"])
        self.map_file = data_dir / "cluster.json"

    def http(self, shard_id: str) -> tuple[str, int]:
        return split_addr(self.map.shard(shard_id).http.removeprefix("http://"))

    def owner(self, user: str) -> tuple[str, int]:
        return self.http(self.map.owner_of(user).id)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)

    def kill_shards(self) -> int:
        """SIGKILL every shard at once; ``cluster up`` notices and exits (its code)."""
        for shard in self.ready["shards"]:
            os.kill(shard["pid"], signal.SIGKILL)
        return self.proc.wait(60)


# framed TCP ------------------------------------------------------------------------------

def thread_nices(pid: int | str = "self") -> dict[str, int]:
    """A process's threads and their nice values (/proc: field 19 of a task's stat)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as fh:
            stat = fh.read()
        out[tid] = int(stat[stat.rindex(")") + 2:].split()[16])
    return out


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


# Keys an error object may carry beside its code to say what to fix (docs/wire.md).
INFORMATIVE_KEYS = frozenset({"message", "field", "expected", "got", "hint", "detail"})


def codes_only(value: Any) -> Any:
    """``value`` with the informative keys dropped from every ``error`` object in it, for
    tests that pin the normative part of an error body."""
    if isinstance(value, list):
        return [codes_only(item) for item in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        if key == "error" and isinstance(item, dict):
            item = {k: v for k, v in item.items() if k not in INFORMATIVE_KEYS}
        out[key] = codes_only(item)
    return out
