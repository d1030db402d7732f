"""A table installed from key-disjoint parts equals one replay of all its events.

The history is split by each table's key into K parts; each part is replayed alone
(``beava.offline.Replay``, as a Spark task does), and the parts' uploaded states are
decoded, loaded and joined as a multi-part backfill commit does (``StateDecoder``,
``load_table``, ``join_part``). Over every operator family of the catalogue (lifetime and
windowed, a global table, a composite key, a cold TTL), the joined table must hold the
entity states of one replay of all events (slot order aside) and answer every GET as that
replay does at three later times, and again after more events reach both.
"""

from __future__ import annotations

import copy
import random
import zlib
from typing import Any

import msgspec
import pytest

from beava.catalogue.errors import BeavaError
from beava.catalogue.operators import OPERATOR_NAMES, canonical_op
from beava.engine.backfill import join_part, load_table
from beava.engine.backfill_state import StateDecoder
from beava.engine.registry import TableSpec, empty_registry, register
from beava.engine.state.reads import get
from beava.engine.state.tables import TableState
from beava.offline import Pipeline, Replay
from tests.unit.test_snapshots import EVERY_OP_NODES, T0

MIN = 60_000
USERS = [f"u{i}" for i in range(40)]


def _nodes() -> list[dict[str, Any]]:
    """Every op (test_snapshots' registry), a cold TTL on the event and a composite key."""
    nodes = copy.deepcopy(EVERY_OP_NODES)
    nodes[0]["cold_after_ms"] = 90 * MIN
    nodes.append({"kind": "derivation", "name": "P", "upstreams": ["Ev"],
                  "key": ["user", "c"], "agg": {
                      "p_n": {"op": "count", "params": {}},
                      "p_s_1h": {"op": "sum", "params": {"field": "x", "window": "1h"}},
                      "p_top": {"op": "top_k", "params": {"field": "s", "k": 2}},
                      "p_last": {"op": "last", "params": {"field": "s"}}}})
    return nodes


NODES = _nodes()
PIPELINE = Pipeline({"nodes": NODES})


def history(seed: int, n: int) -> list[tuple[int, dict[str, Any]]]:
    """``n`` events ``(time, fields)``, mostly forward in time (a step back now and then,
    gaps past the cold TTL for some users), skewed to a few users."""
    rng = random.Random(seed)
    now = T0
    out = []
    for _ in range(n):
        now += rng.choice((0, 500, 20_000, 3 * MIN, 100 * MIN)) if rng.random() < 0.97 else 0
        at = now - (rng.randrange(1, 5 * MIN) if rng.random() < 0.05 else 0)
        user = USERS[min(int(rng.expovariate(0.15)), len(USERS) - 1)]
        out.append((at, {
            "user": user, "x": rng.choice((rng.uniform(-50, 150), float(rng.randrange(9)))),
            "i": rng.randrange(-3, 5000), "s": f"s{rng.randrange(12)}",
            "c": rng.choice(("a", "b", "a|b", "category-with-a-long-name")),
            "b": rng.random() < 0.6, "lat": 40 + rng.uniform(-1, 1),
            "lon": -3 + rng.uniform(-1, 1)}))
    return out


def table_spec(payload: bytes, name: str) -> TableSpec:
    """The TableSpec of ``name`` as the server compiles ``payload``."""
    outcome = register(empty_registry(), payload, memory_governance_enforce=False)
    assert outcome.registry is not None
    return outcome.registry.tables[name]


def join(spec: TableSpec, states: list[bytes]) -> TableState:
    """The table a multi-part commit installs from these uploaded parts."""
    table: TableState | None = None
    starts: list[int] = []
    for data in states:
        decoder = StateDecoder(spec, data)
        assert decoder.run(None, lambda: 0.0) and decoder.state is not None
        part = load_table(spec, decoder.state)
        if table is None:
            table, starts = part, [0]
        else:
            join_part(table, part, starts)
    assert table is not None
    return table


def canonical(spec: TableSpec, table: TableState) -> Any:
    """The table's dump in a form independent of how its object handles were handed out
    (a dump loaded again numbers them in slot order)."""
    again = TableState(spec)
    again.load(msgspec.msgpack.decode(msgspec.msgpack.encode(table.dump())))
    return msgspec.msgpack.encode(again.dump())


