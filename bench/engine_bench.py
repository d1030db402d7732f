"""Engine benchmarks: events/s per workload, GET latency, server CPU per read, RSS per entity.

Every figure comes from a real ``beava`` server process started here (memory-only unless
asked otherwise) and the pipelined load generator of ``bench.loadgen``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field

import msgspec

from beava_client.opcodes import CT_JSON, CT_MSGPACK, OP_BATCH_GET, OP_ERROR, OP_GET
from bench import loadgen, workloads
from bench.get_sampler import Sampler
from bench.process_usage import cpu_seconds, rss_kb
from bench.server_process import BenchServer


@dataclass
class Row:
    workload: str
    mode: str
    events_per_s: float
    errors: int
    extra: dict = field(default_factory=dict)


def register(http_addr: str, payload: dict) -> None:
    req = urllib.request.Request(f"http://{http_addr}/register", data=json.dumps(payload).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=30) as resp:
        body = json.loads(resp.read())
    if "error" in body:
        raise RuntimeError(f"register failed: {body}")


def server_args(mode: str) -> tuple[list[str], dict[str, str]]:
    if mode == "memory":
        return ["--memory-only"], {}

    data = tempfile.mkdtemp(prefix="beava-bench-")
    return ["--data-dir", data], {"BEAVA_WAL_SYNC_MODE": mode,
                                  "BEAVA_SNAPSHOT_INTERVAL_MS": "0"}


def throughput(name: str, *, mode: str = "memory", connections: int = 16, depth: int = 1024,
               seconds: float = 10.0, content: str = "msgpack", distinct: int = 100_000
               ) -> Row:
    wl = workloads.load(name)
    frames = loadgen.push_frames(wl.event, workloads.events(wl, distinct), content)
    args, env = server_args(mode)
    server = BenchServer(*args, env=env)
    try:
        register(server.addrs["http"], wl.register)
        # warm-up: create the entities so the timed run measures steady state
        asyncio.run(loadgen.blast(server.tcp(), frames, connections=connections, depth=depth,
                                  seconds=1.0))
        cpu_before = cpu_seconds(server.pid())
        result = asyncio.run(loadgen.blast(server.tcp(), frames, connections=connections,
                                           depth=depth, seconds=seconds))
        cpu = cpu_seconds(server.pid()) - cpu_before
    finally:
        server.stop()
    if result.errors:
        print(f"  {result.errors} error replies, first: {result.first_error[:200]!r}")
    return Row(name, mode, result.rate, result.errors,
               {"connections": connections, "depth": depth, "content": content,
                "cpu_us_per_event": cpu * 1e6 / result.replies if result.replies else 0.0})


def null_ceiling(name: str, *, connections: int = 16, depth: int = 1024, seconds: float = 5.0
                 ) -> Row:
    """The load generator against a server that does nothing."""
    wl = workloads.load(name)
    frames = loadgen.push_frames(wl.event, workloads.events(wl, 100_000))
    proc = subprocess.Popen([sys.executable, "-m", "bench.null_server"], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        addr = json.loads(proc.stdout.readline())["addr"]
        host, _, port = addr.rpartition(":")
        result = asyncio.run(loadgen.blast((host, int(port)), frames, connections=connections,
                                           depth=depth, seconds=seconds))
    finally:
        proc.terminate()
        proc.wait(10)
    return Row(name, "null-server", result.rate, result.errors)


def _percentiles(samples: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples)
    return {"p50_ms": statistics.median(ms), "p99_ms": ms[int(len(ms) * 0.99) - 1]}


def get_latency(name: str = "fraud-team", *, samples: int = 5000, connections: int = 16,
                depth: int = 1024) -> dict[str, dict[str, float]]:
    """GET p50/p99 for one key: idle, then while pushes run on other connections."""
    wl = workloads.load(name)
    bodies = workloads.events(wl, 100_000)
    frames = loadgen.push_frames(wl.event, bodies)
    server = BenchServer("--memory-only")
    try:
        register(server.addrs["http"], wl.register)
        asyncio.run(loadgen.blast(server.tcp(), frames, connections=4, depth=depth,
                                  seconds=1.0))
        latencies = sample_get_latencies(server.tcp(), wl.first_table(),
                                         bodies[0][wl.key_fields[0]], frames, samples=samples,
                                         connections=connections, depth=depth)
    finally:
        server.stop()
    return {"idle": _percentiles(latencies.idle),
            "under_push_load": _percentiles(latencies.under_push_load)}


# Seconds the push load runs before the GETs sampled under it begin, and at most while
# they run.
LOAD_RAMP_S = 0.3
LOAD_CAP_S = 10.0


@dataclass
class GetLatencies:
    idle: list[float]
    under_push_load: list[float]
    push_replies: int
    """Push replies (and error replies among them) of the load run while sampling."""
    push_errors: int
    first_push_error: bytes = b""


def sample_get_latencies(addr: tuple[str, int], table: str, key: str, frames: list[bytes], *,
                         samples: int = 5000, connections: int = 16, depth: int = 1024
                         ) -> GetLatencies:
    """Sequential GETs of one key from a process of their own (``bench.get_sampler``),
    against a running server at ``addr``: first idle, then while ``frames`` are pushed on
    ``connections`` other connections: one push run, under way (LOAD_RAMP_S) before the
    first GET and stopped after the last one or after LOAD_CAP_S (a server that answers no
    read under load then answers the rest: their latencies say how long they waited).
    Latencies in seconds."""
    idle = Sampler(addr, table, key, samples).latencies()
    results: list[loadgen.BlastResult] = []

    async def load_while_reading() -> Sampler:
        stop = asyncio.Event()
        load = asyncio.ensure_future(loadgen.blast(addr, frames, connections=connections,
                                                   depth=depth, stop=stop))
        await asyncio.sleep(LOAD_RAMP_S)
        sampler = Sampler(addr, table, key, samples)
        capped = asyncio.get_running_loop().time() + LOAD_CAP_S
        while (sampler.running() and not load.done()
               and asyncio.get_running_loop().time() < capped):
            await asyncio.sleep(0.01)
        stop.set()
        results.append(await load)
        return sampler

    loaded = asyncio.run(load_while_reading()).latencies()
    first_error = next((r.first_error for r in results if r.errors), b"")
    return GetLatencies(idle, loaded, sum(r.replies for r in results),
                        sum(r.errors for r in results), first_error)


def memory_per_keyset(name: str = "fraud-team", *, keysets: int = 50_000,
                      pushes_per_keyset: int = 2) -> dict[str, float]:
    """RSS growth per distinct key set (every group-key field new), pushed N times each."""
    wl = workloads.load(name)
    bodies = workloads.events(wl, keysets, key_pool=None)
    frames = loadgen.push_frames(wl.event, bodies) * pushes_per_keyset
    server = BenchServer("--memory-only")
    try:
        register(server.addrs["http"], wl.register)
        # one small batch first so lazily imported code and first-use buffers are counted
        # in the baseline, not in the per-entity figure
        warm = loadgen.push_frames(wl.event, workloads.events(wl, 100, key_pool=None, seed=99))
        asyncio.run(loadgen.blast(server.tcp(), warm, connections=1, depth=256,
                                  total=len(warm)))
        time.sleep(0.5)
        before = rss_kb(server.pid())
        result = asyncio.run(loadgen.blast(server.tcp(), frames, connections=1, depth=1024,
                                           total=len(frames)))
        time.sleep(0.5)
        after = rss_kb(server.pid())
    finally:
        server.stop()
    if before is None or after is None:
        raise RuntimeError("the server exited while its memory was measured")
    if result.errors:
        raise RuntimeError(f"{result.errors} pushes failed: {result.first_error!r}")
    return {"keysets": keysets, "rss_before_kb": before, "rss_after_kb": after,
            "bytes_per_keyset": (after - before) * 1024 / keysets,
            "tables_per_keyset": len(wl.tables)}


def read_cost(name: str = "fraud-team", *, keys: int = 100, requests: int = 1000
              ) -> dict[str, float]:
    """Server CPU per read, idle memory-only server holding ``name``'s state after 20,000
    pushes: OP_GET in MessagePack and in JSON, a BATCH_GET of ``keys`` keys (JSON reply),
    and POST /get; ``requests`` sequential round trips of each (microseconds)."""
    wl = workloads.load(name)
    bodies = workloads.events(wl, 20_000)
    frames = loadgen.push_frames(wl.event, bodies)
    table, field_name = wl.first_table(), wl.key_fields[0]
    chosen = list(dict.fromkeys(body[field_name] for body in bodies))[:keys]
    server = BenchServer("--memory-only")
    try:
        register(server.addrs["http"], wl.register)
        asyncio.run(loadgen.blast(server.tcp(), frames, connections=4, depth=256,
                                  total=len(frames)))
        get = {"table": table, "key": chosen[0]}
        calls = {
            "get_msgpack": loadgen.frame(OP_GET, CT_MSGPACK, msgspec.msgpack.encode(get)),
            "get_json": loadgen.frame(OP_GET, CT_JSON, msgspec.json.encode(get)),
            f"batch_get_{keys}": loadgen.frame(OP_BATCH_GET, CT_MSGPACK, msgspec.msgpack.encode(
                {"requests": [{"table": table, "key": key} for key in chosen]})),
        }
        out: dict[str, float] = {}
        with socket.create_connection(server.tcp()) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for label, data in calls.items():
                for _ in range(min(requests, 100)):  # warm
                    loadgen.request(sock, data)
                before = cpu_seconds(server.pid())
                for _ in range(requests):
                    op, payload = loadgen.request(sock, data)
                    if op == OP_ERROR:
                        raise RuntimeError(f"{label} failed: {payload!r}")
                out[label] = round((cpu_seconds(server.pid()) - before) / requests * 1e6, 1)
        url = f"http://{server.addrs['http']}/get"
        body = msgspec.json.encode(get)
        before = cpu_seconds(server.pid())
        for _ in range(requests):
            request = urllib.request.Request(url, data=body,
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request) as reply:
                reply.read()
        out["http_get"] = round((cpu_seconds(server.pid()) - before) / requests * 1e6, 1)
    finally:
        server.stop()
    return out


def chart(rows: list[Row], latency: dict | None, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2 if latency else 1, figsize=(11 if latency else 6, 4))
    ax = axes[0] if latency else axes
    labels = [f"{r.workload}\n{r.mode}" for r in rows]
    ax.bar(labels, [r.events_per_s for r in rows], color="#4C72B0")
    ax.set_yscale("log")
    ax.set_ylabel("events/s (log scale)")
    ax.set_title("push throughput (16 conn x 1024 deep, msgpack)")
    ax.tick_params(axis="x", labelsize=8)
    if latency:
        ax2 = axes[1]
        names = list(latency)
        ax2.bar([f"{n}\np50" for n in names], [latency[n]["p50_ms"] for n in names],
                color="#55A868")
        ax2.bar([f"{n}\np99" for n in names], [latency[n]["p99_ms"] for n in names],
                color="#C44E52")
        ax2.set_ylabel("ms")
        ax2.set_title("GET latency, one fraud-team key")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def print_rows(rows: list[Row]) -> None:
    print(f"{'workload':<22}{'mode':<14}{'events/s':>14}{'errors':>8}{'server CPU us/event':>22}")
    for r in rows:
        cpu = r.extra.get("cpu_us_per_event")
        cpu_text = f"{cpu:>22.2f}" if cpu is not None else f"{'-':>22}"
        print(f"{r.workload:<22}{r.mode:<14}{r.events_per_s:>14,.0f}{r.errors:>8}{cpu_text}")
