"""Shared fixtures: one real beava server per test session, reset before each test.

The servers the tests start are the *installed* package (``python -P -m beava``, see
beava/launcher.py), so the run first checks that it is this checkout (the editable install
of README's test command); otherwise the tests would exercise some other copy of beava.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.support import REPO, BeavaProcess, http_request


def installed_package_dir() -> str:
    """The directory of the ``beava`` package that the launcher's command (this
    interpreter, ``-P``) imports."""
    code = "import importlib.util as u; print(u.find_spec('beava').submodule_search_locations[0])"
    return subprocess.run([sys.executable, "-P", "-c", code], cwd=os.sep, capture_output=True,
                          text=True, check=True, timeout=60).stdout.strip()


def pytest_configure(config: pytest.Config) -> None:
    found = installed_package_dir()
    if os.path.realpath(found) != os.path.realpath(REPO / "beava"):
        raise pytest.UsageError(
            f"the servers started by the tests would run the beava installed at {found}, not "
            f"this checkout ({REPO / 'beava'}); install it in editable mode first: "
            "pip install -e ./client -e '.[test]' -e ./spark_connector")


@pytest.fixture(scope="session")
def server() -> Iterator[BeavaProcess]:
    """A memory-only, test-mode beava server shared by the session."""
    proc = BeavaProcess()
    yield proc
    proc.terminate()


@pytest.fixture
def clean_server(server: BeavaProcess) -> BeavaProcess:
    """The session server after a reset (empty registry, no state)."""
    status, _, _ = http_request(server.http, "POST", "/reset")
    assert status == 200
    return server
