"""Every error code the server emits on register and push, triggered on a live server.

Each code is sent over HTTP and framed TCP (push also as MessagePack and through the legacy
`/push/<event>` route) and checked for: the code, the HTTP status of spec/wire.md §5.2 (on TCP
the error op 0xFFFF with ct 0x01), the envelope family of spec/wire.md §5.1 (push errors carry
`registry_version` on TCP only; register errors carry `path`, `reason` and `registry_version`)
and, for register errors, the exact `path`: the reference's own path recorded in the `$comment`
of tests/conformance/vectors/register_errors.json where a vector has one, otherwise the path of
the rule tables of spec/registry.md §3.5-§7, §13, §14 and spec/expressions.md §9.

Not triggered here: `wal_sync_timeout` and `aggregation_duplicate_feature_name` are reserved
and never emitted (wire.md §5.2); `wal_unavailable` needs the WAL append of a register to fail
(registry.md §4 P10), which a `--memory-only` server never attempts and a healthy disk never
does, so it belongs with the fault-injection tests of spec/durability.md.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import msgspec
import pytest

from tests.reference_vectors import load_scenarios, reference_text
from tests.register_payloads import table_node
from tests.support import SPEC, BeavaProcess, FrameConn, codes_only, http_request

OP_PING, OP_REGISTER, OP_PUSH, OP_ERROR = 0x0000, 0x0001, 0x0010, 0xFFFF
CT_JSON, CT_MSGPACK = 0x01, 0x02

# HTTP statuses of the codes exercised here, as spec/wire.md §5.2 lists them
# (test_statuses_match_the_spec_table re-reads the table).
SPEC_STATUS = {
    "event_not_found": 404,
    "invalid_event": 400,
    "unknown_field_v0": 400,
    "unknown_field_event_time_v0": 400,
    "unknown_field_tolerate_delay_v0": 400,
    "control_character_in_string": 400,
    "invalid_json_body": 400,
    "missing_event_name_in_body": 400,
    "invalid_registration": 400,
    "invalid_expression": 400,
    "unsupported_node_kind": 400,
    "feature_removed_no_joins_v0": 400,
    "feature_removed_no_unions_v0": 400,
    "unbounded_op_in_lifetime_mode": 400,
    "aggregation_on_table_not_supported": 400,
    "aggregation_unknown_field": 400,
    "aggregation_unknown_op": 400,
    "aggregation_invalid_window": 400,
    "aggregation_invalid_where": 400,
    "aggregation_group_key_collides_with_feature": 400,
    "aggregation_feature_name_collision_across_aggregations": 400,
    "window_not_supported": 400,
    "invalid_percentile_q": 400,
    "invalid_top_k_k": 400,
    "invalid_bloom_fpr": 400,
    "force_required": 409,
    "unsupported_media_type": 415,
}
# Emitted by register or push per the spec but deliberately not triggered (module docstring).
NOT_TRIGGERED = {"wal_unavailable"}


@dataclass(frozen=True)
class Reply:
    """One answer: `status` for HTTP, `op`/`ct` for framed TCP, and the decoded body."""

    status: int | None
    op: int | None
    ct: int | None
    body: Any


def http_post(server: BeavaProcess, target: str, body: bytes,
              content_type: str | None = "application/json") -> Reply:
    headers = {"Content-Type": content_type} if content_type else {}
    status, _, payload = http_request(server.http, "POST", target, body, headers)
    return Reply(status, None, None, json.loads(payload))


def tcp_send(conn: FrameConn, op: int, ct: int, payload: bytes) -> Reply:
    reply_op, reply_ct, reply = conn.request(op, ct, payload)
    return Reply(None, reply_op, reply_ct, json.loads(reply))


def registry_version(conn: FrameConn) -> int:
    reply = tcp_send(conn, OP_PING, CT_JSON, b"")
    assert reply.op == OP_PING, reply
    return reply.body["registry_version"]


def register_ok(server: BeavaProcess, nodes: list[dict[str, Any]]) -> None:
    reply = http_post(server, "/register", json.dumps({"nodes": nodes}).encode())
    assert reply.status == 200 and reply.body["status"] == "ok", reply


@pytest.fixture
def conn(clean_server: BeavaProcess):
    c = FrameConn(clean_server.tcp)
    yield c
    c.close()


# payload builders ------------------------------------------------------------------------

FIELDS = {"user": "str", "merchant": "str", "amount": "f64", "qty": "i64", "ok": "bool"}


def event(name: str = "Txn", **extra: Any) -> dict[str, Any]:
    return {"kind": "event", "name": name,
            "schema": {"fields": dict(FIELDS), "optional_fields": []}, **extra}


def feat(op: str, **params: Any) -> dict[str, Any]:
    return {"op": op, "params": params}


def table_b(agg: Any, name: str = "T", key: Any = ("user",), **extra: Any) -> dict[str, Any]:
    """A shape-B table derivation (node-level key and agg, registry.md §3.5)."""
    key = list(key) if isinstance(key, tuple) else key
    return {"kind": "derivation", "name": name, "upstreams": ["Txn"], "key": key, "agg": agg,
            **extra}


def derived(name: str, ops: list[dict[str, Any]], upstreams: tuple[str, ...] = ("Txn",),
            **extra: Any) -> dict[str, Any]:
    """An event derivation."""
    return {"kind": "derivation", "name": name, "output_kind": "event",
            "upstreams": list(upstreams), "ops": ops, **extra}


COUNT = {"c": feat("count", window="1h")}


def nested_where(depth: int) -> str:
    expr = "ok"
    for _ in range(depth):
        expr = f"({expr} and ok)"
    return expr


# register errors -------------------------------------------------------------------------

@dataclass(frozen=True)
class RegisterCase:
    code: str
    label: str
    body: bytes
    path: str
    is_object: bool  # a JSON object body: can also be sent as a dry run


def reg(code: str, label: str, path: str, *nodes: dict[str, Any]) -> RegisterCase:
    return RegisterCase(code, label, json.dumps({"nodes": list(nodes)}).encode(), path, True)


def reg_raw(code: str, label: str, path: str, body: bytes) -> RegisterCase:
    return RegisterCase(code, label, body, path, False)


def reference_cases() -> list[RegisterCase]:
    """Every recorded register error whose vector keeps the reference's exact path."""
    out = []
    for scenario in load_scenarios("register_errors.json"):
        short = scenario["name"].rsplit(".", 1)[-1]
        for n, step in enumerate(scenario["steps"]):
            error = step.get("expect", {}).get("body", {}).get("error")
            if step["kind"] != "register" or not isinstance(error, dict):
                continue
            path = reference_text(error.get("path"))
            if path is None:
                continue
            label = f"ref-{short}-{n}"
            if "raw_body" in step:
                out.append(reg_raw(error["code"], label, path, step["raw_body"].encode()))
            else:
                body = json.dumps(step["payload"]).encode()
                out.append(RegisterCase(error["code"], label, body, path,
                                        isinstance(step["payload"], dict)))
    return out


