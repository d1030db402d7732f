"""Register payload builders shared by the registry tests (spec/registry.md §3)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from beava.engine.registry import RegisterOutcome, Registry, empty_registry, register


def table_node(agg: dict[str, Any], *, name: str = "T", keys: Sequence[str] | None = None,
               ops: Sequence[dict[str, Any]] = (), up: str = "Txn",
               **extra: Any) -> dict[str, Any]:
    """A shape-A table derivation of ``up``: ``ops``, then group_by ``keys`` (default
    ``["user"]``) aggregating ``agg``."""
    keys = ["user"] if keys is None else list(keys)
    return {"kind": "derivation", "name": name, "output_kind": "table", "upstreams": [up],
            "ops": [*ops, {"op": "group_by", "keys": keys, "agg": agg}],
            "table_primary_key": keys, **extra}


def event_derivation(name: str, ops: list[dict[str, Any]], up: str = "Txn",
                     **extra: Any) -> dict[str, Any]:
    """An event derivation of ``up`` by chain ``ops``."""
    return {"kind": "derivation", "name": name, "output_kind": "event", "upstreams": [up],
            "ops": ops, **extra}


def register_json(payload: Any, current: Registry | None = None, **kw: Any) -> RegisterOutcome:
    """Register ``payload`` (JSON-encoded unless already bytes or str) over ``current``
    (default: the empty registry)."""
    body = payload if isinstance(payload, (bytes, str)) else json.dumps(payload)
    return register(current or empty_registry(), body, **kw)
