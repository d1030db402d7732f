"""Shared fixtures: one real beava server per test session, reset before each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import BeavaProcess, http_request


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