TXN = event()
G = "nodes[1].ops[0]"  # group-by prefix of the shape-A table at nodes[1] without prefix ops

SPEC_CASES = [
    # registry.md §4 P1 / P3 and expressions.md §9: undecodable payloads, path <body>
    reg_raw("invalid_registration", "top-level-array", "<body>", b'[{"nodes":[]}]'),
    reg_raw("invalid_registration", "not-json", "<body>", b'{"nodes": [}'),
    reg("invalid_registration", "unknown-chain-op", "<body>",
        TXN, derived("D", [{"op": "explode", "field": "user"}])),
    reg("invalid_registration", "non-string-with-columns-expr", "<body>",
        TXN, derived("D", [{"op": "with_columns", "exprs": {"x": 5}}])),
    reg("invalid_registration", "negative-integer", "<body>",
        event(dedupe_key="user", dedupe_window_ms=-5)),
    # registry.md §7.1 structural rules
    reg("invalid_registration", "R2a-empty-name", "nodes[0].name", event(name="")),
    reg("invalid_registration", "R2c-reserved-prefix", "nodes[1].name",
        TXN, event(name="_beava_x")),
    reg("invalid_registration", "R2d-name-too-long", "nodes[0].name", event(name="A" * 129)),
    reg("invalid_registration", "R3b-default-not-a-field", "nodes[0].schema.defaults.zz",
        {**TXN, "schema": {**TXN["schema"], "defaults": {"zz": "x"}}}),
    reg("invalid_registration", "R3b-default-wrong-type", "nodes[0].schema.defaults.qty",
        {**TXN, "schema": {**TXN["schema"], "defaults": {"qty": 1.5}}}),
    reg("invalid_registration", "R4-two-upstreams", "nodes[2].upstreams",
        TXN, event(name="Refund"), {**table_node(COUNT), "upstreams": ["Txn", "Refund"]}),
    reg("invalid_registration", "R4-event-derivation-without-upstream", "nodes[1].upstreams",
        TXN, derived("D", [{"op": "filter", "expr": "(amount > 1)"}], upstreams=())),
    reg("invalid_registration", "R6a-empty-derived-schema", "nodes[1].schema.fields",
        TXN, derived("D", [], schema={"fields": {}, "optional_fields": []})),
    reg("invalid_registration", "R6b-shape-a-without-primary-key", "nodes[1].table_primary_key",
        TXN, {k: v for k, v in table_node(COUNT).items() if k != "table_primary_key"}),
    reg("invalid_registration", "R6c-group-by-not-last", "nodes[1].ops[0]",
        TXN, {**table_node(COUNT), "ops": [table_node(COUNT)["ops"][0],
                                      {"op": "filter", "expr": "(amount > 1)"}]}),
    reg("invalid_registration", "R6d-table-without-aggregation", "nodes[1].ops",
        TXN, {**table_node(COUNT), "ops": [{"op": "filter", "expr": "(amount > 1)"}]}),
    reg("invalid_registration", "R5-upstream-not-in-payload", "nodes[1].upstreams[0]",
        TXN, table_node(COUNT, up="Gone")),
    reg("invalid_registration", "R8-upstream-later-in-payload", "nodes[1].upstreams[0]",
        TXN, table_node(COUNT, up="D"), derived("D", [{"op": "filter", "expr": "ok"}])),
    reg("invalid_registration", "R7-self-cycle", "nodes[1]",
        TXN, derived("D", [{"op": "filter", "expr": "ok"}], upstreams=("D",))),
    # registry.md §3.6 duration aliases
    reg("invalid_registration", "keep-events-for-bad-duration", "nodes[0].keep_events_for",
        event(keep_events_for="3x")),
    reg("invalid_registration", "dedupe-window-forever", "nodes[0].dedupe_window",
        event(dedupe_key="user", dedupe_window="forever")),
    reg("invalid_registration", "cold-after-disagrees-with-ms", "nodes[0].cold_after",
        event(cold_after="1h", cold_after_ms=5)),
    # registry.md §3.5 shape-B normalisation
    reg("invalid_registration", "shape-b-agg-not-object", "nodes[1].agg",
        TXN, table_b([feat("count")])),
    reg("invalid_registration", "shape-b-key-not-array", "nodes[1].key",
        TXN, table_b(COUNT, key="user")),
    reg("invalid_registration", "shape-b-with-group-by-op", "nodes[1].agg",
        TXN, table_b(COUNT, ops=table_node(COUNT)["ops"])),
    reg("invalid_registration", "shape-b-output-kind-event", "nodes[1].output_kind",
        TXN, table_b(COUNT, output_kind="event")),
    # registry.md §7.3 R11.5 (half_life), shape A and B
    reg("invalid_registration", "R11.5-half-life-forever", f"{G}.agg.e.params.half_life",
        TXN, table_node({"e": feat("ewma", field="amount", half_life="forever")})),
    reg("invalid_registration", "R11.5-half-life-zero-shape-b", "nodes[1].agg.e.params.half_life",
        TXN, table_b({"e": feat("decayed_sum", field="amount", half_life="0s")})),
    # expressions.md §9 / §10: chain-op failures, checked against the previous op's schema
    reg("invalid_expression", "fillna-default-type", "nodes[1].ops[0]",
        TXN, table_node(COUNT, ops=({"op": "fillna", "defaults": {"qty": "many"}},))),
    reg("invalid_expression", "fillna-null-default", "nodes[1].ops[0]",
        TXN, table_node(COUNT, ops=({"op": "fillna", "defaults": {"amount": None}},))),
    reg("invalid_expression", "filter-type-error", "nodes[1].ops[0]",
        TXN, table_node(COUNT, ops=({"op": "filter", "expr": "(user > 1)"},))),
    reg("invalid_expression", "cast-unknown-field", "nodes[1].ops[0].expr",
        TXN, table_node(COUNT, ops=({"op": "cast", "type_map": {"zz": "int"}},))),
    reg("invalid_expression", "map-later-entry", "nodes[1].ops[0].expr",
        TXN, derived("D", [{"op": "map", "exprs": {"w": "(amount + y)", "y": "(qty + 1)"}}])),
    reg("invalid_expression", "second-op-after-select", "nodes[1].ops[1].expr",
        TXN, table_node(COUNT, ops=({"op": "select", "fields": ["user", "amount"]},
                                  {"op": "filter", "expr": "(qty > 1)"}))),
    reg("invalid_expression", "table-on-event-derivation", "nodes[2].ops[0].expr",
        TXN, derived("D", [{"op": "select", "fields": ["user"]}]),
        table_node(COUNT, up="D", ops=({"op": "filter", "expr": "(amount > 1)"},))),
    # registry.md §5 prelude: names omitted when not a non-empty string, pass order
    reg("unsupported_node_kind", "nameless", "nodes[0].kind", {"kind": "upsert"}),
    reg("unsupported_node_kind", "non-string-name", "nodes[1].kind",
        TXN, {"kind": "table", "name": 5}),
    reg("unsupported_node_kind", "pass-c-before-pass-d", "nodes[2].X.kind",
        TXN, table_node({"c": feat("first_n", field="amount")}), {"kind": "upsert", "name": "X"}),
    reg("feature_removed_no_joins_v0", "pass-a-before-pass-b", "nodes[1].J.ops[1]",
        event(event_time_field="ts"),
        derived("J", [{"op": "filter", "expr": "ok"}, {"op": "join", "with": "Other"}])),
    reg("feature_removed_no_joins_v0", "nameless-node", "nodes[1].ops[0]",
        TXN, {"kind": "derivation", "upstreams": ["Txn"], "ops": [{"op": "join"}]}),
    reg("feature_removed_no_unions_v0", "first-in-payload-order", "nodes[1].U.ops[1]",
        TXN, derived("U", [{"op": "filter", "expr": "ok"}, {"op": "union"}, {"op": "join"}])),
    reg("unknown_field_event_time_v0", "on-a-derivation", "nodes[1].D.event_time_field",
        TXN, derived("D", [{"op": "filter", "expr": "ok"}], event_time_field=None)),
    reg("unknown_field_event_time_v0", "b1-before-b2-in-a-node", "nodes[0].Txn.event_time_field",
        event(tolerate_delay_ms=5, event_time_field="ts")),
    reg("unknown_field_event_time_v0", "pass-b-before-pass-c", "nodes[1].Txn.event_time_field",
        {"kind": "table", "name": "X"}, event(event_time_field="ts")),
    reg("unknown_field_tolerate_delay_v0", "earlier-node-first", "nodes[0].Txn.tolerate_delay_ms",
        event(tolerate_delay_ms=5), derived("D", [], event_time_field="ts")),
    reg("unknown_field_tolerate_delay_v0", "on-a-derivation", "nodes[1].D.tolerate_delay_ms",
        TXN, derived("D", [{"op": "filter", "expr": "ok"}], tolerate_delay_ms=0)),
    # registry.md §13 with the default enforcement (on)
    reg("unbounded_op_in_lifetime_mode", "shape-b", "nodes[1].T.agg.c",
        TXN, table_b({"c": feat("first_n", field="amount")})),
    reg("unbounded_op_in_lifetime_mode", "float-n", "nodes[1].T.ops[0].agg.c",
        TXN, table_node({"c": feat("lag", field="amount", n=5.0)})),
    reg("unbounded_op_in_lifetime_mode", "bool-n", "nodes[1].T.ops[0].agg.c",
        TXN, table_node({"c": feat("last_n", field="amount", n=True)})),
    reg("unbounded_op_in_lifetime_mode", "reservoir-k-alias", "nodes[1].T.ops[0].agg.c",
        TXN, table_node({"c": feat("reservoir_sample", field="amount", k=10)})),
    reg("unbounded_op_in_lifetime_mode", "empty-buckets", "nodes[1].T.ops[0].agg.c",
        TXN, table_node({"c": feat("histogram", field="amount", buckets=[])})),
    reg("unbounded_op_in_lifetime_mode", "deprecated-name", "nodes[1].T.ops[0].agg.c",
        TXN, table_node({"c": feat("avg", field="amount")})),
    reg("unbounded_op_in_lifetime_mode", "json-agg-order", "nodes[1].T.ops[0].agg.z",
        TXN, table_node({"z": feat("first_n", field="amount"),
                    "a": feat("histogram", field="amount")})),
    # registry.md §7.3 R11, §14
    reg("aggregation_on_table_not_supported", "R11.1-no-upstream", "nodes[1].upstreams",
        TXN, {**table_node(COUNT), "upstreams": []}),
    reg("aggregation_unknown_field", "shape-b-key", "nodes[1].key[0]",
        TXN, table_b(COUNT, key=("nope",))),
    reg("aggregation_unknown_field", "shape-b-float-key", "nodes[1].key[1]",
        TXN, table_b(COUNT, key=("user", "amount"))),
    reg("aggregation_unknown_field", "key-renamed-away", "nodes[1].ops[1].group_by[0]",
        TXN, table_node(COUNT, ops=({"op": "rename", "mapping": {"user": "u"}},))),
    reg("aggregation_unknown_field", "R11.7a-first-without-field", f"{G}.agg.c.params.field",
        TXN, table_node({"c": feat("first")})),
    reg("aggregation_unknown_field", "field-dropped-by-select",
        "nodes[1].ops[1].agg.s.params.field",
        TXN, table_node({"s": feat("sum", field="amount", window="1h")},
                   ops=({"op": "select", "fields": ["user", "qty"]},))),
    reg("aggregation_unknown_field", "R11.8-n-missing-windowed", f"{G}.agg.c.params.n",
        TXN, table_node({"c": feat("time_since_last_n", window="1h")})),
    reg("aggregation_unknown_op", "windowed-avg", f"{G}.agg.c.op",
        TXN, table_node({"c": feat("avg", field="amount", window="1h")})),
    reg("aggregation_unknown_op", "shape-b", "nodes[1].agg.c.op",
        TXN, table_b({"c": feat("percentile", field="amount", window="1h")})),
    reg("aggregation_invalid_window", "shape-b-grammar", "nodes[1].agg.c.params.window",
        TXN, table_b({"c": feat("count", window="1w")})),
    reg("aggregation_invalid_window", "lifetime-op-forever", f"{G}.agg.c.params.window",
        TXN, table_node({"c": feat("last_seen", window="forever")})),
    reg("aggregation_invalid_window", "overflow", f"{G}.agg.c.params.window",
        TXN, table_node({"c": feat("count", window="9999999999999999999d")})),
    reg("aggregation_invalid_where", "unknown-function", f"{G}.agg.c.params.where",
        TXN, table_node({"c": feat("count", window="1h", where="(foo(amount) > 1)")})),
    reg("aggregation_invalid_where", "wrong-arity", f"{G}.agg.c.params.where",
        TXN, table_node({"c": feat("count", window="1h", where="quadkey(1.0, 2.0)")})),
    reg("aggregation_invalid_where", "operand-type", f"{G}.agg.c.params.where",
        TXN, table_node({"c": feat("count", window="1h", where="(user + qty)")})),
    reg("aggregation_invalid_where", "non-bool-result", f"{G}.agg.c.params.where",
        TXN, table_node({"c": feat("count", window="1h", where="qty")})),
    reg("aggregation_invalid_where", "null-result", f"{G}.agg.c.params.where",
        TXN, table_node({"c": feat("count", window="1h", where="null")})),
    reg("aggregation_invalid_where", "depth", f"{G}.agg.c.params.where",
        TXN, table_node({"c": feat("count", window="1h", where=nested_where(600))})),
    reg("aggregation_invalid_where", "shape-b", "nodes[1].agg.c.params.where",
        TXN, table_b({"c": feat("count", window="1h", where="(zz > 1)")})),
    reg("aggregation_group_key_collides_with_feature", "second-key", f"{G}.agg.merchant",
        TXN, table_node({"merchant": feat("count", window="1h")}, keys=("user", "merchant"))),
    reg("aggregation_group_key_collides_with_feature", "shape-b", "nodes[1].agg.user",
        TXN, table_b({"user": feat("count", window="1h")})),
    reg("aggregation_feature_name_collision_across_aggregations", "shape-b",
        "nodes.T2.features.c", TXN, table_b(COUNT), table_b(COUNT, name="T2")),
    reg("aggregation_feature_name_collision_across_aggregations", "later-table",
        "nodes.T3.features.c", TXN, table_node(COUNT),
        table_node({"d": feat("count", window="1h")}, name="T2"), table_node(COUNT, name="T3")),
    reg("window_not_supported", "forever", f"{G}.agg.c.params.window",
        TXN, table_node({"c": feat("bloom_member", field="user", window="forever")})),
    reg("window_not_supported", "shape-b", "nodes[1].agg.c.params.window",
        TXN, table_b({"c": feat("bloom_member", field="user", window="1h")})),
    reg("invalid_percentile_q", "one", f"{G}.agg.c.params.q",
        TXN, table_node({"c": feat("quantile", field="amount", q=1.0)})),
    reg("invalid_percentile_q", "shape-b-negative", "nodes[1].agg.c.params.q",
        TXN, table_b({"c": feat("quantile", field="amount", q=-0.5)})),
    reg("invalid_top_k_k", "above-1024", f"{G}.agg.c.params.k",
        TXN, table_node({"c": feat("top_k", field="merchant", k=1025)})),
    reg("invalid_top_k_k", "ascending-feature-order", f"{G}.agg.a.params.k",
        TXN, table_node({"z": feat("quantile", field="amount", q=1.5),
                    "a": feat("top_k", field="merchant", k=0)})),
    reg("invalid_bloom_fpr", "fpr-alias", f"{G}.agg.c.params.target_fpr",
        TXN, table_node({"c": feat("bloom_member", field="user", fpr=0)})),
    reg("invalid_bloom_fpr", "one", f"{G}.agg.c.params.target_fpr",
        TXN, table_node({"c": feat("bloom_member", field="user", target_fpr=1.0)})),
]

