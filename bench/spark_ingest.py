"""Rows/s from Spark into one beava server: ``beava_spark.push_dataframe``, the
``format("beava")`` batch write, and the ``format("beava")`` streaming write.

For each workload (bench/workloads/) a memory-only server is started and registered, a
DataFrame of the workload's event is generated in Spark and cached (so the timed runs
measure the push, not the generation), one warm-up push is made, then ``repeat`` timed
pushes. The batch write (``df.write.format("beava")``) and the streaming write (a
Parquet copy of the same rows read by ``readStream`` with ``trigger(availableNow=True)``,
one micro-batch) are timed ``repeat`` times each too, wall clock around ``save()`` /
``start()`` to the end of the query. Also reported: the Spark-side ceiling, i.e. the
push_dataframe job with a partition function that only reads its JSON bodies.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any

from bench import workloads
from bench.engine_bench import register
from bench.server_process import BenchServer

KEY_POOL = 10_000


@dataclass
class SparkRow:
    workload: str
    rows: int
    partitions: int
    batch_size: int
    max_in_flight: int
    rows_per_s_median: float
    rows_per_s_best: float
    spark_side_ceiling: float
    rejected: int
    format_rows_per_s_median: float
    stream_rows_per_s_median: float


def session(master: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(master).appName("beava-spark bench")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.memory", "4g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def event_frame(spark: Any, wl: workloads.Workload, rows: int, partitions: int) -> Any:
    """``rows`` events of the workload, made by Spark with the value ranges of
    bench.workloads: keys from a pool of 10,000, other strings from 1,000."""
    from pyspark.sql import functions as f

    i = f.col("id")
    columns = []
    for name, kind in wl.fields.items():
        if name in wl.key_fields:
            value = f.concat(f.lit(name[:2]), (i * 7919 % KEY_POOL).cast("string"))
        elif kind == "str":
            value = f.format_string("s%03d", i * 31 % 1000)
        elif kind == "f64":
            unit = (i * 104_729 % 1_000_003) / 1_000_003
            low, high = {"lat": (25.0, 49.0), "lon": (-124.0, -67.0)}.get(name, (0.0, 1000.0))
            value = unit * (high - low) + low
        elif kind == "i64":
            value = (i % 2 if name in workloads.FLAG_FIELDS
                     else f.lit(1_700_000_000_000) + i * 997 % 86_400_000)
        elif kind == "bool":
            value = i % 2 == 0
        else:
            value = f.format_string("s%03d", i % 1000)
        columns.append(value.alias(name))
    return spark.range(rows, numPartitions=partitions).select(*columns)


def _read_only(lines: Any) -> None:
    for _ in lines:
        pass


def measure(spark: Any, name: str, *, rows: int, partitions: int, batch_size: int,
            max_in_flight: int, repeat: int) -> SparkRow:
    from beava_spark import plan_conversion, push_dataframe
    from beava_spark.driver import json_lines

    wl = workloads.load(name)
    df = event_frame(spark, wl, rows, partitions).cache()
    df.count()
    lines = json_lines(plan_conversion(df.schema).bodies(df))
    started = time.perf_counter()
    lines.foreachPartition(_read_only)
    ceiling = rows / (time.perf_counter() - started)
    server = BenchServer("--memory-only")
    stream_dir = tempfile.mkdtemp(prefix="beava-spark-bench-")
    try:
        register(server.addrs["http"], wl.register)
        url = "tcp://{}:{}".format(*server.tcp())
        rates = []
        rejected = 0
        for run in range(repeat + 1):
            totals = push_dataframe(df, wl.event, url, batch_size=batch_size,
                                    max_in_flight=max_in_flight, on_error="collect")
            rejected += totals.rejected
            if run:  # the first run warms up workers and creates the entities
                rates.append(totals.rows_per_second)
        format_rates, stream_rates = _format_rates(
            spark, df, wl.event, url, rows=rows, batch_size=batch_size,
            max_in_flight=max_in_flight, repeat=repeat, stream_dir=stream_dir)
    finally:
        server.stop()
        df.unpersist()
        shutil.rmtree(stream_dir, ignore_errors=True)
    return SparkRow(name, rows, partitions, batch_size, max_in_flight,
                    statistics.median(rates), max(rates), ceiling, rejected,
                    statistics.median(format_rates), statistics.median(stream_rates))


def _format_rates(spark: Any, df: Any, event: str, url: str, *, rows: int, batch_size: int,
                  max_in_flight: int, repeat: int, stream_dir: str
                  ) -> tuple[list[float], list[float]]:
    """Rows/s of ``repeat`` batch writes and ``repeat`` streaming writes through
    ``format("beava")`` (wall clock, query planning included)."""
    import beava_spark

    beava_spark.register(spark)
    options = {"url": url, "event": event, "batch_size": str(batch_size),
               "max_in_flight": str(max_in_flight), "on_error": "collect"}
    format_rates = []
    for _ in range(repeat):
        started = time.perf_counter()
        df.write.format("beava").options(**options).mode("append").save()
        format_rates.append(rows / (time.perf_counter() - started))
    source = os.path.join(stream_dir, "rows")
    df.write.parquet(source)
    stream_rates = []
    for run in range(repeat):
        reader = spark.readStream.schema(df.schema).parquet(source)
        started = time.perf_counter()
        query = (reader.writeStream.format("beava").options(**options)
                 .option("checkpointLocation", os.path.join(stream_dir, f"checkpoint-{run}"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        stream_rates.append(rows / (time.perf_counter() - started))
    return format_rates, stream_rates


def main(names: list[str], *, rows: int, partitions: int, batch_size: int, max_in_flight: int,
         repeat: int, master: str, as_json: bool) -> None:
    spark = session(master)
    try:
        results = [measure(spark, name, rows=rows, partitions=partitions,
                           batch_size=batch_size, max_in_flight=max_in_flight, repeat=repeat)
                   for name in names]
    finally:
        spark.stop()
    if as_json:
        print(json.dumps([asdict(r) for r in results], indent=2))
        return
    print(f"Spark {master}, {partitions} partitions, batch {batch_size}, "
          f"in flight {max_in_flight} rows, {repeat} timed runs")
    print(f"{'workload':<20}{'rows':>11}{'rows/s median':>16}{'rows/s best':>14}"
          f"{'spark-side ceiling':>20}{'rejected':>10}{'format batch':>14}"
          f"{'format stream':>15}")
    for r in results:
        print(f"{r.workload:<20}{r.rows:>11,}{r.rows_per_s_median:>16,.0f}"
              f"{r.rows_per_s_best:>14,.0f}{r.spark_side_ceiling:>20,.0f}{r.rejected:>10}"
              f"{r.format_rows_per_s_median:>14,.0f}{r.stream_rows_per_s_median:>15,.0f}")
