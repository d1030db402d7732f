"""``MockApp``: an in-memory stand-in for ``bv.App`` that records calls (no I/O)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["MockApp"]


def _key(key: Any) -> Any:
    if key is None:
        return ""
    if isinstance(key, list):
        return tuple(key)
    return key


class MockApp:
    """The ``App`` method set, in memory. Every call is recorded in ``_calls``; reads
    answer rows canned with ``_set_get_response`` (``{}`` otherwise)."""

    def __init__(
        self, url: str | None = None, *, timeout: float = 30.0, test_mode: bool = False
    ) -> None:
        self.url = url
        self.timeout = timeout
        self.test_mode = test_mode
        self._calls: list[tuple[Any, ...]] = []
        self._registered: list[tuple[Any, ...]] = []
        self._rows: dict[tuple[str, Any], dict[str, Any]] = {}
        self._closed = False

    def __enter__(self) -> MockApp:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True

    def _set_get_response(self, table: str, key: Any, row: Mapping[str, Any]) -> None:
        """Can the row ``get(table, key)`` answers (list keys are stored as tuples)."""
        self._rows[(table, _key(key))] = dict(row)

    def register(
        self, *descriptors: Any, force: bool = False, dry_run: bool = False
    ) -> dict[str, Any]:
        self._calls.append(("register", descriptors, {"force": force, "dry_run": dry_run}))
        self._registered.append(descriptors)
        return {"status": "ok", "registry_version": len(self._registered)}

    def push(self, event_name: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        self._calls.append(("push", event_name, dict(fields)))
        return {"ack_lsn": len(self._calls), "registry_version": 1}

    def push_many(
        self, event_name: str, rows: Iterable[Mapping[str, Any]], *, chunk_size: int = 1000
    ) -> dict[str, Any]:
        bodies = [dict(row) for row in rows]
        self._calls.append(("push_many", event_name, bodies))
        return {"acks": len(bodies), "ack_lsn": len(self._calls), "errors": [],
                "registry_version": 1}

    def _row(self, table: str, key: Any, features: Sequence[str] | None) -> dict[str, Any]:
        row = self._rows.get((table, _key(key)))
        if row is None:
            return {}
        if features is None:
            return dict(row)
        return {name: row[name] for name in features if name in row}

    def get(
        self, table: str, key: Any = None, features: Sequence[str] | None = None
    ) -> dict[str, Any]:
        self._calls.append(("get", table, key))
        return self._row(table, key, features)

    def batch_get(self, requests: Iterable[tuple[Any, ...]]) -> list[dict[str, Any]]:
        entries = list(requests)
        self._calls.append(("batch_get", entries))
        out: list[dict[str, Any]] = []
        for entry in entries:
            if not isinstance(entry, tuple) or len(entry) not in (2, 3):
                raise TypeError(
                    f"batch_get entries must be (table, key[, features]) tuples, got {entry!r}"
                )
            features = entry[2] if len(entry) == 3 else None
            out.append(self._row(entry[0], entry[1], features))
        return out

    def reset(self) -> None:
        self._calls.append(("reset",))
        self._rows.clear()

    def ping(self) -> dict[str, Any]:
        self._calls.append(("ping",))
        return {"server_version": "0.0.0-mock", "registry_version": len(self._registered)}

    def describe(self) -> dict[str, Any]:
        """The registry document of the last ``register`` call, built from its compiled
        payload (as a server lists it; parameters are not normalised)."""
        self._calls.append(("describe",))
        nodes: list[dict[str, Any]] = []
        if self._registered:
            from beava.dsl.compiler import compile_register_payload
            from beava.engine.registry.describe import describe_node

            payload = compile_register_payload(*self._registered[-1])
            nodes = [describe_node(node) for node in payload["nodes"]]
        return {"version": len(self._registered), "node_count": len(nodes), "nodes": nodes}
