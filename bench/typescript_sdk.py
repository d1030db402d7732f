"""``python -m bench.typescript_sdk [--events N]``: the TypeScript SDK's push figures beside
the Python wire client's, on one server.

A memory-only test-mode server is started; the Python wire client (``beava_client``,
MessagePack) runs the measures of the TypeScript SDK's `npm run bench`
(sdk/typescript/bench/bench.ts), on the same `small` workload and the same rows, then that
bench runs from one Node process against the same server (built first with `npm run build`;
`npm ci` must have been run in sdk/typescript). Each side resets the server and registers
the workload before it starts. The measures:

- pipelined push_many / pushMany: the rows in chunks of 1,000, every chunk sent at once;
- push with 1,024 requests in flight (asyncio tasks / promises), one event per request;
- push one at a time (at most 20,000 events), each request awaited before the next.

Each prints events/s and the p50/p99 of each request's latency, from the call to its
answer, as the client's caller sees it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from beava_client import AsyncTcpClient, TcpClient
from bench.server_process import BenchServer

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "sdk" / "typescript"
CHUNK = 1000
IN_FLIGHT = 1024
ONE_AT_A_TIME = 20_000


def rows(count: int) -> list[dict[str, Any]]:
    """The rows bench.ts pushes."""
    return [{"event_time": i, "user_id": f"u{i % 10_000}", "amount": (i % 1000) + 0.5}
            for i in range(count)]


def report(label: str, events: int, seconds: float, latencies: list[float]) -> None:
    """One line, in bench.ts's format."""
    latencies.sort()

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000

    print(f"{label}: {round(events / seconds):,} events/s, latency p50 {pct(0.5):.3f} ms, "
          f"p99 {pct(0.99):.3f} ms ({len(latencies)} requests)", flush=True)


async def _timed(latencies: list[float], call: Callable[[], Awaitable[Any]]) -> Any:
    start = time.perf_counter()
    out = await call()
    latencies.append(time.perf_counter() - start)
    return out


async def python_side(host: str, port: int, events: list[dict[str, Any]]) -> None:
    register = json.loads((REPO / "bench" / "workloads" / "small.json").read_text())["register"]
    client = AsyncTcpClient(host, port, content_type="msgpack", max_in_flight=IN_FLIGHT)
    await client.reset()
    await client.register(register)

    latencies: list[float] = []
    chunks = [events[i:i + CHUNK] for i in range(0, len(events), CHUNK)]
    start = time.perf_counter()
    # Bind each chunk now: the lambdas run inside gather, after the loop has moved on.
    results = await asyncio.gather(*(
        _timed(latencies, lambda c=c: client.push_many("Txn", c, chunk_size=CHUNK))
        for c in chunks))
    report("push_many (chunks of 1000, all pipelined)", sum(r["acks"] for r in results),
           time.perf_counter() - start, latencies)

    latencies = []
    queue = iter(events)

    async def worker() -> None:
        for row in queue:
            await _timed(latencies, lambda row=row: client.push("Txn", row))

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    report(f"push ({IN_FLIGHT} in flight)", len(events), time.perf_counter() - start, latencies)
    await client.close()

    latencies = []
    n = min(len(events), ONE_AT_A_TIME)
    with TcpClient(host, port, content_type="msgpack") as sync:
        start = time.perf_counter()
        for row in events[:n]:
            t0 = time.perf_counter()
            sync.push("Txn", row)
            latencies.append(time.perf_counter() - t0)
        report("push (one at a time)", n, time.perf_counter() - start, latencies)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.typescript_sdk", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=200_000)
    args = parser.parse_args()
    if not (PACKAGE / "node_modules").is_dir():
        parser.error(f"run `npm ci` in {PACKAGE} first")
    subprocess.run(["npm", "run", "--silent", "build"], cwd=PACKAGE, check=True)
    server = BenchServer("--memory-only", "--test-mode")
    try:
        host, port = server.tcp()
        print(f"server tcp://{host}:{port}, small workload, {args.events:,} events")
        print("Python wire client (beava_client, MessagePack; asyncio, and sync one at a time):")
        asyncio.run(python_side(host, port, rows(args.events)))
        print("TypeScript SDK (App, MessagePack; one Node process):", flush=True)
        subprocess.run(["npm", "run", "--silent", "bench", "--", f"tcp://{host}:{port}",
                        str(args.events)], cwd=PACKAGE, check=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
