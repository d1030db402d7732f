"""The registry: compiled, immutable registry versions and the `register` call (registry.md).

`register` runs P1-P9 of registry.md §4 and returns the response the server sends plus, when
the call mutates, the new Registry and the WAL record to append before swapping it in. The
server owns P0 (content type), P10 (WAL append + fsync, 503 on failure) and P11 (swap).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from beava.catalogue.operators import WindowMode, lookup, parse_duration, resolve_params
from beava.engine.registry.checks import (
    check_limits,
    check_prelude,
    check_rules,
    event_output_schema,
)
from beava.engine.registry.diff import (
    DEFAULT_DEDUPE_WINDOW_MS,
    compute_diff,
    dry_run_body,
    error_body,
    force_required_body,
    plan_transition,
    success_body,
)
from beava.engine.registry.errors import RegisterError
from beava.engine.registry.payload import decode_payload, group_by_index, parse_body

__all__ = [
    "EventSpec",
    "FeatureSpec",
    "RegisterOutcome",
    "Registry",
    "TableSpec",
    "empty_registry",
    "register",
    "registry_from_record",
]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class EventSpec:
    """An event source as pushes see it."""

    name: str
    fields: Mapping[str, str]  # declared typed fields (name -> type)
    required: frozenset[str]  # fields not listed in optional_fields
    optional: frozenset[str]  # optional_fields (may include untyped names)
    defaults: Mapping[str, Any]
    dedupe_key: str | None
    dedupe_window_ms: int
    cold_after_ms: int | None
    schema: Mapping[str, str]  # output schema for chain ops (untyped optional names: "json")


@dataclass(frozen=True, slots=True)
class FeatureSpec:
    """One feature of a table: canonical op, resolved params (catalogue.operators.resolve_params)
    and its bucketed window (None = lifetime)."""

    name: str
    op: str
    params: Mapping[str, Any]
    window_ms: int | None


@dataclass(frozen=True, slots=True)
class TableSpec:
    """A table derivation, flattened to its root event source (registry.md §15)."""

    name: str
    source: str  # root event source
    chain: tuple[Mapping[str, Any], ...]  # every prefix op from the root to this table, in order
    input_schema: Mapping[str, str]  # schema of the source event
    keys: tuple[str, ...]  # group-by key columns (empty = global table)
    features: Mapping[str, FeatureSpec]  # ascending name order
    cold_after_ms: int | None


@dataclass(frozen=True, slots=True)
class Registry:
    """One compiled registry version; never mutated (a register builds a new one)."""

    version: int
    node_count: int  # event sources + derivations
    nodes: tuple[dict[str, Any], ...]  # normalised nodes (registry.md §3.7), payload order
    events: Mapping[str, EventSpec]
    tables: Mapping[str, TableSpec]
    _feeds: Mapping[str, tuple[TableSpec, ...]]

    def feeds(self, event: str) -> tuple[TableSpec, ...]:
        """Tables fed by a push to `event`, directly or through event derivations."""
        return self._feeds.get(event, ())

    @property
    def names(self) -> list[str]:
        """Registered descriptor names, payload order."""
        return [node["name"] for node in self.nodes]


@dataclass(frozen=True, slots=True)
class RegisterOutcome:
    status: int  # HTTP status: 200, 400 or 409
    body: dict[str, Any]  # exact response body (registry.md §12), with registry_version
    registry: Registry | None  # the Registry to swap in (version + 1) when the call mutates
    record: dict[str, Any] | None  # WAL record body to append first (durability.md §5)


def _event_spec(node: Mapping[str, Any]) -> EventSpec:
    schema = node["schema"]
    optional = frozenset(schema["optional_fields"])
    window = node["dedupe_window_ms"]
    return EventSpec(
        name=node["name"],
        fields=MappingProxyType(dict(schema["fields"])),
        required=frozenset(schema["fields"]) - optional,
        optional=optional,
        defaults=MappingProxyType(dict(schema["defaults"])),
        dedupe_key=node["dedupe_key"],
        dedupe_window_ms=DEFAULT_DEDUPE_WINDOW_MS if window is None else window,
        cold_after_ms=node["cold_after_ms"],
        schema=MappingProxyType(event_output_schema(schema)),
    )


def _feature_spec(name: str, spec: Mapping[str, Any]) -> FeatureSpec:
    op = lookup(spec["op"])
    if op is None:
        raise ValueError(f"feature {name!r}: unknown op {spec['op']!r}")
    params = spec["params"]
    window = params.get("window")
    window_ms = None
    if op.window is WindowMode.WINDOWED and isinstance(window, str):
        window_ms = parse_duration(window)
    return FeatureSpec(name, op.name, MappingProxyType(resolve_params(op, params)), window_ms)


def _compile(nodes: Iterable[dict[str, Any]], version: int) -> Registry:
    """Build a Registry from normalised nodes that passed validation."""
    ordered = tuple(nodes)
    events: dict[str, EventSpec] = {}
    tables: dict[str, TableSpec] = {}
    feeds: dict[str, list[TableSpec]] = {}
    # name -> (root source, ops a row has been through on leaving it, whether rows flow out)
    routes: dict[str, tuple[str, tuple[Mapping[str, Any], ...], bool]] = {}
    for node in ordered:
        name = node["name"]
        if node["kind"] == "event":
            events[name] = _event_spec(node)
            routes[name] = (name, (), True)
            feeds[name] = []
            continue
        root, chain, flows = routes[node["upstreams"][0]]
        gb = group_by_index(node)
        if gb is None:
            routes[name] = (root, chain + tuple(node["ops"]), flows)
            continue
        chain = chain + tuple(node["ops"][:gb])
        group_by = node["ops"][gb]
        agg = group_by["agg"]
        table = TableSpec(
            name=name,
            source=root,
            chain=chain,
            input_schema=events[root].schema,
            keys=tuple(group_by["keys"]),
            features=MappingProxyType({f: _feature_spec(f, agg[f]) for f in sorted(agg)}),
            cold_after_ms=events[root].cold_after_ms,
        )
        tables[name] = table
        routes[name] = (root, chain, False)  # a table emits no rows (registry.md §15)
        if flows:
            feeds[root].append(table)
    return Registry(
        version=version,
        node_count=len(ordered),
        nodes=ordered,
        events=MappingProxyType(events),
        tables=MappingProxyType(tables),
        _feeds=MappingProxyType({e: tuple(t) for e, t in feeds.items()}),
    )


def empty_registry(version: int = 0) -> Registry:
    """A registry with no descriptors (fresh start, or after a reset)."""
    return _compile((), version)


def registry_from_record(record: Mapping[str, Any], version: int) -> Registry:
    """Rebuild the registry a REGISTRY WAL record installed (recovery)."""
    return _compile(record["nodes"], version)


def _rejected(error: RegisterError, version: int) -> RegisterOutcome:
    return RegisterOutcome(400, error_body(error.error_object(), version), None, None)


def register(
    current: Registry, body: bytes | bytearray | memoryview | str, *,
    memory_governance_enforce: bool = True,
) -> RegisterOutcome:
    """Process one register request against `current` (registry.md §4, P1-P9).

    Never raises for bad input: every rejection is a 400 / 409 outcome with its exact body."""
    version = current.version
    try:
        raw = parse_body(body)  # P1
        nodes = raw.get("nodes")
        if isinstance(nodes, list):  # P2
            check_prelude(nodes, memory_governance_enforce=memory_governance_enforce)
        payload = decode_payload(raw)  # P3
        check_limits(payload.nodes)  # docs/limits.md: before the diff compares anything
    except RegisterError as exc:
        return _rejected(exc, version)
    if not payload.nodes:  # P4
        if payload.dry_run:
            return RegisterOutcome(200, dry_run_body(None, version), None, None)
        names = sorted(current.names)
        return RegisterOutcome(200, success_body(
            added=[], already_present=[], changed=[], registered=names, version=version,
            removed=[],
        ), None, None)
    new_nodes = [pn.node for pn in payload.nodes]
    old = {node["name"]: node for node in current.nodes}
    diff = compute_diff(old, new_nodes)  # P5
    if diff.destructive and not payload.dry_run and not payload.force:  # P6
        return RegisterOutcome(409, force_required_body(diff, version), None, None)
    try:
        check_rules(payload.nodes)  # P7
    except RegisterError as exc:
        return _rejected(exc, version)
    if payload.dry_run:  # P8
        return RegisterOutcome(200, dry_run_body(diff, version), None, None)
    names = [node["name"] for node in new_nodes]
    if diff.empty:  # P9
        return RegisterOutcome(200, success_body(
            added=[], already_present=diff.already_present, changed=[], registered=names,
            version=version, removed=[],
        ), None, None)
    plan = plan_transition(diff, old, new_nodes)
    replaced = set(plan.replace)
    untouched = set(diff.already_present) - replaced
    installed = [old[n["name"]] if n["name"] in untouched else n for n in new_nodes]
    new_version = version + 1
    fresh = set(diff.added) | replaced
    added = [name for name in names if name in fresh]
    response = success_body(
        added=added,
        already_present=[name for name in diff.already_present if name not in fresh],
        changed=diff.changed,
        registered=names,
        version=new_version,
        removed=diff.removed,
    )
    record = {
        "force": payload.force,
        "new_version": new_version,
        "nodes": installed,
        "plan": plan.record(),
    }
    return RegisterOutcome(200, response, _compile(installed, new_version), record)
