"""``python -m bench shards --shards N [N ...]``: the same pre-encoded ``fraud-team`` load
(every table, every key) sent to one server and to N shards (``beava cluster up``), and
the server CPU per event summed over every shard (docs/sharding.md). ``--one-at-a-time``
sends the shards their frames one after another: each shard then has the machine to
itself (with the load generator), which separates what the fan-out costs from what
sharing a few cores costs. A shard receives an
event once however many of its tables it owns, and applies only those: its events per busy
core-second count what it received, its table updates per busy core-second what it
applied.

Each push frame is encoded once; a sharded run sends each frame, unchanged, to every
shard owning one of its tables' keys (the owners a sharded client computes), each shard
over one connection in order, the shards at once. Every run sends the events twice (the
first pass creates the entities); the second is measured: wall time, each server's CPU
time, and so the summed CPU per event and each shard's events per busy core-second. All
servers are in test mode with one pinned clock, and afterwards a sample of every table's
keys is read from the shards and from the single server: ``exact`` says they are equal.

The load generator runs in this process and needs a core too: on a machine with few
cores the aggregate rate cannot grow with N, the CPU per event is the figure to read.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from beava.launcher import split_addr
from beava_client import ShardedClient, TcpClient
from bench import loadgen, workloads
from bench.engine_bench import register
from bench.process_usage import cpu_seconds
from bench.server_process import BenchServer

PINNED_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: every server's test clock
SAMPLE_KEYS = 200  # keys read per table for the exactness check


@dataclass
class Run:
    servers: str
    events: int
    seconds: float
    cpu: list[float]  # per server
    received: list[int]  # frames per server
    updates: list[int]  # table updates each server applies
    exact: bool | None = None

    def row(self) -> dict[str, Any]:
        total = sum(self.cpu)
        return {
            "servers": self.servers, "events": self.events,
            "events_per_s": round(self.events / self.seconds),
            "cpu_us_per_event": round(total * 1e6 / self.events, 1),
            "fan_out": round(sum(self.received) / self.events, 2),
            "events_per_busy_core_s": [round(n / c) for n, c in zip(self.received, self.cpu,
                                                                    strict=True)],
            "table_updates_per_busy_core_s": [round(n / c) for n, c in zip(
                self.updates, self.cpu, strict=True)],
            "exact": self.exact,
        }


def _two_passes(targets: list[tuple[tuple[str, int], list[bytes]]], pids: list[int],
                depth: int, together: bool = True) -> tuple[float, list[float]]:
    """Send each server its frames twice (in order, one connection each; the servers at
    once, or one after another); the second pass's wall time and each server's CPU time."""

    async def one_pass() -> None:
        sends = [loadgen.blast(addr, frames, connections=1, depth=depth, total=len(frames))
                 for addr, frames in targets if frames]
        results = await asyncio.gather(*sends) if together else [await s for s in sends]
        errors = [r for r in results if r.errors]
        if errors:
            raise RuntimeError(f"{errors[0].errors} error replies, first: "
                               f"{errors[0].first_error[:300]!r}")

    asyncio.run(one_pass())
    before = [cpu_seconds(pid) for pid in pids]
    started = time.perf_counter()
    asyncio.run(one_pass())
    seconds = time.perf_counter() - started
    return seconds, [cpu_seconds(pid) - b for pid, b in zip(pids, before, strict=True)]


class _Cluster:
    """``beava cluster up --memory-only --test-mode`` with N shards."""

    def __init__(self, shards: int) -> None:
        self.dir = tempfile.mkdtemp(prefix="beava-bench-shards-")
        env = {k: v for k, v in os.environ.items() if not k.startswith("BEAVA_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "beava", "cluster", "up", "--shards", str(shards),
             "--data-dir", self.dir, "--memory-only", "--test-mode"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # cluster up exits when a shard cannot start
        if not line:
            raise RuntimeError(f"beava cluster up --shards {shards} did not start")
        self.ready: dict[str, Any] = json.loads(line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)
        shutil.rmtree(self.dir, ignore_errors=True)


def _sample(wl: workloads.Workload, bodies: list[dict[str, Any]]) -> list[tuple[str, str]]:
    reads = []
    for node in wl.register["nodes"]:
        if node["name"] not in wl.tables:
            continue
        (field,) = next(op["keys"] for op in node["ops"] if op["op"] == "group_by")
        keys = sorted({b[field] for b in bodies})[:SAMPLE_KEYS]
        reads += [(node["name"], k) for k in keys]
    return reads


def main(shard_counts: list[int], events: int = 100_000, depth: int = 1024,
         as_json: bool = False, together: bool = True) -> list[dict[str, Any]]:
    wl = workloads.load("fraud-team")
    bodies = workloads.events(wl, events)
    frames = loadgen.push_frames(wl.event, bodies)  # encoded once, for every run
    reads = _sample(wl, bodies)
    single = BenchServer("--memory-only", "--test-mode")
    rows = []
    try:
        register(single.addrs["http"], wl.register)
        with TcpClient(*single.tcp()) as client:
            client.test_clock(PINNED_MS)
            seconds, cpu = _two_passes([(single.tcp(), frames)], [single.pid()], depth)
            expected = client.batch_get(reads)
        rows.append(Run("1 server", events, seconds, cpu, [events],
                        [events * len(wl.tables)]).row())
        for count in shard_counts:
            rows.append(_sharded(count, wl, bodies, frames, reads, expected, depth,
                                 together).row())
    finally:
        single.stop()
    if as_json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"fraud-team, {events:,} events (second pass), {os.cpu_count()} CPUs, shards "
              + ("at once" if together else "one at a time"))
        for row in rows:
            print(json.dumps(row))
    return rows


def _sharded(count: int, wl: workloads.Workload, bodies: list[dict[str, Any]],
             frames: list[bytes], reads: list[tuple[str, str]], expected: list[Any],
             depth: int, together: bool) -> Run:
    cluster = _Cluster(count)
    try:
        shards = cluster.ready["shards"]
        with ShardedClient(os.path.join(cluster.dir, "cluster.json")) as client:
            client.register(wl.register)
            client.test_clock(PINNED_MS)
            routes = client.routes
            assert routes is not None  # described by the register
            per_shard: dict[str, list[bytes]] = {s["id"]: [] for s in shards}
            updates = dict.fromkeys(per_shard, 0)
            assert client.map is not None  # fetched by the register
            owner = client.map.owner_of
            for body, data in zip(bodies, frames, strict=True):
                for shard_id in client.push_owners(routes, wl.event, body):
                    per_shard[shard_id].append(data)
                for text in routes.push_texts(wl.event, body):
                    updates[owner(text).id] += 1
            targets = [(split_addr(s["tcp"]), per_shard[s["id"]]) for s in shards]
            seconds, cpu = _two_passes(targets, [s["pid"] for s in shards], depth, together)
            exact = client.batch_get(reads) == expected
    finally:
        cluster.stop()
    return Run(f"{count} shard" + ("s" if count > 1 else ""), len(bodies), seconds, cpu,
               [len(per_shard[s["id"]]) for s in shards], [updates[s["id"]] for s in shards],
               exact)
