"""Agent runtime guardrails: before each tool call, decide whether an AI agent may go on.

Every tool call an agent makes is pushed as a ``ToolCall`` event. Per-agent features —
call rate, spend, consecutive failures, tool fan-out, token usage — are read back live
(the read right after a push already includes it) and turned into ALLOW / THROTTLE /
HALT decisions.

Run: ``python examples/agent_runtime_guardrails.py [URL]`` — without a URL a private
server is started for the run (embed mode).
"""

from __future__ import annotations

import sys
from typing import Any

import beava as bv


@bv.event
class ToolCall(bv.Event):
    agent_id: str
    tool: str
    tokens: int
    cost_usd: float
    failed: bool


@bv.table(key="agent_id")
def AgentGuard(calls: ToolCall) -> bv.Table:
    return calls.group_by("agent_id").agg(
        calls_1m=bv.count(window="1m"),
        spend_1h=bv.sum("cost_usd", window="1h"),
        failure_streak=bv.streak(where=bv.col("failed")),
        failure_rate_10m=bv.ratio(window="10m", where=bv.col("failed")),
        tools_10m=bv.n_unique("tool", window="10m"),
        tokens_max_1h=bv.max("tokens", window="1h"),
    )


# Guardrail policy.
MAX_CALLS_PER_MINUTE = 8
MAX_SPEND_PER_HOUR = 2.50
MAX_FAILURE_STREAK = 3
MAX_TOOLS = 5


def decide(row: dict[str, Any]) -> tuple[str, str]:
    """ALLOW / THROTTLE / HALT with the reason, from an AgentGuard row."""
    if row.get("failure_streak", 0) >= MAX_FAILURE_STREAK:
        return "HALT", f"{row['failure_streak']} failed calls in a row"
    if row.get("spend_1h", 0.0) > MAX_SPEND_PER_HOUR:
        return "HALT", f"spent ${row['spend_1h']:.2f} this hour (budget ${MAX_SPEND_PER_HOUR})"
    if row.get("calls_1m", 0) > MAX_CALLS_PER_MINUTE:
        return "THROTTLE", f"{row['calls_1m']} calls in the last minute"
    if row.get("tools_10m", 0) > MAX_TOOLS:
        return "THROTTLE", f"{row['tools_10m']} different tools in 10 minutes"
    return "ALLOW", "within limits"


def tool_calls() -> list[dict[str, Any]]:
    """Three agents: a well-behaved one, a looping one, and one that keeps failing."""
    calls: list[dict[str, Any]] = []
    for i in range(4):
        calls.append({"agent_id": "planner", "tool": ["search", "read", "write"][i % 3],
                      "tokens": 900 + 50 * i, "cost_usd": 0.04, "failed": False})
    for i in range(11):
        calls.append({"agent_id": "looper", "tool": "search", "tokens": 1200,
                      "cost_usd": 0.03, "failed": False})
        if i == 5:
            calls.append({"agent_id": "looper", "tool": "browser", "tokens": 300,
                          "cost_usd": 0.01, "failed": True})
    for i in range(4):
        calls.append({"agent_id": "flaky", "tool": "deploy", "tokens": 4000,
                      "cost_usd": 0.70, "failed": i > 0})
    return calls


def main(url: str | None = None) -> int:
    with bv.App(url, test_mode=url is None) as app:
        app.register(ToolCall, AgentGuard)
        actions: dict[str, str] = {}
        for n, call in enumerate(tool_calls(), start=1):
            app.push("ToolCall", call)
            # the read right after the push already counts it
            action, reason = decide(app.get("AgentGuard", call["agent_id"]))
            if actions.get(call["agent_id"]) != action:
                actions[call["agent_id"]] = action
                print(f"call {n:>2} {call['agent_id']:>8} {call['tool']:<8} -> {action}: {reason}")
        print("\nlive features and final decisions")
        agents = sorted(actions)
        rows = app.batch_get([("AgentGuard", agent) for agent in agents])
        for agent, row in zip(agents, rows, strict=True):
            action, reason = decide(row)
            print(f"{agent:>8} {action:<8} {reason}; features {row}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None))