REGISTER_CASES = reference_cases() + SPEC_CASES


def _register_params() -> list[Any]:
    out: list[Any] = []
    for case in REGISTER_CASES:
        transports = ["http", "tcp"] + (["http-dry-run"] if case.is_object else [])
        out.extend(pytest.param(case, t, id=f"{case.code}-{case.label}-{t}") for t in transports)
    return out


def send_register(server: BeavaProcess, conn: FrameConn, transport: str, body: bytes) -> Reply:
    if transport == "tcp":
        return tcp_send(conn, OP_REGISTER, CT_JSON, body)
    if transport == "http-dry-run":
        body = json.dumps({**json.loads(body), "dry_run": True}).encode()
    return http_post(server, "/register", body)


def assert_error_transport(reply: Reply, transport: str, code: str) -> None:
    if transport.startswith("http"):
        assert reply.status == SPEC_STATUS[code], reply
    else:
        assert (reply.op, reply.ct) == (OP_ERROR, CT_JSON), reply


@pytest.mark.parametrize("case,transport", _register_params())
def test_register_error(clean_server: BeavaProcess, conn: FrameConn, case: RegisterCase,
                        transport: str) -> None:
    version = registry_version(conn)
    reply = send_register(clean_server, conn, transport, case.body)
    assert_error_transport(reply, transport, case.code)
    assert set(reply.body) == {"error", "registry_version"}, reply.body
    assert reply.body["registry_version"] == version
    error = reply.body["error"]
    assert error["code"] == case.code, reply.body
    assert error["path"] == case.path, reply.body
    assert isinstance(error["reason"], str)
    # expressions.md §9: `detail` is the only optional extra key of a register error
    assert set(error) - {"code", "path", "reason"} <= {"detail"}, error
    assert registry_version(conn) == version


