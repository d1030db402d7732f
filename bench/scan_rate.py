"""Rows/s and server CPU per row of a table scan (docs/wire.md "Table scan") on a
workload's widest table, how long one page holds the server (a push waits at most that long
behind a scan), and optionally the rate of ``spark.read.format("beava")``.

``measure(server, table)`` takes the figures on a running server whose table is already
filled (``python -m bench offline`` calls it on its own server); ``main`` starts a
memory-only server, registers the workload, pushes ``events`` events over ``keys`` distinct
key sets (bench/workloads.py) and measures the table fed by the bench event with the most
features, per page size and content type, rows as maps and (MessagePack, as
``spark.read`` reads them) as arrays. A full scan by one framed-TCP client is repeated
``repeat`` times: rows/s is the median, server CPU per row the median of the server's CPU
time over the scan (every thread, bench/process_usage.py) divided by its rows. ``--spark``
also reads the table with ``spark.read.format("beava")`` on ``local[2]`` into Spark's
``noop`` sink (every column of every row converted into Spark's rows; Spark start-up and a
warm-up read not timed).

    python -m bench.scan_rate --workload fraud-team --events 200000 --keys 50000 --spark
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass

from beava_client import TcpClient
from bench import workloads
from bench.engine_bench import register
from bench.process_usage import cpu_seconds, tree_cpu_seconds
from bench.server_process import BenchServer


@dataclass(frozen=True)
class ScanFigures:
    """One table's scan figures: ``rows`` per full scan, its ``columns`` (key columns
    included); ``rows_per_s`` of one framed-TCP client reading pages of ``page`` rows in
    ``content_type``, ``server_us_per_row`` the server's CPU time per row over that scan,
    ``slowest_page_ms`` the longest page round trip; ``spark_rows_per_s`` the rate of
    ``spark.read.format("beava")`` on ``local[2]`` and ``spark_us_per_row`` the CPU time
    of Spark's processes (driver, JVM, Python workers; the server's not included) per row
    (None when not measured). ``arrays``: the rows came as arrays of their values (the
    scan's ``arrays``, as ``spark.read`` asks for them), not as maps."""

    table: str
    rows: int
    columns: int
    page: int
    content_type: str
    arrays: bool
    rows_per_s: float
    server_us_per_row: float
    slowest_page_ms: float
    spark_rows_per_s: float | None = None
    spark_us_per_row: float | None = None

    def summary(self) -> str:
        rows = "arrays" if self.arrays else "maps"
        text = (f"page {self.page:>6,}  {self.content_type:<7} {rows:<6}  "
                f"{self.rows_per_s:>10,.0f} rows/s"
                f"  {self.server_us_per_row:6.1f} us server CPU/row  (slowest page "
                f"{self.slowest_page_ms:.1f} ms)")
        if self.spark_rows_per_s is not None:
            text += (f"\n  spark.read.format('beava') local[2]: {self.spark_rows_per_s:,.0f} "
                     f"rows/s, {self.spark_us_per_row:.1f} us Spark CPU/row")
        return text


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


def time_scan(client: TcpClient, table: str, page: int, pid: int, arrays: bool = False
              ) -> tuple[int, float, float, float]:
    """(rows, seconds, server CPU seconds, slowest page seconds) of one full scan."""
    rows = 0
    slowest = 0.0
    cursor = None
    cpu = cpu_seconds(pid)
    started = time.perf_counter()
    while True:
        before = time.perf_counter()
        reply = client.scan(table, cursor, limit=page, arrays=arrays)
        slowest = max(slowest, time.perf_counter() - before)
        rows += len(reply["rows"])
        cursor = reply["cursor"]
        if cursor is None:
            return rows, time.perf_counter() - started, cpu_seconds(pid) - cpu, slowest


def spark_read(url: str, table: str, rows: int, page: int, repeat: int,
               server_pid: int | None = None) -> list[tuple[float, float]]:
    """(rows/s, Spark CPU seconds per row) of ``repeat`` reads of ``table`` (``rows``
    entities) into the noop sink, after one untimed read that starts the Python workers.
    Spark's CPU time is that of this process and every one below it (the driver's JVM, the
    Python workers), the server ``server_pid`` left out."""
    from bench.spark_ingest import session

    spark = session("local[2]")
    import beava_spark

    beava_spark.register(spark)
    figures = []
    exclude = frozenset(() if server_pid is None else (server_pid,))
    try:
        for _ in range(repeat + 1):
            cpu = tree_cpu_seconds(os.getpid(), exclude)
            started = time.perf_counter()
            (spark.read.format("beava").option("url", url).option("table", table)
             .option("page_size", str(page)).option("partitions", "2").load()
             .write.format("noop").mode("overwrite").save())
            figures.append((rows / (time.perf_counter() - started),
                            (tree_cpu_seconds(os.getpid(), exclude) - cpu) / rows))
    finally:
        spark.stop()
    return figures[1:]


def measure(server: BenchServer, table: str, *, page: int = 1_000,
            content_type: str = "msgpack", arrays: bool = False, repeat: int = 3,
            spark: bool = False, spark_repeat: int = 2) -> ScanFigures:
    """The scan figures of ``table`` on ``server`` (filled, and not written to while this
    runs: the server's CPU time is counted whole)."""
    with TcpClient(*server.tcp(), content_type=content_type) as client:
        first = client.scan(table, limit=0)
        runs = [time_scan(client, table, page, server.pid(), arrays) for _ in range(repeat)]
    rows = runs[0][0]
    spark_rate = spark_cpu = None
    if spark:
        url = f"tcp://{server.addrs['tcp']}"
        reads = spark_read(url, table, rows, page, spark_repeat, server.pid())
        spark_rate = statistics.median(rate for rate, _ in reads)
        spark_cpu = statistics.median(cpu for _, cpu in reads) * 1e6
    return ScanFigures(
        table=table, rows=rows, columns=len(first["columns"]), page=page,
        content_type=content_type, arrays=arrays,
        rows_per_s=statistics.median(n / seconds for n, seconds, _, _ in runs),
        server_us_per_row=statistics.median(cpu / n * 1e6 for n, _, cpu, _ in runs),
        slowest_page_ms=max(slowest for _, _, _, slowest in runs) * 1000,
        spark_rows_per_s=spark_rate, spark_us_per_row=spark_cpu)


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
        with TcpClient(*server.tcp()) as client:
            load(client, wl, args.events, args.keys)
        pages = [int(p) for p in args.pages.split(",")]
        for page in pages:
            for content_type, arrays in (("json", False), ("msgpack", False),
                                         ("msgpack", True)):
                figures = measure(server, table, page=page, content_type=content_type,
                                  arrays=arrays, repeat=args.repeat,
                                  spark=args.spark and arrays and page == pages[0])
                if page == pages[0] and content_type == "json":
                    print(f"{wl.name}: table {table}, {figures.rows:,} entities, "
                          f"{figures.columns} columns", flush=True)
                print("  " + figures.summary(), flush=True)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
