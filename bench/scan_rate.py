"""Rows/s of a table scan (docs/wire.md "Table scan") on a workload's widest table, and
how long one page holds the server (a push waits at most that long behind a scan).

A memory-only server is started and registered with the workload, ``events`` events are
pushed with ``keys`` distinct key sets (bench/workloads.py), then the table fed by the
bench event with the most features is scanned ``repeat`` times per page size and content
type, by ``scan_rows`` of one framed-TCP client. Reported: rows/s (median of the repeats)
and the slowest page round trip. ``--spark`` also reads the table with
``spark.read.format("beava")`` on ``local[2]`` (Spark start-up not timed).

    python -m bench.scan_rate --workload fraud-team --events 200000 --keys 50000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from beava_client import TcpClient
from bench import workloads
from bench.engine_bench import register
from bench.server_process import BenchServer


def widest_table(wl: workloads.Workload) -> str:
    counts = {}
    for node in wl.register["nodes"]:
        if node["kind"] == "derivation" and node["name"] in wl.tables:
            counts[node["name"]] = sum(len(op.get("agg", {})) for op in node.get("ops", []))
    return max(counts, key=lambda name: counts[name])


def load(client: TcpClient, wl: workloads.Workload, events: int, keys: int) -> None:
    bodies = workloads.events(wl, events, key_pool=keys)
    result = client.push_pipelined(wl.event, bodies)
    if result["acks"] != events:
        raise RuntimeError(f"pushes rejected: {result['errors'][:3]}")


def time_scan(client: TcpClient, table: str, page: int) -> tuple[int, float, float]:
    """(rows, seconds, slowest page seconds) of one full scan."""
    rows = 0
    slowest = 0.0
    cursor = None
    started = time.perf_counter()
    while True:
        before = time.perf_counter()
        reply = client.scan(table, cursor, limit=page)
        slowest = max(slowest, time.perf_counter() - before)
        rows += len(reply["rows"])
        cursor = reply["cursor"]
        if cursor is None:
            return rows, time.perf_counter() - started, slowest


def spark_read(url: str, table: str, page: int, repeat: int) -> list[float]:
    from bench.spark_ingest import session

    spark = session("local[2]")
    import beava_spark

    beava_spark.register(spark)
    rates = []
    for _ in range(repeat + 1):  # the first read warms the Python workers
        started = time.perf_counter()
        df = (spark.read.format("beava").option("url", url).option("table", table)
              .option("page_size", str(page)).option("partitions", "2").load())
        rows = df.rdd.mapPartitions(lambda it: [sum(1 for _ in it)]).sum()
        rates.append(rows / (time.perf_counter() - started))
    spark.stop()
    return rates[1:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="fraud-team")
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--pages", default="1000,10000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--spark", action="store_true")
    args = parser.parse_args(argv)
    wl = workloads.load(args.workload)
    table = widest_table(wl)
    server = BenchServer("--memory-only")
    try:
        register(server.addrs["http"], wl.register)
        with TcpClient(*server.tcp()) as json_client, \
                TcpClient(*server.tcp(), content_type="msgpack") as mp_client:
            load(json_client, wl, args.events, args.keys)
            first = json_client.scan(table, limit=0)
            print(f"{wl.name}: table {table}, {first['entities']:,} entities, "
                  f"{len(first['columns'])} columns", flush=True)
            for page in (int(p) for p in args.pages.split(",")):
                for name, client in (("json", json_client), ("msgpack", mp_client)):
                    runs: list[Any] = [time_scan(client, table, page) for _ in range(args.repeat)]
                    rates = [rows / seconds for rows, seconds, _ in runs]
                    slowest = max(s for _, _, s in runs)
                    print(f"  page {page:>6,}  {name:<7}  {statistics.median(rates):>10,.0f} "
                          f"rows/s  (slowest page {slowest * 1000:.1f} ms)", flush=True)
            if args.spark:
                url = f"tcp://{server.addrs['tcp']}"
                rates = spark_read(url, table, 1000, args.repeat)
                print(f"  spark.read.format('beava') local[2], page 1,000: "
                      f"{statistics.median(rates):,.0f} rows/s", flush=True)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
