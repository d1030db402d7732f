"""The TypeScript SDK (sdk/typescript): `npm ci` from its lockfile, then `npm test`: strict
`tsc`, then its `node --test` suite, which starts real servers from this venv's Python
(compile parity with the Python SDK, the clients, the cross-SDK run, the conformance
replay). Skipped when Node.js is missing, except under CI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.support import REPO

PACKAGE = REPO / "sdk" / "typescript"


def _npm(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BEAVA_PYTHON": sys.executable}
    return subprocess.run(["npm", *args], cwd=PACKAGE, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_typescript_sdk() -> None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        if os.environ.get("CI"):
            pytest.fail("Node.js (node, npm) is required under CI for the TypeScript SDK")
        pytest.skip("Node.js is not installed")
    # `npm test` compiles with strict tsc (any type error fails it), then runs node --test.
    for args, timeout in ((("ci", "--no-audit", "--no-fund"), 300), (("test",), 600)):
        proc = _npm(*args, timeout=timeout)
        output = f"{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
        assert proc.returncode == 0, f"npm {' '.join(args)}:\n{output}"
