"""Time from exec to both bind lines (spec/server.md §6: target < 1 s)."""

from __future__ import annotations

import statistics

from bench.server_process import BenchServer


def measure(runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        server = BenchServer("--memory-only")
        times.append(server.bound_after_s)
        server.stop()
    return times


def main(runs: int) -> None:
    times = measure(runs)
    ms = sorted(t * 1000 for t in times)
    print(f"startup (exec -> http+tcp bound lines) over {runs} runs: "
          f"min {ms[0]:.0f} ms, median {statistics.median(ms):.0f} ms, max {ms[-1]:.0f} ms")
