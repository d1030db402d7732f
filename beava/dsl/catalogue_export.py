"""The catalogue as JSON for the SDKs written in other languages (sdk/typescript).

``python -m beava.dsl.catalogue_export`` prints the document; ``--write`` writes it to
``sdk/typescript/src/catalogue.json``, the committed copy the TypeScript DSL validates from
(a test fails when the copy differs from this output, so the operator catalogue, the Python
SDK and the TypeScript SDK cannot drift). It holds the operator table, the op aliases, the
SDK's client-side bounds, each operator function's keyword parameters and defaults (read
from ``beava.dsl.operators``), the duration and expression grammar, and the wire types.
Integers beyond 2**53 are written as decimal strings (JSON readers in JavaScript would
round them).
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from typing import Any

from beava.catalogue import expression_grammar as grammar
from beava.catalogue import operators as cat
from beava.dsl import events as dsl_events
from beava.dsl import operators as dsl_ops

TARGET = Path(__file__).resolve().parents[2] / "sdk" / "typescript" / "src" / "catalogue.json"
_SAFE = (1 << 53) - 1


def _number(value: Any) -> Any:
    if type(value) is int and abs(value) > _SAFE:
        return str(value)
    return value


def _bounds(b: cat.Bounds | None) -> dict[str, Any] | None:
    if b is None:
        return None
    return {"lo": _number(b.lo), "hi": _number(b.hi), "lo_open": b.lo_open,
            "hi_open": b.hi_open, "code": b.code, "text": b.describe()}


def _param(p: cat.ParamSpec) -> dict[str, Any]:
    default = list(p.default) if isinstance(p.default, tuple) else p.default
    return {"name": p.name, "kind": p.kind.value, "default": default, "required": p.required,
            "bounds": _bounds(p.bounds), "alias": p.alias, "max_items": p.max_items}


def _operator(spec: cat.OperatorSpec) -> dict[str, Any]:
    return {
        "name": spec.name, "family": spec.family, "params": [_param(p) for p in spec.params],
        "field": spec.field.value, "window": spec.window.value, "output": spec.output,
        "wire_type": spec.wire_type, "memory": spec.memory.value,
        "memory_param": spec.memory_param, "memory_default": spec.memory_default,
    }


def _function(name: str) -> dict[str, Any]:
    """The SDK function ``bv.<name>``: its parameters in order, each positional or keyword,
    with its default (``required`` when it has none)."""
    fn = getattr(dsl_ops, name)
    params = []
    for p in inspect.signature(fn).parameters.values():
        required = p.default is inspect.Parameter.empty
        params.append({
            "name": p.name,
            "positional": p.kind is not inspect.Parameter.KEYWORD_ONLY,
            "required": required,
            "default": None if required else p.default,
        })
    return {"op": cat.canonical_op(name), "params": params}


def document() -> dict[str, Any]:
    """The whole export (keys sorted when written)."""
    functions = [*cat.OPERATOR_NAMES, "ema"]
    client_bounds = {f"{op}.{param}": _bounds(b)
                     for (op, param), b in dsl_ops._CLIENT_BOUNDS.items()}
    return {
        "operators": [_operator(cat.CATALOGUE[name]) for name in cat.OPERATOR_NAMES],
        "op_aliases": {"ema": cat.canonical_op("ema")},
        "functions": {name: _function(name) for name in functions},
        "client_bounds": client_bounds,
        "recognised_params": {k: v.value for k, v in cat.RECOGNISED_PARAMS.items()},
        "param_aliases": dict(cat.ALIASES),
        "bloom": {"max_hashes": cat.BLOOM_MAX_HASHES, "max_bits": cat.BLOOM_MAX_BITS,
                  "default_expected_n": 1024, "default_target_fpr": 0.01},
        "durations": {
            "forever": cat.FOREVER, "max_ms": _number(cat.MAX_DURATION_MS),
            "units_ms": {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000},
            "sdk_pattern": "^[1-9][0-9]*(?:ms|s|m|h|d)$",
        },
        "expressions": {
            "identifier": f"^{grammar.IDENTIFIER.pattern}$",
            "keywords": sorted(grammar.KEYWORDS),
            "i64_min": _number(grammar.I64_MIN), "i64_max": _number(grammar.I64_MAX),
            "cast_targets": dict(grammar.CAST_TARGETS),
        },
        "event": {
            "wire_types": sorted(set(dsl_events._WIRE_TYPES.values())),
            "options": list(dsl_events._OPTIONS),
            "forbidden_options": list(dsl_events._FORBIDDEN_OPTIONS),
        },
    }


def render() -> str:
    """The file's text: sorted keys, two-space indent, a final newline."""
    return json.dumps(document(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if argv == ["--write"]:
        TARGET.write_text(text)
        return 0
    if argv:
        print("usage: python -m beava.dsl.catalogue_export [--write]", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
