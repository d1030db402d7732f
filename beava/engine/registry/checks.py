"""Register checks: the prelude (P2, registry.md §5 and §13) and rules R1-R12 (§7, §14).

Every check raises RegisterError for the first failure, in the order the spec fixes. The
prelude runs on the raw JSON; R1-R12 run on the normalised payload alone (after a successful
call the registry equals the payload).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from beava.catalogue.errors import with_known_names
from beava.catalogue.operators import (
    NUMERIC_FIELD_OPS,
    OPERATOR_NAMES,
    FieldUse,
    OperatorSpec,
    ParamKind,
    WindowMode,
    lookup,
    optional_param_problem,
    parse_duration,
    shown,
)
from beava.engine.expressions import ExpressionError, check_where
from beava.engine.expressions.chain_ops import ChainOpError, chain_output_schema
from beava.engine.expressions.parser import MAX_EXPRESSION_LENGTH
from beava.engine.registry.errors import (
    AGGREGATION_FEATURE_NAME_COLLISION,
    AGGREGATION_FIELD_NOT_NUMERIC,
    AGGREGATION_GROUP_KEY_COLLIDES_WITH_FEATURE,
    AGGREGATION_INVALID_WHERE,
    AGGREGATION_INVALID_WINDOW,
    AGGREGATION_ON_TABLE_NOT_SUPPORTED,
    AGGREGATION_UNKNOWN_FIELD,
    AGGREGATION_UNKNOWN_OP,
    BODY_PATH,
    FEATURE_REMOVED_NO_JOINS,
    FEATURE_REMOVED_NO_UNIONS,
    INVALID_REGISTRATION,
    UNBOUNDED_OP_IN_LIFETIME_MODE,
    UNKNOWN_FIELD_EVENT_TIME,
    UNKNOWN_FIELD_TOLERATE_DELAY,
    UNSUPPORTED_NODE_KIND,
    WINDOW_NOT_SUPPORTED,
    RegisterError,
)
from beava.engine.registry.payload import PayloadNode, group_by_index, is_table_node

__all__ = [
    "MAX_DISTINCT_EXPRESSION_CHARS",
    "MAX_FEATURES_PER_PAYLOAD",
    "MAX_FEATURES_PER_TABLE",
    "MAX_NODES",
    "MAX_OPS_PER_NODE",
    "check_limits",
    "check_prelude",
    "check_rules",
    "event_output_schema",
]

# Payload limits beyond the spec (docs/limits.md), checked after decoding (P3), before the
# diff: `invalid_registration` at the path of the first item past the limit.
MAX_NODES = 4_096
MAX_OPS_PER_NODE = 256  # ops of one derivation, its group_by included
MAX_FEATURES_PER_TABLE = 32_768
MAX_FEATURES_PER_PAYLOAD = 65_536
# Characters of all distinct expression texts (filter, with_columns / map, where) of a
# payload: what it costs to type-check and compile them (each one is also bounded by the
# parser's own limits).
MAX_DISTINCT_EXPRESSION_CHARS = 65_536

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
_MAX_NAME = 128
_RESERVED_PREFIX = "_beava_"


# ---------------------------------------------------------------------------------------------
# P2: prelude


def _prefix(i: int, node: dict[str, Any]) -> str:
    name = node.get("name")
    return f"nodes[{i}].{name}" if isinstance(name, str) and name else f"nodes[{i}]"


def _derivations(nodes: list[Any]) -> list[tuple[int, dict[str, Any]]]:
    return [
        (i, n) for i, n in enumerate(nodes)
        if isinstance(n, dict) and n.get("kind") == "derivation"
    ]


def _lifetime_bound_problem(op: str, params: Mapping[str, Any]) -> str | None:
    """Why a windowless feature has no finite per-entity memory bound (§13), or None."""
    spec = lookup(op)
    if spec is None:
        return (
            f"aggregation op {op!r} has no finite per-entity memory bound in lifetime mode; "
            "add a window= duration to use the rolling 64-bucket window"
        )
    bound = spec.lifetime_bound()
    if bound is None:
        return None
    p = bound.name
    value = params.get(p)
    if bound.kind is ParamKind.NUMBERS:
        ok = isinstance(value, list) and len(value) > 0
    else:
        ok = type(value) is int and value > 0
    if ok:
        return None
    return (
        f"aggregation op {op!r} requires an explicit memory bound in lifetime mode: the "
        f"{p!r} param is missing or invalid; add {p}=<bound> or a window= duration"
    )


def _check_lifetime_agg(path: str, agg: dict[str, Any]) -> None:
    for feature, spec in agg.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("op"), str):
            continue  # not a feature spec: strict decoding rejects it (P3)
        params = spec.get("params")
        if not isinstance(params, dict):
            params = {}
        if isinstance(params.get("window"), str):
            continue  # windowed: bounded by the 64-bucket ring
        problem = _lifetime_bound_problem(spec["op"], params)
        if problem is not None:
            raise RegisterError(UNBOUNDED_OP_IN_LIFETIME_MODE, f"{path}.{feature}", problem)


def check_prelude(nodes: list[Any], *, memory_governance_enforce: bool) -> None:
    """P2: the prelude passes a1/a2, b1/b2, c, d (§5), each over all nodes in payload order."""
    for i, node in _derivations(nodes):
        ops = node.get("ops")
        if not isinstance(ops, list):
            continue
        for k, op in enumerate(ops):
            kind = op.get("op") if isinstance(op, dict) else None
            if kind == "join":
                raise RegisterError(
                    FEATURE_REMOVED_NO_JOINS, f"{_prefix(i, node)}.ops[{k}]",
                    "joins are not supported: push events to each stream independently and "
                    "compose features client-side",
                )
            if kind == "union":
                raise RegisterError(
                    FEATURE_REMOVED_NO_UNIONS, f"{_prefix(i, node)}.ops[{k}]",
                    "unions are not supported: push to each event source independently",
                )
    for i, node in enumerate(nodes):
        if not isinstance(node, dict):
            continue
        if "event_time_field" in node:
            raise RegisterError(
                UNKNOWN_FIELD_EVENT_TIME, f"{_prefix(i, node)}.event_time_field",
                "event_time_field is not supported: beava buckets on server arrival time; "
                "drop the key",
            )
        if "tolerate_delay_ms" in node:
            raise RegisterError(
                UNKNOWN_FIELD_TOLERATE_DELAY, f"{_prefix(i, node)}.tolerate_delay_ms",
                "tolerate_delay_ms is not supported: beava buckets on server arrival time; "
                "drop the key",
            )
    for i, node in enumerate(nodes):
        if not isinstance(node, dict):
            continue
        kind = node.get("kind")
        if isinstance(kind, str) and kind and kind not in ("event", "derivation"):
            raise RegisterError(
                UNSUPPORTED_NODE_KIND, f"{_prefix(i, node)}.kind",
                f"node kind {kind!r} is not supported (supported kinds: 'event', 'derivation')",
            )
    if not memory_governance_enforce:
        return
    for i, node in _derivations(nodes):
        ops = node.get("ops")
        if isinstance(ops, list):
            for k, op in enumerate(ops):
                if (
                    isinstance(op, dict) and op.get("op") == "group_by"
                    and isinstance(op.get("agg"), dict)
                ):
                    _check_lifetime_agg(f"{_prefix(i, node)}.ops[{k}].agg", op["agg"])
        if isinstance(node.get("agg"), dict):
            _check_lifetime_agg(f"{_prefix(i, node)}.agg", node["agg"])


# ---------------------------------------------------------------------------------------------
# Payload limits (docs/limits.md)


def _expressions(pn: PayloadNode) -> list[tuple[str, str]]:
    """(path, text) of every expression of a normalised node, in payload order."""
    i, node = pn.index, pn.node
    out: list[tuple[str, str]] = []
    for k, op in enumerate(node.get("ops", ())):
        name = op["op"]
        if name == "filter":
            out.append((f"nodes[{i}].ops[{k}].expr", op["expr"]))
        elif name in ("with_columns", "map"):
            out.extend((f"nodes[{i}].ops[{k}].exprs.{col}", text)
                       for col, text in op["exprs"].items())
        elif name == "group_by":
            base = f"nodes[{i}].agg" if pn.shape_b else f"nodes[{i}].ops[{k}].agg"
            for feature, spec in op["agg"].items():
                where = spec["params"].get("where")
                if where is not None:
                    out.append((f"{base}.{feature}.params.where", where))
    return out


def check_limits(nodes: Sequence[PayloadNode]) -> None:
    """The payload limits, in this order: nodes, then per node in payload order its ops
    and features, then the distinct expression text of the whole payload."""
    if len(nodes) > MAX_NODES:
        raise _fail(
            f"nodes[{MAX_NODES}]",
            f"a register payload holds at most {MAX_NODES} nodes; got {len(nodes)}",
        )
    features = 0
    for pn in nodes:
        i, node = pn.index, pn.node
        ops = node.get("ops", ())
        if len(ops) > MAX_OPS_PER_NODE:
            raise _fail(
                f"nodes[{i}].ops[{MAX_OPS_PER_NODE}]",
                f"a derivation holds at most {MAX_OPS_PER_NODE} ops; got {len(ops)}",
            )
        gb = group_by_index(node)
        if gb is None:
            continue
        agg = ops[gb]["agg"]
        path = f"nodes[{i}].agg" if pn.shape_b else f"nodes[{i}].ops[{gb}].agg"
        if len(agg) > MAX_FEATURES_PER_TABLE:
            raise _fail(
                path, f"a table holds at most {MAX_FEATURES_PER_TABLE} features; got {len(agg)}"
            )
        features += len(agg)
        if features > MAX_FEATURES_PER_PAYLOAD:
            raise _fail(
                path, f"a register payload holds at most {MAX_FEATURES_PER_PAYLOAD} features "
                f"over all its tables; {features} with this table",
            )
    seen: set[str] = set()
    chars = 0
    for pn in nodes:
        for path, text in _expressions(pn):
            if text in seen or len(text) > MAX_EXPRESSION_LENGTH:
                continue  # an over-long text fails to parse (P7), with its own code
            seen.add(text)
            chars += len(text)
            if chars > MAX_DISTINCT_EXPRESSION_CHARS:
                raise _fail(
                    path, f"the distinct expressions of a register payload hold at most "
                    f"{MAX_DISTINCT_EXPRESSION_CHARS} characters together; "
                    f"{chars} with this one",
                )


# ---------------------------------------------------------------------------------------------
# R1-R9: structural rules


def _fail(path: str, reason: str) -> RegisterError:
    return RegisterError(INVALID_REGISTRATION, path, reason)


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def _default_fits(field_type: str, value: Any) -> bool:
    """Whether a `schema.defaults` value matches its field's type (registry.md §3.1)."""
    if field_type == "str":
        return isinstance(value, str)
    if field_type == "i64":
        return type(value) is int
    if field_type == "f64":
        return type(value) is int or type(value) is float
    if field_type == "bool":
        return isinstance(value, bool)
    return value is not None and not isinstance(value, (list, dict))