def read(table: TableState, name: str, key: str, at: int) -> bytes:
    """A GET of the stored key ``key`` at ``at``, as its JSON reply."""
    spec = table.spec
    parts = key.split("|") if len(spec.keys) > 1 else None  # no "|" in these key values
    found = get(lambda _: table, {"table": name, "key": parts if parts else key}, at)
    return msgspec.json.encode(found)


def test_the_registry_covers_every_operator_of_the_catalogue() -> None:
    used = {canonical_op(f["op"]) for n in NODES if n["kind"] == "derivation"
            for f in n["agg"].values()}
    assert set(OPERATOR_NAMES) <= used
    windowed = {canonical_op(f["op"]) for f in NODES[2]["agg"].values()}
    assert {"count", "sum", "mean", "min", "max", "quantile", "top_k", "n_unique",
            "entropy"} <= windowed


@pytest.mark.parametrize(("seed", "k"), [(1, 2), (2, 3), (3, 5), (4, 16)])
def test_parts_replayed_alone_and_joined_equal_one_replay_of_all(seed: int, k: int) -> None:
    events = history(seed, 1_500)
    more = [(at + 200 * MIN, row) for at, row in history(seed + 100, 300)]
    last = max(at for at, _ in events + more)
    for name in PIPELINE.table_names:
        plan = PIPELINE.table(name)
        whole = Replay(plan.payload)
        keys = [whole.key_of(name, "Ev", at, row) for at, row in events]
        nparts = k if plan.keys else 1  # a table without keys is one part
        part_of = [zlib.crc32(key.encode()) % nparts if key is not None else 0
                   for key in keys]
        parts = [Replay(plan.payload) for _ in range(nparts)]
        for (at, row), part in zip(events, part_of, strict=True):
            whole.push("Ev", at, row)
            parts[part].push("Ev", at, row)
        spec = table_spec(plan.payload, name)
        joined = join(spec, [p.state(name) for p in parts])
        # by state: each part's events in time order, the parts one after another, give
        # every entity the events it had in the same order, and the joined slot order
        ordered = Replay(plan.payload)
        for index in sorted(range(len(events)), key=lambda i: (part_of[i], i)):
            ordered.push("Ev", *events[index])
        reference = TableState(spec)
        reference.load(msgspec.msgpack.decode(ordered.state(name)))
        assert canonical(spec, joined) == canonical(spec, reference), name
        stored = [key for key in dict.fromkeys(keys) if key is not None]
        assert joined.entity_count == len(stored)
        # by GET, at three later times; then again after more events reach both
        for step in (0, 1):
            for at in (last, last + 30 * MIN, last + 26 * 60 * MIN):
                for key in stored:
                    assert read(joined, name, key, at) == msgspec.json.encode(
                        whole.get(name, key.split("|") if len(plan.keys) > 1 else key, at)
                    ), (name, key, at, step)
            if step == 0:
                for at, row in more:
                    whole.push("Ev", at, row)
                    joined.push(row, at)


def test_parts_that_share_a_key_are_refused_naming_it() -> None:
    plan = PIPELINE.table("P")
    spec = table_spec(plan.payload, "P")
    states = []
    for users in (["u1", "u2"], ["u3"], ["u4", "u2"]):
        replay = Replay(plan.payload)
        for j, user in enumerate(users):
            replay.push("Ev", T0 + j, {"user": user, "x": 1.0, "i": 1, "s": "s", "c": "a|b",
                                       "b": True, "lat": 0.0, "lon": 0.0})
        states.append(replay.state("P"))
    with pytest.raises(BeavaError) as info:
        join(spec, states)
    error = info.value
    assert (error.code, error.status) == ("backfill_parts_overlap", 409)
    assert error.fields["table"] == "P" and error.fields["parts"] == [0, 2]
    assert error.fields["key"] == {"user": "u2", "c": "a|b"}
    assert "parts 0 and 2 of table P both hold the entity user='u2' c='a|b'" in (
        error.fields["message"])
