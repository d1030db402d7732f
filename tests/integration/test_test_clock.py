"""The test clock (docs/wire.md, an extension): POST /test/clock and opcode 0x0041 pin a
test-mode server's clock, so windowed features can be tested exactly; the SDK's
``App.set_time`` / ``App.advance`` drive it."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator

import pytest

import beava as bv
from beava_client.opcodes import OP_ERROR, OP_TEST_CLOCK
from tests.support import BeavaProcess, FrameConn, http_request

HOUR_MS = 3_600_000
T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z


@bv.event
class Visit:
    user_id: str
    ms: float


@bv.table(key="user_id")
def Visits(v: Visit) -> bv.Table:
    return v.group_by("user_id").agg(
        visits_1h=bv.count(window="1h"),
        visits=bv.count(),
        ms_1h=bv.sum("ms", window="1h"),
    )


def post(server: BeavaProcess, body: bytes) -> tuple[int, dict[str, object]]:
    status, _, raw = http_request(server.http, "POST", "/test/clock", body,
                                  {"Content-Type": "application/json"})
    return status, json.loads(raw)


@pytest.fixture
def app(clean_server: BeavaProcess) -> Iterator[bv.App]:
    with bv.App(f"tcp://{clean_server.addrs['tcp']}") as app:
        app.register(Visit, Visits)
        yield app
        app.reset()  # back to the wall clock for the next test


def test_http_pins_and_releases_the_clock(app: bv.App, clean_server: BeavaProcess) -> None:
    assert post(clean_server, b'{"now_ms": %d}' % T0) == (200, {"now_ms": T0})
    app.push("Visit", {"user_id": "u1", "ms": 10.0})
    assert post(clean_server, b'{"now_ms": %d}' % (T0 + 60_000)) == (
        200, {"now_ms": T0 + 60_000})
    assert app.get("Visits", "u1") == {"visits_1h": 1, "visits": 1, "ms_1h": 10.0}
    assert post(clean_server, b'{"now_ms": %d}' % (T0 + 2 * HOUR_MS)) == (
        200, {"now_ms": T0 + 2 * HOUR_MS})
    assert app.get("Visits", "u1") == {"visits_1h": 0, "visits": 1, "ms_1h": None}
    assert post(clean_server, b'{"now_ms": null}') == (200, {"now_ms": None})


def test_sdk_set_time_and_advance(app: bv.App) -> None:
    app.set_time(datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.UTC))
    app.push("Visit", {"user_id": "u2", "ms": 1.0})
    app.advance(minutes=30)
    app.push("Visit", {"user_id": "u2", "ms": 2.0})
    assert app.get("Visits", "u2") == {"visits_1h": 2, "visits": 2, "ms_1h": 3.0}
    app.advance(minutes=45)  # the first visit is now 75 minutes old
    assert app.get("Visits", "u2") == {"visits_1h": 1, "visits": 2, "ms_1h": 2.0}
    app.set_time(T0 + 10 * HOUR_MS)
    assert app.get("Visits", "u2") == {"visits_1h": 0, "visits": 2, "ms_1h": None}
    app.set_time(None)
    with pytest.raises(TypeError):
        app.set_time(1.5)  # type: ignore[arg-type]


def test_framed_tcp_opcode(clean_server: BeavaProcess) -> None:
    conn = FrameConn(clean_server.tcp)
    op, _, payload = conn.request(OP_TEST_CLOCK, 1, b'{"now_ms": 5}')
    assert (op, json.loads(payload)) == (OP_TEST_CLOCK, {"now_ms": 5})
    op, _, payload = conn.request(OP_TEST_CLOCK, 1, b'{"now_ms": -1}')
    assert op == OP_ERROR
    assert json.loads(payload)["error"]["code"] == "invalid_test_clock"
    op, _, payload = conn.request(OP_TEST_CLOCK, 1, b'{"now_ms": null}')
    assert (op, json.loads(payload)) == (OP_TEST_CLOCK, {"now_ms": None})
    conn.close()


@pytest.mark.parametrize("body", [b"", b"[]", b"{}", b'{"now_ms": "5"}', b'{"now_ms": 1.5}',
                                  b'{"now_ms": true}', b'{"now_ms": 9223372036854775808}'])
def test_bad_bodies_are_client_errors(clean_server: BeavaProcess, body: bytes) -> None:
    status, reply = post(clean_server, body)
    assert status == 400
    assert reply["error"]["code"] == "invalid_test_clock"  # type: ignore[index]


def test_outside_test_mode_the_clock_is_refused() -> None:
    server = BeavaProcess(test_mode=False)
    try:
        status, reply = post(server, b'{"now_ms": 5}')
        assert status == 403
        assert reply["error"]["code"] == "test_mode_required"  # type: ignore[index]
        conn = FrameConn(server.tcp)
        op, _, payload = conn.request(OP_TEST_CLOCK, 1, b'{"now_ms": 5}')
        conn.close()
        assert op == OP_ERROR
        assert json.loads(payload)["error"]["code"] == "test_mode_required"
    finally:
        server.terminate()