def _check_name(i: int, name: str) -> None:
    path = f"nodes[{i}].name"
    if not name:
        raise _fail(path, "descriptor name must not be empty")
    if _NAME_RE.fullmatch(name) is None:
        raise _fail(
            path, f"descriptor name {name!r} must match [A-Za-z_][A-Za-z0-9_]* "
            "(no hyphens or leading digits)",
        )
    if name.startswith(_RESERVED_PREFIX):
        raise _fail(path, f"descriptor name {name!r} uses the reserved prefix '_beava_'")
    if len(name) > _MAX_NAME:
        raise _fail(path, f"descriptor name is longer than {_MAX_NAME} characters")


def _check_event(i: int, node: dict[str, Any]) -> None:
    fields = node["schema"]["fields"]
    if not fields:
        raise _fail(f"nodes[{i}].schema.fields", "event schema must have at least one field")
    for name, value in node["schema"]["defaults"].items():
        path = f"nodes[{i}].schema.defaults.{name}"
        if name not in fields:
            raise _fail(path, f"default for {name!r}, which is not a field of schema.fields")
        if not _default_fits(fields[name], value):
            raise _fail(path, f"default {value!r} does not match the type {fields[name]!r}")
        if type(value) is int and not _I64_MIN <= value <= _I64_MAX:
            # a push would carry it widened to float, or not at all (10**400); a default is
            # put into rows as is, so its WAL record and replies could not encode it
            raise _fail(path, "an integer default must be within the signed 64-bit range")
    dedupe_key = node["dedupe_key"]
    if dedupe_key is not None and dedupe_key not in fields:
        raise _fail(f"nodes[{i}].dedupe_key", f"dedupe_key {dedupe_key!r} is not a field in schema")
    if node["dedupe_window_ms"] == 0:
        raise _fail(f"nodes[{i}].dedupe_window_ms", "dedupe_window_ms must be positive (> 0)")