def test_register_error_does_not_touch_the_registry(clean_server: BeavaProcess,
                                                    conn: FrameConn) -> None:
    """A rejected payload leaves the registered descriptors and their state in place."""
    register_ok(clean_server, [TXN, table_node(COUNT)])
    row = {"user": "u1", "merchant": "m", "amount": 2.0, "qty": 1, "ok": True}
    assert http_post(clean_server, "/push", json.dumps({"event": "Txn", "data": row}).encode()
                     ).status == 200
    version = registry_version(conn)
    bad = table_node({**COUNT, "k": feat("top_k", field="merchant", k=0)})
    reply = tcp_send(conn, OP_REGISTER, CT_JSON, json.dumps({"nodes": [TXN, bad]}).encode())
    assert reply.body["error"]["code"] == "invalid_top_k_k"
    assert registry_version(conn) == version
    again = http_post(clean_server, "/register",
                      json.dumps({"nodes": [TXN, table_node(COUNT)]}).encode())
    assert again.body["already_present"] == ["T", "Txn"]
    assert again.body["registry_version"] == version
    assert http_post(clean_server, "/get", b'{"table":"T","key":"u1"}').body == {"c": 1}


# force_required (registry.md §4 P6, §12.4) ------------------------------------------------

USER_TXN_1H = table_node({"cnt": feat("count", window="1h")}, name="UserTxn")
USER_TXN_5M = table_node({"cnt": feat("count", window="5m")}, name="UserTxn")


