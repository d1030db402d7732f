"""Looking inside a running server: `beava registry`, `beava get`, `beava stats`, and the
metrics they read (rejections per event and code, entities per table)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

import beava as bv
from beava.cli import main
from beava.cli_inspect import parse_metrics, stat_lines
from beava.launcher import ServerStartError
from tests.card_pipeline import Card, CardMerchant, CardSpend
from tests.support import BeavaProcess, http_request


@pytest.fixture
def loaded(clean_server: BeavaProcess) -> Iterator[BeavaProcess]:
    with bv.App(f"tcp://{clean_server.addrs['tcp']}") as app:
        app.register(Card, CardSpend, CardMerchant)
        app.push("Card", {"user_id": "u1", "merchant": "cafe", "amount": 4.5})
        app.push("Card", {"user_id": "u1", "merchant": "shop", "amount": 10.0})
        app.push("Card", {"user_id": "u2", "merchant": "cafe", "amount": 1.0})
    yield clean_server


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    from beava.cli_inspect import main as inspect_main

    code = inspect_main(argv, out)
    return code, out.getvalue()


def metrics(server: BeavaProcess) -> dict[str, float]:
    return parse_metrics(http_request(server.admin, "GET", "/metrics")[2].decode())


def test_registry_command(loaded: BeavaProcess, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["registry", "--url", loaded.http_url]) == 0
    text = capsys.readouterr().out
    assert "event Card: amount f64, merchant str, user_id str" in text
    assert "table CardSpend [key: user_id] <- Card" in text
    assert "table CardMerchant [key: user_id, merchant] <- Card" in text
    assert "spend  sum(field=\"amount\")  lifetime" in text
    assert "n      count()  1h" in text
    code, out = run(["registry", "--json", "--url", f"tcp://{loaded.addrs['tcp']}"])
    assert code == 0
    doc = json.loads(out)
    assert doc == json.loads(http_request(loaded.admin, "GET", "/registry")[2])


def test_get_command(loaded: BeavaProcess, capsys: pytest.CaptureFixture[str]) -> None:
    tcp = f"tcp://{loaded.addrs['tcp']}"
    assert run(["get", "CardSpend", "u1", "--url", tcp]) == (
        0, json.dumps({"n": 2, "spend": 14.5}, indent=2) + "\n")
    code, out = run(["get", "CardSpend", "u1", "--features", "spend", "--url", loaded.http_url])
    assert (code, json.loads(out)) == (0, {"spend": 14.5})
    assert json.loads(run(["get", "CardMerchant", "u1|cafe", "--url", tcp])[1]) == {"visits": 1}
    assert json.loads(run(["get", "CardSpend", "nobody", "--url", tcp])[1]) == {}
    capsys.readouterr()
    assert run(["get", "CardSpnd", "u1", "--url", tcp])[0] == 1
    err = capsys.readouterr().err
    assert "error: [unknown_table]" in err and "did you mean 'CardSpend'?" in err


def test_unreachable_server(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["registry", "--url", "tcp://127.0.0.1:1"])[0] == 1
    assert "error: cannot reach tcp://127.0.0.1:1" in capsys.readouterr().err
    assert run(["stats", "--url", "http://127.0.0.1:1", "--count", "1"])[0] == 1
    assert "error: cannot reach http://127.0.0.1:1" in capsys.readouterr().err


def test_tokens(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    reader, admin = "read-token-0000000001", "admin-token-000000003"
    server = BeavaProcess(env={"BEAVA_AUTH_TOKENS": f"{reader}:read;{admin}:admin"})
    try:
        tcp, admin_url = f"tcp://{server.addrs['tcp']}", f"http://{server.addrs['admin']}"
        monkeypatch.delenv("BEAVA_TOKEN", raising=False)
        assert run(["registry", "--url", tcp])[0] == 1
        assert "unauthenticated" in capsys.readouterr().err
        assert run(["registry", "--url", tcp, "--token", reader])[0] == 0
        assert run(["stats", "--url", admin_url, "--count", "1", "--token", reader])[0] == 1
        assert "needs a token with the admin scope" in capsys.readouterr().err
        monkeypatch.setenv("BEAVA_TOKEN", admin)  # the default token
        code, out = run(["stats", "--url", admin_url, "--count", "1"])
        assert code == 0 and len(out.splitlines()) == 3  # the server, the header, one line
        # an admin URL names its data plane only to an admin token
        assert run(["registry", "--url", admin_url, "--token", reader])[0] == 1
        assert "pass the data-plane URL" in capsys.readouterr().err
        assert run(["registry", "--url", admin_url])[0] == 0
        assert run(["get", "Nothing", "--url", server.http_url])[0] == 1
        assert "[unknown_table]" in capsys.readouterr().err
    finally:
        server.terminate()


def test_stats_command_prints_live_rates(loaded: BeavaProcess) -> None:
    admin = f"http://{loaded.addrs['admin']}"
    code, out = run(["stats", "--url", admin, "--interval", "0.05", "--count", "3"])
    assert code == 0
    server, header, *rows = out.splitlines()
    assert server == (f"server: pid {loaded.proc.pid}, tcp {loaded.addrs['tcp']}, "
                      f"http {loaded.addrs['http']}, admin {loaded.addrs['admin']}; memory only")
    assert header.split() == ["pushes", "push/s", "rejected", "rej/s", "replays", "read/s",
                              "entities", "fsync/s", "registry"]
    assert len(rows) == 3
    first = rows[0].split()
    assert first[1] == "-" and first[3] == "-" and first[5] == "-"  # no rate before a second
    assert first[6] == "5"  # 2 CardSpend + 3 CardMerchant rows
    assert rows[2].split()[1] == "0"  # nothing pushed meanwhile


def test_every_command_takes_either_url(loaded: BeavaProcess,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    admin = f"http://{loaded.addrs['admin']}"
    tcp = f"tcp://{loaded.addrs['tcp']}"
    # registry and get given the admin sidecar's URL read through its server's data plane
    assert run(["registry", "--json", "--url", admin])[1] == run(
        ["registry", "--json", "--url", tcp])[1]
    assert json.loads(run(["get", "CardSpend", "u1", "--url", admin])[1]) == {
        "n": 2, "spend": 14.5}
    # stats given a data-plane URL looks for the sidecar at the default admin port of that
    # host; this server's sidecar is elsewhere, so it says what to pass (or, when another
    # server's sidecar answers there, warns that the figures are that server's)
    capsys.readouterr()
    code, out = run(["stats", "--url", tcp, "--count", "1"])
    err = capsys.readouterr().err
    if code == 1:
        assert f"{tcp} is a data-plane URL" in err
        assert "pass --url with the server's admin sidecar URL" in err
    else:
        assert "belongs to another server" in err and f"pid {loaded.proc.pid}," not in out


def _start_on_default_admin_port() -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    """A server that asks for the default admin address without naming it: its
    process and the addresses its bind lines report."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BEAVA_")}
    env.update({"BEAVA_LISTEN_ADDR": "127.0.0.1:0", "BEAVA_TCP_PORT": "0"})
    proc = subprocess.Popen([sys.executable, "-m", "beava", "--config", "/dev/null",
                             "--memory-only"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=env)
    addrs = {}
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = json.loads(raw)
        if line["kind"].endswith("_bound"):
            addrs[line["kind"].split(".")[1].removesuffix("_bound")] = line["addr"]
        if line["kind"] == "server.ready":
            break
    return proc, addrs


def test_stats_warns_when_the_default_sidecar_is_another_servers(
        capsys: pytest.CaptureFixture[str]) -> None:
    try:  # the first server holds the default admin address
        first = BeavaProcess(env={"BEAVA_ADMIN_ADDR": "127.0.0.1:8090"})
    except ServerStartError:
        pytest.skip("the default admin port is held by something else")
    try:
        second, addrs = _start_on_default_admin_port()
        try:
            assert "admin" not in addrs
            second_tcp = f"tcp://{addrs['tcp']}"
            capsys.readouterr()
            code, out = run(["stats", "--url", second_tcp, "--count", "1"])
            err = capsys.readouterr().err
            assert code == 0
            # the figures are the first server's, and both the output and the warning say so
            assert out.startswith(f"server: pid {first.proc.pid}, ")
            assert (f"warning: the admin sidecar at http://127.0.0.1:8090 belongs to another "
                    f"server (pid {first.proc.pid}, ") in err
            assert f"not to the one at {second_tcp}" in err
            # the first server's own data-plane URL finds its sidecar without a warning
            code, out = run(["stats", "--url", f"tcp://{first.addrs['tcp']}", "--count", "1"])
            assert code == 0 and capsys.readouterr().err == ""
            assert out.startswith(f"server: pid {first.proc.pid}, ")
        finally:
            second.send_signal(signal.SIGTERM)
            _, stderr = second.communicate(timeout=10)
        assert "the default admin address 127.0.0.1:8090 is busy" in stderr.decode()
    finally:
        first.terminate()


def test_stat_lines_compute_rates() -> None:
    samples = iter([(10.0, {"beava_pushes_total": 100.0}),
                    (12.0, {"beava_pushes_total": 300.0,
                            'beava_push_rejections_total{code="invalid_event",event="E"}': 4.0,
                            'beava_push_rejections_total{code="x",event="F"}': 2.0})])
    _, first, second = list(stat_lines(samples))
    assert first.split()[:4] == ["100", "-", "0", "-"]
    assert second.split()[:4] == ["300", "100", "6", "3"]


def test_stat_lines_count_reads_of_every_read_command() -> None:
    def reads(get: float, batch: float) -> dict[str, float]:
        return {'beava_request_duration_seconds_count{op="get"}': get,
                'beava_request_duration_seconds_count{op="batch_get"}': batch,
                'beava_request_duration_seconds_count{op="push"}': 1000.0 * get,
                'beava_request_duration_seconds_bucket{le="0.001",op="get"}': get}

    _, _, second = list(stat_lines(iter([(1.0, reads(10, 2)), (3.0, reads(30, 6))])))
    assert second.split()[5] == "12"  # (20 + 4) reads in 2 s; pushes and buckets not counted


def test_cli_subcommand_runs_as_a_program(loaded: BeavaProcess) -> None:
    proc = subprocess.run([sys.executable, "-m", "beava", "get", "CardSpend", "u2", "--url",
                           f"tcp://{loaded.addrs['tcp']}"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"n": 1, "spend": 1.0}


def test_metrics_count_rejections_by_event_and_code(loaded: BeavaProcess) -> None:
    before = metrics(loaded)
    with bv.App(f"tcp://{loaded.addrs['tcp']}") as app:
        for bad in ({"user_id": "u1", "merchant": "m", "amount": "1"},
                    {"user_id": "u1", "merchant": "m"},
                    {"user_id": "u1", "merchant": "m", "amount": 1.0, "extra": 1}):
            with pytest.raises(bv.PushError):
                app.push("Card", bad)
        with pytest.raises(bv.PushError):
            app.push("Nope-" + "x" * 20, {"a": 1})
        out = app.push_many("Card", [{"user_id": "u3", "merchant": "m", "amount": 2.0},
                                     {"user_id": 3}])
        assert out["acks"] == 1
    after = metrics(loaded)

    def delta(event: str, code: str) -> float:
        series = f'beava_push_rejections_total{{code="{code}",event="{event}"}}'
        return after.get(series, 0.0) - before.get(series, 0.0)

    assert delta("Card", "invalid_event") == 3.0
    assert delta("Card", "unknown_field_v0") == 1.0
    assert delta("<unregistered>", "event_not_found") == 1.0
    assert after['beava_table_entities{table="CardSpend"}'] == 3.0
    assert after['beava_table_entities{table="CardMerchant"}'] == 4.0
