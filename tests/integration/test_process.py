"""The ``beava`` process: command line, configuration, bind lines, signals
(spec/server.md)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from beava import __version__
from tests.support import BeavaProcess, FrameConn, http_request


def run_beava(*args: str, env: dict[str, str] | None = None, timeout: float = 10
              ) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("BEAVA_")}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "beava", *args], capture_output=True,
                          env=full_env, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("flag", ["--help", "-h", "help"])
def test_help_lists_every_option(flag):
    result = run_beava(flag)
    assert result.returncode == 0
    out = result.stdout.decode()
    for option in ("--config", "--http-addr", "--tcp-addr", "--admin-addr", "--data-dir",
                   "--memory-only", "--test-mode", "--version", "BEAVA_WAL_SYNC_MODE"):
        assert option in out
    test_mode = " ".join(out[out.rindex("--test-mode"):].split("--auth-token-file")[0].split())
    assert "test clock" in test_mode and "set_time" in test_mode


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag):
    result = run_beava(flag)
    assert (result.returncode, result.stdout) == (0, f"beava {__version__}\n".encode())


@pytest.mark.parametrize("args", [["--bogus"], ["--http-addr"], ["nonsense-command"]])
def test_usage_errors_exit_2(args):
    result = run_beava(*args)
    assert result.returncode == 2
    assert result.stderr and not result.stdout


@pytest.mark.parametrize("args,env,needle", [
    (["--http-addr", "localhost:8080"], {}, "localhost"),
    (["--tcp-addr", "127.0.0.1:99999"], {}, "99999"),
    ([], {"BEAVA_TCP_PORT": "abc"}, "BEAVA_TCP_PORT"),
    ([], {"BEAVA_LISTEN_ADDR": "nohost"}, "BEAVA_LISTEN_ADDR"),
    ([], {"BEAVA_WAL_SYNC_MODE": "sometimes"}, "BEAVA_WAL_SYNC_MODE"),
    ([], {"BEAVA_LOG_LEVEL": "loud"}, "BEAVA_LOG_LEVEL"),
    ([], {"BEAVA_SNAPSHOT_INTERVAL_MS": "-1"}, "BEAVA_SNAPSHOT_INTERVAL_MS"),
    (["--config", "/nonexistent/beava.yaml"], {}, "config file not found"),
])
def test_configuration_errors_exit_1(args, env, needle):
    result = run_beava("--memory-only", *args, env=env)
    assert result.returncode == 1
    err = result.stderr.decode()
    assert err.startswith("Error: ") and needle in err


def test_yaml_unknown_key_and_wrong_type(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("tcp:\n  port: 0\n  colour: blue\n")
    result = run_beava("--config", str(bad), "--memory-only")
    assert result.returncode == 1 and "tcp.colour" in result.stderr.decode()
    bad.write_text("test_mode: 3\n")
    assert run_beava("--config", str(bad), "--memory-only").returncode == 1
    bad.write_text("- a list\n")
    assert run_beava("--config", str(bad), "--memory-only").returncode == 1


def test_yaml_values_apply_and_env_and_cli_win(tmp_path):
    cfg = tmp_path / "beava.yaml"
    cfg.write_text("listen_addr: 127.0.0.1:0\nadmin_addr: 127.0.0.1:0\ntest_mode: true\n"
                   "memory_only: true\ntcp:\n  host: 127.0.0.1\n  port: 1\n"
                   "  max_frame_bytes: 8\n")
    proc = BeavaProcess("--config", str(cfg), env={"BEAVA_TCP_PORT": "0"},
                        memory_only=False, test_mode=False)
    try:
        assert "recovery.skipped_memory_mode" in proc.kinds()   # YAML memory_only
        assert "server.test_mode_enabled" in proc.kinds()       # YAML test_mode
        conn = FrameConn(proc.tcp)                              # env port 0 beat YAML port 1
        conn.send(b"\x00\x00\x00\x0c\x00\x00\x01" + b"x" * 9)   # YAML frame limit 8
        reply = conn.recv_frame()
        assert json.loads(reply[2])["error"]["code"] == "frame_too_large"
    finally:
        proc.terminate()
    starting = next(line for line in proc.lines if line["kind"] == "server.starting")
    assert starting["version"] == __version__ and starting["pid"] > 0
    assert "--config" in starting["config_source"]


def test_log_lines_shape_and_order(server):
    kinds = server.kinds()
    order = ["server.starting", "server.http_bound", "server.tcp_bound", "server.admin_bound",
             "server.test_mode_enabled", "recovery.skipped_memory_mode", "server.ready"]
    assert [k for k in kinds if k in order][:len(order)] == order
    for line in server.lines[:len(order)]:
        assert set(line) >= {"timestamp", "level", "message", "kind", "target"}
        assert line["timestamp"].endswith("Z") and len(line["timestamp"]) == 27
    bound = {line["kind"]: line["addr"] for line in server.lines if "addr" in line}
    assert not bound["server.http_bound"].endswith(":0")


def test_sigterm_graceful_exit_with_open_connections():
    proc = BeavaProcess()
    conn = FrameConn(proc.tcp)
    assert conn.request(0x0000)[0] == 0x0000
    started = time.monotonic()
    code = proc.terminate(timeout=10)
    assert code == 0
    assert time.monotonic() - started < 5
    assert conn.is_closed()
    kinds = proc.kinds()
    assert "server.shutdown_initiated" in kinds and kinds[-1] == "server.shutdown_complete"
    assert next(line for line in proc.lines
                if line["kind"] == "server.shutdown_initiated")["signal"] == "SIGTERM"


def test_sigint_also_shuts_down():
    proc = BeavaProcess()
    proc.proc.send_signal(signal.SIGINT)
    assert proc.proc.wait(10) == 0


def test_requests_received_before_sigterm_are_answered():
    proc = BeavaProcess()
    conn = FrameConn(proc.tcp)
    conn.send(b"".join(b"\x00\x00\x00\x03\x00\x00\x01" for _ in range(200)))
    proc.proc.send_signal(signal.SIGTERM)
    answered = 0
    while conn.recv_frame() is not None:
        answered += 1
    assert answered == 200
    assert proc.proc.wait(10) == 0


def test_sigkill_makes_client_calls_fail_not_hang():
    proc = BeavaProcess()
    conn = FrameConn(proc.tcp, timeout=5)
    proc.kill()
    with pytest.raises(OSError):
        for _ in range(3):
            conn.send(b"\x00\x00\x00\x03\x00\x00\x01")
            if conn.recv_frame() is None:
                raise ConnectionResetError("EOF")


def test_data_dir_is_created_and_locked(tmp_path):
    first = BeavaProcess("--data-dir", str(tmp_path), memory_only=False)
    try:
        assert (tmp_path / "wal" / "LOCK").exists() and (tmp_path / "snapshots").is_dir()
        second = run_beava("--config", "/dev/null", "--data-dir", str(tmp_path),
                           env={"BEAVA_LISTEN_ADDR": "127.0.0.1:0", "BEAVA_TCP_PORT": "0",
                                "BEAVA_ADMIN_ADDR": "127.0.0.1:0"})
        assert second.returncode == 3
        fatal = [json.loads(x) for x in second.stdout.decode().splitlines()
                 if '"server.fatal"' in x]
        assert fatal and fatal[0]["reason"] == "data directory locked"
    finally:
        assert first.terminate() == 0


def test_unusable_data_dir_exits_3_with_a_message(tmp_path):
    # the lock file cannot be opened (here: a directory in its place; likewise a read-only
    # or foreign directory): exit 3, "Error: " on stderr, no traceback
    (tmp_path / "wal" / "LOCK").mkdir(parents=True)
    result = run_beava("--config", "/dev/null", "--data-dir", str(tmp_path),
                       env={"BEAVA_LISTEN_ADDR": "127.0.0.1:0", "BEAVA_TCP_PORT": "0",
                            "BEAVA_ADMIN_ADDR": "127.0.0.1:0"})
    assert result.returncode == 3
    stderr = result.stderr.decode()
    assert stderr.startswith("Error: data directory unusable: cannot open ")
    assert "Traceback" not in stderr
    fatal = [json.loads(x) for x in result.stdout.decode().splitlines() if '"server.fatal"' in x]
    assert fatal and fatal[0]["exit_code"] == 3


def test_busy_explicit_admin_port_is_fatal_default_is_not():
    blocker = socket.socket()
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    busy = f"127.0.0.1:{blocker.getsockname()[1]}"
    try:
        result = run_beava("--config", "/dev/null", "--memory-only", "--admin-addr", busy,
                           env={"BEAVA_LISTEN_ADDR": "127.0.0.1:0", "BEAVA_TCP_PORT": "0"})
        assert result.returncode == 1 and "admin" in result.stderr.decode()
        result = run_beava("--config", "/dev/null", "--memory-only", "--http-addr", busy,
                           env={"BEAVA_TCP_PORT": "0", "BEAVA_ADMIN_ADDR": "127.0.0.1:0"})
        assert result.returncode == 1
    finally:
        blocker.close()


def test_default_admin_port_busy_warns_and_continues():
    blocker = socket.socket()
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        blocker.bind(("127.0.0.1", 8090))
    except OSError:
        pytest.skip("default admin port is held by something else")
    blocker.listen()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("BEAVA_")}
        env.update({"BEAVA_LISTEN_ADDR": "127.0.0.1:0", "BEAVA_TCP_PORT": "0"})
        proc = subprocess.Popen([sys.executable, "-m", "beava", "--config", "/dev/null",
                                 "--memory-only"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)
        kinds = []
        assert proc.stdout is not None
        for raw in proc.stdout:
            kind = json.loads(raw)["kind"]
            kinds.append(kind)
            if kind == "server.ready":
                break
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=10)
        assert proc.returncode == 0
        assert "server.admin_bind_failed" in kinds and "server.admin_bound" not in kinds
        # besides the JSON WARN, a plain notice naming the busy address and the flag
        notice = stderr.decode()
        assert "the default admin address 127.0.0.1:8090 is busy" in notice
        assert "--admin-addr" in notice and "BEAVA_ADMIN_ADDR" in notice
    finally:
        blocker.close()


def test_ipv6_address_formatting():
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        probe = socket.socket(socket.AF_INET6)
        probe.bind(("::1", 0))
        probe.close()
    except OSError:
        pytest.skip("no IPv6 loopback")
    proc = BeavaProcess("--http-addr", "[::1]:0")
    try:
        assert proc.addrs["http"].startswith("[::1]:")
        host, port = proc.addrs["http"].rsplit(":", 1)
        status, _, _ = http_request(("::1", int(port)), "POST", "/ping")
        assert status == 200
    finally:
        proc.terminate()


def test_pushes_received_before_sigterm_are_answered_and_durable(tmp_path):
    """Strict mode, a deep pipeline: every fully received push is acknowledged after its
    fsync, then the server exits 0, and a restart holds every acknowledged push."""
    import msgspec

    nodes = {"nodes": [
        {"kind": "event", "name": "E", "schema": {"fields": {"k": "str"}}},
        {"kind": "derivation", "name": "T", "output_kind": "table", "upstreams": ["E"],
         "table_primary_key": ["k"],
         "ops": [{"op": "group_by", "keys": ["k"], "agg": {"n": {"op": "count"}}}]}]}
    proc = BeavaProcess("--data-dir", str(tmp_path), memory_only=False)
    conn = FrameConn(proc.tcp)
    assert conn.request(0x0001, 1, json.dumps(nodes).encode())[0] == 0x0001
    push = msgspec.msgpack.encode({"event": "E", "body": {"k": "a"}})
    frame = (len(push) + 3).to_bytes(4, "big") + \
        b"\x00\x10\x02" + push
    conn.send(frame * 3000)
    proc.proc.send_signal(signal.SIGTERM)
    acked = 0
    while (reply := conn.recv_frame()) is not None:
        assert reply[0] == 0x0010
        acked += 1
    assert proc.proc.wait(10) == 0
    assert acked > 0
    again = BeavaProcess("--data-dir", str(tmp_path), memory_only=False)
    try:
        row = FrameConn(again.tcp).request(0x0020, 1, b'{"table":"T","key":"a"}')
        assert json.loads(row[2])["n"] >= acked
    finally:
        again.terminate()
