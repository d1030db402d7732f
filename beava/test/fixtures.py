"""``fixture`` (an App for pytest fixtures) and ``replay`` (push recorded events)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from beava.app import App

__all__ = ["fixture", "replay"]


def fixture(
    *,
    reset_each: bool = True,
    test_mode: bool = True,
    url: str | None = None,
    timeout: float = 30.0,
) -> Iterator[App]:
    """Yield an entered ``bv.App`` and close it afterwards; with ``reset_each`` the
    server is reset first (errors ignored). Usage::

        @pytest.fixture
        def app():
            yield from fixture()

    ``test_mode`` applies to embed mode (``url=None``), the only mode where it has an
    effect, so a ``url`` does not trigger the App's "no effect" warning.
    """
    with App(url=url, timeout=timeout, test_mode=test_mode and url is None) as app:
        if reset_each:
            with contextlib.suppress(Exception):
                app.reset()
        yield app


class _Pusher(Protocol):
    def push(self, event_name: str, fields: Mapping[str, Any]) -> Any: ...


def replay(app: _Pusher, events: Iterable[Mapping[str, Any]]) -> None:
    """Push each event in order: its ``"_event"`` key names the event, the other keys are
    the fields (the shape of ``bv.demo(name)["events"]``). Works with App and MockApp."""
    for event in events:
        if "_event" not in event:
            raise ValueError(f"replay event missing '_event' key: {dict(event)!r}")
        fields = {k: v for k, v in event.items() if k != "_event"}
        app.push(event["_event"], fields)
