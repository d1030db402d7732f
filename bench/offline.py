"""The offline paths side by side with the live server, on one fraud-team history.

``python -m bench offline [--events N]`` generates the synthetic fraud-team history of
bench/historical.py once (``--events`` over the five events, 30 days, and a spine of
``--spine`` rows, cached in Spark before any clock starts), then computes it four ways:

- **live**: a memory-only server, every event pushed over framed TCP (pipelined OP_PUSH);
  the server's CPU time over the pushes (every thread, bench/process_usage.py) per event;
- **historical_features** of every table on ``--master`` (``local[2]``): the call and a
  ``noop`` write of its result;
- **backfill** of every table into a durable server (replay, upload, install);
- **scan**: the backfilled server's widest table read by one TCP client (MessagePack
  pages, rows as arrays as ``spark.read`` asks for them, then rows as maps) and by
  ``spark.read.format("beava")`` (bench/scan_rate.py).

Each Spark figure is events (rows) per second of wall-clock time and the CPU time of the
Spark driver, its JVM and the Python workers per event, the servers' own left out except
for ``backfill``, whose server install is part of the work (its share printed below it);
the cost per event per core is that CPU time, set beside the live server's CPU per event
(offline/live). ``historical_features`` and ``backfill`` then run a second time in the
same session (``backfill`` into a second server): the first run pays for the JVM compiling
the exchange's code, the second shows the cost once it is compiled.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import asdict
from typing import Any

from beava_client import TcpClient
from bench import backfill, historical, scan_rate, workloads
from bench.engine_bench import register
from bench.process_usage import cpu_seconds
from bench.server_process import BenchServer

CHUNK_ROWS = 20_000  # event rows taken from Spark per pipelined push


def live(history: historical.History) -> dict[str, Any]:
    """Push every event of ``history`` to a memory-only server over framed TCP: the
    server's CPU time per event (the rows come from Spark in chunks, outside the count)."""
    server = BenchServer("--memory-only")
    try:
        register(server.addrs["http"], history.register)
        with TcpClient(*server.tcp()) as client:
            spent = 0.0
            started = time.perf_counter()
            for name, frame in history.frames.items():
                rows = frame.drop("ts").toLocalIterator()
                while chunk := [row.asDict() for _, row in zip(range(CHUNK_ROWS), rows,
                                                              strict=False)]:
                    cpu = cpu_seconds(server.pid())
                    result = client.push_pipelined(name, chunk)
                    spent += cpu_seconds(server.pid()) - cpu
                    if result["acks"] != len(chunk):
                        raise RuntimeError(f"pushes rejected: {result['errors'][:3]}")
            seconds = time.perf_counter() - started
    finally:
        server.stop()
    return {"events": history.events, "server_cpu_s": round(spent, 2),
            "cpu_us_per_event": round(spent / history.events * 1e6, 1),
            "events_per_s_per_core": round(history.events / spent),
            "seconds_with_client": round(seconds, 1)}


def measure(spark: Any, *, events: int, spine: int, partitions: int) -> dict[str, Any]:
    """Every figure; the scan last, as its Spark read stops the session when done."""
    data = historical.history(spark, events=events, spine=spine, partitions=partitions)
    with tempfile.TemporaryDirectory() as directory:
        server = backfill.durable_server(directory, data.register)
        try:
            try:
                result: dict[str, Any] = {"workload": "fraud-team", "events": data.events,
                                          "spine_rows": spine, "live": live(data),
                                          "historical_features": historical.run(data),
                                          "backfill": backfill.run(data, server)}
                result["historical_features, 2nd run"] = historical.run(data)
                with tempfile.TemporaryDirectory() as again:
                    second = backfill.durable_server(again, data.register)
                    try:
                        result["backfill, 2nd run"] = backfill.run(data, second)
                    finally:
                        second.stop()
            finally:
                data.unpersist()
            table = scan_rate.widest_table(workloads.load("fraud-team"))
            result["scan"] = asdict(scan_rate.measure(server, table, arrays=True, spark=True))
            result["scan, rows as maps"] = asdict(scan_rate.measure(server, table))
        finally:
            server.stop()
    return result


def report(result: dict[str, Any]) -> str:
    live_us = result["live"]["cpu_us_per_event"]
    lines = [f"fraud-team, {result['events']:,} events "
             f"(historical_features: spine of {result['spine_rows']:,} rows)",
             f"{'':40}{'events/s':>10}{'CPU µs/event':>14}{'offline/live':>14}",
             f"{'live server (1 core)':40}{result['live']['events_per_s_per_core']:>10,}"
             f"{live_us:>14}{'1.0':>14}"]
    for name in ("historical_features", "backfill", "historical_features, 2nd run",
                 "backfill, 2nd run"):
        part = result[name]
        label = name.replace(",", f" {result['master']},") if "," in name else (
            f"{name} {result['master']}")
        lines.append(f"{label:40}{part['events_per_s']:>10,}"
                     f"{part['cpu_us_per_event']:>14}"
                     f"{part['cpu_us_per_event'] / live_us:>14.1f}")
    lines.append(f"{'':40}(backfill: the server's share "
                 f"{result['backfill']['server_us_per_event']} µs/event)")
    scan, maps = result["scan"], result["scan, rows as maps"]
    lines.append(f"scan {scan['table']} ({scan['rows']:,} rows, {scan['columns']} columns): "
                 f"server {scan['server_us_per_row']:.1f} µs/row (rows as maps: "
                 f"{maps['server_us_per_row']:.1f}), one client "
                 f"{scan['rows_per_s']:,.0f} rows/s, spark.read "
                 f"{scan['spark_rows_per_s'] or 0:,.0f} rows/s "
                 f"({scan['spark_us_per_row'] or 0:.1f} µs of Spark CPU per row)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = historical.history_parser("python -m bench offline").parse_args(argv)
    result = historical.run_history(args, measure)
    print(json.dumps(result, indent=2) if args.json else report(result))


if __name__ == "__main__":
    main()
