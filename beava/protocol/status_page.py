"""The admin sidecar's status page (docs/operations.md, "The status page"): one HTML
document with its style and script inline (``status_page.html`` beside this module),
served at ``/``.

The document holds no server data: its script fetches ``registry``, ``metrics`` and
``entity`` from the same sidecar, with the admin token the reader enters when access
control is on. Its Content-Security-Policy allows nothing but that inline style and script
(named by their SHA-256) and requests to the page's own origin. The file is read on the
first request for the page, not at start-up.
"""

from __future__ import annotations

import base64
import hashlib
import re
from importlib.resources import files

CONTENT_TYPE = "text/html; charset=utf-8"
_NONE = "'none'"
_INLINE = re.compile(r"<(script|style)>(.*?)</\1>", re.DOTALL)


def _hash_source(text: str) -> str:
    digest = base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")
    return f"'sha256-{digest}'"


def content_security_policy(html: str) -> str:
    """The policy of ``html``: its inline ``<script>`` and ``<style>`` blocks by hash, and
    fetches to its own origin; nothing else (no other script, style, image, frame, form
    target or base URL)."""
    sources: dict[str, list[str]] = {"script": [], "style": []}
    for kind, text in _INLINE.findall(html):
        sources[kind].append(_hash_source(text))
    return "; ".join((
        "default-src 'none'",
        "script-src " + (" ".join(sources["script"]) or _NONE),
        "style-src " + (" ".join(sources["style"]) or _NONE),
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ))


class StatusPage:
    """The page's bytes and response headers, loaded once."""

    __slots__ = ("_loaded",)

    def __init__(self) -> None:
        self._loaded: tuple[bytes, tuple[tuple[str, str], ...]] | None = None

    def _load(self) -> tuple[bytes, tuple[tuple[str, str], ...]]:
        if self._loaded is None:
            html = files("beava.protocol").joinpath("status_page.html").read_text("utf-8")
            self._loaded = (html.encode("utf-8"), (
                ("content-type", CONTENT_TYPE),
                ("content-security-policy", content_security_policy(html)),
                ("x-content-type-options", "nosniff"),
                ("referrer-policy", "no-referrer"),
                ("cache-control", "no-store"),
            ))
        return self._loaded

    @property
    def body(self) -> bytes:
        return self._load()[0]

    @property
    def headers(self) -> tuple[tuple[str, str], ...]:
        return self._load()[1]