def _check_derivation(pn: PayloadNode) -> None:
    i, node = pn.index, pn.node
    ops = node["ops"]
    schema = node["schema"]
    if not ops and (schema is None or not schema["fields"]):
        raise _fail(f"nodes[{i}].schema.fields", "derivation schema must have at least one field")
    if not pn.shape_b and node["output_kind"] == "table" and node["table_primary_key"] is None:
        raise _fail(
            f"nodes[{i}].table_primary_key",
            "derivation with output_kind='table' must specify table_primary_key",
        )
    last = len(ops) - 1
    for k, op in enumerate(ops):
        if op["op"] == "group_by" and k != last:
            raise _fail(
                f"nodes[{i}].ops[{k}]",
                "group_by must be the last op of a derivation, and there can be only one",
            )
    if node["output_kind"] == "table" and group_by_index(node) is None:
        raise _fail(f"nodes[{i}].ops", "a table derivation needs a group_by op or an agg")


def _check_structure(nodes: Sequence[PayloadNode]) -> None:
    first_seen: dict[str, int] = {}
    for pn in nodes:
        name = pn.node["name"]
        if name in first_seen:
            raise _fail(
                f"nodes[{pn.index}].name",
                f"duplicate descriptor name {name!r}; first seen at nodes[{first_seen[name]}]",
            )
        first_seen[name] = pn.index
    for pn in nodes:
        i, node = pn.index, pn.node
        _check_name(i, node["name"])
        if node["kind"] == "derivation":
            upstreams = node["upstreams"]
            if len(upstreams) > 1 or (not upstreams and not is_table_node(node)):
                raise _fail(
                    f"nodes[{i}].upstreams",
                    f"a derivation needs exactly one upstream; got {len(upstreams)}",
                )
            _check_derivation(pn)
        else:
            _check_event(i, node)
    derivations = [pn for pn in nodes if pn.node["kind"] == "derivation"]
    for pn in derivations:
        for j, up in enumerate(pn.node["upstreams"]):
            if up not in first_seen:
                raise _fail(
                    f"nodes[{pn.index}].upstreams[{j}]",
                    f"upstream {up!r} is not declared in this payload",
                )
    for pn in derivations:
        for j, up in enumerate(pn.node["upstreams"]):
            if first_seen[up] > pn.index:
                raise _fail(
                    f"nodes[{pn.index}].upstreams[{j}]",
                    f"upstream {up!r} appears later in payload at nodes[{first_seen[up]}]",
                )
    for pn in derivations:
        name = pn.node["name"]
        if name in pn.node["upstreams"]:
            raise _fail(f"nodes[{pn.index}]", f"cycle detected: {name} -> {name}")


