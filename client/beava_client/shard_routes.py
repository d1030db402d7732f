"""Where a sharded client sends a push or a read: the slot texts of every table an event
feeds, computed from the registry as ``describe`` lists it (docs/sharding.md).

A table's rows live on the owner of its canonical key's slot, a global table's on the
owner of its name's slot. The client computes an event's key for each table from the
pushed body, so it can only place tables whose key fields reach them unchanged: a key
field that a step between the event and the table writes (``with_columns``/``map``,
``rename``, ``cast``, ``fillna``: ``step_writes``) is computed by the server alone. Such a
registry is refused when it is registered through a sharded client (``RoutingError``),
before any shard sees it. ``describe`` lists each node's written fields (``writes``,
from ``step_writes`` too).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .chain_writes import ANY_FIELD, TRANSPARENT_STEPS, step_writes
from .errors import ServerError
from .keys import event_key, read_key


class RoutingError(ServerError):
    """A sharded client cannot place a request: ``code`` ``unroutable_key`` (a table whose
    key a step may compute), ``path`` the table."""


@dataclass(frozen=True, slots=True)
class _Table:
    name: str
    keys: tuple[str, ...]
    # the fields the steps between the event and the table write, with the step
    written: Mapping[str, str]

    @property
    def opaque_step(self) -> str | None:
        """The step that writes one of the key fields, if any."""
        for field in (*self.keys, ANY_FIELD):
            if field in self.written:
                return self.written[field]
        return None


@dataclass(frozen=True, slots=True)
class _EventPlan:
    """What placing one event's push takes: its global tables, the distinct key-field
    tuples of its keyed tables, the defaults of those fields, and whether a table's key
    is one a step writes."""

    global_tables: frozenset[str]
    keyed: tuple[tuple[str, ...], ...]
    defaults: dict[str, Any]
    opaque: bool


def _describe_form(node: Mapping[str, Any]) -> dict[str, Any]:
    """A node as ``describe`` lists it, from that form or from a register payload's."""
    if node.get("kind") == "event" or "ops" not in node:
        if node.get("kind") == "event" and "fields" not in node:
            schema = node.get("schema") or {}
            return {"kind": "event", "name": node.get("name"),
                    "defaults": dict(schema.get("defaults") or {})}
        return dict(node)
    ops = list(node.get("ops") or [])
    group_by = next((op for op in ops if op.get("op") == "group_by"), None)
    out: dict[str, Any] = {
        "kind": "table" if node.get("output_kind") == "table" else "event_derivation",
        "name": node.get("name"),
        "upstreams": list(node.get("upstreams") or []),
        "steps": [op.get("op") for op in ops if op.get("op") != "group_by"],
        "writes": step_writes(ops),
    }
    if group_by is not None:
        out["keys"] = list(group_by.get("keys") or [])
    return out


def _node_writes(node: Mapping[str, Any]) -> dict[str, str]:
    """A described node's written fields: its ``writes``, or from a server that does not
    list them, any field for each step that is not transparent."""
    writes = node.get("writes")
    if isinstance(writes, Mapping):
        return {str(k): str(v) for k, v in writes.items()}
    opaque = [s for s in node.get("steps") or () if s not in TRANSPARENT_STEPS]
    return {ANY_FIELD: str(opaque[0])} if opaque else {}


