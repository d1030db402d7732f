"""The examples/ scripts run end to end: in embed mode (no argument) and against a running
server (URL argument); each registers, pushes, reads and prints its decisions."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import BeavaProcess

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

# example -> lines its output must contain (decisions computed from live features)
EXPECTED = {
    "agent_runtime_guardrails.py": [
        " planner ALLOW    within limits",
        "looper THROTTLE 12 calls in the last minute",
        "flaky HALT     3 failed calls in a row",
        "'calls_1m': 12",
        "'failure_streak': 3",
    ],
    "marketplace_reranking.py": [
        "shopper alice: {'favourite_category': [{'count': 3, 'value': 'home'}], "
        "'typical_price': 45.0}",
        "1. lamp-01   score 2.337  views 11  sales 4",
        "2. rug-11    score 2.290  views  4  sales 2",
        "5. desk-07   score 0.201  views  6  sales 0",
    ],
    "saas_growth_rescue.py": [
        "acme: NONE: healthy (24/40 seats, 4 features)",
        "globex: CSM CALL: 3 urgent tickets (worst open 6.7 h) and only 3/25 seats active",
        "initech: UPSELL: all 12 seats active",
    ],
}


def run(example: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("BEAVA_BINARY", None)
    proc = subprocess.run([sys.executable, str(EXAMPLES / example), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_every_example_is_covered() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("example", sorted(EXPECTED))
def test_example_embed_mode(example: str) -> None:
    out = run(example)
    for line in EXPECTED[example]:
        assert line in out, out


@pytest.mark.parametrize("example", sorted(EXPECTED))
@pytest.mark.parametrize("transport", ["tcp", "http"])
def test_example_against_a_server(clean_server: BeavaProcess, example: str,
                                  transport: str) -> None:
    url = (clean_server.http_url if transport == "http"
           else f"tcp://{clean_server.addrs['tcp']}")
    out = run(example, url)
    for line in EXPECTED[example]:
        assert line in out, out