def _force_required_body(version: int, reason: Any) -> dict[str, Any]:
    """The body of registry.md §12.4 for the window change 1h -> 5m of UserTxn.cnt."""
    return {
        "added": [],
        "changed": [{"changed_features": [{"from": {"op": "count", "params": {"window": "1h"}},
                                           "name": "cnt",
                                           "to": {"op": "count", "params": {"window": "5m"}}}],
                     "name": "UserTxn"}],
        "error": {"code": "force_required",
                  "diff": {"additive": [], "already_present": ["Txn"],
                           "destructive": [{"agg": "UserTxn.cnt", "from": "1h",
                                            "kind": "window_change", "to": "5m"}]},
                  "reason": reason},
        "registry_version": version, "removed": [], "status": "conflict",
    }


# only the JSON literal true turns force on (registry.md §2)
FORCE_OFF = {"absent": {}, "false": {"force": False}, "string": {"force": "yes"},
             "one": {"force": 1}, "null": {"force": None}}


@pytest.mark.parametrize("transport", ["http", "tcp"])
@pytest.mark.parametrize("force", FORCE_OFF.values(), ids=FORCE_OFF.keys())
def test_force_required(clean_server: BeavaProcess, conn: FrameConn, transport: str,
                        force: dict[str, Any]) -> None:
    register_ok(clean_server, [TXN, USER_TXN_1H])
    version = registry_version(conn)
    body = json.dumps({"nodes": [TXN, USER_TXN_5M], **force}).encode()
    reply = send_register(clean_server, conn, transport, body)
    assert_error_transport(reply, transport, "force_required")
    assert isinstance(reply.body["error"]["reason"], str)
    assert reply.body == _force_required_body(version, reply.body["error"]["reason"])
    assert registry_version(conn) == version


