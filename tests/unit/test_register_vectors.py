"""The recorded register conformance vectors, replayed through `register()` in process.

Every scenario of register.json and register_errors.json is replayed from empty_registry():
register steps go through `register()` (swapping in the new Registry when there is one), ping
steps check the registry version, reset steps empty the registry and bump its version. Steps
the registry cannot observe (push, get, raw HTTP / TCP transport checks) are skipped; the live
conformance run covers them. Besides the runner's matchers, error paths are compared with the
reference path recorded in the `$comment` of the vector (paths are normative, registry.md §12.5).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest

from beava.engine.registry import Registry, empty_registry, register
from tests.reference_vectors import is_matcher, load_scenarios, reference_text

FILES = ("register.json", "register_errors.json")
REGISTRY_STEPS = {"register", "ping", "reset"}
OP_REGISTER, OP_ERROR = 0x0001, 0xFFFF


def _scenarios() -> list[Any]:
    """Every scenario with a register step (transport-only ones belong to the live run)."""
    return [pytest.param(sc, id=sc["name"]) for name in FILES for sc in load_scenarios(name)
            if any(step["kind"] == "register" for step in sc["steps"])]


SCENARIOS = _scenarios()


class Mismatch(AssertionError):
    pass


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


_TYPES = {
    "int": lambda x: isinstance(x, int) and not isinstance(x, bool),
    "float": lambda x: isinstance(x, float),
    "number": _is_num,
    "str": lambda x: isinstance(x, str),
    "bool": lambda x: isinstance(x, bool),
    "null": lambda x: x is None,
    "list": lambda x: isinstance(x, list),
    "dict": lambda x: isinstance(x, dict),
    "any": lambda x: True,
}


def _close(e: float, a: float, rel: float, abs_: float) -> bool:
    return e == a or abs(e - a) <= max(rel * max(abs(e), abs(a)), abs_)


def match(exp: Any, act: Any, path: str, base_rv: int) -> None:
    """Raise Mismatch unless `act` satisfies `exp` (subset mode, README matchers)."""
    if is_matcher(exp):
        _match_matcher(exp, act, path, base_rv)
    elif isinstance(exp, dict):
        if not isinstance(act, dict):
            raise Mismatch(f"{path}: expected object, got {act!r}")
        for k, ev in exp.items():
            if is_matcher(ev) and ev.get("$absent"):
                if k in act:
                    raise Mismatch(f"{path}.{k}: expected absent")
                continue
            if k not in act:
                raise Mismatch(f"{path}.{k}: missing")
            match(ev, act[k], f"{path}.{k}", base_rv)
    elif isinstance(exp, list):
        if not isinstance(act, list) or len(act) != len(exp):
            raise Mismatch(f"{path}: expected {exp!r}, got {act!r}")
        for i, (ev, av) in enumerate(zip(exp, act, strict=True)):
            match(ev, av, f"{path}[{i}]", base_rv)
    elif _is_num(exp):
        if not _is_num(act) or isinstance(exp, int) != isinstance(act, int):
            raise Mismatch(f"{path}: expected {exp!r}, got {act!r}")
        if not _close(float(exp), float(act), 1e-9, 1e-12):
            raise Mismatch(f"{path}: expected {exp!r}, got {act!r}")
    elif type(exp) is not type(act) or exp != act:
        raise Mismatch(f"{path}: expected {exp!r}, got {act!r}")


def _matches(exp: Any, act: Any, base_rv: int) -> bool:
    try:
        match(exp, act, "", base_rv)
    except Mismatch:
        return False
    return True


def _unordered(want: list[Any], act: list[Any], base_rv: int) -> bool:
    if not want:
        return not act
    first, rest = want[0], want[1:]
    return any(
        _matches(first, a, base_rv) and _unordered(rest, act[:i] + act[i + 1:], base_rv)
        for i, a in enumerate(act)
    )


def _match_matcher(m: dict[str, Any], act: Any, path: str, base_rv: int) -> None:
    for key, arg in m.items():
        if key in ("$any", "$present", "$comment", "$absent", "rel", "abs"):
            continue
        if key == "$type":
            wants = arg if isinstance(arg, list) else [arg]
            ok = any(_TYPES[w](act) for w in wants)
        elif key == "$rv":
            ok = act == base_rv + arg
        elif key == "$unordered":
            ok = isinstance(act, list) and len(act) == len(arg) and _unordered(arg, act, base_rv)
        elif key == "$literal":
            ok = type(act) is type(arg) and act == arg
        elif key == "$num":
            ok = _is_num(act) and _close(float(arg), float(act), 1e-9, 1e-12)
        elif key == "$approx":
            ok = _is_num(act) and _close(
                float(arg), float(act), m.get("rel", 1e-9), m.get("abs", 1e-12)
            )
        elif key == "$range":
            lo, hi = arg
            ok = _is_num(act) and (lo is None or act >= lo) and (hi is None or act <= hi)
        elif key == "$len":
            ok = isinstance(act, (list, dict, str)) and len(act) == arg
        elif key == "$keys":
            ok = isinstance(act, dict) and sorted(act) == sorted(arg)
        elif key == "$sum":
            values = act.values() if isinstance(act, dict) else act
            ok = isinstance(values, (list, type({}.values()))) and math.isclose(
                sum(values), arg
            )
        elif key == "$oneof":
            ok = any(_matches(alt, act, base_rv) for alt in arg)
        elif key == "$contains":
            ok = isinstance(act, str) and arg in act
        elif key == "$regex":
            ok = isinstance(act, str) and re.fullmatch(arg, act) is not None
        else:
            raise Mismatch(f"{path}: matcher {key} cannot be checked without a server")
        if not ok:
            raise Mismatch(f"{path}: {key} {arg!r} does not hold for {act!r}")


def _reference_paths(exp: Any, act: Any, where: str) -> None:
    """Error paths must equal the reference path recorded as `$comment: "reference: P"`."""
    if isinstance(exp, dict) and isinstance(act, dict):
        want = reference_text(exp.get("path"))
        if want is not None:
            assert act.get("path") == want, f"{where}: path {act.get('path')!r} != {want!r}"
        for k, v in exp.items():
            if k in act and not is_matcher(v):
                _reference_paths(v, act[k], f"{where}.{k}")


def _step_body(step: dict[str, Any]) -> bytes:
    if "raw_body" in step:
        return step["raw_body"].encode()
    return json.dumps(step["payload"]).encode()


def _check(step: dict[str, Any], status: int, body: Any, base_rv: int, where: str) -> None:
    expect = step["expect"]
    if "status" in expect:
        assert status == expect["status"], f"{where}: status {status}, body {body}"
    if "op" in expect:
        op = OP_REGISTER if status == 200 else OP_ERROR
        assert op == expect["op"], f"{where}: reply op {op:#06x}, body {body}"
    if "body" in expect:
        try:
            match(expect["body"], body, "body", base_rv)
        except Mismatch as exc:
            raise AssertionError(f"{where}: {exc}; got {body}") from None
        _reference_paths(expect["body"], body, f"{where}: body")


def run_scenario(scenario: dict[str, Any]) -> int:
    """Replay a scenario's registry steps; returns how many steps were checked."""
    current: Registry = empty_registry()
    checked = 0
    for n, step in enumerate(scenario["steps"]):
        kind = step["kind"]
        if kind not in REGISTRY_STEPS:
            continue
        where = f"step {n} ({step.get('comment', kind)})"
        if kind == "register":
            outcome = register(current, _step_body(step))
            _check(step, outcome.status, outcome.body, 0, where)
            if outcome.registry is not None:
                assert outcome.registry.version == current.version + 1
                current = outcome.registry
        elif kind == "ping":
            rv = step["expect"]["body"]["registry_version"]
            match(rv, current.version, f"{where} registry_version", 0)
        else:  # reset: empty registry, version + 1 (wire.md §9)
            current = empty_registry(current.version + 1)
            _check(step, 200, {"registry_version": current.version, "reset": True}, 0, where)
        checked += 1
    return checked


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_register_vectors(scenario: dict[str, Any]) -> None:
    assert run_scenario(scenario) > 0


def test_matcher_rejects_mismatches() -> None:
    """The matcher itself must be able to fail."""
    assert not _matches({"a": 1}, {"a": 1.0}, 0)
    assert not _matches({"$rv": 1}, 2, 0)
    assert not _matches({"$unordered": ["a", "b"]}, ["a", "a"], 0)
    assert not _matches({"$type": "str"}, 5, 0)
    assert not _matches({"x": {"$absent": True}}, {"x": 1}, 0)
    assert _matches({"$unordered": ["a", "b"]}, ["b", "a"], 0)
    assert _matches({"a": [1, {"$type": "int"}]}, {"a": [1, 2], "extra": True}, 0)
