"""``python -m bench <what>``: beava benchmarks (numbers, never assertions)."""

from __future__ import annotations

import argparse
import json


def chart_problem() -> str | None:
    """Why `--chart` cannot draw (matplotlib missing), or None: checked before running."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        return ("--chart needs matplotlib, which is not installed; install the bench extra "
                "(pip install -e '.[bench]') or leave out --chart")
    return None


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench")
    sub = parser.add_subparsers(dest="what", required=True)
    startup = sub.add_parser("startup", help="exec -> bind lines")
    startup.add_argument("--runs", type=int, default=20)
    ping = sub.add_parser("ping", help="PING frames/s over one pipelined connection")
    ping.add_argument("--frames", type=int, default=1_000_000)
    ping.add_argument("--depth", type=int, default=1024)
    push = sub.add_parser("push", help="push events/s per workload")
    push.add_argument("workloads", nargs="*", default=["small", "fraud-team"])
    push.add_argument("--mode", choices=("memory", "strict", "periodic"), default="memory")
    push.add_argument("--connections", type=int, default=16)
    push.add_argument("--depth", type=int, default=1024)
    push.add_argument("--seconds", type=float, default=10.0)
    push.add_argument("--content", choices=("msgpack", "json"), default="msgpack")
    push.add_argument("--null", action="store_true", help="also measure against a null server")
    push.add_argument("--chart", metavar="PNG", help="write a chart (needs matplotlib)")
    report = sub.add_parser("report", help="the engine figures: events/s per workload and "
                                           "mode, GET latency, RSS per key set; a chart")
    report.add_argument("--seconds", type=float, default=10.0)
    report.add_argument("--keysets", type=int, default=50_000)
    report.add_argument("--chart", metavar="PNG", help="write a chart (needs matplotlib)")
    latency = sub.add_parser("latency", help="GET p50/p99 idle and under push load")
    latency.add_argument("--workload", default="fraud-team")
    latency.add_argument("--samples", type=int, default=5000)
    read_cost = sub.add_parser("reads", help="server CPU per read: OP_GET (MessagePack, JSON), "
                                             "BATCH_GET, POST /get")
    read_cost.add_argument("--workload", default="fraud-team")
    read_cost.add_argument("--keys", type=int, default=100, help="keys per BATCH_GET")
    read_cost.add_argument("--requests", type=int, default=1000)
    memory = sub.add_parser("memory", help="RSS growth per key set")
    memory.add_argument("--workload", default="fraud-team")
    memory.add_argument("--keysets", type=int, default=50_000)
    offline = sub.add_parser("offline", help="historical_features, backfill and a scan read "
                             "beside the live server, on one fraud-team history")
    offline.add_argument("--events", type=int, default=1_000_000)
    offline.add_argument("--spine", type=int, default=100_000)
    offline.add_argument("--master", default="local[2]")
    offline.add_argument("--json", action="store_true")
    spark = sub.add_parser("spark", help="rows/s from Spark into one server (beava_spark)")
    spark.add_argument("workloads", nargs="*", default=["small", "fraud-team"])
    spark.add_argument("--rows", type=int, default=2_000_000)
    spark.add_argument("--partitions", type=int, default=2)
    spark.add_argument("--batch-size", type=int, default=1000)
    spark.add_argument("--max-in-flight", type=int, default=16_000)
    spark.add_argument("--repeat", type=int, default=3)
    spark.add_argument("--master", default="local[2]")
    spark.add_argument("--json", action="store_true")
    greedy = sub.add_parser("greedy", help="a second client's GET latency while slow or "
                                           "greedy clients hold the server")
    greedy.add_argument("scenarios", nargs="*", default=["idle", "slowloris", "unread-pipeline",
                                                         "batch-100k", "all"])
    greedy.add_argument("--samples", type=int, default=2000)
    cmp = sub.add_parser("compare", help="this server against a reference beava binary, "
                                         "alternating: events/s, CPU per event, GET latency")
    cmp.add_argument("workloads", nargs="*",
                     default=["small", "large-with-sketches", "fraud-team"])
    cmp.add_argument("--reference", metavar="PATH",
                     help="the reference server binary (default: $BEAVA_REFERENCE_BINARY)")
    cmp.add_argument("--modes", nargs="+", choices=("memory", "wal"), default=["memory", "wal"])
    cmp.add_argument("--rounds", type=int, default=3)
    cmp.add_argument("--seconds", type=float, default=5.0, help="timed push run per server")
    cmp.add_argument("--samples", type=int, default=2000, help="GETs idle and under load")
    cmp.add_argument("--connections", type=int, default=16)
    cmp.add_argument("--depth", type=int, default=1024)
    cmp.add_argument("--chart", metavar="PNG", help="write a chart (needs matplotlib)")
    cmp.add_argument("--json", metavar="PATH", help="write every run's figures as JSON")
    cmp.add_argument("--perf", action="store_true",
                     help="profile the server with perf over each timed window: its CPU "
                          "shares in libpython and the allocator, its busiest symbols")
    soak = sub.add_parser("soak", help="mixed load on a strict-WAL server SIGKILLed and "
                                       "restarted every few seconds, a full WAL disk once; "
                                       "every acknowledged push checked after each restart")
    soak.add_argument("--minutes", type=float, default=8.0)
    soak.add_argument("--rounds", type=int, help="stop after this many rounds (kills)")
    soak.add_argument("--seed", type=int, help="seed of every random choice (printed)")
    soak.add_argument("--connections", type=int, default=4, help="pushing connections")
    soak.add_argument("--keys", type=int, default=1024, help="keys per pushing connection")
    soak.add_argument("--kill-min", type=float, default=1.0, help="shortest round, seconds")
    soak.add_argument("--kill-max", type=float, default=4.0, help="longest round, seconds")
    soak.add_argument("--no-disk-full", action="store_true", help="skip the full WAL disk")
    soak.add_argument("--data-dir", help="an empty directory to use (default: a new "
                                         "temporary one, removed unless a check failed)")
    shards = sub.add_parser("shards", help="fraud-team to one server and to N shards: "
                                           "summed server CPU per event, exact features")
    shards.add_argument("--shards", type=int, nargs="+", default=[1, 4], metavar="N")
    shards.add_argument("--events", type=int, default=100_000)
    shards.add_argument("--depth", type=int, default=1024)
    shards.add_argument("--json", action="store_true")
    shards.add_argument("--one-at-a-time", action="store_true",
                        help="feed the shards one after another, each alone on the machine")
    args = parser.parse_args()
    if getattr(args, "chart", None):
        problem = chart_problem()
        if problem is not None:
            parser.error(problem)  # before any run: exit 2 with the message

    if args.what == "startup":
        from bench.startup_time import main as run_startup

        run_startup(args.runs)
    elif args.what == "ping":
        from bench.ping_rate import main as run_ping

        run_ping(args.frames, args.depth)
    elif args.what == "push":
        from bench import engine_bench

        rows = []
        for name in args.workloads:
            if args.null:
                rows.append(engine_bench.null_ceiling(name, connections=args.connections,
                                                      depth=args.depth))
            rows.append(engine_bench.throughput(
                name, mode=args.mode, connections=args.connections, depth=args.depth,
                seconds=args.seconds, content=args.content))
        engine_bench.print_rows(rows)
        if args.chart:
            engine_bench.chart(rows, None, args.chart)
    elif args.what == "report":
        from bench import engine_bench

        rows = [engine_bench.null_ceiling("small")]
        for mode in ("memory", "strict", "periodic"):
            for name in ("small", "fraud-team"):
                rows.append(engine_bench.throughput(name, mode=mode, seconds=args.seconds))
        engine_bench.print_rows(rows)
        latencies = engine_bench.get_latency("fraud-team")
        print("GET fraud-team (ms):", json.dumps(latencies))
        print("RSS per fraud-team key set:",
              json.dumps(engine_bench.memory_per_keyset("fraud-team", keysets=args.keysets)))
        if args.chart:
            engine_bench.chart(rows, latencies, args.chart)
    elif args.what == "latency":
        from bench import engine_bench

        print(json.dumps(engine_bench.get_latency(args.workload, samples=args.samples),
                         indent=2))
    elif args.what == "reads":
        from bench import engine_bench

        print(json.dumps(engine_bench.read_cost(args.workload, keys=args.keys,
                                                requests=args.requests), indent=2))
    elif args.what == "memory":
        from bench import engine_bench

        print(json.dumps(engine_bench.memory_per_keyset(args.workload, keysets=args.keysets),
                         indent=2))
    elif args.what == "greedy":
        from bench import greedy as greedy_bench

        try:
            greedy_bench.print_results(greedy_bench.run(args.scenarios, samples=args.samples))
        except ValueError as exc:
            parser.error(str(exc))
    elif args.what == "compare":
        from bench import compare

        try:
            compare.main(args.reference, args.workloads, args.modes, rounds=args.rounds,
                         seconds=args.seconds, samples=args.samples,
                         connections=args.connections, depth=args.depth,
                         chart_path=args.chart, json_path=args.json, perf=args.perf)
        except ValueError as exc:
            parser.error(str(exc))
    elif args.what == "soak":
        from bench import soak as soak_bench

        if not 0 < args.kill_min <= args.kill_max or args.connections < 1 or args.keys < 64:
            parser.error("soak needs 0 < --kill-min <= --kill-max, --connections >= 1 and "
                         "--keys >= 64")
        raise SystemExit(soak_bench.main(soak_bench.Options(
            minutes=args.minutes, rounds=args.rounds, seed=args.seed,
            connections=args.connections, keys=args.keys, kill_min=args.kill_min,
            kill_max=args.kill_max, disk_full=not args.no_disk_full, data_dir=args.data_dir)))
    elif args.what == "shards":
        from bench.shards import main as run_shards

        if min(args.shards) < 1 or args.events < 1:
            parser.error("shards needs --shards N >= 1 and --events >= 1")
        run_shards(args.shards, events=args.events, depth=args.depth, as_json=args.json,
                   together=not args.one_at_a_time)
    elif args.what == "offline":
        from bench.offline import main as run_offline

        run_offline(["--events", str(args.events), "--spine", str(args.spine), "--master",
                     args.master, *(["--json"] if args.json else [])])
    elif args.what == "spark":
        from bench.spark_ingest import main as run_spark

        run_spark(args.workloads, rows=args.rows, partitions=args.partitions,
                  batch_size=args.batch_size, max_in_flight=args.max_in_flight,
                  repeat=args.repeat, master=args.master, as_json=args.json)


if __name__ == "__main__":
    main()
