"""``python -m beava_spark``: ingest a Parquet, CSV or JSON-lines file (or directory) into
running beava server(s), with live progress on stderr and a summary at the end.

Exit status: 0 every row acknowledged, 1 rows rejected, 2 nothing or not everything
could be pushed (bad arguments, conversion error, server unreachable, job failed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from .access import Access
from .driver import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_TIMEOUT,
    check_server,
    push_dataframe,
    urls_of,
)
from .errors import (
    BeavaSparkError,
    PushFailedError,
    RowsRejectedError,
    SchemaMismatchError,
    spark_failure_reason,
)
from .progress import Progress
from .totals import PushTotals
from .writer import DEFAULT_SCHEMA_CHECK_ROWS

FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".json": "json",
           ".jsonl": "json", ".ndjson": "json"}
DEFAULT_OPTIONS = {"csv": {"header": "true", "inferSchema": "true"}}


def _pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m beava_spark",
        description="Push every row of a Parquet, CSV or JSON-lines file into beava as one "
                    "event per row (Spark reads the file; see spark_connector/README.md).")
    parser.add_argument("path", nargs="+", help="input file(s) or directory(ies)")
    parser.add_argument("--event", required=True, help="registered event name")
    parser.add_argument("--url", action="append", required=True,
                        help="tcp://host:port of a server; repeat for several (needs --key)")
    parser.add_argument("--format", choices=sorted(set(FORMATS.values())),
                        help="input format (default: from the file extension)")
    parser.add_argument("--key", action="append", default=None,
                        help="key column for routing to several servers; repeat for a "
                             "composite key")
    parser.add_argument("--schema", action="append", type=_pair, default=[],
                        metavar="COLUMN=TYPE",
                        help="beava type of a column (str, i64, f64, bool, datetime)")
    parser.add_argument("--option", action="append", type=_pair, default=[],
                        metavar="NAME=VALUE",
                        help="Spark reader option (CSV defaults: header=true, "
                             "inferSchema=true)")
    parser.add_argument("--event-schema", metavar="FIELD:TYPE,...",
                        help="the event's fields, e.g. 'user_id:str,amount:f64,coupon:str?' "
                             "(? = optional; default: the fields the server has registered): "
                             "columns are checked before anything is sent")
    parser.add_argument("--schema-check-rows", type=int, default=DEFAULT_SCHEMA_CHECK_ROWS,
                        help="stop a partition whose first N rows are all rejected for a "
                             "schema reason (0: never; default %(default)s)")
    parser.add_argument("--select", help="comma-separated columns to push (default: all)")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
    parser.add_argument("--max-in-flight", type=int, default=DEFAULT_MAX_IN_FLIGHT)
    parser.add_argument("--partitions", type=int,
                        help="repartition the input into this many tasks first")
    parser.add_argument("--partitions-per-server", type=int)
    parser.add_argument("--on-error", choices=("collect", "raise"), default="collect",
                        help="collect: push every row and count rejections (default); "
                             "raise: stop a partition at its first rejected row")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    parser.add_argument("--master", default="local[*]",
                        help="Spark master when this command starts Spark (default local[*])")
    parser.add_argument("--progress-interval", type=float, default=1.0,
                        help="seconds between progress lines (0: none)")
    parser.add_argument("--json", action="store_true",
                        help="print the totals as one JSON object instead of the summary")
    return parser


def input_format(paths: Sequence[str]) -> str:
    """The format of ``paths`` from their extensions (files inside a directory count)."""
    found = set()
    for name in paths:
        path = Path(name)
        files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
        for file in files:
            if file.name.startswith(("_", ".")):
                continue
            fmt = FORMATS.get(file.suffix.lower())
            if fmt is None:
                raise ValueError(f"cannot tell the format of {file}; use --format")
            found.add(fmt)
    if len(found) != 1:
        raise ValueError(f"cannot tell one input format from {list(paths)} "
                         f"(found {sorted(found) or 'no files'}); use --format")
    return found.pop()


class ProgressPrinter:
    """Writes one progress line per report: rewritten in place on a terminal."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.in_place = stream.isatty()
        self.printed = False

    def __call__(self, progress: Progress) -> None:
        line = progress.line()
        if self.in_place:
            self.stream.write("\r" + line.ljust(100))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self.printed = True

    def finish(self) -> None:
        if self.in_place and self.printed:
            self.stream.write("\n")
            self.stream.flush()


def _session(master: str) -> tuple[Any, bool]:
    """The active SparkSession, or a new one (then also returned True: stop it at the end)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    # Workers must run this interpreter: it has beava_spark and beava_client.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (SparkSession.builder.master(master).appName("beava-spark ingest")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.ui.enabled", "false"))
    if master.startswith("local"):
        # A local job needs no other interface than the loopback one.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (builder.config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark, True


def _print_totals(totals: PushTotals, args: argparse.Namespace, out: TextIO,
                  note: str = "") -> None:
    if args.json:
        out.write(json.dumps(totals.as_dict(), sort_keys=True) + "\n")
        return
    out.write(f"beava-spark: {', '.join(args.path)} -> event {args.event} "
              f"on {', '.join(args.url)}{' ' + note if note else ''}\n{totals.summary()}\n")
    for sample in totals.rejections[:5]:
        out.write(f"  rejected [{sample.code}] {sample.row}\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        fmt = args.format or input_format(args.path)
        urls = urls_of(args.url)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        # Before Spark starts (seconds): an unreachable server or unknown event is known
        # at once.
        for url in urls:
            check_server(url, args.event, args.timeout, Access.resolve())
    except BeavaSparkError as exc:
        sys.stderr.write(f"beava-spark: {exc}\n")
        return 2
    spark, owned = _session(args.master)
    printer = ProgressPrinter(sys.stderr)
    try:
        options = {**DEFAULT_OPTIONS.get(fmt, {}), **dict(args.option)}
        df = spark.read.format(fmt).options(**options).load(list(args.path))
        if args.select:
            df = df.select(*[c.strip() for c in args.select.split(",")])
        if args.partitions:
            df = df.repartition(args.partitions)
        totals = push_dataframe(
            df, args.event, args.url, batch_size=args.batch_size,
            max_in_flight=args.max_in_flight, key=args.key, on_error=args.on_error,
            schema=dict(args.schema), event_schema=args.event_schema,
            schema_check_rows=args.schema_check_rows,
            partitions_per_server=args.partitions_per_server,
            timeout=args.timeout,
            progress=printer if args.progress_interval > 0 else None,
            progress_interval=args.progress_interval or 1.0,
        )
    except RowsRejectedError as exc:
        printer.finish()
        _print_totals(exc.totals, args, sys.stdout)
        return 1
    except (PushFailedError, SchemaMismatchError) as exc:
        printer.finish()
        _print_totals(exc.totals, args, sys.stdout,
                      "so far (every task attempt)" if isinstance(exc, PushFailedError) else "")
        sys.stderr.write(f"beava-spark: {exc}\n")
        return 2
    except (BeavaSparkError, ValueError) as exc:
        printer.finish()
        sys.stderr.write(f"beava-spark: {exc}\n")
        return 2
    except Exception as exc:  # Spark failed outside the push (e.g. reading the input)
        printer.finish()
        sys.stderr.write(f"beava-spark: Spark failed: {spark_failure_reason(exc)}\n")
        return 2
    finally:
        if owned:
            spark.stop()
    printer.finish()
    _print_totals(totals, args, sys.stdout)
    return 1 if totals.rejected else 0


if __name__ == "__main__":
    sys.exit(main())
