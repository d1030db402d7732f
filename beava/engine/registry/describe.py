"""What a registry holds, for people and tools: the admin sidecar's `/registry`."""

from __future__ import annotations

from typing import Any

from beava.engine.registry import Registry
from beava_client.chain_writes import step_writes

__all__ = ["describe_node", "describe_registry"]


def _features(agg: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, spec in agg.items():
        params = {k: v for k, v in spec["params"].items() if k != "window"}
        out[name] = {"op": spec["op"], "params": params, "window": spec["params"].get("window")}
    return out


def describe_node(node: dict[str, Any]) -> dict[str, Any]:
    """One register payload node as the describe command lists it."""
    schema = node.get("schema") or {}
    if node.get("kind") == "event":
        return {"kind": "event", "name": node["name"], "fields": dict(schema.get("fields", {})),
                "optional_fields": list(schema.get("optional_fields", [])),
                "defaults": dict(schema.get("defaults", {}))}
    ops = list(node.get("ops") or [])
    group_by = next((op for op in ops if op.get("op") == "group_by"), None)
    out: dict[str, Any] = {
        "kind": "table" if node.get("output_kind") == "table" else "event_derivation",
        "name": node["name"],
        "upstreams": list(node.get("upstreams") or []),
        "steps": [op["op"] for op in ops if op.get("op") != "group_by"],
        "writes": step_writes(ops),
    }
    if group_by is not None:
        out["keys"] = list(group_by["keys"])
        out["features"] = _features(group_by["agg"])
    return out


def describe_registry(registry: Registry) -> dict[str, Any]:
    """`{"version", "node_count", "nodes"}`: every node in registration order; events with
    their fields (types, optional ones, defaults), tables with their keys and features
    (op, params, window)."""
    return {"version": registry.version, "node_count": registry.node_count,
            "nodes": [describe_node(dict(node)) for node in registry.nodes]}
