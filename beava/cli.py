"""The ``beava`` command (spec/server.md §1): serve by default, ``quickstart``, ``help``;
``registry``, ``get``, ``stats`` (beava/cli_inspect.py), ``wal`` (beava/cli_wal.py) and
``cluster up`` (beava/cli_cluster.py)."""

from __future__ import annotations

import argparse
import os
import sys

from beava import __version__
from beava.cli_usage import UsageParser

ENV_HELP = """\
environment variables (command line > environment > YAML > defaults):
  BEAVA_LISTEN_ADDR            HTTP data-plane address (IP:PORT)
  BEAVA_TCP_HOST, BEAVA_TCP_PORT   framed-TCP host and port
  BEAVA_ADMIN_ADDR             admin sidecar address (IP:PORT)
  BEAVA_TCP_MAX_FRAME_BYTES    TCP payload limit (default 4194304)
  BEAVA_MAX_CONNECTIONS        data-plane connections open at once (default 4096, 0 = no cap)
  BEAVA_REQUEST_TIMEOUT_MS     time to send one whole request (default 30000, 0 = none)
  BEAVA_IDLE_TIMEOUT_MS        close connections idle, or not reading their replies, this
                               long (default 300000, 0 = never)
  BEAVA_LOG_LEVEL              trace, debug, info, warn, error
  BEAVA_TEST_MODE=1            enable reset
  BEAVA_MEMORY_GOV_ENFORCE=0   allow unbounded lifetime operators
  BEAVA_WAL_DIR, BEAVA_SNAPSHOT_DIR   data directories
  BEAVA_WAL_SYNC_MODE          strict (ack after fsync, default) or periodic
  BEAVA_WAL_TICK_MS            periodic-mode fsync interval (1-1000, default 20)
  BEAVA_WAL_ON_CORRUPTION      as --wal-on-corruption
  BEAVA_WAL_FSYNC_BYTES, BEAVA_WAL_SEGMENT_BYTES, BEAVA_WAL_BUFFERS, BEAVA_WAL_BUFFER_SIZE_MB
  BEAVA_SNAPSHOT_INTERVAL_MS, BEAVA_SNAPSHOT_MIN_EVENTS, BEAVA_SNAPSHOT_RETAIN_COUNT,
  BEAVA_SNAPSHOT_FORK          snapshot cadence and retention
  BEAVA_DEDUPE_SWEEP_SECS      expired dedupe-entry sweep period
  BEAVA_AUTH_TOKEN_FILE        token file (as --auth-token-file)
  BEAVA_AUTH_TOKENS            inline tokens: TOKEN:SCOPE[+SCOPE][;TOKEN:SCOPE...]
  BEAVA_TLS_CERT, BEAVA_TLS_KEY, BEAVA_TLS_CLIENT_CA   as --tls-cert, --tls-key, --tls-client-ca
  BEAVA_SHARD_MAP, BEAVA_SHARD_ID   as --shard-map, --shard-id
"""


