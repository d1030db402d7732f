"""The black-box conformance vectors (vectors/, copies of the shared set), run by the
conformance runner (runner.py, a copy too) against a live server (one run per vector file;
one test per scenario), once memory-only and once with the default strict WAL (every push
acknowledged only after its fsync).
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache

import pytest

from tests.support import CONFORMANCE_RUNNER, CONFORMANCE_VECTORS, BeavaProcess

# Every file of the shared set; a missing one fails the run (never skipped).
VECTOR_FILES = ("batch_get.json", "chains.json", "events.json", "get.json", "http.json",
                "ops_buffer.json", "ops_core.json", "ops_decay.json", "ops_geo.json",
                "ops_recency.json", "ops_sketch.json", "ops_velocity.json", "push.json",
                "register.json", "register_errors.json", "tables.json", "tcp.json")


def _scenarios() -> list[tuple[str, str]]:
    out = []
    for name in VECTOR_FILES:
        doc = json.loads((CONFORMANCE_VECTORS / name).read_text())
        out.extend((name, sc["name"]) for sc in doc["scenarios"])
    return out


def test_every_vector_file_is_run() -> None:
    assert sorted(p.name for p in CONFORMANCE_VECTORS.glob("*.json")) == sorted(VECTOR_FILES)
    assert CONFORMANCE_RUNNER.is_file()


@pytest.fixture(scope="module", params=["memory-only", "strict-wal"])
def conformance_server(request, tmp_path_factory):
    if request.param == "memory-only":
        proc = BeavaProcess()
    else:
        data = tmp_path_factory.mktemp("conformance-data")
        proc = BeavaProcess("--data-dir", str(data), memory_only=False)
    yield proc
    proc.terminate()


@cache
def _run_file(http: str, tcp: str, name: str) -> dict[str, str]:
    result = subprocess.run([sys.executable, str(CONFORMANCE_RUNNER), "--http", http,
                             "--tcp", tcp, str(CONFORMANCE_VECTORS / name)],
                            capture_output=True, text=True, timeout=600)
    outcomes = {}
    for line in result.stdout.splitlines():
        verdict, _, rest = line.partition(" ")
        if verdict in ("PASS", "FAIL"):
            scenario, _, detail = rest.partition(": ")
            outcomes[scenario] = "" if verdict == "PASS" else detail or "failed"
    assert outcomes, f"the runner reported nothing: {result.stdout[-2000:]} {result.stderr}"
    return outcomes


@pytest.mark.parametrize("file,scenario", _scenarios())
def test_scenario(conformance_server, file, scenario):
    outcomes = _run_file(conformance_server.http_url, conformance_server.addrs["tcp"], file)
    assert scenario in outcomes, f"runner did not report {scenario}"
    failure = outcomes[scenario]
    assert not failure, failure
