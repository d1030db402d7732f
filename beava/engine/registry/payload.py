"""Register payload: JSON parse (P1), strict decode into msgspec Structs and normalisation (P3).

registry.md §2-§3. The normalised node (§3.7) is a plain JSON-able dict; it is what the diff
compares, what the WAL stores and what introspection shows:

    event:      {"kind":"event","name","schema":{"fields","optional_fields","defaults"},
                 "dedupe_key","dedupe_window_ms","keep_events_for_ms","cold_after_ms"}
    derivation: {"kind":"derivation","name","output_kind","upstreams","ops","schema",
                 "table_primary_key"}

Shape-B table nodes become shape A (their aggregation appended to `ops` as a group_by), duration
aliases become `_ms` integers, aggregation params keep recognised keys only
(catalogue.operators.normalise_params) and `ema` becomes `ewma`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from beava.catalogue.operators import (
    FOREVER,
    MAX_DURATION_MS,
    canonical_op,
    normalise_params,
    parse_duration,
)
from beava.engine.registry.errors import BODY_PATH, INVALID_REGISTRATION, RegisterError

__all__ = [
    "CHAIN_OPS",
    "FIELD_TYPES",
    "MAX_JSON_DEPTH",
    "Payload",
    "PayloadNode",
    "decode_payload",
    "group_by_index",
    "is_table_node",
    "parse_body",
]

FieldType = Literal["str", "i64", "f64", "bool", "bytes", "datetime", "json"]
FIELD_TYPES: tuple[str, ...] = ("str", "i64", "f64", "bool", "bytes", "datetime", "json")
_Ms = Annotated[int, Meta(ge=0, le=MAX_DURATION_MS)]
# A valid payload nests about 8 levels deep; the cap keeps every later walk of user values
# (diff comparisons, body key sorting) far from Python's recursion limit.
MAX_JSON_DEPTH = 64


class EventSchema(Struct):
    fields: dict[str, FieldType]
    optional_fields: list[str] = []
    defaults: dict[str, Any] | None = None


class DerivedSchema(Struct):
    fields: dict[str, FieldType] = {}
    optional_fields: list[str] = []


class EventNode(Struct, tag_field="kind", tag="event"):
    name: str
    schema: EventSchema
    dedupe_key: str | None = None
    dedupe_window_ms: _Ms | None = None
    dedupe_window: str | None = None
    keep_events_for_ms: _Ms | None = None
    keep_events_for: str | None = None
    cold_after_ms: _Ms | None = None
    cold_after: str | None = None


class DerivationNode(Struct, tag_field="kind", tag="derivation"):
    name: str
    upstreams: list[str]
    output_kind: Literal["event", "table"] | UnsetType = UNSET
    ops: list[dict[str, Any]] = []
    schema: DerivedSchema | None = None
    table_primary_key: list[str] | None = None
    # shape B (registry.md §3.5): checked during normalisation, so decoded loosely here
    key: Any = UNSET
    agg: Any = UNSET


class Envelope(Struct):
    nodes: list[EventNode | DerivationNode]


class FilterOp(Struct):
    expr: str


class FieldsOp(Struct):  # select, drop
    fields: list[str]


class RenameOp(Struct):
    mapping: dict[str, str]


class ExprsOp(Struct):  # with_columns, map
    exprs: dict[str, str]


class CastOp(Struct):
    type_map: dict[str, str]


class FillnaOp(Struct):
    defaults: dict[str, Any]


class AggSpec(Struct):
    op: str
    params: dict[str, Any] | None = None


class GroupByOp(Struct):
    keys: list[str]
    agg: dict[str, AggSpec]


_OP_STRUCTS: dict[str, type[Struct]] = {
    "filter": FilterOp,
    "select": FieldsOp,
    "drop": FieldsOp,
    "rename": RenameOp,
    "with_columns": ExprsOp,
    "map": ExprsOp,
    "cast": CastOp,
    "fillna": FillnaOp,
    "group_by": GroupByOp,
}
CHAIN_OPS: tuple[str, ...] = tuple(_OP_STRUCTS)


@dataclass(frozen=True, slots=True)
class PayloadNode:
    """A normalised payload node with what the checks need to report paths."""

    index: int  # position in the payload
    node: dict[str, Any]  # the normalised node
    shape_b: bool  # sent with a node-level `agg` (paths are reported in shape-B terms)


@dataclass(frozen=True, slots=True)
class Payload:
    nodes: tuple[PayloadNode, ...]
    force: bool
    dry_run: bool


def _decode_error(message: str) -> RegisterError:
    return RegisterError(INVALID_REGISTRATION, BODY_PATH, message)


def _too_deep(value: Any) -> bool:
    """Whether a decoded JSON value nests deeper than MAX_JSON_DEPTH (checked iteratively)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return True
        if isinstance(v, dict):
            stack.extend((sub, depth + 1) for sub in v.values())
        elif isinstance(v, list):
            stack.extend((sub, depth + 1) for sub in v)
    return False