def build_parser() -> argparse.ArgumentParser:
    parser = UsageParser(
        prog="beava", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="beava: real-time feature server (framed TCP + HTTP).",
        epilog="commands:\n  quickstart   run the in-process demo\n  help         print help\n"
        "  registry     print what a running server's registry holds (beava registry -h)\n"
        "  get          print one entity's features: beava get TABLE [KEY]\n"
        "  stats        live rates from a running server's metrics (beava stats -h)\n"
        "  wal          check or repair a data directory's WAL: beava wal check|repair "
        "DATA_DIR\n"
        "  cluster up   start N shards on this machine: beava cluster up --shards N "
        "--data-dir DIR\n\n"
        + ENV_HELP, add_help=False)
    parser.add_argument("command", nargs="?", choices=("serve", "quickstart", "help"),
                        default="serve", help=argparse.SUPPRESS)
    parser.add_argument("-c", "--config", metavar="PATH",
                        help="YAML config file (explicit only; no implicit lookup)")
    parser.add_argument("--http-addr", metavar="ADDR",
                        help="HTTP data-plane listen address (default 127.0.0.1:8080)")
    parser.add_argument("--tcp-addr", metavar="ADDR",
                        help="framed-TCP listen address (default 127.0.0.1:8081)")
    parser.add_argument("--admin-addr", metavar="ADDR",
                        help="admin sidecar listen address (default 127.0.0.1:8090)")
    parser.add_argument("--data-dir", metavar="PATH",
                        help="WAL in PATH/wal, snapshots in PATH/snapshots")
    parser.add_argument("--wal-on-corruption", choices=("replay", "point-in-time", "refuse"),
                        default=None,
                        help="damaged WAL bytes (other than a torn tail): replay (default) "
                        "quarantines them and applies every intact record after them; "
                        "point-in-time stops at the first damage and quarantines the rest; "
                        "refuse exits 3 without changing anything (then 'beava wal repair')")
    parser.add_argument("--memory-only", action="store_true",
                        help="no WAL, no snapshots, no recovery")
    parser.add_argument("--test-mode", action="store_true",
                        help="for tests: enable reset (POST /reset, OP_RESET) and the test "
                        "clock (POST /test/clock, OP_TEST_CLOCK; the SDK's set_time and "
                        "advance) that pins the time pushes and reads see")
    parser.add_argument("--auth-token-file", metavar="PATH",
                        help="require tokens: one 'TOKEN SCOPE[,SCOPE]' per line, scopes "
                        "read, write, admin (default: no access control)")
    parser.add_argument("--tls-cert", metavar="PATH",
                        help="PEM certificate (chain): serve every listener over TLS")
    parser.add_argument("--tls-key", metavar="PATH", help="PEM private key of --tls-cert")
    parser.add_argument("--tls-client-ca", metavar="PATH",
                        help="PEM CA bundle: require client certificates it signed (mTLS)")
    parser.add_argument("--shard-map", metavar="PATH",
                        help="serve as one shard of a sharded deployment: the shard map "
                        "(JSON, docs/sharding.md); needs --shard-id")
    parser.add_argument("--shard-id", metavar="ID",
                        help="this server's shard in --shard-map: it applies and serves "
                        "only the keys whose slots that shard owns")
    parser.add_argument("--write-example", metavar="PATH",
                        help="quickstart: also write an SDK script reproducing the demo")
    parser.add_argument("-h", "--help", action="store_true", help="print help")
    parser.add_argument("-V", "--version", action="store_true", help="print version")
    return parser


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if words and words[0] in ("registry", "get", "stats"):  # a client of a running server
        from beava.cli_inspect import main as inspect_main

        return inspect_main(words)
    if words and words[0] == "cluster":  # N shard processes (sharded serving)
        from beava.cli_cluster import main as cluster_main

        return cluster_main(words[1:])
    if words and words[0] == "wal":  # offline: a data directory's WAL
        from beava.cli_wal import main as wal_main

        return wal_main(words[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.help or args.command == "help":
        parser.print_help(sys.stdout)
        return 0
    if args.version:
        sys.stdout.write(f"beava {__version__}\n")
        return 0
    if args.command == "quickstart":
        from beava.quickstart import run_quickstart

        return run_quickstart(args.write_example)
    return serve(args)


def serve(args: argparse.Namespace) -> int:
    from beava.server.config import CommandLine, ConfigError, resolve
    from beava.server.log_lines import LogLines
    from beava.server.process import StartupError, run

    cli = CommandLine(config=args.config, http_addr=args.http_addr, tcp_addr=args.tcp_addr,
                      admin_addr=args.admin_addr, data_dir=args.data_dir,
                      memory_only=args.memory_only, test_mode=args.test_mode,
                      auth_token_file=args.auth_token_file, tls_cert=args.tls_cert,
                      tls_key=args.tls_key, tls_client_ca=args.tls_client_ca,
                      wal_on_corruption=args.wal_on_corruption, shard_map=args.shard_map,
                      shard_id=args.shard_id)
    try:
        cfg = resolve(cli, os.environ)
    except ConfigError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1
    log = LogLines(cfg.log_level)
    try:
        return run(cfg, log)
    except StartupError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        log.error("server.fatal", str(exc), reason=str(exc), exit_code=exc.exit_code)
        return exc.exit_code


def entry() -> None:
    sys.exit(main())
