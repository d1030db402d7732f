"""Starting a beava server process and learning where it listens.

One launcher is shared by embed mode (``bv.App()``, ``beava quickstart``), the tests and the
benchmarks. It builds the command line and the environment, starts the process, parses its
JSON stdout lines on a draining thread (``server.http_bound``, ``server.tcp_bound``,
``server.admin_bound`` carry the bound addresses, ``server.ready`` follows recovery),
keeps the last lines of its stderr on another draining thread, waits for start-up with a
timeout and stops it (SIGTERM, then SIGKILL after a deadline).

The server command is ``$BEAVA_BINARY`` when set, otherwise the *installed* server run by
the current interpreter, ``python -P -m beava``: ``-P`` keeps the working directory off
``sys.path``, so starting from a source checkout (where ``beava/`` is the uncompiled tree)
still runs the installed package. With an editable install the installed package is the
checkout itself.

When the server does not start, :class:`ServerStartError` says why and carries the last
lines of its stderr (a traceback, a configuration error).

:class:`EmbeddedServer` is the private server of embed mode: a :class:`ServerProcess` on
OS-assigned ports with a temporary data directory, removed when it stops.

Standard library and ``beava.errors`` only: nothing of the server is imported here.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

from beava.errors import BinaryNotFoundError
from beava.process_bond import parent_death_signal

__all__ = [
    "BINARY_ENV",
    "BOUND_KINDS",
    "EMBED_STARTUP_TIMEOUT_S",
    "EPHEMERAL_PORTS",
    "EmbeddedServer",
    "STDERR_TAIL_LINES",
    "STOP_TIMEOUT_S",
    "ServerProcess",
    "ServerStartError",
    "embed_command",
    "installed_server_command",
    "server_command",
    "server_env",
    "split_addr",
]

BINARY_ENV = "BEAVA_BINARY"
# Bind lines of the server's stdout -> the listener they name.
BOUND_KINDS: dict[str, str] = {
    "server.http_bound": "http",
    "server.tcp_bound": "tcp",
    "server.admin_bound": "admin",
}
READY_KIND = "server.ready"
# Every listener on an OS-assigned port of the loopback interface.
EPHEMERAL_PORTS: dict[str, str] = {
    "BEAVA_LISTEN_ADDR": "127.0.0.1:0",
    "BEAVA_TCP_PORT": "0",
    "BEAVA_ADMIN_ADDR": "127.0.0.1:0",
}
STOP_TIMEOUT_S = 5.0
# How long embed mode waits for its server's listeners ($BEAVA_EMBED_STARTUP_TIMEOUT).
EMBED_STARTUP_TIMEOUT_S = 5.0
STDERR_TAIL_LINES = 40
# A stderr "line" longer than this is kept in pieces (the tail stays bounded in bytes too).
STDERR_LINE_BYTES = 4096
# How long to wait for the rest of a dead process's output before reporting on it.
OUTPUT_GRACE_S = 2.0


class ServerStartError(TimeoutError):
    """The server did not start: it exited, or did not report in time.

    ``returncode`` is the exit code (None if it was still running and had to be killed) and
    ``stderr_tail`` the last lines it wrote to stderr; the message includes both.
    """

    def __init__(self, message: str, *, returncode: int | None = None,
                 stderr_tail: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.returncode = returncode
        self.stderr_tail = list(stderr_tail)


def split_addr(addr: str) -> tuple[str, int]:
    """``"H:P"`` (or ``"[v6]:P"``) -> ``(host, port)``."""
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


def installed_server_command() -> list[str]:
    """The installed ``beava`` server run by this interpreter, whatever the working
    directory (``-P``: the working directory is not put on ``sys.path``)."""
    return [sys.executable, "-P", "-m", "beava"]


def server_command(environ: Mapping[str, str] | None = None) -> list[str]:
    """``$BEAVA_BINARY`` of ``environ`` (default: ``os.environ``) when set, as given (the
    caller checks it is executable), else :func:`installed_server_command`."""
    binary = (os.environ if environ is None else environ).get(BINARY_ENV)
    return [binary] if binary is not None else installed_server_command()


def server_env(overrides: Mapping[str, str] | None = None, *,
               inherit_beava: bool = True) -> dict[str, str]:
    """The environment of a server: this process's, every listener on an ephemeral
    127.0.0.1 port, then ``overrides``. ``inherit_beava=False`` first drops every inherited
    ``BEAVA_*`` variable, so a developer's settings cannot change what a test measures."""
    env = {key: value for key, value in os.environ.items()
           if inherit_beava or not key.startswith("BEAVA_")}
    env.update(EPHEMERAL_PORTS)
    env.update(overrides or {})
    return env