def parse_body(body: bytes | bytearray | memoryview | str) -> dict[str, Any]:
    """P1: parse the JSON text; the top level must be an object."""
    try:
        raw = msgspec.json.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # a string not UTF-8: the latter
        raise _decode_error(f"invalid JSON: {exc}") from None
    except RecursionError:
        raise _decode_error("invalid JSON: nesting too deep") from None
    if not isinstance(raw, dict):
        raise _decode_error("register body must be a JSON object")
    if _too_deep(raw):
        raise _decode_error(f"JSON nesting deeper than {MAX_JSON_DEPTH} levels")
    return raw


def _convert(obj: Any, typ: type[Any], where: str) -> Any:
    """msgspec.convert with the error path rebased onto `where` (e.g. `$.nodes[1].ops[0]`)."""
    try:
        return msgspec.convert(obj, typ)
    except msgspec.ValidationError as exc:
        message = str(exc)
        if "`$" in message:
            message = message.replace("`$", f"`{where}", 1)
        else:
            message = f"{message} - at `{where}`"
        raise _decode_error(message) from None


def _decode_op(op: dict[str, Any], where: str) -> dict[str, Any]:
    name = op.get("op")
    if not isinstance(name, str):
        raise _decode_error(f"op object needs a string field `op` - at `{where}`")
    struct = _OP_STRUCTS.get(name)
    if struct is None:
        raise _decode_error(
            f"unknown op {name!r} - at `{where}`; valid ops are: {', '.join(CHAIN_OPS)}"
        )
    decoded = _convert(op, struct, where)
    if isinstance(decoded, GroupByOp):
        return _group_by(decoded.keys, decoded.agg)
    out: dict[str, Any] = {"op": name}
    for field in decoded.__struct_fields__:
        out[field] = getattr(decoded, field)
    return out


def _group_by(keys: list[str], agg: dict[str, AggSpec]) -> dict[str, Any]:
    return {
        "op": "group_by",
        "keys": list(keys),
        "agg": {
            feature: {"op": canonical_op(spec.op), "params": normalise_params(spec.params)}
            for feature, spec in agg.items()
        },
    }


def _alias_ms(
    i: int, ms_key: str, ms_value: int | None, alias_key: str, alias: str | None,
    forever_ok: bool,
) -> int | None:
    """Fold a duration alias (registry.md §3.6) into its `_ms` value."""
    if alias is None:
        return ms_value
    path = f"nodes[{i}].{alias_key}"
    if alias == FOREVER and not forever_ok:
        raise RegisterError(INVALID_REGISTRATION, path, f"{alias_key} cannot be 'forever'")
    try:
        value = parse_duration(alias)
    except ValueError as exc:
        raise RegisterError(INVALID_REGISTRATION, path, str(exc)) from None
    if ms_value is not None and ms_value != value:
        raise RegisterError(
            INVALID_REGISTRATION, path,
            f"{alias_key} {alias!r} disagrees with {ms_key} {ms_value}",
        )
    return value


def _normalise_event(i: int, n: EventNode) -> dict[str, Any]:
    return {
        "kind": "event",
        "name": n.name,
        "schema": {
            "fields": dict(n.schema.fields),
            "optional_fields": list(dict.fromkeys(n.schema.optional_fields)),
            "defaults": dict(n.schema.defaults or {}),
        },
        "dedupe_key": n.dedupe_key,
        "dedupe_window_ms": _alias_ms(
            i, "dedupe_window_ms", n.dedupe_window_ms, "dedupe_window", n.dedupe_window, False
        ),
        "keep_events_for_ms": _alias_ms(
            i, "keep_events_for_ms", n.keep_events_for_ms, "keep_events_for",
            n.keep_events_for, True,
        ),
        "cold_after_ms": _alias_ms(
            i, "cold_after_ms", n.cold_after_ms, "cold_after", n.cold_after, True
        ),
    }


