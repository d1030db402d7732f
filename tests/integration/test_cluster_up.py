"""``beava cluster up`` (docs/sharding.md): N shards on this machine from one command, one
``cluster.ready`` line, a map every shard serves; SIGTERM stops them all; a shard that dies
stops the others (exit 1); a second ``up`` on the same directory reuses the map and every
shard recovers its own data."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from beava_client.slots import SLOTS
from tests.register_payloads import table_node
from tests.support import BeavaCluster, http_request

REGISTER = json.dumps({"nodes": [
    {"kind": "event", "name": "E", "schema": {"fields": {"user": "str"}}},
    table_node({"n": {"op": "count"}}, name="ByUser", keys=["user"], up="E"),
]}).encode()
JSON = {"Content-Type": "application/json"}
USERS = [f"u{i}" for i in range(30)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purpose
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def _register_and_push(cluster: BeavaCluster) -> None:
    """REGISTER on every shard, one push per user to its owner."""
    for shard in cluster.ready["shards"]:
        status, _, raw = http_request(cluster.http(shard["id"]), "POST", "/register",
                                      REGISTER, JSON)
        assert status == 200, raw
    for user in USERS:
        body = json.dumps({"event": "E", "data": {"user": user}}).encode()
        status, _, raw = http_request(cluster.owner(user), "POST", "/push", body, JSON)
        assert status == 200, raw


def _check_pushed(cluster: BeavaCluster) -> None:
    """Every user's one push is read back from its owner."""
    for user in USERS:
        body = json.dumps({"table": "ByUser", "key": user}).encode()
        status, _, raw = http_request(cluster.owner(user), "POST", "/get", body, JSON)
        assert (status, json.loads(raw)) == (200, {"n": 1})


def test_cluster_up_serves_restarts_and_recovers(tmp_path: Path) -> None:
    cluster = BeavaCluster(tmp_path)
    try:
        ready = cluster.ready
        assert ready["kind"] == "cluster.ready"
        assert [s["id"] for s in ready["shards"]] == ["s0", "s1", "s2"]
        assert sorted(r for s in cluster.map.shards for r in s.ranges) == \
            [(0, 5462), (5462, 10923), (10923, SLOTS)]
        assert json.loads((tmp_path / "cluster.json").read_text()) == ready["map"]
        for shard in ready["shards"]:
            status, _, raw = http_request(cluster.http(shard["id"]), "GET", "/cluster/map")
            assert status == 200 and json.loads(raw) == ready["map"]
            assert (tmp_path / f"shard-{shard['id'][1:]}").is_dir()
        _register_and_push(cluster)
        pids = [s["pid"] for s in ready["shards"]]
        for pid in pids:  # every shard killed at once: cluster up notices and exits 1
            os.kill(pid, signal.SIGKILL)
        assert cluster.proc.wait(60) == 1
    finally:
        cluster.stop()
    again = BeavaCluster(tmp_path)
    try:
        assert again.ready["map"] == cluster.ready["map"]  # the same map, ports reused
        _check_pushed(again)
        pids = [s["pid"] for s in again.ready["shards"]]
    finally:
        assert again.stop() == 0
    assert not any(_alive(pid) for pid in pids)


def test_shards_stop_when_cluster_up_itself_is_killed(tmp_path: Path) -> None:
    """SIGKILL of ``cluster up`` leaves it no chance to stop its shards: the kernel sends
    each shard SIGTERM (beava.process_bond), so none keeps serving the directory, and a
    second ``up`` on it serves every acknowledged push."""
    cluster = BeavaCluster(tmp_path)
    try:
        _register_and_push(cluster)
        pids = [s["pid"] for s in cluster.ready["shards"]]
        cluster.proc.kill()
        cluster.proc.wait(60)
        deadline = time.monotonic() + 30  # a liveness bound, not a speed figure
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in pids)
    finally:
        cluster.stop()
    again = BeavaCluster(tmp_path)
    try:
        _check_pushed(again)
    finally:
        assert again.stop() == 0
