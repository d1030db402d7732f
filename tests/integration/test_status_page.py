"""The admin sidecar's status page in a real headless browser (the system Chromium driven
by Playwright): the registry it shows, live rates that move with pushes, the entity
lookup, and the token prompt when access control is on.

Without Chromium (or the playwright package) the tests skip, except under CI (the
variable ``CI`` set), where they fail: ``.ci/run`` installs Chromium first.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import beava as bv
from tests.card_pipeline import Card, CardMerchant, CardSpend
from tests.support import BeavaProcess, http_request

CHROMIUM = "/usr/bin/chromium"
READ = "read-token-0000000001"
ADMIN = "admin-token-000000003"
TIMEOUT_MS = 15_000
_ERROR_ANSWER = "Failed to load resource: the server responded with a status of 4"


def _missing() -> str | None:
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is not installed (pip install -e '.[test]')"
    if not os.path.exists(CHROMIUM):
        return f"{CHROMIUM} not found (apt-get install chromium)"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    reason = _missing()
    if reason is not None:
        if "CI" in os.environ:
            pytest.fail(f"the status-page browser test cannot run under CI: {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page whose console errors and uncaught exceptions fail the test (a script
    or style refused by the page's Content-Security-Policy shows up there)."""
    context = browser.new_context()
    tab = context.new_page()
    tab.set_default_timeout(TIMEOUT_MS)
    problems: list[str] = []
    tab.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
    tab.on("pageerror", lambda exc: problems.append(str(exc)))
    yield tab
    context.close()
    # an error answer (401 without a token, 404 for an unknown table) is logged by the
    # browser as a failed resource load: the page handles those
    assert [p for p in problems if not p.startswith(_ERROR_ANSWER)] == []


PUSHES = ({"user_id": "u1", "merchant": "cafe", "amount": 4.5},
          {"user_id": "u1", "merchant": "shop", "amount": 10.0},
          {"user_id": "u<2>", "merchant": "<b>cafe</b>", "amount": 1.0})


def load(app: bv.App) -> None:
    app.register(Card, CardSpend, CardMerchant)
    for fields in PUSHES:
        app.push("Card", fields)


def tile(tab: Any, name: str) -> str:
    text: str = tab.locator(f'[data-tile="{name}"] .value').inner_text()
    return text


def number(text: str) -> float:
    """A tile's number (``1.2K``, ``3.40M`` as the page abbreviates them)."""
    scale = {"K": 1e3, "M": 1e6}.get(text[-1:], 1.0)
    return float(text.rstrip("KM")) * scale


