"""The register payloads the Python SDK compiles for the repository's pipelines, as canonical
JSON, for the TypeScript SDK's parity test (test/parity.test.ts), which compiles the same
pipelines written in TypeScript and compares the text.

Pipelines: every `examples/*.py` (all its descriptors, in definition order), the pipeline
samples of `docs/*.md` (a page's ```python blocks in order, descriptors in definition
order), the operator reference's table (`docs/hooks/reference.py`: one feature per
operator) and `bench/workloads/*.json` (rebuilt with the DSL from the nodes the file
describes, as the TypeScript test rebuilds them).

The text is the payload's JSON with its keys sorted and no spaces, numbers as Python writes
them: a float keeps its fraction (`3.0`), as the TypeScript SDK writes a parameter the
catalogue types as a float, so the two texts are compared as they are.
Run: `python sdk/typescript/scripts/python_payloads.py` prints `{pipeline: text}`.
"""

from __future__ import annotations

import ast
import json
import re
import runpy
import sys
import warnings
from pathlib import Path
from typing import Any

import beava as bv
from beava.dsl.chain import EventDerivation, is_event_source
from beava.dsl.tables import TableDescriptor

REPO = Path(__file__).resolve().parents[3]
_BLOCK = re.compile(r"^(<!-- sample: [a-z]+ -->\n)?```python\n(?P<code>.*?)^```$", re.M | re.S)


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def is_descriptor(obj: Any) -> bool:
    return is_event_source(obj) or isinstance(obj, TableDescriptor) or (
        isinstance(obj, EventDerivation) and obj._is_bv_event_function)


def collect(found: list[Any], namespace: dict[str, Any]) -> None:
    """Append the descriptors of `namespace` not yet in `found`, in namespace order."""
    for value in namespace.values():
        if is_descriptor(value) and not any(value is f for f in found):
            found.append(value)


def example(path: Path) -> dict[str, Any]:
    found: list[Any] = []
    collect(found, runpy.run_path(str(path), run_name="pipeline"))
    return bv.compile_register_payload(*found)


def _declarative(code: str) -> str:
    """A sample block reduced to `import beava` lines and its decorated definitions."""
    kept = []
    for node in ast.parse(code).body:
        beava_import = isinstance(node, ast.Import) and all(a.name == "beava" for a in node.names)
        decorated = isinstance(node, ast.ClassDef | ast.FunctionDef) and node.decorator_list
        if beava_import or decorated:
            kept.append(node)
    return ast.unparse(ast.Module(body=kept, type_ignores=[]))


def page(path: Path) -> dict[str, Any] | None:
    namespace: dict[str, Any] = {"__name__": f"docs_{path.stem}"}
    found: list[Any] = []
    for match in _BLOCK.finditer(path.read_text()):
        exec(compile(_declarative(match["code"]), path.name, "exec"), namespace)  # noqa: S102
        collect(found, namespace)
    return bv.compile_register_payload(*found) if found else None


def operator_reference() -> dict[str, Any]:
    sys.path.insert(0, str(REPO / "docs" / "hooks"))
    import reference  # the generator of docs/operators.md

    namespace: dict[str, Any] = {}
    exec("import beava as bv\n" + reference.EXAMPLE_EVENT, namespace)  # noqa: S102
    txn = namespace["Txn"]
    features = {}
    for example in reference.EXAMPLES.values():
        name, _, call = example.partition("=")
        features[name] = eval(call, {"bv": bv})  # noqa: S307

    @bv.table(key="user_id")
    def Reference(txn: txn) -> bv.Table:  # type: ignore[valid-type]
        return txn.group_by("user_id").agg(**features)

    return bv.compile_register_payload(txn, Reference)


def workload_feature(entry: dict[str, Any]) -> Any:
    """A workload feature through its operator function: `field` positional, the other
    params the function takes as keywords (the workloads carry some the server ignores).
    When the function refuses them (a `where` string, a param it requires missing) the
    feature is the node dict `{"op", **params}`, passed through unchanged."""
    params = dict(entry["params"])
    fn = getattr(bv, entry["op"])
    code = fn.__code__
    accepted = set(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount])
    kwargs = {k: v for k, v in params.items() if k in accepted and k != "field"}
    try:
        if "where" in params:
            raise TypeError("a where string")
        return fn(params["field"], **kwargs) if "field" in accepted else fn(**kwargs)
    except (TypeError, ValueError, KeyError, bv.RegistrationError):
        return {"op": entry["op"], **params}


def _table(name: str, upstream: Any, keys: list[str], features: dict[str, Any]) -> Any:
    def build(events: Any) -> Any:
        return events.group_by(*keys).agg(**features)

    build.__name__ = name
    build.__annotations__ = {"events": upstream}
    return bv.table(key=keys)(build)


def workload(path: Path) -> dict[str, Any]:
    """The workload's pipeline through the DSL: each event without `event_time` (the DSL
    refuses the name), each table's features by `workload_feature`."""
    nodes = json.loads(path.read_text())["register"]["nodes"]
    sources: dict[str, Any] = {}
    out: list[Any] = []
    for node in nodes:
        if node["kind"] == "event":
            fields = {k: v for k, v in node["schema"]["fields"].items() if k != "event_time"}
            hints = {k: {"str": str, "i64": int, "f64": float, "bool": bool}[v]
                     for k, v in fields.items()}
            source = bv.event(type(node["name"], (), {"__annotations__": hints}))
            sources[node["name"]] = source
            out.append(source)
    for node in nodes:
        if node["kind"] != "derivation":
            continue
        step = node["ops"][-1]
        upstream = sources[node["upstreams"][0]]
        features = {}
        for name, entry in step["agg"].items():
            features[name] = workload_feature(entry)
        out.append(_table(node["name"], upstream, step["keys"], features))
    return bv.compile_register_payload(*out)


def main() -> None:
    warnings.simplefilter("ignore")
    out: dict[str, str] = {}
    for path in sorted((REPO / "examples").glob("*.py")):
        out[f"examples/{path.name}"] = canonical(example(path))
    for path in sorted((REPO / "docs").glob("*.md")):
        payload = page(path) if path.name != "operators.md" else operator_reference()
        if payload is not None:
            out[f"docs/{path.name}"] = canonical(payload)
    for path in sorted((REPO / "bench" / "workloads").glob("*.json")):
        out[f"bench/workloads/{path.name}"] = canonical(workload(path))
    json.dump(out, sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
