"""Admin sidecar routes (spec/wire.md §4): health, ready, registry, metrics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from beava.protocol.http import HttpRequest, render_response
from beava.protocol.messages import encode_json

_JSON = ("content-type", "application/json")
_RUNTIME = ("x-runtime", "tokio")
_ROUTES = ("/health", "/ready", "/registry", "/metrics")
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class AdminResponder:
    """Answers admin requests from live server state."""

    def __init__(self, registry_info: Callable[[], tuple[int, int]],
                 metrics_text: Callable[[], bytes],
                 registry_doc: Callable[[], dict[str, Any]] | None = None) -> None:
        self._registry_info = registry_info  # () -> (version, node_count)
        self._metrics_text = metrics_text
        self._registry_doc = registry_doc  # () -> every node (engine.registry.describe)

    def __call__(self, request: HttpRequest) -> bytes:
        path = request.target.split("?", 1)[0]
        keep = request.keep_alive
        if path not in _ROUTES:
            return render_response(404, b"", (_RUNTIME,), keep)
        if request.method not in ("GET", "HEAD"):
            return render_response(405, b"", (_RUNTIME, ("allow", "GET,HEAD")), keep)
        if path == "/metrics":
            body = self._metrics_text()
            headers = (("content-type", METRICS_CONTENT_TYPE), _RUNTIME)
        else:
            if path == "/health":
                doc: dict[str, Any] = {"status": "ok"}
            elif path == "/ready":
                doc = {"status": "ready"}
            elif self._registry_doc is not None:
                doc = self._registry_doc()
            else:
                version, node_count = self._registry_info()
                doc = {"node_count": node_count, "version": version}
            body = encode_json(doc)
            headers = (_JSON, _RUNTIME)
        return render_response(200, body, headers, keep, include_body=request.method == "GET")

    @staticmethod
    def protocol_error() -> bytes:
        return render_response(400, b"", (_RUNTIME,), keep_alive=False)
