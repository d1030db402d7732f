"""Rows/s of ``beava_spark.backfill`` over a synthetic fraud-team history.

``python -m bench.backfill`` starts a durable ``beava`` server (a temporary data
directory), registers fraud-team, generates in Spark the history of bench/historical.py
(``--events`` over the five events, 30 days, cached before the clock starts) and times one
``backfill`` of every table into the server: one Spark job on ``--master`` replaying each
(key group, key bucket) in its task, which uploads the parts of its keys, then the
installs (parts joined, WAL tail read, state record written and fsynced, swap). events/s
is ``events / seconds``; ``cpu_us_per_event`` the CPU time of the whole process tree in
that window (driver, Spark JVM, Python workers, server) per event, which other load on the
machine does not inflate as it does the wall time; ``server_us_per_event`` the server's
share of it (receiving the parts, the installs). A GET of one entity checks the result
is served.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from typing import Any

from bench.historical import History, history, spark_cpu
from bench.process_usage import cpu_seconds
from bench.server_process import BenchServer
from bench.spark_ingest import session


def run(history: History, server: BenchServer) -> dict[str, Any]:
    """Time one ``backfill`` of every table of ``history`` into ``server`` (durable, with
    fraud-team registered): seconds and the CPU of the whole process tree, the server's
    install included (module docstring), and the server's own share of it."""
    from beava_client import client_for_url
    from beava_spark import backfill

    url = f"tcp://{server.addrs['tcp']}"
    cpu, server_cpu = spark_cpu(), cpu_seconds(server.pid())
    started = time.perf_counter()
    totals = backfill(history.frames, history.register, url)
    seconds = time.perf_counter() - started
    cpu, server_cpu = spark_cpu() - cpu, cpu_seconds(server.pid()) - server_cpu
    with client_for_url(url) as client:
        probe = client.get("TxnByUser", "us1")
    return {"workload": "fraud-team", "events": history.events,
            "events_by_type": history.counts, "tables": len(totals.tables),
            "entities": sum(t.entities for t in totals.tables.values()),
            "state_bytes": sum(t.state_bytes for t in totals.tables.values()),
            "parts": sum(t.parts for t in totals.tables.values()),
            "seconds": round(seconds, 2), "events_per_s": round(history.events / seconds),
            "spark_cpu_s": round(cpu, 1),
            "cpu_us_per_event": round(cpu / history.events * 1e6, 1),
            "server_cpu_s": round(server_cpu, 2),
            "server_us_per_event": round(server_cpu / history.events * 1e6, 2),
            "probe_txn_count": probe.get("txn_count_lifetime")}


def durable_server(directory: str, register: dict[str, Any]) -> BenchServer:
    """A durable server in ``directory`` with ``register`` registered."""
    from beava_client import client_for_url

    server = BenchServer("--data-dir", directory)
    with client_for_url(f"tcp://{server.addrs['tcp']}") as client:
        client.register(register)
    return server


def measure(spark: Any, *, events: int, partitions: int) -> dict[str, Any]:
    data = history(spark, events=events, spine=1, partitions=partitions)
    try:
        with tempfile.TemporaryDirectory() as directory:
            server = durable_server(directory, data.register)
            try:
                return run(data, server)
            finally:
                server.stop()
    finally:
        data.unpersist()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.backfill")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2, help="input partitions")
    parser.add_argument("--shuffle-partitions", type=int, default=8)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    spark = session(args.master)
    spark.conf.set("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
    try:
        result = measure(spark, events=args.events, partitions=args.partitions)
    finally:
        spark.stop()
    result["master"] = args.master
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"backfill, fraud-team, Spark {args.master}")
    print(f"events {result['events']:,} ({result['tables']} tables, "
          f"{result['entities']:,} entities, {result['state_bytes']:,} state bytes)")
    print(f"{result['seconds']:.1f} s  {result['events_per_s']:,} events/s  "
          f"{result['cpu_us_per_event']} us of CPU per event (the server's install "
          f"{result['server_us_per_event']})")


if __name__ == "__main__":
    main()
