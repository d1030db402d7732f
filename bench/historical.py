"""Rows/s of ``beava_spark.historical_features`` over a synthetic fraud-team history.

``python -m bench.historical`` (or ``python -m bench historical``) generates in Spark a
history of every fraud-team event (Txn, Login, Signup, CardAdd, Refund: 70 / 15 / 5 / 5 /
5 % of ``--events``) spread over 30 days, with the value rules of bench/workloads/README.md
(group-key fields from a pool of 10,000 keys, other strings from 1,000, f64 uniform, i64
flags 0/1), and a spine of ``--spine`` rows at random times holding the keys of every table.
Both are cached before the clock starts. The timed part is the ``historical_features``
call (which already runs the shuffle stages) and a ``noop`` write of its result, over all
nine tables: events/s is ``events / seconds``; Spark's CPU per event is the CPU time of the
driver, its JVM and the Python workers over the same window, divided by the events.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench import workloads
from bench.process_usage import tree_cpu_seconds
from bench.spark_ingest import KEY_POOL, session

DAY_MS = 86_400_000
T0 = 1_700_000_000_000
SHARES = {"Txn": 0.70, "Login": 0.15, "Signup": 0.05, "CardAdd": 0.05, "Refund": 0.05}


def key_fields(nodes: list[dict[str, Any]]) -> set[str]:
    """Every group-by key of the payload's tables."""
    keys: set[str] = set()
    for node in nodes:
        for op in node.get("ops", []):
            if op.get("op") == "group_by":
                keys.update(op["keys"])
    return keys


def event_frame(spark: Any, fields: dict[str, str], keys: set[str], rows: int, seed: int,
                partitions: int) -> Any:
    """``rows`` events with ``fields`` and ``ts`` (epoch ms over 30 days), made by Spark."""
    from pyspark.sql import functions as f

    i = f.col("id") + f.lit(seed * 1_000_003)
    columns = [(f.lit(T0) + (f.col("id") * 30 * DAY_MS / rows).cast("long")
                + i * 7 % 1000).alias("ts")]
    for name, kind in fields.items():
        if name in keys:
            value = f.concat(f.lit(name[:2]), (i * 7919 % KEY_POOL).cast("string"))
        elif kind == "str":
            value = f.format_string("s%03d", i * 31 % 1000)
        elif kind == "f64":
            unit = (i * 104_729 % 1_000_003) / 1_000_003
            low, high = {"lat": (25.0, 49.0), "lon": (-124.0, -67.0)}.get(name, (0.0, 1000.0))
            value = unit * (high - low) + low
        elif name in workloads.FLAG_FIELDS:
            value = i % 2
        else:
            value = columns[0]  # event_time: the event's time
        columns.append(value.alias(name))
    return spark.range(rows, numPartitions=partitions).select(*columns)


def spine_frame(spark: Any, keys: set[str], rows: int, partitions: int) -> Any:
    from pyspark.sql import functions as f

    i = f.col("id")
    columns = [i.alias("row_id"),
               (f.lit(T0) + (i * 104_729 % 1_000_003) * (30 * DAY_MS // 1_000_003)).alias("ts")]
    for name in sorted(keys):
        columns.append(f.concat(f.lit(name[:2]), (i * 6421 % KEY_POOL).cast("string"))
                       .alias(name))
    return spark.range(rows, numPartitions=partitions).select(*columns)


@dataclass
class History:
    """A synthetic fraud-team history in Spark, cached: the events by name, their counts,
    and a spine holding the keys of every table."""

    frames: dict[str, Any]
    counts: dict[str, int]
    labels: Any
    register: dict[str, Any]

    @property
    def events(self) -> int:
        return sum(self.counts.values())

    def unpersist(self) -> None:
        for frame in [*self.frames.values(), self.labels]:
            frame.unpersist()


def history(spark: Any, *, events: int, spine: int, partitions: int) -> History:
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
    labels = spine_frame(spark, keys, spine, partitions).cache()
    labels.count()
    return History(frames, counts, labels, wl.register)


def spark_cpu(exclude: frozenset[int] = frozenset()) -> float:
    """CPU seconds of this process (the Spark driver) and every one below it (its JVM,
    the Python workers), the ``exclude`` processes (a server) left out."""
    return tree_cpu_seconds(os.getpid(), exclude)


def run(history: History) -> dict[str, Any]:
    """Time ``historical_features`` over ``history`` (the call, which runs the shuffle
    stages already, and a ``noop`` write of its result): seconds and Spark's CPU."""
    from beava_spark import historical_features

    cpu = spark_cpu()
    started = time.perf_counter()
    out = historical_features(history.labels, history.frames, history.register)
    out.write.format("noop").mode("overwrite").save()
    seconds = time.perf_counter() - started
    cpu = spark_cpu() - cpu
    nodes = history.register["nodes"]
    return {"workload": "fraud-team", "events": history.events,
            "events_by_type": history.counts, "spine_rows": history.labels.count(),
            "tables": len([n for n in nodes if n["kind"] != "event"]),
            "feature_columns": len(out.columns) - len(history.labels.columns),
            "seconds": round(seconds, 2), "events_per_s": round(history.events / seconds),
            "spark_cpu_s": round(cpu, 1),
            "cpu_us_per_event": round(cpu / history.events * 1e6, 1)}


def measure(spark: Any, *, events: int, spine: int, partitions: int) -> dict[str, Any]:
    data = history(spark, events=events, spine=spine, partitions=partitions)
    try:
        return run(data)
    finally:
        data.unpersist()


def history_parser(prog: str) -> argparse.ArgumentParser:
    """The options of a bench over one fraud-team history on Spark (this one, bench
    offline): its size, its spine, input partitions, the master, JSON output."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--spine", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=2, help="input partitions")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--json", action="store_true")
    return parser


def run_history(args: argparse.Namespace, measure_with: Callable[..., dict[str, Any]],
                conf: dict[str, str] | None = None) -> dict[str, Any]:
    """``measure_with(spark, events=, spine=, partitions=)`` in a session on ``args``'
    master (with ``conf`` set), stopped after; the result with the master named."""
    spark = session(args.master)
    for key, value in (conf or {}).items():
        spark.conf.set(key, value)
    try:
        result = measure_with(spark, events=args.events, spine=args.spine,
                              partitions=args.partitions)
    finally:
        spark.stop()
    result["master"] = args.master
    return result


def main(argv: list[str] | None = None) -> None:
    parser = history_parser("python -m bench.historical")
    parser.add_argument("--shuffle-partitions", type=int, default=8)
    args = parser.parse_args(argv)
    result = run_history(args, measure,
                         {"spark.sql.shuffle.partitions": str(args.shuffle_partitions)})
    result["shuffle_partitions"] = args.shuffle_partitions
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"historical_features, fraud-team, Spark {args.master}, "
          f"{args.shuffle_partitions} shuffle partitions")
    print(f"events {result['events']:,} ({result['tables']} tables, "
          f"{result['feature_columns']} features)  spine {result['spine_rows']:,} rows")
    print(f"{result['seconds']:.1f} s  {result['events_per_s']:,} events/s  "
          f"Spark CPU {result['cpu_us_per_event']} µs per event")


if __name__ == "__main__":
    main()