def _normalise_derivation(
    i: int, n: DerivationNode, ops: list[dict[str, Any]], agg: dict[str, AggSpec] | None
) -> dict[str, Any]:
    output_kind = n.output_kind
    table_primary_key = n.table_primary_key
    if n.agg is not UNSET:  # shape B -> shape A
        if agg is None:
            raise RegisterError(INVALID_REGISTRATION, f"nodes[{i}].agg", "agg must be an object")
        key = n.key
        if key is UNSET or key is None:
            key = []
        elif not isinstance(key, list) or not all(isinstance(k, str) for k in key):
            raise RegisterError(
                INVALID_REGISTRATION, f"nodes[{i}].key", "key must be an array of strings"
            )
        if any(op["op"] == "group_by" for op in ops):
            raise RegisterError(
                INVALID_REGISTRATION, f"nodes[{i}].agg",
                "node-level agg cannot be combined with a group_by op",
            )
        if output_kind == "event":
            raise RegisterError(
                INVALID_REGISTRATION, f"nodes[{i}].output_kind",
                "a node with a node-level agg is a table; output_kind must be 'table'",
            )
        output_kind = "table"
        if table_primary_key is None:
            table_primary_key = list(key)
        ops = [*ops, _group_by(key, agg)]
    elif any(op["op"] == "group_by" for op in ops):
        output_kind = "table"  # a group_by makes a table whatever output_kind says (§3.2)
    schema = None
    if n.schema is not None:
        schema = {
            "fields": dict(n.schema.fields),
            "optional_fields": list(dict.fromkeys(n.schema.optional_fields)),
        }
    return {
        "kind": "derivation",
        "name": n.name,
        "output_kind": output_kind,
        "upstreams": list(n.upstreams),
        "ops": ops,
        "schema": schema,
        "table_primary_key": None if table_primary_key is None else list(table_primary_key),
    }


def decode_payload(raw: dict[str, Any]) -> Payload:
    """P3: strict decode of the envelope and every node, then normalisation.

    Decode failures (path `<body>`) of any node win over normalisation failures (specific
    paths) of any node."""
    envelope = _convert(raw, Envelope, "$")
    decoded: list[tuple[EventNode | DerivationNode, list[dict[str, Any]], Any]] = []
    for i, n in enumerate(envelope.nodes):
        if isinstance(n, EventNode):
            decoded.append((n, [], None))
            continue
        where = f"$.nodes[{i}]"
        if n.agg is UNSET and n.output_kind is UNSET:
            raise _decode_error(f"Object missing required field `output_kind` - at `{where}`")
        ops = [_decode_op(op, f"{where}.ops[{k}]") for k, op in enumerate(n.ops)]
        agg = None
        if isinstance(n.agg, dict):
            agg = _convert(n.agg, dict[str, AggSpec], f"{where}.agg")
        decoded.append((n, ops, agg))
    nodes: list[PayloadNode] = []
    for i, (n, ops, agg) in enumerate(decoded):
        if isinstance(n, EventNode):
            nodes.append(PayloadNode(i, _normalise_event(i, n), False))
        else:
            nodes.append(
                PayloadNode(i, _normalise_derivation(i, n, ops, agg), n.agg is not UNSET)
            )
    return Payload(tuple(nodes), raw.get("force") is True, raw.get("dry_run") is True)


def group_by_index(node: Mapping[str, Any]) -> int | None:
    """Index of the last group_by op of a normalised node, or None (event sources too)."""
    ops = node.get("ops", ())
    for k in range(len(ops) - 1, -1, -1):
        if ops[k]["op"] == "group_by":
            return k
    return None


def is_table_node(node: Mapping[str, Any]) -> bool:
    """A table derivation: a derivation with a group_by (shape B already normalised)."""
    return group_by_index(node) is not None
