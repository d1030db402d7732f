"""Data-plane route table (spec/wire.md §3.2, §3.4).

``resolve`` maps a request to ``(route, param)`` or raises the routing error. ``param`` is
the event name of the legacy push routes, ``(feature, key)`` for ``GET /get/<f>/<k>``,
else ``None``.
"""

from __future__ import annotations

from beava.catalogue.errors import BeavaError

# Exact paths: path -> (method, route name)
EXACT = {
    "/ping": ("POST", "ping"),
    "/register": ("POST", "register"),
    "/push": ("POST", "push"),
    "/push-sync": ("POST", "push"),
    "/push_many": ("POST", "push_many"),
    "/get": ("POST", "get"),
    "/batch_get": ("POST", "batch_get"),
    "/reset": ("POST", "reset"),
    "/health": ("GET", "health"),
    "/ready": ("GET", "ready"),
}

# Prefix routes whose remainder (non-empty, taken literally) is the event name.
PUSH_PREFIXES = ("/push/", "/push-sync/", "/push-batch/")


def resolve(method: str, target: str) -> tuple[str, object]:
    path = target.split("?", 1)[0].rstrip("/")
    expected: str
    param: object = None
    exact = EXACT.get(path)
    if exact is not None:
        expected, route = exact
    else:
        route = ""
        for prefix in PUSH_PREFIXES:
            if path.startswith(prefix) and len(path) > len(prefix):
                expected, route, param = "POST", "push_event", path[len(prefix):]
                break
        if not route:
            feature, sep, key = path[len("/get/"):].partition("/") if path.startswith(
                "/get/") else ("", "", "")
            if not (feature and sep):
                raise BeavaError("not_found", path=target)
            expected, route, param = "GET", "legacy_get", (feature, key)
    if method != expected:
        raise BeavaError("method_not_allowed", method=method, path=target)
    return route, param
