"""Data-plane routing (spec/wire.md §3.1, §3.2, §3.4), derived from the command table.

``resolve`` maps a request to ``(command, params)`` or raises the routing error. ``params``
holds the route parameters taken from the path: ``(event,)`` for the legacy push routes,
``(feature, key)`` for ``GET /get/<feature>/<key>``, ``()`` for exact paths.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from beava.catalogue.errors import BeavaError
from beava.protocol.commands import ROUTED, Command

# routing path -> command
EXACT: Mapping[str, Command] = MappingProxyType(
    {path: c for c in ROUTED for path in c.http_paths})
# (path prefix, command), tried in table order after the exact paths
PREFIXES: tuple[tuple[str, Command], ...] = tuple(
    (prefix, c) for c in ROUTED for prefix in c.http_prefixes)


def routing_path(target: str) -> str:
    """The query (from the first ``?``) removed, then trailing ``/`` trimmed."""
    return target.split("?", 1)[0].rstrip("/")


def resolve(method: str, target: str) -> tuple[Command, tuple[str, ...]]:
    path = routing_path(target)
    command = EXACT.get(path)
    params: tuple[str, ...] = ()
    if command is None:
        found = _by_prefix(path)
        if found is None:
            raise BeavaError("not_found", path=target)
        command, params = found
    if method != command.http_method:
        raise BeavaError("method_not_allowed", method=method, path=target)
    return command, params


def _by_prefix(path: str) -> tuple[Command, tuple[str, ...]] | None:
    """The first prefix route whose parameters ``path`` has: each non-empty, split at ``/``
    (the last keeps any further ``/``, taken literally)."""
    for prefix, command in PREFIXES:
        if path.startswith(prefix):
            params = tuple(path[len(prefix):].split("/", command.http_params - 1))
            if len(params) == command.http_params and all(params):
                return command, params
    return None
