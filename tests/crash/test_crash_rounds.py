"""Crash rounds: pipelined pushes on four TCP connections (JSON and MessagePack, OP_PUSH and
OP_PUSH_MANY), a register and snapshots in flight, the server SIGKILLed at random moments, at
crash points, during a snapshot and during a register, restarted on the same data directory
every time, and every key checked exactly (spec/durability.md §1 G1-G5, G12, G14).

Exactness: connection ``c`` of round ``r`` sends its push ``i`` to key ``r{r}c{c}k{i % K}``
with ``v = 2 ** (i // K)``. A key's ``sum(v)`` is then the bit set of the pushes applied to
it (exact in a float64 below 2**53), and ``count == popcount(sum)`` proves that none was
applied twice. Pushes on one connection get increasing LSNs, so by G3 the applied pushes of a
key are a prefix of what was sent to it: ``sum == 2**count - 1``. Acked pushes are a prefix
too, so G1 reads ``acked <= count <= sent`` per key.
"""

from __future__ import annotations

import os
import random
import socket
import threading
import time
from dataclasses import dataclass, field

import msgspec

from beava_client import TcpClient, TransportError
from beava_client.frames import FrameDecoder, encode_frame
from beava_client.opcodes import CT_JSON, CT_MSGPACK, OP_PUSH, OP_PUSH_MANY, OP_REGISTER
from tests.crash.conftest import (
    Pusher,
    Servers,
    assert_clean_recovery,
    check_bitset,
    sigkill,
    wait_dead,
    wait_for,
    wait_line,
)
from tests.support import BeavaProcess

EVENT = "Txn"
KEYS_PER_CONN = 256  # times BITS: up to 13312 pushes per connection and round
# (content type, opcode) of the four pushing connections.
CONNECTIONS = [(CT_JSON, OP_PUSH), (CT_MSGPACK, OP_PUSH), (CT_JSON, OP_PUSH_MANY),
               (CT_MSGPACK, OP_PUSH)]
WATCHED_KEYS = 4  # keys per connection the G14 reader polls while pushes run
# Frequent snapshots (recovery = snapshot + tail) and small segments (rotation, reclamation).
ENV = {"BEAVA_SNAPSHOT_INTERVAL_MS": "150", "BEAVA_WAL_SEGMENT_BYTES": "1048576"}

BASE_NODES: list[dict] = [
    {"kind": "event", "name": EVENT,
     "schema": {"fields": {"k": "str", "c": "str", "v": "i64"}}},
    {"kind": "derivation", "name": "U", "upstreams": [EVENT], "key": ["k"], "agg": {
        "n": {"op": "count"},
        "s": {"op": "sum", "params": {"field": "v"}},
        "n1h": {"op": "count", "params": {"window": "1h"}},
        "s1h": {"op": "sum", "params": {"field": "v", "window": "1h"}},
        "ew": {"op": "ewma", "params": {"field": "v", "half_life": "1m"}},
        "ds": {"op": "decayed_sum", "params": {"field": "v", "half_life": "10m"}}}},
    {"kind": "derivation", "name": "C", "upstreams": [EVENT], "key": ["c"],
     "agg": {"cn": {"op": "count"}}},
    {"kind": "derivation", "name": "G", "upstreams": [EVENT], "agg": {"gn": {"op": "count"}}},
]


def round_table(r: int) -> dict:
    """The table a round registers while its pushes run: counts what arrives after it."""
    return {"kind": "derivation", "name": f"R{r}", "upstreams": [EVENT], "key": ["k"],
            "agg": {f"rn{r}": {"op": "count"}}}


@dataclass
class Plan:
    """How a round ends: ``random`` SIGKILL, SIGKILL when a ``snapshot`` has started,
    SIGKILL right after a ``register`` frame was sent, or a ``crash`` point (``crash_at``);
    ``child`` crashes the snapshot child at ``crash_at`` and SIGKILLs the server after it."""

    kill: str
    crash_at: str | None = None


PLANS = [
    Plan("random"),
    Plan("crash", "wal_after_write"),
    Plan("snapshot"),
    Plan("crash", "registry_after_fsync:1"),
    Plan("random"),
    Plan("register"),
    Plan("crash", "wal_after_fsync"),
    Plan("child", "snapshot_before_rename:1"),
    Plan("crash", "wal_after_apply"),
    Plan("snapshot"),
    Plan("register"),
    Plan("random"),
    Plan("crash", "rotation_after_create:1"),
    Plan("random"),
    Plan("crash", "wal_after_write"),
    Plan("random"),
    Plan("snapshot"),
    Plan("crash", "wal_after_fsync"),
    Plan("register"),
    Plan("random"),
]