# ---------------------------------------------------------------------------------------------
# R10: chain ops


def event_output_schema(schema: Mapping[str, Any]) -> dict[str, str]:
    """Output schema of a declared schema: typed fields, then untyped optional names as json."""
    out = dict(schema["fields"])
    for name in schema.get("optional_fields", ()):
        out.setdefault(name, "json")
    return out


def _check_chains(nodes: Sequence[PayloadNode]) -> dict[str, dict[str, str]]:
    """R10; returns every node's output schema (a table's: its post-prefix schema S)."""
    schemas: dict[str, dict[str, str]] = {}
    for pn in nodes:
        node = pn.node
        if node["kind"] == "event":
            schemas[node["name"]] = event_output_schema(node["schema"])
            continue
        upstreams = node["upstreams"]
        source = schemas[upstreams[0]] if upstreams else {}
        gb = group_by_index(node)
        prefix = node["ops"] if gb is None else node["ops"][:gb]
        if gb is None and not prefix:
            schemas[node["name"]] = event_output_schema(node["schema"])
            continue
        try:
            schemas[node["name"]] = chain_output_schema(prefix, source)
        except ChainOpError as exc:
            path = (
                BODY_PATH if exc.code == INVALID_REGISTRATION
                else f"nodes[{pn.index}].ops[{exc.index}]{exc.path_suffix}"
            )
            raise RegisterError(exc.code, path, exc.reason, exc.detail) from None
    return schemas


