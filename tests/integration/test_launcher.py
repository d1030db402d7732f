"""The server launcher (beava/launcher.py) shared by embed mode, the tests and the bench:
command and environment, start-up failures reported with the server's stderr, a bounded
stderr tail, stopping, and ``-P`` keeping a source tree in the working directory out of
the server."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from beava.launcher import (
    EPHEMERAL_PORTS,
    STDERR_TAIL_LINES,
    ServerProcess,
    ServerStartError,
    installed_server_command,
    server_command,
    server_env,
)

BIND_LINES = ("echo '{\"kind\": \"server.http_bound\", \"addr\": \"127.0.0.1:1\"}'\n"
              "echo '{\"kind\": \"server.tcp_bound\", \"addr\": \"127.0.0.1:2\"}'\n")


def script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def shadow_tree(root: Path) -> Path:
    """A directory holding a ``beava/`` package that cannot be imported, like a source
    checkout whose kernels were never compiled."""
    package = root / "beava"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        'raise ImportError("the source tree in the working directory was imported")\n')
    return root


def test_commands() -> None:
    assert installed_server_command() == [sys.executable, "-P", "-m", "beava"]
    assert server_command({"BEAVA_BINARY": "/opt/beava"}) == ["/opt/beava"]
    assert server_command({}) == installed_server_command()


def test_argv_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BEAVA_BINARY", "/opt/beava")
    monkeypatch.setenv("BEAVA_WAL_SYNC_MODE", "periodic")
    monkeypatch.setenv("BEAVA_TCP_PORT", "9999")
    inherited = ServerProcess(["--memory-only"], env={"BEAVA_TEST_MODE": "1"})
    assert inherited.argv == ["/opt/beava", "--config", os.devnull, "--memory-only"]
    assert inherited.env["BEAVA_WAL_SYNC_MODE"] == "periodic"
    assert inherited.env["BEAVA_TEST_MODE"] == "1"
    assert {k: inherited.env[k] for k in EPHEMERAL_PORTS} == EPHEMERAL_PORTS  # ports win
    scrubbed = ServerProcess(inherit_beava=False)
    assert scrubbed.argv == [*installed_server_command(), "--config", os.devnull]
    assert not [key for key in scrubbed.env if key.startswith("BEAVA_")
                and key not in EPHEMERAL_PORTS]
    assert server_env({"BEAVA_TCP_PORT": "7"}, inherit_beava=False)["BEAVA_TCP_PORT"] == "7"


def test_a_real_server_start_and_stop() -> None:
    server = ServerProcess(["--memory-only", "--test-mode"], inherit_beava=False).start()
    try:
        server.wait_ready(20)
        assert set(server.addrs) == {"http", "tcp", "admin"}
        assert not [addr for addr in server.addrs.values() if addr.endswith(":0")]
        assert server.bound_at is not None and server.bound_at >= server.started_at
        kinds = server.kinds()
        assert kinds.index("server.tcp_bound") < kinds.index("server.ready")
    finally:
        code = server.stop()
    assert code == 0
    assert server.stderr_tail() == []


def test_a_real_server_failing_shows_its_stderr() -> None:
    server = ServerProcess(["--no-such-flag"], inherit_beava=False).start()
    with pytest.raises(ServerStartError) as info:
        server.wait_bound(20)
    assert info.value.returncode == 2
    message = str(info.value)
    assert "exited with code 2 before reporting its listening addresses" in message
    assert "unrecognized arguments: --no-such-flag" in message
    assert "-P -m beava --config" in message  # the command is named


def test_stderr_of_a_failing_binary_is_in_the_error(tmp_path: Path) -> None:
    failing = script(tmp_path, "failing",
                     'echo "not json"\n'
                     'echo "Traceback (most recent call last):" >&2\n'
                     'echo "ImportError: cannot import name \'kernel\' from \'beava._fast\'" >&2\n'
                     "exit 1\n")
    server = ServerProcess(command=[failing]).start()
    with pytest.raises(ServerStartError) as info:
        server.wait_bound(10)
    assert info.value.returncode == 1
    assert info.value.stderr_tail == [
        "Traceback (most recent call last):",
        "ImportError: cannot import name 'kernel' from 'beava._fast'"]
    assert "  ImportError: cannot import name 'kernel' from 'beava._fast'" in str(info.value)
    assert server.raw_lines == ["not json"] and server.lines == []


def test_stderr_tail_is_bounded(tmp_path: Path) -> None:
    noisy = script(tmp_path, "noisy",
                   'i=0\nwhile [ $i -lt 500 ]; do echo "line $i" >&2; i=$((i+1)); done\n'
                   "head -c 20000 /dev/zero | tr '\\0' x >&2\necho >&2\necho last >&2\n"
                   "exit 4\n")
    server = ServerProcess(command=[noisy]).start()
    with pytest.raises(ServerStartError) as info:
        server.wait_bound(10)
    tail = info.value.stderr_tail
    assert len(tail) == STDERR_TAIL_LINES and tail[-1] == "last"
    assert max(len(line) for line in tail) <= 4096  # a long line is kept in pieces
    assert "line 499" in tail and "line 0" not in tail


def test_silent_server_is_killed_after_the_timeout(tmp_path: Path) -> None:
    silent = script(tmp_path, "silent", 'echo "starting up" >&2\nexec sleep 30\n')
    server = ServerProcess(command=[silent]).start()
    started = time.monotonic()
    with pytest.raises(ServerStartError) as info:
        server.wait_bound(0.5)
    assert time.monotonic() - started < 5
    assert "did not report its listening addresses within 0.5s" in str(info.value)
    assert info.value.returncode is None and info.value.stderr_tail == ["starting up"]
    assert server.poll() is not None  # killed


def test_stop_escalates_to_sigkill(tmp_path: Path) -> None:
    stubborn = script(tmp_path, "stubborn", "trap '' TERM\n" + BIND_LINES + "exec sleep 30\n")
    server = ServerProcess(command=[stubborn]).start()
    server.wait_bound(10)
    assert server.addrs == {"http": "127.0.0.1:1", "tcp": "127.0.0.1:2"}
    started = time.monotonic()
    assert server.stop(timeout=0.5) == -9
    assert time.monotonic() - started < 5


def test_keep_output_off_records_only_addresses(tmp_path: Path) -> None:
    fake = script(tmp_path, "fake", "echo hello\n" + BIND_LINES
                  + "echo '{\"kind\": \"server.ready\"}'\nexec sleep 30\n")
    server = ServerProcess(command=[fake], keep_output=False).start()
    try:
        server.wait_ready(10)
        assert server.ready and set(server.addrs) == {"http", "tcp"}
        assert server.lines == [] and server.raw_lines == []
    finally:
        server.kill()


def test_a_source_tree_in_the_working_directory_is_not_imported(tmp_path: Path) -> None:
    """``python -m beava`` from a checkout imports its uncompiled ``beava/``; the launcher's
    ``-P`` runs the installed server instead."""
    cwd = shadow_tree(tmp_path / "checkout")
    server = ServerProcess(["--memory-only"], inherit_beava=False, cwd=cwd).start()
    try:
        server.wait_ready(20)
    finally:
        assert server.stop() == 0
    # The same start without -P imports the shadow package: what -P protects against.
    plain = ServerProcess(["--memory-only"], command=[sys.executable, "-m", "beava"],
                          inherit_beava=False, cwd=cwd).start()
    with pytest.raises(ServerStartError, match="source tree in the working directory"):
        plain.wait_bound(20)
