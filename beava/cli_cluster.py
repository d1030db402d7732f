"""``beava cluster up``: N shard processes of one sharded deployment on this machine
(docs/sharding.md, DESIGN.md §7).

Shard ``i`` keeps its data in ``DIR/shard-i`` and serves the slots of ``DIR/cluster.json``,
the shard map written by the first ``up`` on ``DIR`` (its slot ranges split evenly); a
later ``up`` on the same directory reuses the map and its ports while they are free, so
every shard recovers its own data. Once every shard is ready, one JSON line
``{"kind": "cluster.ready", "map": ..., "shards": [...]}`` goes to stdout. SIGTERM or
SIGINT stops every shard (exit 0); a shard that dies stops the others (exit 1).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
from typing import Any

from beava.cli_usage import UsageParser
from beava.launcher import ServerProcess, ServerStartError
from beava_client.slots import Shard, ShardMap, ShardMapError, split_slots

MAP_FILE = "cluster.json"
HOST = "127.0.0.1"
START_TIMEOUT_S = 300.0  # a shard's recovery of a large WAL takes a while
POLL_S = 0.2
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
MAX_SHARDS = 256


def build_parser() -> argparse.ArgumentParser:
    parser = UsageParser(prog="beava cluster up",
                         description="Start N shards of a sharded beava on this machine.")
    parser.add_argument("--shards", type=int, required=True, metavar="N",
                        help=f"number of shard processes (1-{MAX_SHARDS})")
    parser.add_argument("--data-dir", required=True, metavar="DIR",
                        help="shard i's data in DIR/shard-i, the shard map in "
                        f"DIR/{MAP_FILE}")
    parser.add_argument("--memory-only", action="store_true",
                        help="shards keep no WAL and no snapshots")
    parser.add_argument("--test-mode", action="store_true",
                        help="shards enable reset and the test clock")
    parser.add_argument("--wal-on-corruption", choices=("replay", "point-in-time", "refuse"),
                        default=None, help="as beava --wal-on-corruption")
    parser.add_argument("--auth-token-file", metavar="PATH", help="as beava --auth-token-file")
    parser.add_argument("--tls-cert", metavar="PATH", help="as beava --tls-cert")
    parser.add_argument("--tls-key", metavar="PATH", help="as beava --tls-key")
    parser.add_argument("--tls-client-ca", metavar="PATH", help="as beava --tls-client-ca")
    return parser


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def _free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 now (held open together while chosen)."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            sock.bind((HOST, 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def _port_of(address: str) -> int:
    return int(address.rstrip("/").rpartition(":")[2])


def _shard(shard_id: str, ranges: tuple[tuple[int, int], ...], ports: list[int],
           tls: bool) -> Shard:
    tcp = f"{HOST}:{ports[0]}"
    http = f"{'https' if tls else 'http'}://{HOST}:{ports[1]}"
    admin = f"http://{HOST}:{ports[2]}"  # the sidecar's plain HTTP, as with one server
    return Shard(shard_id, ranges, tcp, http, admin,
                 tcps=tcp if tls else None, https=http if tls else None)


def cluster_map(path: str, shards: int, tls: bool) -> ShardMap:
    """The map at ``path`` (its shard count must be ``shards``; a shard whose ports are
    taken gets free ones), or a new one of ``shards`` even ranges, written there."""
    if os.path.exists(path):
        old = ShardMap.load(path)
        if len(old.shards) != shards:
            raise ShardMapError("shards", f"{path} has {len(old.shards)} shards, not "
                                f"{shards}: start it with --shards {len(old.shards)}")
        kept = []
        for shard in old.shards:
            ports = [_port_of(shard.tcp), _port_of(shard.http),
                     _port_of(shard.admin) if shard.admin else 0]
            if not all(port and _port_free(port) for port in ports):
                ports = _free_ports(3)
            kept.append(_shard(shard.id, shard.ranges, ports, tls))
        fresh = ShardMap(old.epoch, kept)
        if fresh == old:
            return old
    else:
        ports = _free_ports(3 * shards)
        fresh = ShardMap(1, [_shard(f"s{i}", (r,), ports[3 * i:3 * i + 3], tls)
                             for i, r in enumerate(split_slots(shards))])
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(fresh.to_dict(), indent=1) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return fresh


def _shard_flags(args: argparse.Namespace, map_path: str, shard: Shard, index: int
                 ) -> list[str]:
    flags = ["--shard-map", map_path, "--shard-id", shard.id,
             "--data-dir", os.path.join(args.data_dir, f"shard-{index}"),
             "--tcp-addr", shard.tcp, "--http-addr", f"{HOST}:{_port_of(shard.http)}"]
    if shard.admin is not None:
        flags += ["--admin-addr", f"{HOST}:{_port_of(shard.admin)}"]
    for flag, on in (("--memory-only", args.memory_only), ("--test-mode", args.test_mode)):
        if on:
            flags.append(flag)
    for flag, value in (("--wal-on-corruption", args.wal_on_corruption),
                        ("--auth-token-file", args.auth_token_file),
                        ("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key),
                        ("--tls-client-ca", args.tls_client_ca)):
        if value is not None:
            flags += [flag, value]
    return flags


def _stop_all(servers: list[ServerProcess]) -> None:
    for server in servers:  # SIGTERM to all first: they shut down side by side
        if server.poll() is None:
            server.proc.send_signal(signal.SIGTERM)
    for server in servers:
        server.stop()


def up(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if not 1 <= args.shards <= MAX_SHARDS:
        sys.stderr.write(f"Error: --shards must be 1-{MAX_SHARDS}, got {args.shards}\n")
        return EXIT_USAGE
    os.makedirs(args.data_dir, exist_ok=True)
    map_path = os.path.join(args.data_dir, MAP_FILE)
    try:
        shard_map = cluster_map(map_path, args.shards, args.tls_cert is not None)
    except ShardMapError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return EXIT_FAILED
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    servers: list[ServerProcess] = []
    try:
        for index, shard in enumerate(shard_map.shards):
            servers.append(ServerProcess(_shard_flags(args, map_path, shard, index),
                                         keep_output=False, bound_to_parent=True).start())
        for server in servers:
            server.wait_ready(START_TIMEOUT_S)
    except ServerStartError as exc:
        sys.stderr.write(f"Error: a shard did not start: {exc}\n")
        _stop_all(servers)
        return EXIT_FAILED
    shards: list[dict[str, Any]] = [
        {"id": shard.id, "tcp": shard.tcp, "http": shard.http, "admin": shard.admin,
         "pid": server.pid} for shard, server in zip(shard_map.shards, servers, strict=True)]
    sys.stdout.write(json.dumps({"kind": "cluster.ready", "map": shard_map.to_dict(),
                                 "shards": shards}) + "\n")
    sys.stdout.flush()
    code = EXIT_OK
    while not stop.wait(POLL_S):
        statuses = [(shard.id, server.poll())
                    for shard, server in zip(shard_map.shards, servers, strict=True)]
        dead = [(shard_id, status) for shard_id, status in statuses if status is not None]
        if dead:
            for shard_id, status in dead:
                sys.stderr.write(f"Error: shard {shard_id} exited with code {status}; "
                                 "stopping the others\n")
            code = EXIT_FAILED
            break
    _stop_all(servers)
    return code


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "up":
        sys.stderr.write("usage: beava cluster up --shards N --data-dir DIR [options]\n")
        return EXIT_USAGE
    return up(argv[1:])
