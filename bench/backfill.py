"""Rows/s of ``beava_spark.backfill`` over a synthetic fraud-team history.

``python -m bench.backfill`` starts a durable ``beava`` server (a temporary data
directory), registers fraud-team, generates in Spark the history of bench/historical.py
(``--events`` over the five events, 30 days, cached before the clock starts) and times one
``backfill`` of every table into the server: one Spark job on ``--master`` replaying each
(key group, key bucket) in its task, which uploads the parts of its keys, then the
installs (parts joined, WAL tail read, state record written and fsynced, swap). events/s
is ``events / seconds``; ``cpu_us_per_event`` the CPU time of the whole process tree in
that window (driver, Spark JVM, Python workers, server) per event, which other load on the
machine does not inflate as it does the wall time. A GET of one entity checks the result
is served.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from typing import Any

from bench import workloads
from bench.historical import SHARES, event_frame, key_fields
from bench.process_usage import tree_cpu_seconds
from bench.server_process import BenchServer
from bench.spark_ingest import session


def measure(spark: Any, *, events: int, partitions: int) -> dict[str, Any]:
    from beava_client import client_for_url
    from beava_spark import backfill

    wl = workloads.load("fraud-team")
    nodes = wl.register["nodes"]
    keys = key_fields(nodes)
    frames = {}
    counts = {}
    for seed, (name, share) in enumerate(SHARES.items()):
        fields = next(n for n in nodes if n["kind"] == "event" and n["name"] == name)[
            "schema"]["fields"]
        counts[name] = int(events * share)
        frames[name] = event_frame(spark, fields, keys, counts[name], seed, partitions).cache()
        frames[name].count()
    with tempfile.TemporaryDirectory() as data:
        server = BenchServer("--data-dir", data)
        try:
            url = f"tcp://{server.addrs['tcp']}"
            with client_for_url(url) as client:
                client.register(wl.register)
                started, cpu = time.perf_counter(), tree_cpu_seconds(os.getpid())
                totals = backfill(frames, wl.register, url)
                seconds = time.perf_counter() - started
                cpu = tree_cpu_seconds(os.getpid()) - cpu
                probe = client.get("TxnByUser", "us1")
        finally:
            server.stop()
    for frame in frames.values():
        frame.unpersist()
    total = sum(counts.values())
    return {"workload": "fraud-team", "events": total, "events_by_type": counts,
            "tables": len(totals.tables),
            "entities": sum(t.entities for t in totals.tables.values()),
            "state_bytes": sum(t.state_bytes for t in totals.tables.values()),
            "parts": sum(t.parts for t in totals.tables.values()),
            "seconds": round(seconds, 2), "events_per_s": round(total / seconds),
            "cpu_seconds": round(cpu, 1), "cpu_us_per_event": round(cpu * 1e6 / total, 1),
            "probe_txn_count": probe.get("txn_count_lifetime")}


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
    print(f"{result['seconds']:.1f} s  {result['events_per_s']:,} events/s")


if __name__ == "__main__":
    main()
