"""Admin sidecar routes (spec/wire.md §4): health, ready, registry, metrics; plus the
status page (``/``), one entity's row (``/entity``) and which server this is (``/server``),
docs/operations.md."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from beava.protocol.dispatch import as_error
from beava.protocol.http import HttpRequest, render_response
from beava.protocol.messages import encode_json
from beava.protocol.status_page import StatusPage

_JSON = ("content-type", "application/json")
_RUNTIME = ("x-runtime", "tokio")
_ROUTES = ("/", "/health", "/ready", "/registry", "/metrics", "/entity", "/server")
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class AdminResponder:
    """Answers admin requests from live server state."""

    def __init__(self, registry_doc: Callable[[], dict[str, Any]],
                 metrics_text: Callable[[], bytes],
                 entity_row: Callable[[str, str], dict[str, Any]],
                 server_doc: Callable[[], dict[str, Any]]) -> None:
        self._registry_doc = registry_doc  # () -> every node (engine.registry.describe)
        self._metrics_text = metrics_text
        self._entity_row = entity_row  # (table, key) -> the row, as POST /get reads it
        # () -> the process this sidecar belongs to (pid, listeners, data directories): a
        # client that reached a sidecar by its address checks it is the server it meant
        self._server_doc = server_doc
        self._page = StatusPage()

    def __call__(self, request: HttpRequest) -> bytes:
        path, _, query = request.target.partition("?")
        keep = request.keep_alive
        if path not in _ROUTES:
            return render_response(404, b"", (_RUNTIME,), keep)
        if request.method not in ("GET", "HEAD"):
            return render_response(405, b"", (_RUNTIME, ("allow", "GET,HEAD")), keep)
        status = 200
        headers: tuple[tuple[str, str], ...] = (_JSON, _RUNTIME)
        if path == "/":
            body = self._page.body
            headers = (*self._page.headers, _RUNTIME)
        elif path == "/metrics":
            body = self._metrics_text()
            headers = (("content-type", METRICS_CONTENT_TYPE), _RUNTIME)
        elif path == "/entity":
            status, body = self._entity(query)
        elif path == "/health":
            body = encode_json({"status": "ok"})
        elif path == "/ready":
            body = encode_json({"status": "ready"})
        elif path == "/server":
            body = encode_json(self._server_doc())
        else:
            body = encode_json(self._registry_doc())
        return render_response(status, body, headers, keep,
                               include_body=request.method == "GET")

    def _entity(self, query: str) -> tuple[int, bytes]:
        """``?table=T&key=K`` (``K`` as POST /get takes a key string: ``K1|K2`` for several
        key columns, absent or empty for a global table): the row, ``{}`` for an entity
        without one, or the error envelope POST /get answers with."""
        params = parse_qs(query, keep_blank_values=True)
        table = params.get("table", [""])[-1]
        key = params.get("key", [""])[-1]
        try:
            return 200, encode_json(self._entity_row(table, key))
        except Exception as exc:  # a bug must cost one request, never the connection
            err = as_error(exc)
            return err.status, encode_json(err.body())

    @staticmethod
    def protocol_error() -> bytes:
        return render_response(400, b"", (_RUNTIME,), keep_alive=False)
