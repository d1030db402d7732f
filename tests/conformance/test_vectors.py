"""The shared black-box conformance vectors, run by the shared runner against a live
server (one run per vector file; one test per scenario), once memory-only and once with
the default strict WAL (every push acknowledged only after its fsync).

``PENDING`` lists the scenarios that need parts of beava not built yet (the aggregation
engine). They are strict xfails: a pending scenario that starts passing fails the run
until it is removed from the list.
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache

import pytest

from tests.support import SHARED, BeavaProcess

VECTORS = SHARED / "conformance"
RUNNER = SHARED / "tools" / "conformance.py"

# scenario name -> why it cannot pass yet
PENDING: dict[str, str] = {}


def _scenarios() -> list[tuple[str, str]]:
    if not VECTORS.is_dir():
        return []
    out = []
    for path in sorted(VECTORS.glob("*.json")):
        doc = json.loads(path.read_text())
        out.extend((path.name, sc["name"]) for sc in doc["scenarios"])
    return out


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
    result = subprocess.run([sys.executable, str(RUNNER), "--http", http, "--tcp", tcp,
                             str(VECTORS / name)], capture_output=True, text=True, timeout=600)
    outcomes = {}
    for line in result.stdout.splitlines():
        verdict, _, rest = line.partition(" ")
        if verdict in ("PASS", "FAIL"):
            scenario, _, detail = rest.partition(": ")
            outcomes[scenario] = "" if verdict == "PASS" else detail or "failed"
    return outcomes


@pytest.mark.parametrize("file,scenario", _scenarios())
def test_scenario(conformance_server, file, scenario):
    outcomes = _run_file(conformance_server.http_url, conformance_server.addrs["tcp"], file)
    assert scenario in outcomes, f"runner did not report {scenario}"
    failure = outcomes[scenario]
    if scenario in PENDING:
        if failure:
            pytest.xfail(PENDING[scenario])
        pytest.fail(f"{scenario} passes now: remove it from PENDING")
    assert not failure, failure
