"""The fields a chain's steps write (``describe``'s ``writes``): a sharded client places a
table only when no step between the event and the table writes one of its key fields
(``shard_routes``). Imports nothing else of the client: the server's describe uses it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# Steps that pass the fields they keep through unchanged (they only drop rows or fields).
TRANSPARENT_STEPS = frozenset({"filter", "select", "drop"})
# Each writing step's parameter naming what it writes: a mapping whose keys (whose values,
# for rename) are the written fields.
_WRITTEN_BY = {"with_columns": "exprs", "map": "exprs", "cast": "type_map",
               "fillna": "defaults", "rename": "mapping"}
ANY_FIELD = "*"
"""In ``writes``: a step this client does not know, which may write any field."""


def step_writes(steps: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The fields a chain of steps writes, each with the (last) step writing it; a step
    of unknown kind writes ``ANY_FIELD``."""
    out: dict[str, str] = {}
    for step in steps:
        op = step.get("op")
        if op in TRANSPARENT_STEPS or op == "group_by" or not isinstance(op, str):
            continue
        param = step.get(_WRITTEN_BY.get(op, ""))
        if not isinstance(param, Mapping):
            out[ANY_FIELD] = op
            continue
        for name in (param.values() if op == "rename" else param):
            out[str(name)] = op
    return out
