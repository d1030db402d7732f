"""Benchmark workloads (bench/workloads/, copies of the shared set) and their synthetic events.

Event generation follows bench/workloads/README.md: group-key fields draw from a pool of
K keys (throughput) or take a fresh value per event (memory runs), other strings from 1,000
short strings, f64 uniform in [0, 1000) (lat/lon in the US box), i64 flags 0/1, and
``event_time`` an epoch-ms integer. Seeded: the same arguments give the same events.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WORKLOADS_DIR = Path(__file__).resolve().parent / "workloads"
FLAG_FIELDS = {"declined", "is_3ds", "success", "is_chargeback"}


@dataclass(frozen=True)
class Workload:
    name: str
    register: dict[str, Any]
    event: str
    fields: dict[str, str]
    key_fields: tuple[str, ...]
    tables: tuple[str, ...]
    feature_count: int

    def first_table(self) -> str:
        return self.tables[0]


def load(name: str, directory: Path = WORKLOADS_DIR) -> Workload:
    doc = json.loads((directory / f"{name}.json").read_text())
    nodes = doc["register"]["nodes"]
    event = doc["event_name"]
    fields = next(n for n in nodes if n["kind"] == "event" and n["name"] == event)[
        "schema"]["fields"]
    key_fields: list[str] = []
    tables = []
    features = 0
    for node in nodes:
        if node["kind"] != "derivation" or node.get("upstreams") != [event]:
            continue
        for op in node.get("ops", []):
            if op.get("op") == "group_by":
                tables.append(node["name"])
                features += len(op["agg"])
                key_fields += [k for k in op["keys"] if k not in key_fields]
    return Workload(name, doc["register"], event, fields, tuple(key_fields), tuple(tables),
                    features)


def _value(rng: random.Random, name: str, kind: str, strings: list[str]) -> Any:
    if kind == "str":
        return rng.choice(strings)
    if kind == "f64":
        if name == "lat":
            return rng.uniform(25.0, 49.0)
        if name == "lon":
            return rng.uniform(-124.0, -67.0)
        return rng.uniform(0.0, 1000.0)
    if kind == "i64":
        if name in FLAG_FIELDS:
            return rng.randint(0, 1)
        return 1_700_000_000_000 + rng.randint(0, 86_400_000)
    if kind == "bool":
        return rng.random() < 0.5
    return rng.choice(strings)


def events(workload: Workload, count: int, *, key_pool: int | None = 10_000,
           seed: int = 7) -> list[dict[str, Any]]:
    """``count`` event bodies. ``key_pool=None`` gives every event fresh key values."""
    rng = random.Random(seed)
    strings = [f"s{i:03d}" for i in range(1000)]
    out = []
    for i in range(count):
        body = {name: _value(rng, name, kind, strings) for name, kind in workload.fields.items()}
        key_index = i if key_pool is None else rng.randrange(key_pool)
        for field in workload.key_fields:
            body[field] = f"{field[:2]}{key_index}"
        out.append(body)
    return out