def keys_of(r: int, c: int) -> list[str]:
    return [f"r{r}c{c}k{j}" for j in range(KEYS_PER_CONN)]


class Reader(threading.Thread):
    """Polls a few keys while pushes run; in strict mode every value it sees is durable
    (G14), so the recovered bit sets must contain everything it observed."""

    def __init__(self, addr: tuple[str, int], keys: list[str], go: threading.Event) -> None:
        super().__init__(daemon=True)
        self.addr, self.keys, self.go = addr, keys, go
        self.seen: dict[str, int] = dict.fromkeys(keys, 0)
        self.reads = 0
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            client = TcpClient(*self.addr, timeout=30)
            client.connect()
        except (OSError, TransportError):
            return
        self.go.wait()
        try:
            while not self.stop.is_set():
                rows = client.batch_get([("U", k) for k in self.keys])
                for key, row in zip(self.keys, rows, strict=True):
                    if row:
                        self.seen[key] |= int(row["s"])
                self.reads += 1
        except (OSError, TransportError):
            return
        finally:
            client.close()


class Registrar(threading.Thread):
    """Sends one register on its own connection after ``delay`` seconds."""

    def __init__(self, addr: tuple[str, int], nodes: list[dict], delay: float,
                 go: threading.Event) -> None:
        super().__init__(daemon=True)
        self.addr, self.nodes, self.delay, self.go = addr, nodes, delay, go
        self.sent = threading.Event()  # set once the frame is written (or the attempt failed)
        self.frame_sent = False
        self.acked = False
        self.reply: object = None

    def run(self) -> None:
        try:
            self._register()
        finally:
            self.sent.set()  # never leave the controller waiting

    def _register(self) -> None:
        try:
            sock = socket.create_connection(self.addr, timeout=30)
        except OSError:
            return
        self.go.wait()
        time.sleep(self.delay)
        decoder = FrameDecoder()
        try:
            sock.sendall(encode_frame(OP_REGISTER, CT_JSON,
                                      msgspec.json.encode({"nodes": self.nodes})))
            self.frame_sent = True
            self.sent.set()
            while True:
                chunk = sock.recv(1 << 16)
                if not chunk:
                    return
                frames = decoder.feed(chunk)
                if frames:
                    op, _ct, payload = frames[0]
                    self.reply = msgspec.json.decode(payload)
                    self.acked = op == OP_REGISTER
                    return
        except OSError:
            return
        finally:
            sock.close()


@dataclass
class RoundResult:
    r: int
    plan: Plan
    pushers: list[Pusher]
    reader: Reader
    registrar: Registrar
    version_before: int
    rows: dict[tuple[str, str], dict] = field(default_factory=dict)