class ServerProcess:
    """One ``beava`` server process: ``command + ["--config", os.devnull, *args]``.

    ``command`` defaults to :func:`server_command` (which honours ``$BEAVA_BINARY`` unless
    ``inherit_beava`` is False, in which case the installed server is run). ``env`` is
    applied over :func:`server_env`. With ``keep_output`` every stdout line is kept in
    ``raw_lines`` (text) and, when it is a JSON object, in ``lines``; without it only the
    addresses and readiness are recorded (for a long-lived server). ``addrs`` maps
    ``"http"``, ``"tcp"``, ``"admin"`` to the ``"H:P"`` each bind line reported.

    ``start()`` spawns it; ``wait_bound`` / ``wait_ready`` wait for start-up and raise
    :class:`ServerStartError` (the process killed) when it fails; ``stop()`` / ``kill()``
    end it.
    """

    def __init__(self, args: Sequence[str] = (), *, command: Sequence[str] | None = None,
                 env: Mapping[str, str] | None = None, inherit_beava: bool = True,
                 cwd: str | os.PathLike[str] | None = None, keep_output: bool = True,
                 stderr_lines: int = STDERR_TAIL_LINES, bound_to_parent: bool = False
                 ) -> None:
        if command is None:
            command = server_command(None if inherit_beava else {})
        self.argv: list[str] = [*command, "--config", os.devnull, *args]
        self.env: dict[str, str] = server_env(env, inherit_beava=inherit_beava)
        self.cwd = cwd
        self.keep_output = keep_output
        self.bound_to_parent = bound_to_parent
        """The server gets SIGTERM when this process dies (Linux; beava.process_bond)."""
        self.lines: list[dict[str, Any]] = []
        self.raw_lines: list[str] = []
        self.addrs: dict[str, str] = {}
        self.ready = False
        self.started_at = 0.0
        self.bound_at: float | None = None
        """``time.monotonic()`` when both the HTTP and the TCP address were known."""
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=stderr_lines)
        self._stderr_lock = threading.Lock()
        self._changed = threading.Condition()
        self._stdout_done = threading.Event()
        self._stdout_thread: threading.Thread | None = None
        self._stderr_thread: threading.Thread | None = None

    # -- starting ----------------------------------------------------------------------------

    def start(self) -> ServerProcess:
        """Spawn the process and its two draining threads. ``OSError`` when the command
        cannot be executed."""
        if self._proc is not None:
            raise RuntimeError("the server process was already started")
        self.started_at = time.monotonic()
        bind = parent_death_signal(signal.SIGTERM) if self.bound_to_parent else None
        self._proc = subprocess.Popen(
            self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=self.env, cwd=self.cwd, preexec_fn=bind,
        )
        assert self._proc.stdout is not None and self._proc.stderr is not None
        self._stdout_thread = threading.Thread(
            target=self._drain_stdout, args=(self._proc.stdout,), name="beava-server-stdout",
            daemon=True)
        self._stderr_thread = threading.Thread(
            target=self._drain_stderr, args=(self._proc.stderr,), name="beava-server-stderr",
            daemon=True)
        self._stdout_thread.start()
        self._stderr_thread.start()
        return self

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        """The child process (after ``start()``)."""
        if self._proc is None:
            raise RuntimeError("the server process has not been started")
        return self._proc

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _drain_stdout(self, stream: IO[bytes]) -> None:
        try:
            for raw in stream:
                text = raw.decode("utf-8", "replace").rstrip("\r\n")
                try:
                    line = json.loads(text)
                except ValueError:
                    line = None
                with self._changed:
                    if self.keep_output:
                        self.raw_lines.append(text)
                    if isinstance(line, dict):
                        self._record(line)
                    self._changed.notify_all()
        except (OSError, ValueError):  # the pipe was closed under us
            pass
        finally:
            with self._changed:
                self._stdout_done.set()
                self._changed.notify_all()

    def _record(self, line: dict[str, Any]) -> None:
        if self.keep_output:
            self.lines.append(line)
        kind = line.get("kind")
        addr = line.get("addr")
        listener = BOUND_KINDS.get(kind) if isinstance(kind, str) else None
        if listener is not None and isinstance(addr, str):
            self.addrs[listener] = addr
            if self.bound_at is None and "http" in self.addrs and "tcp" in self.addrs:
                self.bound_at = time.monotonic()
        elif kind == READY_KIND:
            self.ready = True

    def _drain_stderr(self, stream: IO[bytes]) -> None:
        try:
            while True:
                raw = stream.readline(STDERR_LINE_BYTES)
                if not raw:
                    return
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                with self._stderr_lock:
                    self._stderr_tail.append(line)
        except (OSError, ValueError):
            pass

    # -- waiting -----------------------------------------------------------------------------

    def wait_until(self, condition: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``condition()`` holds (re-checked after each stdout line): True; or
        until stdout ends or ``timeout`` seconds pass: ``condition()`` then."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not condition():
                left = deadline - time.monotonic()
                if self._stdout_done.is_set() or left <= 0:
                    return condition()
                self._changed.wait(left)
        return True

    @property
    def output_ended(self) -> bool:
        """True once the server's stdout reached end of file (the process is exiting)."""
        return self._stdout_done.is_set()

    def wait_bound(self, timeout: float, listeners: Sequence[str] = ("http", "tcp")) -> None:
        """Wait until every one of ``listeners`` reported its address; otherwise kill the
        process and raise :class:`ServerStartError`."""
        if not self.wait_until(lambda: all(name in self.addrs for name in listeners), timeout):
            raise self.start_failure(timeout, "its listening addresses")

    def wait_ready(self, timeout: float) -> None:
        """Wait for ``server.ready`` (listeners bound, recovery complete); otherwise kill the
        process and raise :class:`ServerStartError`."""
        if not self.wait_until(lambda: self.ready, timeout):
            raise self.start_failure(timeout, "that it is ready")

    def start_failure(self, timeout: float, awaited: str) -> ServerStartError:
        """Kill the process (if it still runs) and describe why it did not report
        ``awaited``: its exit code or the timeout, the command, and the last lines of its
        stderr."""
        proc = self.proc
        code = proc.poll()
        if code is None and self.output_ended:  # stdout closed: the process is exiting
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = proc.wait(OUTPUT_GRACE_S)
        if code is None:
            self.kill()
            message = f"the beava server did not report {awaited} within {timeout}s"
        else:
            message = f"the beava server exited with code {code} before reporting {awaited}"
        tail = self.stderr_tail()
        message += f" (command: {' '.join(self.argv)})"
        if tail:
            message += "; the last lines of its stderr:\n" + "\n".join(
                "  " + line for line in tail)
        else:
            message += "; it wrote nothing to stderr"
        return ServerStartError(message, returncode=code, stderr_tail=tail)

    # -- output ------------------------------------------------------------------------------

    def stderr_tail(self) -> list[str]:
        """The last lines the server wrote to stderr. Once the process has exited, the rest
        of its stderr is waited for first (briefly)."""
        if self._proc is not None and self._proc.poll() is not None \
                and self._stderr_thread is not None:
            self._stderr_thread.join(OUTPUT_GRACE_S)
        with self._stderr_lock:
            return list(self._stderr_tail)

    def kinds(self) -> list[str]:
        """The ``kind`` of every JSON stdout line so far (with ``keep_output``)."""
        return [str(line.get("kind", "")) for line in list(self.lines)]

    def join_output(self, timeout: float) -> None:
        """Wait (at most ``timeout`` s each) for both output streams to be fully read."""
        for thread in (self._stdout_thread, self._stderr_thread):
            if thread is not None:
                thread.join(timeout)

    # -- stopping ----------------------------------------------------------------------------

    def poll(self) -> int | None:
        return self.proc.poll()

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM, then SIGKILL if it still runs after ``timeout`` s; the exit code."""
        proc = self.proc
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.join_output(OUTPUT_GRACE_S)
        return proc.returncode

    def kill(self) -> int:
        """SIGKILL (if it still runs); the exit code."""
        proc = self.proc
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.kill()
        return proc.wait()

    def close_pipes(self) -> None:
        """Close this side of the output pipes (after the process has ended)."""
        proc = self.proc
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


# -- embed mode ------------------------------------------------------------------------------


def embed_command() -> list[str]:
    """The server command of embed mode: ``$BEAVA_BINARY`` when set (no fallback; it must be
    an executable file), else this distribution's own server run with ``-P``, so the working
    directory (a source checkout, say) is not imported."""
    command = server_command()
    if os.environ.get(BINARY_ENV) is None:
        return command
    binary = command[0]
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        raise BinaryNotFoundError(
            f"BEAVA_BINARY={binary!r} is not an executable file. Point it at the beava "
            "server executable, or unset it to run this installation's server "
            f"({' '.join(installed_server_command())}); install with `pip install beava`."
        )
    return command


def _embed_startup_timeout() -> float:
    text = os.environ.get("BEAVA_EMBED_STARTUP_TIMEOUT")
    if not text:
        return EMBED_STARTUP_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"BEAVA_EMBED_STARTUP_TIMEOUT={text!r} is not a number") from None
    if not value > 0:
        raise ValueError(f"BEAVA_EMBED_STARTUP_TIMEOUT must be positive, got {text!r}")
    return value


class EmbeddedServer:
    """A private beava server process on OS-assigned ports (spec/sdk.md §8.3).

    ``command`` defaults to :func:`embed_command`. ``start()`` spawns it through
    :class:`ServerProcess` and waits for its ``server.http_bound`` / ``server.tcp_bound``
    stdout lines; if it exits or stays silent first, the :class:`ServerStartError` raised
    carries the last lines of its stderr. ``stop()`` sends SIGTERM (SIGKILL after 5 s) and
    removes its directory. The data directories are passed as ``BEAVA_WAL_DIR`` /
    ``BEAVA_SNAPSHOT_DIR`` (the embed contract), or with ``data_dir_flag`` as
    ``--data-dir`` (how ``beava quickstart`` runs its server).
    """

    def __init__(self, command: Sequence[str] | None = None, *, test_mode: bool = False,
                 data_dir_flag: bool = False) -> None:
        self.command = list(embed_command() if command is None else command)
        self.test_mode = test_mode
        self.data_dir_flag = data_dir_flag
        self.directory = ""
        self.http_addr: tuple[str, int] | None = None
        self.tcp_addr: tuple[str, int] | None = None
        self._server: ServerProcess | None = None
        self._lock = threading.Lock()
        self._stopped = False

    @property
    def _proc(self) -> subprocess.Popen[bytes] | None:
        """The server's process, once spawned."""
        server = self._server
        return None if server is None else server.proc

    def start(self) -> None:
        """Spawn the server and wait until both listeners are bound."""
        timeout = _embed_startup_timeout()
        stamp = int(time.time() * 1000)
        self.directory = os.path.join(
            tempfile.gettempdir(), f"beava-embed-{os.getpid()}-{stamp}-{secrets.token_hex(4)}"
        )
        os.makedirs(os.path.join(self.directory, "wal"))
        os.makedirs(os.path.join(self.directory, "snapshots"))
        atexit.register(self.stop)
        env = {"BEAVA_DEV_ENDPOINTS": "1"}
        args: list[str] = []
        if self.data_dir_flag:
            args += ["--data-dir", self.directory]  # WAL in <dir>/wal, snapshots beside it
        else:
            env["BEAVA_WAL_DIR"] = os.path.join(self.directory, "wal")
            env["BEAVA_SNAPSHOT_DIR"] = os.path.join(self.directory, "snapshots")
        if self.test_mode:
            env["BEAVA_TEST_MODE"] = "1"
        server = ServerProcess(args, command=self.command, env=env, keep_output=False)
        try:
            server.start()
        except OSError as exc:
            self.stop()
            raise BinaryNotFoundError(
                f"cannot start the beava server {self.command[0]!r}: {exc}"
            ) from exc
        self._server = server
        try:
            server.wait_bound(timeout)
        except ServerStartError:
            self.stop(kill=True)
            raise
        self.http_addr = split_addr(server.addrs["http"])
        self.tcp_addr = split_addr(server.addrs["tcp"])

    @property
    def tcp_url(self) -> str:
        assert self.tcp_addr is not None
        return f"tcp://{self.tcp_addr[0]}:{self.tcp_addr[1]}"

    @property
    def http_url(self) -> str:
        assert self.http_addr is not None
        return f"http://{self.http_addr[0]}:{self.http_addr[1]}"

    def stop(self, *, kill: bool = False) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 5 s; ``kill``: SIGKILL at once) and
        remove its directory. Idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        server = self._server
        if server is not None:
            if kill:
                server.kill()
                server.join_output(1.0)
            else:
                server.stop(STOP_TIMEOUT_S)
            server.close_pipes()
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)
        atexit.unregister(self.stop)
