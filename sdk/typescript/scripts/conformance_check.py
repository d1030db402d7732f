"""The conformance runner's comparison rules for the TypeScript SDK's replay
(test/conformance.test.ts): the TypeScript test runs a scenario's steps through `App` and
sends what each step observed here; this checks them with `tests/conformance/runner.py`'s
own `check_step` (the matchers, exact/subset, tolerances, `$rv`, `$capture`/`$var`), so the
two replays cannot drift apart.

Protocol: one JSON line per scenario on stdin, `{"steps": [...], "observations": [...],
"base_rv": n}` (an observation per step: `{"ok": bool, "body": ...}`, `null` for a sleep),
one JSON line back, `{"diff": null}` or `{"diff": "step N (...): first difference"}`.

What an SDK observation cannot hold, and how it is compared instead:
- the HTTP status or the reply opcode: `App` resolves on success and rejects with the
  server's error otherwise, so `ok` must equal whether the vector expects success (status
  200, or the success opcode of the request), and the status/opcode/content-type checks are
  dropped;
- response headers: `App` returns bodies only (the body's `idempotent_replay` carries what
  `X-Beava-Idempotent-Replay` says), so header checks are dropped;
- int versus float: JavaScript has one number type, so a float the server wrote as `3.0`
  reaches the SDK as `3`; numbers are compared with the runner's `--loose-numbers` rule and
  a `{"$type": "float"}` matcher accepts any number (`"int"` still requires an integer).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("conformance_runner",
                                               REPO / "tests" / "conformance" / "runner.py")
assert _spec is not None and _spec.loader is not None
runner = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = runner  # its dataclasses look their module up there
_spec.loader.exec_module(runner)

# The success reply opcode of each request kind over framed TCP (writes echo their op).
_SUCCESS_OPS = {"register": runner.OP_REGISTER, "push": runner.OP_PUSH, "ping": runner.OP_PING,
                "get": runner.OP_GET_RESPONSE, "batch_get": runner.OP_GET_RESPONSE,
                "reset": runner.OP_GET_RESPONSE}
_TRANSPORT_CHECKS = ("status", "op", "ct", "headers", "alive")


def _expects_success(step: dict[str, Any], expect: dict[str, Any]) -> bool | None:
    """Whether the vector expects the request to succeed (None: it does not say)."""
    if "status" in expect:
        return bool(expect["status"] == 200)
    if "op" in expect:
        allowed = expect["op"] if isinstance(expect["op"], list) else [expect["op"]]
        return _SUCCESS_OPS[step["kind"]] in allowed
    return None


def _any_number(exp: Any) -> Any:
    """`exp` with every `$type` naming "float" widened to "number" (see the module doc)."""
    if isinstance(exp, list):
        return [_any_number(x) for x in exp]
    if not isinstance(exp, dict):
        return exp
    out = {k: _any_number(v) for k, v in exp.items()}
    if runner.is_matcher(exp) and "$type" in exp:
        wants = exp["$type"] if isinstance(exp["$type"], list) else [exp["$type"]]
        out["$type"] = ["number" if w == "float" else w for w in wants]
    return out


def check(steps: list[dict[str, Any]], observations: list[Any], base_rv: int) -> str | None:
    ctx = runner.Ctx(http="", tcp_host="", tcp_port=0, timeout=0.0, loose_numbers=True,
                     base_rv=base_rv, vars={})
    for i, (step, obs) in enumerate(zip(steps, observations, strict=True), 1):
        if obs is None:
            continue
        expect = step.get("expect") or {}
        where = f"step {i} ({runner.describe(step)})"
        success = _expects_success(step, expect)
        if success is not None and obs["ok"] != success:
            return (f"{where}: expected {'success' if success else 'an error'}, got "
                    f"{'success' if obs['ok'] else 'an error'}: {runner.short(obs.get('body'))}")
        body_only = {k: v for k, v in expect.items() if k not in _TRANSPORT_CHECKS}
        if "body" in body_only:
            body_only["body"] = _any_number(body_only["body"])
        diff = runner.check_step({**step, "expect": body_only}, {"body": obs.get("body")}, ctx)
        if diff:
            return f"{where}: {diff}"
    return None


def main() -> None:
    for line in sys.stdin:
        doc = json.loads(line)
        diff = check(doc["steps"], doc["observations"], doc["base_rv"])
        sys.stdout.write(json.dumps({"diff": diff}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