@pytest.mark.parametrize("transport", ["http", "tcp"])
def test_force_required_wins_over_validation(clean_server: BeavaProcess, conn: FrameConn,
                                             transport: str) -> None:
    """Invalid and destructive without force is 409, not 400 (registry.md §4)."""
    register_ok(clean_server, [TXN, USER_TXN_1H])
    version = registry_version(conn)
    invalid = table_node({"c": feat("count", window="1h", where="(zz > 1)")}, name="Bad")
    reply = send_register(clean_server, conn, transport,
                          json.dumps({"nodes": [TXN, invalid]}).encode())
    assert_error_transport(reply, transport, "force_required")
    assert reply.body == {
        "added": ["Bad"], "changed": [],
        "error": {"code": "force_required",
                  "diff": {"additive": [], "already_present": ["Txn"],
                           "destructive": [{"from": "UserTxn", "kind": "rename", "to": "Bad"}]},
                  "reason": reply.body["error"]["reason"]},
        "registry_version": version, "removed": ["UserTxn"], "status": "conflict",
    }
    # a dry run never answers 409: it validates instead (registry.md §10)
    dry = http_post(clean_server, "/register",
                    json.dumps({"nodes": [TXN, invalid], "dry_run": True}).encode())
    assert dry.status == 400
    assert dry.body["error"]["code"] == "aggregation_invalid_where"
    assert dry.body["error"]["path"] == f"{G}.agg.c.params.where"


# content type of a register (wire.md §3.3, §2.3) -------------------------------------------

@pytest.mark.parametrize("content_type", [None, "text/plain", "application/jsonx",
                                          "application/x-www-form-urlencoded"],
                         ids=["missing", "text", "json-prefix", "form"])
def test_register_unsupported_media_type_http(clean_server: BeavaProcess, conn: FrameConn,
                                              content_type: str | None) -> None:
    register_ok(clean_server, [TXN])
    version = registry_version(conn)
    reply = http_post(clean_server, "/register", b'{"nodes":[]}', content_type)
    assert reply.status == SPEC_STATUS["unsupported_media_type"]
    assert reply.body == {"error": {"code": "unsupported_media_type", "path": "/register",
                                    "reason": "expected application/json"},
                          "registry_version": version}


@pytest.mark.parametrize("ct", [CT_MSGPACK, 0x03])
def test_register_unsupported_content_type_tcp(conn: FrameConn, ct: int) -> None:
    version = registry_version(conn)
    reply = tcp_send(conn, OP_REGISTER, ct, b'{"nodes":[]}')
    assert (reply.op, reply.ct) == (OP_ERROR, CT_JSON)
    assert set(reply.body) == {"error"}
    assert set(reply.body["error"]) == {"code", "message"}
    assert reply.body["error"]["code"] == "unsupported_content_type"
    if ct == CT_MSGPACK:
        assert reply.body["error"]["message"] == "unsupported content_type for register: 0x02"
    assert registry_version(conn) == version


# push errors (wire.md §6) ------------------------------------------------------------------

PUSH_SCHEMA = [
    {"kind": "event", "name": "Txn",
     "schema": {"fields": {"user": "str", "amount": "f64", "qty": "i64", "ok": "bool"},
                "optional_fields": ["note"]}},
    derived("Big", [{"op": "filter", "expr": "(amount > 10.0)"}]),
    table_node({"n": feat("count")}, name="Counts"),
]
VALID = {"user": "u1", "amount": 1.5, "qty": 2, "ok": True}
PUSH_TRANSPORTS = ("http", "http-legacy", "tcp-json", "tcp-msgpack")
JSON_TRANSPORTS = ("http", "http-legacy", "tcp-json")


def without(key: str) -> dict[str, Any]:
    return {k: v for k, v in VALID.items() if k != key}


@dataclass(frozen=True)
class PushCase:
    code: str
    label: str
    event: str
    data: Any
    transports: tuple[str, ...] = PUSH_TRANSPORTS

PUSH_CASES = [
    PushCase("event_not_found", "unknown-name", "Nope", VALID),
    PushCase("event_not_found", "derivation-name", "Big", VALID),
    PushCase("event_not_found", "table-name", "Counts", VALID),
    PushCase("invalid_event", "body-is-array", "Txn", [VALID]),
    PushCase("invalid_event", "body-is-string", "Txn", "u1"),
    PushCase("invalid_event", "body-is-null", "Txn", None),
    PushCase("invalid_event", "non-object-before-event-lookup", "Nope", [1]),
    PushCase("invalid_event", "non-object-before-control-chars", "T\x01xn", [1],
             ("http", "tcp-json", "tcp-msgpack")),
    PushCase("invalid_event", "required-missing", "Txn", without("user")),
    PushCase("invalid_event", "required-null", "Txn", {**VALID, "amount": None}),
    PushCase("invalid_event", "str-for-f64", "Txn", {**VALID, "amount": "1.5"}),
    PushCase("invalid_event", "bool-for-f64", "Txn", {**VALID, "amount": True}),
    PushCase("invalid_event", "bool-for-i64", "Txn", {**VALID, "qty": False}),
    PushCase("invalid_event", "number-for-str", "Txn", {**VALID, "user": 42}),
    PushCase("invalid_event", "number-for-bool", "Txn", {**VALID, "ok": 1}),
    PushCase("invalid_event", "bin-for-str", "Txn", {**VALID, "user": b"u1"}, ("tcp-msgpack",)),
    PushCase("invalid_event", "ext-for-str", "Txn", {**VALID, "user": msgspec.msgpack.Ext(1, b"x")},
             ("tcp-msgpack",)),
    PushCase("invalid_event", "ext-in-optional-field", "Txn",
             {**VALID, "note": msgspec.msgpack.Ext(1, b"x")}, ("tcp-msgpack",)),
    PushCase("invalid_event", "ext-nested", "Txn",
             {**VALID, "note": {"a": [msgspec.msgpack.Ext(1, b"x")]}}, ("tcp-msgpack",)),
    PushCase("unknown_field_v0", "undeclared", "Txn", {**VALID, "zzz": 1}),
    PushCase("unknown_field_v0", "before-type-checks", "Txn", {"zzz": 1, "user": 5}),
    PushCase("unknown_field_event_time_v0", "event_time", "Txn", {**VALID, "event_time": 1}),
    PushCase("unknown_field_event_time_v0", "event_time_ms", "Txn",
             {**VALID, "event_time_ms": 1700000000000}),
    PushCase("unknown_field_event_time_v0", "wins-over-unknown-field", "Txn",
             {**VALID, "aaa": 1, "event_time": 1, "zzz": 2}),
    PushCase("control_character_in_string", "event-name", "T\x01xn", VALID,
             ("http", "tcp-json", "tcp-msgpack")),
    PushCase("control_character_in_string", "event-name-of-unknown-event", "No\x7fpe", VALID,
             ("http", "tcp-json", "tcp-msgpack")),
    PushCase("control_character_in_string", "field-name", "Txn", {**VALID, "us\ter": "u1"}),
    PushCase("control_character_in_string", "string-value", "Txn", {**VALID, "user": "u\n1"}),
    PushCase("control_character_in_string", "c1-control", "Txn", {**VALID, "user": "u\x851"}),
    PushCase("control_character_in_string", "nested-value", "Txn",
             {**VALID, "note": {"tags": ["fine", "bad\x00"]}}),
    PushCase("control_character_in_string", "nested-key", "Txn",
             {**VALID, "note": {"k\x1f": 1}}),
]