class CrashRounds:
    def __init__(self, servers: Servers, rng: random.Random, seed: int) -> None:
        self.servers = servers
        self.rng = rng
        self.seed = seed
        self.nodes = list(BASE_NODES)
        self.round_tables: list[int] = []  # rounds whose R table is registered
        self.done: list[RoundResult] = []
        self.max_lsn = 0  # highest ack_lsn seen so far
        self.recovered_lsn = 0  # last LSN reflected after the latest recovery (G12)
        self.total_applied = 0
        self.killed_in_snapshot = 0
        self.tmp_seen_after_kill = 0

    def msg(self, text: str) -> str:
        return f"seed={self.seed} round={len(self.done)}: {text}"

    # -- one round ------------------------------------------------------------------------

    def run_round(self, r: int, plan: Plan) -> None:
        env = dict(ENV)
        crash_at = plan.crash_at
        if crash_at is not None and ":" not in crash_at:
            crash_at = f"{crash_at}:{self.rng.randint(5, 60)}"
        if crash_at is not None:
            env["BEAVA_CRASH_AT"] = crash_at
        proc = self.servers.start(env)
        with TcpClient(*proc.tcp, timeout=30) as client:
            self.verify(proc, client)
            version = client.ping()["registry_version"]
        go = threading.Event()
        pushers = [Pusher(proc.tcp, EVENT, keys_of(r, c), f"r{r}c{c}", ct, op, go)
                   for c, (ct, op) in enumerate(CONNECTIONS)]
        watched = [k for p in pushers for k in p.keys[:WATCHED_KEYS]]
        reader = Reader(proc.tcp, watched, go)
        kill_after = self.rng.uniform(0.05, 0.7)
        reg_delay = self.rng.uniform(0.02, kill_after * 0.8)
        if crash_at and crash_at.startswith("registry_after_fsync"):
            reg_delay = self.rng.uniform(0.05, 0.4)
        registrar = Registrar(proc.tcp, self.nodes + [round_table(r)], reg_delay, go)
        threads = [*pushers, reader, registrar]
        for t in threads:
            t.start()
        mark = len(proc.lines)
        go.set()
        self.end_round(proc, plan, kill_after, registrar, mark)
        reader.stop.set()
        for t in threads:
            t.join(30)
            assert not t.is_alive(), self.msg("a client thread hung after the server died")
        if any(name.endswith(".tmp") for name in os.listdir(self.servers.data_dir / "snapshots")):
            self.tmp_seen_after_kill += 1
        for p in pushers:
            assert not p.errors, self.msg(f"push errors: {p.errors[:3]}")
            assert p.lsns == sorted(set(p.lsns)), self.msg("ack_lsn not increasing")
            assert not p.lsns or p.lsns[0] > self.recovered_lsn, self.msg(
                f"ack_lsn {p.lsns[0]} not above every recovered one ({self.recovered_lsn}) (G12)")
        if registrar.reply is not None:
            assert registrar.acked, self.msg(f"register failed: {registrar.reply}")
        self.done.append(RoundResult(r, plan, pushers, reader, registrar, version))
        self.max_lsn = max([self.max_lsn] + [p.lsns[-1] for p in pushers if p.lsns])

    def end_round(self, proc: BeavaProcess, plan: Plan, kill_after: float, registrar: Registrar,
                  mark: int) -> None:
        if plan.kill == "crash":
            code = wait_dead(proc, 30)
            assert code == -9, self.msg(f"crash point: exit {code}")
            return
        if plan.kill == "snapshot":
            def started_not_written() -> bool:
                kinds = [line["kind"] for line in list(proc.lines)[mark:]
                         if line["kind"].startswith("snapshot.")]
                return bool(kinds) and kinds[-1] == "snapshot.started"
            wait_for(started_not_written, 10, "a snapshot in progress")
            self.killed_in_snapshot += 1
        elif plan.kill == "child":
            wait_line(proc, "snapshot.failed", 10, after=mark)
            time.sleep(self.rng.uniform(0, 0.05))
        elif plan.kill == "register":
            assert registrar.sent.wait(10)
            time.sleep(self.rng.uniform(0, 0.003))
        else:
            time.sleep(kill_after)
        sigkill(proc)

    # -- checks after a restart --------------------------------------------------------------

    def verify(self, proc: BeavaProcess, client: TcpClient) -> None:
        """Everything known about the rounds so far against the recovered server."""
        complete = wait_line(proc, "recovery.complete")
        assert_clean_recovery(proc, self.servers.data_dir)
        version = client.ping()["registry_version"]
        assert complete["registry_version"] == version
        if not self.done:
            assert client.register({"nodes": self.nodes})["registry_version"] == version + 1
            return
        assert complete["last_lsn"] >= self.max_lsn, self.msg(
            f"recovery ended at LSN {complete['last_lsn']}, acked up to {self.max_lsn} (G1)")
        self.recovered_lsn = complete["last_lsn"]
        last = self.done[-1]
        self.check_register(client, last, version)
        previous_rows = {k: v for res in self.done[:-1] for k, v in res.rows.items()}
        self.check_round(client, last)
        rows = self.read(client, list(previous_rows))
        for entry, row in zip(previous_rows, rows, strict=True):
            assert row == previous_rows[entry], self.msg(
                f"{entry} changed across a restart: {previous_rows[entry]} -> {row} (G5)")
        total = sum(res.rows[("U", k)].get("n", 0) for res in self.done
                    for p in res.pushers for k in p.keys)
        assert client.get("G", "") == {"gn": total}, self.msg("global count")

    def check_register(self, client: TcpClient, res: RoundResult, version: int) -> None:
        """G4: an acked register is durable; an unanswered one is applied entirely or not."""
        reg = res.registrar
        table = f"R{res.r}"
        applied = version == res.version_before + 1
        assert version in (res.version_before, res.version_before + 1), self.msg(
            f"registry_version {version} after {res.version_before}")
        if reg.acked:
            assert applied, self.msg("acknowledged register lost (G4)")
        if res.plan.crash_at is not None and res.plan.crash_at.startswith("registry"):
            assert reg.frame_sent and applied, self.msg("register durable at the crash point")
        if not reg.frame_sent:
            assert not applied, self.msg("a register that was never sent was applied")
        rows = client.batch_get([(table, "")])
        if applied:
            assert "error" not in rows[0], self.msg(f"register applied but {table}: {rows[0]}")
            self.nodes.append(round_table(res.r))
            self.round_tables.append(res.r)
        else:
            assert rows[0]["error"]["code"] == "unknown_table", self.msg(str(rows[0]))

    def read(self, client: TcpClient, entries: list[tuple[str, str]]) -> list[dict]:
        out: list[dict] = []
        for start in range(0, len(entries), 4000):
            out.extend(client.batch_get(entries[start:start + 4000]))
        return out

    def check_round(self, client: TcpClient, res: RoundResult) -> None:
        """Exact per-key checks of the round that just ended, then remember its rows."""
        keys = [k for p in res.pushers for k in p.keys]
        entries = [("U", k) for k in keys] + [("C", p.conn_key) for p in res.pushers]
        entries += [(f"R{q}", k) for q in self.round_tables for k in keys]
        rows = dict(zip(entries, self.read(client, entries), strict=True))
        for p in res.pushers:
            counts = []
            for j, key in enumerate(p.keys):
                row = rows[("U", key)]
                where = self.msg(f"key {key}")
                n = check_bitset(row, p.per_key(p.acked, j), p.per_key(p.sent, j), where)
                bits = int(row.get("s", 0))
                seen = res.reader.seen.get(key, 0)
                assert seen & ~bits == 0, self.msg(
                    f"{where}: a read saw pushes {seen:b} that were not durable ({bits:b}) (G14)")
                if n:
                    assert (row["n1h"], row["s1h"]) == (n, row["s"]), self.msg(f"{where}: {row}")
                    assert row["ew"] is not None and row["ds"] is not None
                counts.append(n)
            cn = rows[("C", p.conn_key)].get("cn", 0)
            assert cn == sum(counts), self.msg(f"{p.conn_key}: C={cn}, keys={sum(counts)}")
            self.total_applied += sum(counts)
            self.check_round_tables(rows, res, p, counts)
        res.rows = rows

    def check_round_tables(self, rows: dict, res: RoundResult, p: Pusher,
                           counts: list[int]) -> None:
        """R{q} counts exactly the pushes that followed its register (§6.4 barrier order)."""
        for q in self.round_tables:
            got = [rows[(f"R{q}", k)].get(f"rn{q}", 0) for k in p.keys]
            if q < res.r:
                assert got == counts, self.msg(f"R{q} missed pushes of {p.conn_key}")
                continue
            # Pushes of this connection with seq < s went before the register: find such an s.
            lo, hi = 0, p.sent
            for j, (n, rn) in enumerate(zip(counts, got, strict=True)):
                before = n - rn
                assert before >= 0, self.msg(f"R{q} counted more than U for {p.keys[j]}")
                if rn:
                    lo = max(lo, j + (before - 1) * KEYS_PER_CONN + 1)
                    hi = min(hi, j + before * KEYS_PER_CONN)
                elif n:
                    lo = max(lo, j + (n - 1) * KEYS_PER_CONN + 1)
            assert lo <= hi, self.msg(
                f"R{q} on {p.conn_key}: no single register point explains {got} vs {counts}")


def test_crash_rounds(servers: Servers) -> None:
    seed = int(os.environ.get("BEAVA_CRASH_SEED", random.randrange(1 << 30)))
    rounds = CrashRounds(servers, random.Random(seed), seed)
    for r, plan in enumerate(PLANS):
        rounds.run_round(r, plan)
    final = servers.start()
    with TcpClient(*final.tcp, timeout=30) as client:
        rounds.verify(final, client)
    assert final.terminate() == 0
    acked = sum(p.acked for res in rounds.done for p in res.pushers)
    assert acked > 0 and rounds.total_applied >= acked
    # Every plan ran: a kill during a snapshot, registers on both sides of the barrier.
    assert rounds.killed_in_snapshot == sum(p.kill == "snapshot" for p in PLANS)
    assert len(rounds.round_tables) >= 2, rounds.msg("registers never became durable")
    assert sum(res.reader.reads for res in rounds.done) > 0
    print(f"seed={seed} acked={acked} applied={rounds.total_applied} "
          f"tables={rounds.round_tables} tmp_after_kill={rounds.tmp_seen_after_kill}")