def wait_for_tile(tab: Any, name: str, test: Any, what: str) -> str:
    for _ in range(TIMEOUT_MS // 100):
        text = tile(tab, name)
        if text != "-" and test(number(text)):
            return text
        tab.wait_for_timeout(100)
    raise AssertionError(f"tile {name} never showed {what}; it shows {tile(tab, name)!r}")


def entity_row(tab: Any) -> dict[str, str]:
    cells = tab.locator("#entity-row tbody tr").evaluate_all(
        "rows => rows.map(r => [r.cells[0].textContent, r.cells[1].textContent])")
    return dict(cells)


def shows(tab: Any, selector: str, text: str) -> None:
    """Wait until the element holds ``text`` (the page's Content-Security-Policy forbids
    evaluating strings, so no wait_for_function with an expression)."""
    from playwright.sync_api import expect

    expect(tab.locator(selector)).to_contain_text(text)


def look_up(tab: Any, table: str, key: str) -> None:
    tab.fill("#lookup-table", table)
    tab.fill("#lookup-key", key)
    tab.click("#lookup-form button")


class Pusher(threading.Thread):
    """Pushes to its own entity (and a refused push and a read every tenth time) until
    stopped."""

    def __init__(self, server: BeavaProcess) -> None:
        super().__init__(daemon=True)
        self.server = server
        self.stop = threading.Event()
        self.sent = 0

    def run(self) -> None:
        refused = json.dumps({"event": "Card", "data": {"user_id": "load", "merchant": "m",
                                                       "amount": "not a number"}}).encode()
        with bv.App(f"tcp://{self.server.addrs['tcp']}") as app:
            while not self.stop.is_set():
                app.push("Card", {"user_id": "load", "merchant": "m", "amount": 1.0})
                self.sent += 1
                if self.sent % 10 == 0:
                    assert http_request(self.server.http, "POST", "/push", refused)[0] == 400
                    assert app.get("CardSpend", "load")["n"] >= 1
                self.stop.wait(0.002)


def test_status_page_shows_registry_rates_and_entities(clean_server: BeavaProcess,
                                                        page: Any) -> None:
    with bv.App(f"tcp://{clean_server.addrs['tcp']}") as app:
        load(app)
        expected_u1 = app.get("CardSpend", "u1")
    assert expected_u1 == {"n": 2, "spend": 14.5}
    page.goto(f"http://{clean_server.addrs['admin']}/")
    assert page.title() == "beava status"
    # the header names the server the sidecar belongs to
    shows(page, "#server", f"pid {clean_server.proc.pid}")
    shows(page, "#server", f"tcp {clean_server.addrs['tcp']}")

    # the registry: events with their fields, tables with keys and features
    spend = page.locator('[data-node="CardSpend"]')
    spend.wait_for()
    assert "key: user_id" in spend.inner_text()
    features = spend.locator("tbody tr").evaluate_all(
        "rows => rows.map(r => Array.from(r.cells, c => c.textContent))")
    assert sorted(features) == [["n", "count", "", "1h"],
                                ["spend", "sum", 'field="amount"', "lifetime"]]
    assert "key: user_id, merchant" in page.locator('[data-node="CardMerchant"]').inner_text()
    fields = page.locator('[data-node="Card"] tbody tr').evaluate_all(
        "rows => rows.map(r => Array.from(r.cells, c => c.textContent))")
    assert sorted(fields) == [["amount", "f64"], ["merchant", "str"], ["user_id", "str"]]
    assert "nodes" in page.inner_text("#registry-summary")

    # live rates: idle first, then moving while events arrive
    assert page.inner_text("#connection") == "live"
    wait_for_tile(page, "push-rate", lambda v: v == 0, "an idle rate")
    # the counters run on across resets of the shared server: compare with what it shows now
    accepted = number(tile(page, "pushes"))
    assert accepted >= len(PUSHES)
    pusher = Pusher(clean_server)
    pusher.start()
    try:
        wait_for_tile(page, "push-rate", lambda v: v > 0, "pushes per second")
        wait_for_tile(page, "rejection-rate", lambda v: v > 0, "rejections per second")
        wait_for_tile(page, "read-rate", lambda v: v > 0, "reads per second")
        wait_for_tile(page, "pushes", lambda v: v > accepted, "more pushes")
    finally:
        pusher.stop.set()
        pusher.join()
    assert pusher.sent > 0
    rejections = page.locator("#rejections tbody tr").evaluate_all(
        "rows => rows.map(r => [r.cells[0].textContent, r.cells[1].textContent])")
    assert ["Card", "invalid_event"] in rejections
    wait_for_tile(page, "entities", lambda v: v == 7, "the resident rows")
    entities = page.locator("#table-entities tbody tr").evaluate_all(
        "rows => rows.map(r => Array.from(r.cells, c => c.textContent))")
    assert sorted(entities) == [["CardMerchant", "4"], ["CardSpend", "3"]]

    # entity lookup: a row, a composite key, markup in server data shown as text
    look_up(page, "CardSpend", "u1")
    page.locator("#entity-row").wait_for()
    assert entity_row(page) == {"n": "2", "spend": "14.5"}
    look_up(page, "CardMerchant", "u1|cafe")
    shows(page, "#lookup-result", "CardMerchant")
    assert entity_row(page) == {"visits": "1"}
    look_up(page, "CardMerchant", "u<2>|<b>cafe</b>")
    shows(page, "#lookup-result", "<b>cafe</b>")
    assert entity_row(page) == {"visits": "1"}
    assert page.locator("#lookup-result b").count() == 0  # text, never markup

    # ... and the messages for what is not there
    look_up(page, "CardSpend", "nobody")
    shows(page, "#lookup-result", "No such entity")
    assert page.inner_text("#lookup-result") == "No such entity: CardSpend [nobody] has no row."
    look_up(page, "Nope", "u1")
    shows(page, "#lookup-result", "Unknown table")
    assert page.inner_text("#lookup-result").startswith('Unknown table "Nope".')
    look_up(page, "CardSpend", "u1|extra")
    shows(page, "#lookup-result", "does not fit")
    assert "key columns are user_id" in page.inner_text("#lookup-result")


def test_status_page_asks_for_an_admin_token(page: Any) -> None:
    from playwright.sync_api import expect

    server = BeavaProcess(env={"BEAVA_AUTH_TOKENS": f"{READ}:read;{ADMIN}:admin"})
    try:
        with bv.App(f"tcp://{server.addrs['tcp']}", token=ADMIN) as app:
            load(app)
        page.goto(f"http://{server.addrs['admin']}/")  # the page itself is open
        expect(page.locator("#connection")).to_have_text("token needed")
        assert "admin scope" in page.inner_text("#auth-note")
        assert page.locator('[data-node="CardSpend"]').count() == 0

        page.fill("#token", READ)
        page.click("#token-form button")
        shows(page, "#auth-note", "lacks the admin scope")
        assert page.inner_text("#connection") == "token needed"

        page.fill("#token", ADMIN)
        page.click("#token-form button")
        page.locator('[data-node="CardSpend"]').wait_for()
        expect(page.locator("#connection")).to_have_text("live")
        assert page.locator("#auth-note").is_hidden()
        wait_for_tile(page, "pushes", lambda v: v == len(PUSHES), "the pushes")
        look_up(page, "CardSpend", "u1")
        page.locator("#entity-row").wait_for()
        assert entity_row(page) == {"n": "2", "spend": "14.5"}
        # the token stays with the tab: a reload does not ask again
        page.reload()
        page.locator('[data-node="CardSpend"]').wait_for()
        assert re.fullmatch(r"version \d+, 3 nodes", page.inner_text("#registry-summary"))
    finally:
        server.terminate()