def _push_params() -> list[Any]:
    return [pytest.param(case, t, id=f"{case.code}-{case.label}-{t}")
            for case in PUSH_CASES for t in case.transports]


def send_push(server: BeavaProcess, conn: FrameConn, transport: str, name: str,
              data: Any) -> Reply:
    if transport == "http":
        return http_post(server, "/push", json.dumps({"event": name, "data": data}).encode())
    if transport == "http-legacy":
        return http_post(server, f"/push/{name}", json.dumps(data).encode())
    if transport == "tcp-json":
        return tcp_send(conn, OP_PUSH, CT_JSON, json.dumps({"event": name, "body": data}).encode())
    return tcp_send(conn, OP_PUSH, CT_MSGPACK,
                    msgspec.msgpack.encode({"event": name, "body": data}))


@pytest.fixture
def push_server(clean_server: BeavaProcess) -> BeavaProcess:
    register_ok(clean_server, PUSH_SCHEMA)
    return clean_server


def counts_row(server: BeavaProcess) -> Any:
    return http_post(server, "/get", b'{"table":"Counts","key":"u1"}').body


@pytest.mark.parametrize("transport", PUSH_TRANSPORTS)
def test_valid_push_is_accepted(push_server: BeavaProcess, conn: FrameConn,
                                transport: str) -> None:
    """The base body the error cases start from is valid on every transport."""
    reply = send_push(push_server, conn, transport, "Txn", VALID)
    if transport.startswith("http"):
        assert reply.status == 200, reply
    else:
        assert (reply.op, reply.ct) == (OP_PUSH, CT_JSON), reply
    assert reply.body["idempotent_replay"] is False
    assert counts_row(push_server) == {"n": 1}


@pytest.mark.parametrize("case,transport", _push_params())
def test_push_error(push_server: BeavaProcess, conn: FrameConn, case: PushCase,
                    transport: str) -> None:
    version = registry_version(conn)
    reply = send_push(push_server, conn, transport, case.event, case.data)
    assert_error_transport(reply, transport, case.code)
    if transport.startswith("http"):
        assert codes_only(reply.body) == {"error": {"code": case.code}}
    else:
        assert codes_only(reply.body) == {"error": {"code": case.code},
                                          "registry_version": version}
    assert counts_row(push_server) == {}
    assert registry_version(conn) == version


@pytest.mark.parametrize("route", ["/push/", "/push-sync/", "/push-batch/"])
@pytest.mark.parametrize("body", [b"", b"{", b"5", b'[{"user":"u1"}]'],
                         ids=["empty", "invalid-json", "scalar", "array"])
def test_legacy_push_body_not_an_object(push_server: BeavaProcess, route: str,
                                        body: bytes) -> None:
    """Legacy routes: a body that is not a JSON object is invalid_event, checked before the
    event lookup (wire.md §3.3)."""
    for name in ("Txn", "Nope"):
        reply = http_post(push_server, route + name, body)
        assert reply.status == SPEC_STATUS["invalid_event"]
        assert codes_only(reply.body) == {"error": {"code": "invalid_event"}}
        assert reply.body["error"]["message"] == LEGACY_BODY_MESSAGES[body]
    assert counts_row(push_server) == {}


# What a refused legacy push body is told: where decoding stopped, or what arrived instead.
LEGACY_BODY_MESSAGES = {
    b"": "the body is empty; expected a JSON object",
    b"{": "the JSON ends early: the body stops after 1 bytes, inside a value",
    b"5": "the event body must be a map of field names to values, got int",
    b'[{"user":"u1"}]': "the event body must be a map of field names to values, got array",
}


@pytest.mark.parametrize("route,code,body,where", [
    ("/push/Txn", "invalid_event", b'{"user":"u1"} x',
     "the body is not valid JSON: trailing characters (byte 15)"),
    ("/push/Txn", "invalid_event", b'{"user":u1}',
     "the body is not valid JSON: invalid character (byte 8)"),
    ("/push/Txn", "invalid_event", b'{"user":"u\xff1"}',
     "the body is not valid UTF-8: invalid start byte at byte 10"),
    ("/push", "invalid_json_body", b'{"event":"Txn","data":{"user":u1}}',
     "the body is not valid JSON: invalid character (byte 30)"),
    ("/push", "invalid_json_body", b'{"event":"Txn","data":{"user":"u1"',
     "the JSON ends early: the body stops after 34 bytes, inside a value"),
], ids=["legacy-trailing", "legacy-bare-word", "legacy-utf8", "envelope-bare-word",
        "envelope-truncated"])
