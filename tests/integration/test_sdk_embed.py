"""Embed mode (spec/sdk.md §8.3): spawn, private directory, test mode, BEAVA_BINARY,
start-up timeout, teardown, a dead server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

import beava as bv
from beava.launcher import EmbeddedServer, ServerStartError

REPO = Path(__file__).resolve().parents[2]


@bv.event
class Ping:
    source: str


@bv.table
def PingCount(p: Ping) -> bv.Table:
    return p.agg(pings=bv.count())


def server_of(app: bv.App) -> EmbeddedServer:
    server = app._server
    assert server is not None
    return server


def script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_private_directory_and_teardown() -> None:
    with bv.App(test_mode=True) as app:
        server = server_of(app)
        directory = Path(server.directory)
        assert directory.parent == Path(tempfile.gettempdir())
        assert directory.name.startswith(f"beava-embed-{os.getpid()}-")
        assert (directory / "wal").is_dir() and (directory / "snapshots").is_dir()
        app.register(PingCount)
        app.push("Ping", {"source": "a"})
        assert app.get("PingCount") == {"pings": 1}
        proc = server._proc
        assert proc is not None and proc.poll() is None
    assert proc.poll() == 0  # SIGTERM: clean exit
    assert not directory.exists()
    with pytest.raises(RuntimeError, match="App is closed"):
        app.ping()


def test_each_app_gets_its_own_server() -> None:
    with bv.App(test_mode=True) as a, bv.App(test_mode=True) as b:
        assert server_of(a).tcp_addr != server_of(b).tcp_addr
        a.register(PingCount)
        a.push("Ping", {"source": "a"})
        with pytest.raises(bv.RegistrationError):
            b.get("PingCount")


def test_without_test_mode_reset_is_refused() -> None:
    with bv.App() as app:
        with pytest.raises(bv.RegistrationError) as info:
            app.reset()
        assert info.value.code == "reset_disabled_in_production"


def test_beava_binary_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    launcher = script(tmp_path, "beava-launcher",
                      f'touch "{tmp_path}/started"\n'
                      f'exec "{sys.executable}" -m beava "$@"\n')
    monkeypatch.setenv("BEAVA_BINARY", launcher)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    with bv.App(test_mode=True) as app:
        assert server_of(app).command == [launcher]
        app.register(PingCount)
        assert app.ping()["registry_version"] == 1
    assert (tmp_path / "started").exists()


def test_startup_timeout_kills_the_process(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    pid_file = tmp_path / "pid"
    silent = script(tmp_path, "silent", f'echo $$ > "{pid_file}"\nexec sleep 30\n')
    monkeypatch.setenv("BEAVA_BINARY", silent)
    monkeypatch.setenv("BEAVA_EMBED_STARTUP_TIMEOUT", "0.5")
    app = bv.App()
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="within 0.5s"), app:
        pass
    assert time.monotonic() - started < 5
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_server_exiting_before_binding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BEAVA_BINARY", script(tmp_path, "fails", 'echo "not json"\nexit 3\n'))
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="exited with code 3"), bv.App():
        pass
    assert time.monotonic() - started < 4


def test_server_stderr_is_shown_when_it_cannot_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that dies at start-up: the error names the exit code and carries the last
    lines of its stderr (here, what an uncompiled source tree would print)."""
    broken = script(tmp_path, "broken",
                    'echo "Traceback (most recent call last):" >&2\n'
                    'echo "ImportError: cannot import name \'frame_splitter\' from '
                    '\'beava._fast\'" >&2\n'
                    "exit 1\n")
    monkeypatch.setenv("BEAVA_BINARY", broken)
    with pytest.raises(TimeoutError) as info, bv.App():
        pass
    message = str(info.value)
    assert "exited with code 1 before reporting its listening addresses" in message
    assert "ImportError: cannot import name 'frame_splitter' from 'beava._fast'" in message
    assert isinstance(info.value, ServerStartError)
    assert info.value.returncode == 1
    assert info.value.stderr_tail[-1].startswith("ImportError")


def test_app_and_the_installed_server_from_a_source_tree(tmp_path: Path) -> None:
    """A script run with a source checkout as working directory (``python examples/x.py``
    from the repository root): the embedded server is the installed one, not the
    ``beava/`` of the working directory (here one that cannot be imported)."""
    checkout = tmp_path / "checkout"
    (checkout / "beava").mkdir(parents=True)
    (checkout / "beava" / "__init__.py").write_text('raise ImportError("source tree imported")\n')
    program = tmp_path / "program.py"
    program.write_text(
        "import beava as bv\n"
        "@bv.event\nclass Ping:\n    source: str\n"
        "@bv.table\ndef PingCount(p: Ping) -> bv.Table:\n    return p.agg(pings=bv.count())\n"
        "with bv.App(test_mode=True) as app:\n"
        "    app.register(PingCount)\n"
        "    app.push('Ping', {'source': 'a'})\n"
        "    print('row', app.get('PingCount'))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BEAVA_")}
    env.pop("PYTHONPATH", None)
    run = subprocess.run([sys.executable, str(program)], cwd=checkout, env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "row {'pings': 1}\n"


def test_only_json_bound_lines_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a program printing noise, then one bound line only: never both -> timeout
    noisy = script(tmp_path, "noisy",
                   "echo hello\necho '[1, 2]'\n"
                   "echo '{\"kind\": \"server.http_bound\", \"addr\": \"127.0.0.1:1\"}'\n"
                   "exec sleep 30\n")
    monkeypatch.setenv("BEAVA_BINARY", noisy)
    monkeypatch.setenv("BEAVA_EMBED_STARTUP_TIMEOUT", "0.5")
    with pytest.raises(TimeoutError), bv.App():
        pass


def test_a_killed_server_fails_the_next_call() -> None:
    with bv.App(test_mode=True, timeout=5) as app:
        app.register(PingCount)
        proc: Any = server_of(app)._proc
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(5)
        started = time.monotonic()
        with pytest.raises(bv.TransportError):
            app.ping()
        with pytest.raises(bv.TransportError):  # never respawned
            app.ping()
        assert time.monotonic() - started < 5


def test_close_without_any_call() -> None:
    app = bv.App()
    app.close()
    with pytest.raises(RuntimeError, match="App is closed"):
        app.ping()


def test_garbage_collected_app_stops_its_server() -> None:
    app = bv.App(test_mode=True)
    app.__enter__()
    app.ping()  # fully started (signal handlers installed)
    server = server_of(app)
    proc: Any = server._proc
    del app
    import gc

    gc.collect()
    assert proc.wait(10) == 0
    assert not Path(server.directory).exists()
