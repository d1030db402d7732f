"""``python -m bench soak``: mixed load against a strict-WAL server that is SIGKILLed every
few seconds and restarted on the same data directory, checking after every restart that
every acknowledged push is there and nothing else was applied (spec/durability.md §1 G1-G5,
G12, G14).

Each round starts the server on the data directory, checks everything the previous rounds
left, then runs for a random 1-4 s (``--kill-min``/``--kill-max``):

- ``--connections`` pipelined framed-TCP connections pushing (MessagePack and JSON,
  ``OP_PUSH`` and ``OP_PUSH_MANY``);
- a reader (``BATCH_GET`` of random keys) whose every answer must survive the crash (G14:
  in strict mode a read only sees durable pushes);
- one register that adds a feature to the registry (a new registry version under load);
- snapshots every ``SNAPSHOT_INTERVAL_MS`` and 1 MiB WAL segments (rotation, reclamation);

and ends with a SIGKILL. Once per soak the WAL's disk fills up (``data_dir/wal`` is a small
tmpfs when the machine lets this process mount one; otherwise the episode is skipped and
the reason printed): pushes are refused with ``wal_unavailable`` while reads are served,
the space returns, writes resume, and the round goes on to its SIGKILL.

Exactness: connection ``c`` owns keys ``c{c}k{j}`` and sends them pushes round-robin; the
``i``-th push a key is sent carries ``i`` and ``q = i * i`` (``i`` counts every push ever
sent to the key, over all rounds). Table ``U`` keeps per key ``n = count``, ``s = sum(i)``,
``q = sum(q)`` and ``tail = last_n(i, 8)``. One connection's pushes are applied in order
(G3) and acknowledged in order, so the pushes of a key applied in a round are a prefix of
the ones sent to it that were not refused: after a restart, with ``m`` the growth of ``n``
since the last check, ``acked <= m <= sent`` and ``s``, ``q`` and ``tail`` must be exactly
those of the first ``m`` of them. ``m < acked`` counts as lost pushes, ``m > sent`` as
invented ones, and any other difference (a push applied twice, out of order, a refused
one applied) as a mismatched key. The key set is fixed, so the state does not grow with the
soak: the server's RSS, sampled every 100 ms from ``/proc/<pid>/status``, should stay flat.

The summary is one JSON object on stdout; the exit status is 1 when anything was lost,
invented or mismatched, or another check failed (``problems``).
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from beava.launcher import ServerProcess, ServerStartError, installed_server_command
from beava_client import ServerError, TcpClient, TransportError
from beava_client.codec import decode_payload
from beava_client.errors import error_from_reply
from beava_client.frames import FrameDecoder
from beava_client.messages import EnvelopeEncoder
from beava_client.opcodes import CT_JSON, CT_MSGPACK, OP_ERROR, OP_PUSH, OP_PUSH_MANY
from bench.process_usage import rss_kb

EVENT = "Txn"
TAIL = 8  # last_n of the push index kept per key: the order of the newest pushes
SNAPSHOT_INTERVAL_MS = 500
SEGMENT_BYTES = 1 << 20
WAL_DISK_MB = 128  # the tmpfs of the WAL: far more than the WAL needs between snapshots
FILL_LEAVE_BYTES = 256 << 10  # what the disk-full episode leaves free
WINDOW = 256  # pushes in flight per connection
WRITE_BATCH = 32  # pushes per socket write
MANY_ROWS = 16  # bodies per OP_PUSH_MANY frame
READ_KEYS = 64  # keys per BATCH_GET of the reader
CHECK_BATCH = 4000  # keys per BATCH_GET of the checks
START_TIMEOUT_S = 60.0
JOIN_TIMEOUT_S = 30.0
# (content type, opcode) of the pushing connections, in turn.
KINDS = [(CT_MSGPACK, OP_PUSH), (CT_JSON, OP_PUSH), (CT_MSGPACK, OP_PUSH_MANY),
         (CT_MSGPACK, OP_PUSH)]
# Recovery lines a crash must never cause (a torn tail of the newest segment is normal).
DAMAGE_KINDS = ("recovery.wal_corruption", "recovery.wal_record_quarantined",
                "recovery.snapshot_invalid")
PROBE_KEY = "disk-full-probe"  # pushed once refused and once accepted in the episode


def nodes(features: int) -> list[dict[str, Any]]:
    """The registry: the event, ``U`` (the exactness table) and ``C`` per connection with
    ``cn`` and the ``features`` count features ``f0``.. added one register at a time."""
    per_conn: dict[str, Any] = {"cn": {"op": "count"}}
    per_conn.update({f"f{m}": {"op": "count"} for m in range(features)})
    return [
        {"kind": "event", "name": EVENT,
         "schema": {"fields": {"k": "str", "c": "str", "i": "i64", "q": "i64"}}},
        {"kind": "derivation", "name": "U", "upstreams": [EVENT], "key": ["k"], "agg": {
            "n": {"op": "count"},
            "s": {"op": "sum", "params": {"field": "i"}},
            "q": {"op": "sum", "params": {"field": "q"}},
            "tail": {"op": "last_n", "params": {"field": "i", "n": TAIL}}}},
        {"kind": "derivation", "name": "C", "upstreams": [EVENT], "key": ["c"],
         "agg": per_conn},
    ]


@dataclass
class Slot:
    """The keys of one pushing connection: what was checked, and this round's pushes."""

    name: str
    keys: list[str]
    # per key, as last checked: count, sum(i), sum(q), tail
    n: list[int] = field(default_factory=list)
    s: list[int] = field(default_factory=list)
    q: list[int] = field(default_factory=list)
    tail: list[list[int]] = field(default_factory=list)
    # per key, this round: first index sent, next index to send, acked, refused indexes
    start: list[int] = field(default_factory=list)
    next: list[int] = field(default_factory=list)
    acked: list[int] = field(default_factory=list)
    refused: dict[int, set[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        k = len(self.keys)
        self.n, self.s, self.q = [0] * k, [0] * k, [0] * k
        self.tail = [[] for _ in range(k)]
        self.start, self.next, self.acked = [0] * k, [0] * k, [0] * k

    def new_round(self) -> None:
        self.start = list(self.next)
        self.acked = [0] * len(self.keys)
        self.refused = {}


class Pusher(threading.Thread):
    """One pipelined connection pushing to its slot's keys until the server dies."""

    def __init__(self, addr: tuple[str, int], slot: Slot, ct: int, op: int,
                 go: threading.Event, after_lsn: int) -> None:
        super().__init__(daemon=True)
        self.addr, self.slot, self.ct, self.op, self.go = addr, slot, ct, op, go
        self.rows = MANY_ROWS if op == OP_PUSH_MANY else 1
        self.encoder = EnvelopeEncoder(EVENT, ct=ct, op=OP_PUSH) if op == OP_PUSH else \
            EnvelopeEncoder(EVENT, field="bodies", ct=ct, op=OP_PUSH_MANY)
        self.last_lsn = after_lsn  # acks must come above every recovered LSN (G12)
        self.sent = self.acked = self.refused = 0
        self.problems: list[str] = []

    def run(self) -> None:
        try:
            sock = socket.create_connection(self.addr, timeout=JOIN_TIMEOUT_S)
        except OSError:
            return
        try:
            self.go.wait()
            self._pump(sock)
        except OSError:  # the server was killed
            pass
        finally:
            sock.close()

    def _pump(self, sock: socket.socket) -> None:
        slot, keys, name = self.slot, self.slot.keys, self.slot.name
        decoder = FrameDecoder()
        in_flight: deque[list[tuple[int, int]]] = deque()
        pending = p = 0
        while True:
            if pending + WRITE_BATCH <= WINDOW:
                buf = bytearray()
                for _ in range(WRITE_BATCH // self.rows):
                    rows, bodies = [], []
                    for _ in range(self.rows):
                        j = p % len(keys)
                        p += 1
                        i = slot.next[j]
                        slot.next[j] = i + 1
                        rows.append((j, i))
                        bodies.append({"k": keys[j], "c": name, "i": i, "q": i * i})
                    self.encoder.append(buf, bodies[0] if self.op == OP_PUSH else bodies)
                    in_flight.append(rows)
                pending += WRITE_BATCH
                self.sent += WRITE_BATCH  # counted before the write: it may land partially
                sock.sendall(buf)
                continue
            chunk = sock.recv(1 << 16)
            if not chunk:
                return
            for op, ct, payload in decoder.feed(chunk):
                rows = in_flight.popleft()
                pending -= len(rows)
                self._reply(op, ct, payload, rows)

    def _reply(self, op: int, ct: int, payload: bytes, rows: list[tuple[int, int]]) -> None:
        if op == OP_ERROR:
            code = error_from_reply(payload, op=op, ct=ct).code
            for j, i in rows:
                self._refuse(j, i, code)
            return
        if op != self.op:
            self.problems.append(f"{self.slot.name}: reply op {op:#x} to op {self.op:#x}")
            return
        reply = decode_payload(payload, ct)
        errors: dict[int, str] = {}
        if op == OP_PUSH_MANY:
            errors = {e["index"]: e["error"]["code"] for e in reply["errors"]}
            if reply["acks"] + len(errors) != len(rows):
                self.problems.append(f"{self.slot.name}: PUSH_MANY of {len(rows)}: {reply}")
        if len(errors) < len(rows):
            lsn = reply["ack_lsn"]
            if lsn <= self.last_lsn:
                self.problems.append(f"{self.slot.name}: ack_lsn {lsn} after {self.last_lsn}")
            self.last_lsn = lsn
        for index, (j, i) in enumerate(rows):
            if index in errors:
                self._refuse(j, i, errors[index])
            else:
                self.slot.acked[j] += 1
                self.acked += 1

    def _refuse(self, j: int, i: int, code: str) -> None:
        """A push answered with an error: only a full WAL disk may refuse one (not applied)."""
        if code != "wal_unavailable":
            self.problems.append(f"{self.slot.name}: push refused with {code}")
        self.slot.refused.setdefault(j, set()).add(i)
        self.refused += 1


class Reader(threading.Thread):
    """BATCH_GETs of random keys of ``U`` while the pushes run, remembering the largest
    count seen per key: in strict mode every read is durable (G14)."""

    def __init__(self, addr: tuple[str, int], keys: list[str], seen: dict[str, int],
                 rng: random.Random, go: threading.Event) -> None:
        super().__init__(daemon=True)
        self.addr, self.keys, self.seen, self.rng, self.go = addr, keys, seen, rng, go
        self.reads = 0

    def run(self) -> None:
        client = TcpClient(*self.addr, timeout=JOIN_TIMEOUT_S, content_type="msgpack")
        try:
            client.connect()
            self.go.wait()
            while True:
                keys = self.rng.sample(self.keys, READ_KEYS)
                for key, row in zip(keys, client.batch_get([("U", k) for k in keys]),
                                    strict=True):
                    if row.get("n", 0) > self.seen.get(key, 0):
                        self.seen[key] = row["n"]
                self.reads += 1
                time.sleep(0.005)
        except (OSError, TransportError):  # the server was killed
            pass
        finally:
            client.close()


class Registrar(threading.Thread):
    """One register adding feature ``f{features - 1}`` to ``C`` after ``delay`` seconds."""

    def __init__(self, addr: tuple[str, int], features: int, delay: float,
                 go: threading.Event) -> None:
        super().__init__(daemon=True)
        self.addr, self.features, self.delay, self.go = addr, features, delay, go
        self.attempted = False
        self.outcome = "not sent"  # "acked", "refused: <code>", "unknown"

    def run(self) -> None:
        self.go.wait()
        time.sleep(self.delay)
        try:
            with TcpClient(*self.addr, timeout=JOIN_TIMEOUT_S) as client:
                self.attempted = True
                client.register({"nodes": nodes(self.features)})
                self.outcome = "acked"
        except ServerError as exc:
            self.outcome = f"refused: {exc.code}"
        except (OSError, TransportError):
            self.outcome = "unknown" if self.attempted else "not sent"


class RssSampler(threading.Thread):
    """Samples the RSS of the running server every 100 ms."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.pid: int | None = None
        self.samples: list[int] = []
        self.lock = threading.Lock()
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.1):
            pid = self.pid
            kb = rss_kb(pid) if pid is not None else None
            if kb is not None:
                with self.lock:
                    self.samples.append(kb)

    def take(self) -> list[int]:
        with self.lock:
            samples, self.samples = self.samples, []
        return samples


class WalDisk:
    """``data_dir/wal`` on a small tmpfs of its own, filled up for the disk-full episode."""

    def __init__(self, wal: Path) -> None:
        self.wal = wal
        self.mounted = False

    def mount(self) -> str | None:
        """Mount the tmpfs; the reason when this machine does not allow it."""
        if os.geteuid() != 0:
            return "mounting a tmpfs needs root"
        if shutil.which("mount") is None:
            return "no mount command"
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={WAL_DISK_MB}m", "tmpfs",
                               str(self.wal)], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            return f"cannot mount a tmpfs: {done.stderr.strip() or done.returncode}"
        self.mounted = True
        return None

    def fill(self) -> Path:
        """A file taking all but ``FILL_LEAVE_BYTES`` of the disk."""
        stats = os.statvfs(self.wal)
        filler = self.wal / "filler"
        size = max(0, stats.f_bavail * stats.f_frsize - FILL_LEAVE_BYTES)
        block = bytes(1 << 20)
        with open(filler, "wb", buffering=0) as fh:
            try:
                while size > 0:  # written, not sparse: tmpfs pages are taken when written
                    size -= fh.write(block[:min(size, len(block))])
            except OSError as exc:  # the WAL, still growing, took the rest first
                if exc.errno != errno.ENOSPC:
                    raise
        return filler

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", str(self.wal)], capture_output=True, check=False)
            self.mounted = False


@dataclass
class Options:
    minutes: float = 8.0
    rounds: int | None = None  # stop after this many rounds (or at ``minutes``)
    seed: int | None = None
    connections: int = 4
    keys: int = 1024  # keys per connection
    kill_min: float = 1.0
    kill_max: float = 4.0
    disk_full: bool = True
    data_dir: str | None = None  # default: a new temporary directory


class Soak:
    def __init__(self, opts: Options, log: Callable[[str], None]) -> None:
        self.opts = opts
        self.log = log
        self.seed = opts.seed if opts.seed is not None else random.randrange(1 << 31)
        self.rng = random.Random(self.seed)
        self.slots = [Slot(f"c{c}", [f"c{c}k{j}" for j in range(opts.keys)])
                      for c in range(opts.connections)]
        self.all_keys = [k for slot in self.slots for k in slot.keys]
        self.seen: dict[str, int] = {}
        self.features = 0  # features f* of C known applied
        self.round = 0
        self.max_acked_lsn = 0
        self.recovered_lsn = 0
        self.sampler = RssSampler()
        self.proc: ServerProcess | None = None
        self.problems: list[str] = []
        self.lost = self.invented = self.mismatched = self.not_durable = 0
        self.sent = self.acked = self.refused = self.reads = 0
        self.registers: dict[str, int] = {}
        self.snapshots = 0
        self.restart_s: list[float] = []
        self.rss_after_recovery: list[int] = []
        self.rss_peak: list[int] = []
        self.disk_full: dict[str, Any] = {}
        self.probe_acked = 0  # acknowledged pushes of PROBE_KEY

    # -- the server --------------------------------------------------------------------------

    def start(self, data_dir: Path) -> tuple[ServerProcess, TcpClient]:
        env = {"BEAVA_SNAPSHOT_INTERVAL_MS": str(SNAPSHOT_INTERVAL_MS),
               "BEAVA_WAL_SEGMENT_BYTES": str(SEGMENT_BYTES), "BEAVA_WAL_SYNC_MODE": "strict"}
        began = time.monotonic()
        proc = ServerProcess(["--data-dir", str(data_dir)], command=installed_server_command(),
                             env=env, inherit_beava=False)
        proc.start()
        self.proc = proc
        proc.wait_ready(START_TIMEOUT_S)
        self.restart_s.append(time.monotonic() - began)
        self.sampler.pid = proc.pid
        host, port = proc.addrs["tcp"].rsplit(":", 1)
        client = TcpClient(host, int(port), timeout=JOIN_TIMEOUT_S, content_type="msgpack")
        return proc, client

    def problem(self, text: str) -> None:
        self.problems.append(f"seed={self.seed} round={self.round}: {text}")

    # -- checks after a restart --------------------------------------------------------------

    def check(self, proc: ServerProcess, client: TcpClient, registrar: Registrar | None,
              version_before: int) -> int:
        """Everything the rounds so far promise, against the recovered server; returns the
        registry version."""
        damage = [line for line in proc.lines if line.get("kind") in DAMAGE_KINDS]
        if damage:
            self.problem(f"a crash caused damage reports: {damage[:3]}")
        complete = next(line for line in proc.lines if line.get("kind") == "recovery.complete")
        if complete["last_lsn"] < self.max_acked_lsn:
            self.problem(f"recovery ended at LSN {complete['last_lsn']}, acked up to "
                         f"{self.max_acked_lsn} (G1)")
        self.recovered_lsn = complete["last_lsn"]
        version = int(client.ping()["registry_version"])
        if registrar is not None:
            self.check_register(registrar, version, version_before)
        for slot in self.slots:
            self.check_slot(client, slot)
        if self.disk_full.get("round") == self.round - 1 and "probe_n" not in self.disk_full:
            probe = client.get("U", PROBE_KEY).get("n", 0)
            self.disk_full["probe_n"] = probe
            if probe != self.probe_acked:
                self.problem(f"{PROBE_KEY}: {probe} applied, {self.probe_acked} acked "
                             "(a refused push applied, or an acked one lost)")
        return version

    def check_register(self, registrar: Registrar, version: int, before: int) -> None:
        """G4: an acked register is durable, a refused one absent, an unanswered one
        applied whole or not at all; a feature of every applied register is readable."""
        applied = version == before + 1
        outcome = registrar.outcome
        self.registers[outcome.split(":")[0]] = self.registers.get(outcome.split(":")[0], 0) + 1
        if version not in (before, before + 1):
            self.problem(f"registry version {version} after {before}")
        elif outcome == "acked" and not applied:
            self.problem("acknowledged register lost (G4)")
        elif outcome in ("not sent", "refused: wal_unavailable") and applied:
            self.problem(f"register {outcome} but applied")
        elif outcome.startswith("refused") and outcome != "refused: wal_unavailable":
            self.problem(f"register {outcome}")
        if applied:
            self.features += 1

    def read(self, client: TcpClient, entries: list[tuple[str, str]]) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for first in range(0, len(entries), CHECK_BATCH):
            rows.extend(client.batch_get(entries[first:first + CHECK_BATCH]))
        return rows

    def check_slot(self, client: TcpClient, slot: Slot) -> None:
        rows = self.read(client, [("U", k) for k in slot.keys])
        for j, row in enumerate(rows):
            self.check_key(slot, j, row)
        (conn,) = client.batch_get([("C", slot.name)])
        if conn.get("cn", 0) != sum(slot.n):
            self.problem(f"C[{slot.name}].cn = {conn.get('cn')}, its keys {sum(slot.n)}")
        counts = [conn.get(f"f{m}") for m in range(self.features)]
        if any(c is None for c in counts):
            self.problem(f"C[{slot.name}] lacks features of applied registers: {conn}")
        elif counts != sorted(counts, reverse=True) or (counts and counts[0] > conn["cn"]):
            self.problem(f"C[{slot.name}]: a later feature counted more: {conn}")
        slot.new_round()

    def check_key(self, slot: Slot, j: int, row: dict[str, Any]) -> None:
        """acked <= applied <= sent, and exactly the first ``m`` pushes not refused."""
        key = slot.keys[j]
        n = row.get("n", 0)
        m = n - slot.n[j]
        acked = slot.acked[j]
        refused = slot.refused.get(j)
        span = range(slot.start[j], slot.next[j])
        candidates = [i for i in span if i not in refused] if refused else span
        where = f"key {key}: {row}, before n={slot.n[j]} s={slot.s[j]}, this round " \
                f"acked {acked} of {len(candidates)} sent from {slot.start[j]}"
        if m < acked:
            self.lost += acked - m
            self.problem(f"{where}: {acked - m} acknowledged pushes lost (G1)")
        elif m > len(candidates):
            self.invented += m - len(candidates)
            self.problem(f"{where}: {m - len(candidates)} pushes applied that were not sent")
        else:
            applied = candidates[:m]
            s = slot.s[j] + sum(applied)
            q = slot.q[j] + sum(i * i for i in applied)
            tail = (slot.tail[j] + list(applied))[-TAIL:]
            if n and (row["s"] != s or row["q"] != q or row["tail"] != tail):
                self.mismatched += 1
                self.problem(f"{where}: expected s={s} q={q} tail={tail} (a push applied "
                             "twice, out of order, or a refused one applied)")
        if self.seen.get(key, 0) > n:
            self.not_durable += 1
            self.problem(f"key {key}: a read saw n={self.seen[key]}, recovered {n} (G14)")
        self.seen[key] = n
        slot.n[j], slot.s[j], slot.q[j] = n, int(row.get("s") or 0), int(row.get("q") or 0)
        slot.tail[j] = list(row.get("tail") or [])

    # -- one round ---------------------------------------------------------------------------

    def run_round(self, data_dir: Path, disk: WalDisk | None,
                  last: tuple[Registrar | None, int]) -> tuple[Registrar, int]:
        proc, client = self.start(data_dir)
        with client:
            version = self.check(proc, client, *last)
            if self.round == 0:
                version = int(client.register({"nodes": nodes(0)})["registry_version"])
            self.rss_after_recovery.append(rss_kb(proc.pid) or 0)
            self.sampler.take()
            go = threading.Event()
            addr = (client.host, client.port)
            pushers = [Pusher(addr, slot, *KINDS[c % len(KINDS)], go, self.recovered_lsn)
                       for c, slot in enumerate(self.slots)]
            kill_after = self.rng.uniform(self.opts.kill_min, self.opts.kill_max)
            reader = Reader(addr, self.all_keys, self.seen,
                            random.Random(self.rng.randrange(1 << 31)), go)
            registrar = Registrar(addr, self.features + 1,
                                  self.rng.uniform(0.05, kill_after * 0.9), go)
            threads: list[threading.Thread] = [*pushers, reader, registrar]
            for thread in threads:
                thread.start()
            mark = len(proc.lines)
            go.set()
            if disk is not None:
                self.disk_episode(proc, client, disk, pushers)
            time.sleep(kill_after)
        code = proc.poll()
        if code is not None:
            self.problem(f"the server exited with {code} before the kill: "
                         + "\n".join(proc.stderr_tail()))
        proc.kill()
        proc.join_output(5)
        self.sampler.pid = None
        for thread in threads:
            thread.join(JOIN_TIMEOUT_S)
            if thread.is_alive():
                self.problem(f"a client thread ({type(thread).__name__}) hung after the kill")
        peak = max(self.sampler.take(), default=0)
        self.rss_peak.append(peak)
        snapshots = sum(line.get("kind") == "snapshot.written" for line in proc.lines[mark:])
        self.snapshots += snapshots
        for p in pushers:
            for text in p.problems[:5]:
                self.problem(text)
            self.sent += p.sent
            self.acked += p.acked
            self.refused += p.refused
            self.max_acked_lsn = max(self.max_acked_lsn, p.last_lsn)
        self.reads += reader.reads
        self.log(f"round {self.round}: killed after {kill_after:.1f} s, "
                 f"acked {sum(p.acked for p in pushers)} of {sum(p.sent for p in pushers)}, "
                 f"refused {sum(p.refused for p in pushers)}, register {registrar.outcome}, "
                 f"snapshots {snapshots}, rss peak {peak // 1024} MiB, "
                 f"restart {self.restart_s[-1]:.2f} s")
        self.round += 1
        return registrar, version

    def disk_episode(self, proc: ServerProcess, client: TcpClient, disk: WalDisk,
                     pushers: list[Pusher]) -> None:
        """Fill the WAL disk under load: pushes refused with ``wal_unavailable`` while reads
        are served; free it: writes resume and pushes are acknowledged again."""
        out = self.disk_full
        out["round"] = self.round
        time.sleep(0.3)
        mark = len(proc.lines)
        filler = disk.fill()
        began = time.monotonic()
        try:
            if not proc.wait_until(lambda: any(
                    line.get("kind") == "wal.write_refused" for line in proc.lines[mark:]), 20):
                out["outcome"] = "failed: the WAL never refused a write"
                self.problem(out["outcome"])
                return
            out["refused_after_s"] = round(time.monotonic() - began, 2)
            deadline = time.monotonic() + 10
            while sum(p.refused for p in pushers) == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            try:
                client.push(EVENT, {"k": PROBE_KEY, "c": "probe", "i": 0, "q": 0})
                out["probe_refused_with"] = None
                self.probe_acked += 1
            except ServerError as exc:
                out["probe_refused_with"] = exc.code
            reads_served = bool(client.ping()) and len(
                client.batch_get([("U", k) for k in self.all_keys[:100]])) == 100
            out["reads_served_while_full"] = reads_served
            time.sleep(1.0)
        finally:
            filler.unlink()
        freed = time.monotonic()
        acked = sum(p.acked for p in pushers)
        resumed = proc.wait_until(lambda: any(
            line.get("kind") == "wal.write_resumed" for line in proc.lines[mark:]), 10)
        out["resumed_after_s"] = round(time.monotonic() - freed, 2) if resumed else None
        deadline = time.monotonic() + 10
        while sum(p.acked for p in pushers) < acked + 100 and time.monotonic() < deadline:
            time.sleep(0.01)
        out["acked_after_resume"] = sum(p.acked for p in pushers) - acked
        out["pushes_refused"] = sum(p.refused for p in pushers)
        client.push(EVENT, {"k": PROBE_KEY, "c": "probe", "i": 1, "q": 1})
        self.probe_acked += 1
        ok = (resumed and reads_served and out["probe_refused_with"] == "wal_unavailable"
              and out["pushes_refused"] > 0 and out["acked_after_resume"] >= 100)
        out["outcome"] = "ok" if ok else "failed"
        if not ok:
            self.problem(f"disk-full episode: {out}")

    # -- the soak ----------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        opts = self.opts
        self.log(f"soak seed={self.seed}")
        own_dir = opts.data_dir is None
        data_dir = Path(opts.data_dir or tempfile.mkdtemp(prefix="beava-soak-"))
        (data_dir / "wal").mkdir(parents=True, exist_ok=True)
        disk = WalDisk(data_dir / "wal")
        skipped = disk.mount() if opts.disk_full else "switched off (--no-disk-full)"
        if skipped is not None:
            self.disk_full = {"outcome": "skipped", "reason": skipped}
            self.log(f"disk-full episode skipped: {skipped}")
        started = time.monotonic()
        deadline = started + opts.minutes * 60
        self.sampler.start()
        last: tuple[Registrar | None, int] = (None, 0)
        final_rss = None
        try:
            while time.monotonic() < deadline and (opts.rounds is None
                                                   or self.round < opts.rounds):
                # the episode: halfway through the rounds asked for, else a third of the time
                episode = skipped is None and not self.disk_full and (
                    self.round == opts.rounds // 2 if opts.rounds is not None
                    else time.monotonic() > started + opts.minutes * 20)
                last = self.run_round(data_dir, disk if episode else None, last)
            proc, client = self.start(data_dir)
            with client:
                self.check(proc, client, *last)
                final_rss = rss_kb(proc.pid)
            code = proc.stop(10)
            if code != 0:
                self.problem(f"the last server stopped with exit {code}")
        except ServerStartError as exc:
            self.problem(f"the server did not start: {exc}")
        finally:
            self.sampler.stopped.set()
            if self.proc is not None:
                self.proc.kill()
            disk.unmount()
        if skipped is None and not self.disk_full:
            self.disk_full = {"outcome": "not reached (too few rounds)"}
        failed = bool(self.problems or self.lost or self.invented or self.mismatched)
        if own_dir and not failed:
            shutil.rmtree(data_dir, ignore_errors=True)
        return self.summary(final_rss, None if own_dir and not failed else str(data_dir))

    def summary(self, final_rss: int | None, data_dir: str | None) -> dict[str, Any]:
        applied = sum(sum(slot.n) for slot in self.slots)
        peaks = [kb // 1024 for kb in self.rss_peak]
        return {
            "seed": self.seed,
            "rounds": self.round,
            "sigkills": self.round,
            "pushes_sent": self.sent,
            "pushes_acked": self.acked,
            "pushes_refused": self.refused,
            "pushes_applied": applied,
            "lost": self.lost,
            "invented": self.invented,
            "mismatched_keys": self.mismatched,
            "reads_not_durable": self.not_durable,
            "batch_gets": self.reads,
            "registers": self.registers,
            "features_added": self.features,
            "snapshots_written": self.snapshots,
            "restart_s": {"median": round(statistics.median(self.restart_s), 2),
                          "max": round(max(self.restart_s), 2)} if self.restart_s else None,
            "rss_mib": {
                "start": peaks[0] if peaks else None,
                "end": peaks[-1] if peaks else None,
                "min": min(peaks, default=None), "max": max(peaks, default=None),
                "after_recovery_first": self.rss_after_recovery[0] // 1024
                if self.rss_after_recovery else None,
                "after_recovery_last": self.rss_after_recovery[-1] // 1024
                if self.rss_after_recovery else None,
                "final_server": final_rss // 1024 if final_rss else None,
                "peak_per_round": peaks,
            },
            "disk_full": self.disk_full,
            "data_dir_kept": data_dir,
            "problems": self.problems[:20],
            "ok": not (self.problems or self.lost or self.invented or self.mismatched),
        }


def print_summary(summary: dict[str, Any]) -> None:
    """One key per line, each value compact: valid JSON that stays readable."""
    body = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in summary.items())
    print("{\n" + body + "\n}")


def main(opts: Options) -> int:
    """Run the soak, print its summary; the exit status (1 when a check failed)."""
    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    summary = Soak(opts, log).run()
    print_summary(summary)
    return 0 if summary["ok"] else 1