def test_malformed_json_push_says_where_decoding_failed(
        push_server: BeavaProcess, route: str, code: str, body: bytes, where: str) -> None:
    """A JSON push body that does not decode is refused with where decoding stopped."""
    reply = http_post(push_server, route, body)
    assert (reply.status, reply.body["error"]) == (
        SPEC_STATUS[code], {"code": code, "message": where})
    assert counts_row(push_server) == {}


# HTTP /push envelope (wire.md §3.3) --------------------------------------------------------

HTTP_ENVELOPE_CASES = [
    ("invalid_json_body", "empty", b""),
    ("invalid_json_body", "truncated", b'{"event":"Txn","data":{'),
    ("invalid_json_body", "trailing-bytes", b'{"event":"Txn","data":{}} x'),
    ("invalid_json_body", "bare-word", b"Txn"),
    ("missing_event_name_in_body", "array", b'[{"event":"Txn","data":{}}]'),
    ("missing_event_name_in_body", "no-event", b'{"data":{"user":"u1"}}'),
    ("missing_event_name_in_body", "non-string-event", b'{"event":7,"data":{}}'),
    ("missing_event_name_in_body", "null-event", b'{"event":null,"data":{}}'),
    ("missing_event_name_in_body", "string-body", b'"Txn"'),
]


@pytest.mark.parametrize("code,body", [pytest.param(c, b, id=f"{c}-{label}-http")
                                       for c, label, b in HTTP_ENVELOPE_CASES])
def test_http_push_envelope_error(push_server: BeavaProcess, code: str, body: bytes) -> None:
    reply = http_post(push_server, "/push", body)
    assert reply.status == SPEC_STATUS[code]
    assert codes_only(reply.body) == {"error": {"code": code}}
    assert counts_row(push_server) == {}


# TCP PUSH envelope: the flat {"code":"unsupported"} (wire.md §2.5) --------------------------

MP = msgspec.msgpack.encode
TCP_ENVELOPE_CASES = [
    (CT_JSON, "invalid-json", b'{"event":"Txn","body":'),
    (CT_JSON, "not-an-object", b'["Txn",{}]'),
    (CT_JSON, "missing-event", b'{"body":{"user":"u1"}}'),
    (CT_JSON, "missing-body", b'{"event":"Txn"}'),
    (CT_JSON, "non-string-event", b'{"event":1,"body":{}}'),
    (CT_JSON, "data-instead-of-body", b'{"event":"Txn","data":{}}'),
    (CT_JSON, "trailing-bytes", b'{"event":"Txn","body":{}} {}'),
    (CT_MSGPACK, "invalid-msgpack", b"\xc1"),
    (CT_MSGPACK, "not-a-map", MP(["Txn", VALID])),
    (CT_MSGPACK, "missing-body", MP({"event": "Txn"})),
    (CT_MSGPACK, "extra-key", MP({"event": "Txn", "body": VALID, "x": 1})),
    (CT_MSGPACK, "bin-event", MP({"event": b"Txn", "body": VALID})),
    (CT_MSGPACK, "data-instead-of-body", MP({"event": "Txn", "data": VALID})),
    (CT_MSGPACK, "trailing-bytes", MP({"event": "Txn", "body": VALID}) + b"\x00"),
]


@pytest.mark.parametrize("ct,payload", [
    pytest.param(ct, p, id=f"unsupported-{label}-tcp-{'json' if ct == CT_JSON else 'msgpack'}")
    for ct, label, p in TCP_ENVELOPE_CASES])
def test_tcp_push_envelope_unsupported(push_server: BeavaProcess, conn: FrameConn, ct: int,
                                       payload: bytes) -> None:
    version = registry_version(conn)
    reply = tcp_send(conn, OP_PUSH, ct, payload)
    assert (reply.op, reply.ct) == (OP_ERROR, CT_JSON)
    assert reply.body == {"code": "unsupported"}
    assert registry_version(conn) == version  # and the connection still answers
    assert counts_row(push_server) == {}


# coverage against the spec ---------------------------------------------------------------

WIRE = SPEC / "wire.md"


def spec_code_table() -> dict[str, tuple[str, str]]:
    """code -> (HTTP column, raised-when column) of spec/wire.md §5.2."""
    text = WIRE.read_text()
    section = text[text.index("### 5.2"):text.index("### 5.3")]
    rows = re.findall(r"^\| `([a-z0-9_]+)` \| ([^|]+) \| [^|]+ \| (.+) \|$", section, re.M)
    return {code: (http.strip(), raised.strip()) for code, http, raised in rows}


def emitted_by_register_or_push() -> set[str]:
    """Codes of the §5.2 table that register or push emit: those named in §6 (push
    semantics) and those whose "raised when" names register or push; reserved codes and the
    §10 extension aside."""
    text = WIRE.read_text()
    rows = spec_code_table()
    push_section = text[text.index("## 6. Push semantics"):text.index("## 7. Reads")]
    out = {code for code in rows if f"`{code}`" in push_section}
    for code, (_, raised) in rows.items():
        lowered = raised.lower()
        if lowered.startswith(("reserved", "extension")):
            continue
        if "register" in lowered or "push" in lowered:
            out.add(code)
    return out


COVERED = ({c.code for c in REGISTER_CASES} | {c.code for c in PUSH_CASES}
           | {c for c, _, _ in HTTP_ENVELOPE_CASES}
           | {"force_required", "unsupported_media_type", "unsupported_content_type",
              "unsupported"})


def test_every_emitted_code_is_covered() -> None:
    wanted = emitted_by_register_or_push()
    assert "event_not_found" in wanted and "force_required" in wanted  # the parse worked
    assert wanted - NOT_TRIGGERED == COVERED


def test_statuses_match_the_spec_table() -> None:
    rows = spec_code_table()
    assert {code: int(rows[code][0]) for code in SPEC_STATUS} == SPEC_STATUS