# ---------------------------------------------------------------------------------------------
# R11: aggregations


def _check_feature(
    f: str, feature: str, op: str, params: Mapping[str, Any], keys: Sequence[str],
    schema: Mapping[str, str], checked_wheres: set[str],
) -> None:
    """R11.3-R11.16 for one feature; `f` is its path prefix."""
    spec: OperatorSpec | None = lookup(op)
    if spec is None:
        raise RegisterError(
            AGGREGATION_UNKNOWN_OP, f"{f}.op",
            f"unknown aggregation op {op!r}; valid ops are: {', '.join(OPERATOR_NAMES)}, ema",
        )
    if feature in keys:
        raise RegisterError(
            AGGREGATION_GROUP_KEY_COLLIDES_WITH_FEATURE, f,
            f"feature name {feature!r} collides with a group_by key",
        )
    for p in spec.params:  # 11.5 / 11.6
        if p.kind is ParamKind.DURATION and p.required:
            value = params.get(p.name)
            try:
                ok = value is not None and parse_duration(value) is not None
            except ValueError:
                ok = False
            if not ok:
                raise _fail(
                    f"{f}.params.{p.name}",
                    f"{spec.name} requires a positive finite {p.name} duration string "
                    f"(e.g. \"5m\"); got {value!r}",
                )
    field = params.get("field")
    if spec.field is FieldUse.REQUIRED and field is None:  # 11.7a
        raise RegisterError(
            AGGREGATION_UNKNOWN_FIELD, f"{f}.params.field", f"op {spec.name!r} requires a field"
        )
    checked = spec.field in (FieldUse.CHECKED, FieldUse.REQUIRED)
    if checked and field is not None and field not in schema:  # 11.7b
        raise RegisterError(
            AGGREGATION_UNKNOWN_FIELD, f"{f}.params.field",
            with_known_names(f"field {field!r} does not exist in upstream schema", field,
                             schema),
        )
    for p in spec.params:  # 11.8
        if p.required and p.bounds is not None:
            value = params.get(p.name)
            if value is None or not p.bounds.contains(value):
                raise RegisterError(
                    p.bounds.code, f"{f}.params.{p.name}",
                    f"op {spec.name!r} parameter {p.name!r} must be in {p.bounds.describe()}; "
                    f"got {shown(value)}",
                )
    window = params.get("window")
    if window is not None and spec.window is WindowMode.LIFETIME_ONLY:  # 11.9
        raise RegisterError(
            AGGREGATION_INVALID_WINDOW, f"{f}.params.window",
            f"op {spec.name!r} is a lifetime operator and does not accept window=",
        )
    if window is None and spec.window is WindowMode.REQUIRED:  # 11.10
        raise RegisterError(
            AGGREGATION_INVALID_WINDOW, f"{f}.params.window",
            f"op {spec.name!r} requires a window= duration parameter",
        )
    if window is not None and spec.window is WindowMode.UNSUPPORTED:  # 11.11
        raise RegisterError(
            WINDOW_NOT_SUPPORTED, f"{f}.params.window",
            f"{spec.name} is windowless-only: window is not supported",
        )
    problem = optional_param_problem(spec, params)  # 11.12-11.14 and docs/limits.md
    if problem is not None:
        raise RegisterError(problem.code, f"{f}.params.{problem.param}", problem.reason)
    if window is not None:  # 11.15
        try:
            parse_duration(window)
        except ValueError:
            raise RegisterError(
                AGGREGATION_INVALID_WINDOW, f"{f}.params.window",
                f"invalid window duration {window!r}; expected <digits>(ms|s|m|h|d) or 'forever'",
            ) from None
    where = params.get("where")
    if where is not None and where not in checked_wheres:  # 11.16 (once per text and table)
        try:
            check_where(where, schema)
        except ExpressionError as exc:
            raise RegisterError(
                AGGREGATION_INVALID_WHERE, f"{f}.params.where", exc.reason, exc.detail
            ) from None
        checked_wheres.add(where)
    if spec.name in NUMERIC_FIELD_OPS and field is not None and schema.get(field) == "str":
        raise RegisterError(  # extension (docs/wire.md): would read its empty value forever
            AGGREGATION_FIELD_NOT_NUMERIC, f"{f}.params.field",
            f"op {spec.name!r} needs a numeric field, but {field!r} is str; declare it "
            f"f64 or i64 (or cast it in a chain step) to aggregate it as a number",
        )