class Routes:
    """The tables each event feeds, with their key fields; built from ``describe``'s
    ``nodes`` (or a register payload's). ``version``: the registry version described."""

    def __init__(self, nodes: Iterable[Mapping[str, Any]], version: int | None = None) -> None:
        self.version = version
        described = [_describe_form(node) for node in nodes]
        self._defaults: dict[str, dict[str, Any]] = {}
        self.tables: dict[str, tuple[str, ...]] = {}
        feeds: dict[str, list[dict[str, Any]]] = {}  # upstream name -> nodes reading it
        for node in described:
            name = node.get("name")
            if not isinstance(name, str):
                continue
            if node.get("kind") == "event":
                self._defaults[name] = dict(node.get("defaults") or {})
                continue
            if node.get("kind") == "table":
                self.tables[name] = tuple(node.get("keys") or ())
            for upstream in node.get("upstreams") or ():
                feeds.setdefault(upstream, []).append(node)
        self._events: dict[str, tuple[_Table, ...]] = {
            event: tuple(self._fed(event, feeds)) for event in self._defaults
        }
        self._plans = {event: self._plan(event, tables) for event, tables in self._events.items()}

    @classmethod
    def from_describe(cls, doc: Mapping[str, Any]) -> Routes:
        return cls(doc.get("nodes") or (), doc.get("version"))

    @staticmethod
    def _fed(event: str, feeds: Mapping[str, list[dict[str, Any]]]) -> list[_Table]:
        """Every table ``event`` reaches, with the fields written on the way (over every
        path, when several lead to one table)."""
        found: dict[str, _Table] = {}
        todo: list[tuple[str, dict[str, str]]] = [(event, {})]
        seen: set[str] = set()
        while todo:
            name, written = todo.pop()
            for node in feeds.get(name, ()):
                here = {**written, **_node_writes(node)}
                if node.get("kind") == "table":
                    before = found.get(node["name"])
                    if before is not None:
                        here = {**before.written, **here}
                    found[node["name"]] = _Table(node["name"], tuple(node.get("keys") or ()),
                                                 here)
                elif node["name"] not in seen:
                    seen.add(node["name"])
                    todo.append((node["name"], here))
        return sorted(found.values(), key=lambda t: t.name)

    def knows_event(self, event: str) -> bool:
        return event in self._events

    def fed_tables(self, event: str) -> list[tuple[str, tuple[str, ...]]]:
        """``(table, key fields)`` of every table ``event`` feeds (global: no fields)."""
        return [(t.name, t.keys) for t in self._events.get(event, ())]

    def defaults(self, event: str) -> dict[str, Any]:
        """The values the server fills for ``event``'s absent fields."""
        return dict(self._defaults.get(event) or {})

    def check_routable(self) -> None:
        """RoutingError for the first keyed table a client cannot place."""
        for tables in self._events.values():
            for table in tables:
                if table.keys and table.opaque_step is not None:
                    raise RoutingError(
                        "unroutable_key",
                        f"table {table.name!r} is keyed by {list(table.keys)} after a "
                        f"{table.opaque_step!r} step, so a sharded client cannot compute its "
                        "key from the pushed event; compute the key into the event's own "
                        "fields, or group by fields the steps keep unchanged",
                        path=table.name)

    def _plan(self, event: str, tables: Sequence[_Table]) -> _EventPlan:
        keyed = tuple(dict.fromkeys(t.keys for t in tables if t.keys))
        fields = {f for keys in keyed for f in keys}
        defaults = {k: v for k, v in self._defaults[event].items() if k in fields}
        opaque = any(t.keys and t.opaque_step is not None for t in tables)
        return _EventPlan(frozenset(t.name for t in tables if not t.keys), keyed, defaults,
                          opaque)

    def push_texts(self, event: str, body: Mapping[str, Any]) -> set[str]:
        """The slot texts of every table ``event`` feeds for this body: each keyed table's
        canonical key, each global table's name; a table whose key the body lacks is
        skipped by the server, and here. An event that feeds no table gives none. (Once
        per pushed row: the work is planned per event in advance.)"""
        plan = self._plans.get(event)
        if plan is None:
            return set()
        if plan.opaque:
            self.check_routable()
        defaults = plan.defaults
        if defaults and not defaults.keys() <= body.keys():
            body = {**defaults, **body}
        texts = set(plan.global_tables)
        for keys in plan.keyed:
            text = event_key(body, keys)
            if text is not None:
                texts.add(text)
        return texts

    def read_text(self, table: str, key: Any) -> str:
        """The slot text of a read of ``key`` in ``table``: a global table's name, a keyed
        table's canonical key; for a key the server will refuse, or a table it does not
        know, the text of whatever was sent (the owner answers the error)."""
        keys: Sequence[str] | None = self.tables.get(table)
        if keys is not None and not keys:
            return table
        text = read_key(key, 1 if keys is None else len(keys))
        return text if text is not None else str(key)