def _check_aggregations(
    nodes: Sequence[PayloadNode], schemas: Mapping[str, Mapping[str, str]]
) -> None:
    tables = {pn.node["name"] for pn in nodes if is_table_node(pn.node)}
    for pn in nodes:
        i, node = pn.index, pn.node
        gb = group_by_index(node)
        if gb is None:
            continue
        upstreams = node["upstreams"]
        if not upstreams:
            raise RegisterError(
                AGGREGATION_ON_TABLE_NOT_SUPPORTED, f"nodes[{i}].upstreams",
                "an aggregation needs an upstream event",
            )
        for j, up in enumerate(upstreams):
            if up in tables:
                raise RegisterError(
                    AGGREGATION_ON_TABLE_NOT_SUPPORTED, f"nodes[{i}].upstreams[{j}]",
                    f"aggregation source {up!r} is a table; aggregation on a table is not "
                    "supported",
                )
        group_by = node["ops"][gb]
        schema = schemas[node["name"]]
        keys = group_by["keys"]
        for j, key in enumerate(keys):
            path = f"nodes[{i}].key[{j}]" if pn.shape_b else f"nodes[{i}].ops[{gb}].group_by[{j}]"
            if key not in schema:
                raise RegisterError(
                    AGGREGATION_UNKNOWN_FIELD, path,
                    with_known_names(f"group_by key {key!r} does not exist in upstream "
                                     "schema", key, schema),
                )
            if schema[key] == "f64":
                raise RegisterError(
                    AGGREGATION_UNKNOWN_FIELD, path,
                    f"group_by key {key!r} cannot be float-typed; cast to str/int/bool first",
                )
        base = f"nodes[{i}].agg" if pn.shape_b else f"nodes[{i}].ops[{gb}].agg"
        agg = group_by["agg"]
        checked_wheres: set[str] = set()
        for feature in sorted(agg):
            spec = agg[feature]
            _check_feature(
                f"{base}.{feature}", feature, spec["op"], spec["params"], keys, schema,
                checked_wheres,
            )


def _check_feature_names(nodes: Sequence[PayloadNode]) -> None:
    """R12 (§14): a feature name is defined by one table only, over the whole payload."""
    owner: dict[str, str] = {}
    for pn in nodes:
        gb = group_by_index(pn.node)
        if gb is None:
            continue
        table = pn.node["name"]
        for feature in sorted(pn.node["ops"][gb]["agg"]):
            if feature in owner:
                raise RegisterError(
                    AGGREGATION_FEATURE_NAME_COLLISION, f"nodes.{table}.features.{feature}",
                    f"feature name {feature!r} is already defined by aggregation "
                    f"{owner[feature]!r}; feature names must be globally unique across "
                    "aggregations",
                )
            owner[feature] = table


def check_rules(nodes: Sequence[PayloadNode]) -> None:
    """P7: R1-R9, then R10, then R11, then R12; the first failure is raised."""
    _check_structure(nodes)
    schemas = _check_chains(nodes)
    _check_aggregations(nodes, schemas)
    _check_feature_names(nodes)
