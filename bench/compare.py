"""``python -m bench compare``: the same load against this server and a reference ``beava``
binary (the 0.0.6 Rust server speaks the same protocol), run alternately.

For every workload, mode and round one fresh server process is started (``ours``, then the
reference, then ``ours`` again in the next mode, and so on, so a drift of the machine hits
both sides alike) and measured the same way:

- register the workload's payload (a rejection is reported, and the run counted as failed);
- push for 1 s to create the entities (warm-up), then for ``--seconds``: events/s as in
  ``bench push`` (``--connections`` x ``--depth`` in flight, MessagePack);
- server CPU over that timed window only: user + system time of the server process, every
  thread (``bench.process_usage.cpu_seconds``), divided by the events acknowledged in the
  window; also split into user and system time (``/proc/<pid>/stat``, 10 ms ticks);
- with ``--perf``: ``perf record`` attached to the server over the same window
  (``bench.server_profile``): the shares of its CPU in libpython and in the C library's
  allocator, and its busiest symbols;
- GET p50/p99 for one key, idle and then under the same push load (``bench.get_sampler``,
  as ``bench latency`` does).

Modes: ``memory`` (``--memory-only`` on both) and ``wal``: this server in strict mode (its
default: a push is acknowledged after fsync) against the reference's own default WAL
settings, plus this server in periodic mode as an extra row against the same reference
runs. Periodic snapshots are pushed out of the measured window on both (one hour).

The machine (CPU model, cores, cache sizes: ``bench.machine``) is printed above the
figures and written with them. Figures are medians over the rounds without an error;
``ours/ref`` is the median of the per-round ratios. A run with error replies, a rejected
payload or a failure is flagged and left out of the medians, never averaged in.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from beava.launcher import ServerProcess, installed_server_command, split_addr
from bench import loadgen, machine, server_profile, workloads
from bench.engine_bench import sample_get_latencies
from bench.process_usage import cpu_seconds, user_system_seconds

REFERENCE_ENV = "BEAVA_REFERENCE_BINARY"
WORKLOADS = ("small", "large-with-sketches", "fraud-team")
MODES = ("memory", "wal")
START_TIMEOUT_S = 60.0
WARM_UP_S = 1.0
# Long enough that no periodic snapshot falls inside a run, on either server.
SNAPSHOT_INTERVAL_MS = "3600000"


@dataclass(frozen=True)
class Setup:
    """One server configuration: which binary and which durability settings."""

    side: str  # "ours" or "ref"
    mode: str  # "memory", "strict", "periodic" (ours) or "wal" (the reference's default)

    @property
    def label(self) -> str:
        return f"{self.side} {self.mode}"


OURS_MEMORY = Setup("ours", "memory")
REF_MEMORY = Setup("ref", "memory")
OURS_STRICT = Setup("ours", "strict")
OURS_PERIODIC = Setup("ours", "periodic")
REF_WAL = Setup("ref", "wal")
# The order each round runs them in, per mode: ours and the reference alternate.
RUN_ORDER: dict[str, tuple[Setup, ...]] = {
    "memory": (OURS_MEMORY, REF_MEMORY),
    "wal": (OURS_STRICT, REF_WAL, OURS_PERIODIC),
}
# The rows of the table: (mode label, ours, reference) per mode.
PAIRS: dict[str, tuple[tuple[str, Setup, Setup], ...]] = {
    "memory": (("memory-only", OURS_MEMORY, REF_MEMORY),),
    "wal": (("WAL: ours strict / ref default", OURS_STRICT, REF_WAL),
            ("WAL: ours periodic / ref default", OURS_PERIODIC, REF_WAL)),
}
# Chart labels of the table's modes.
SHORT_MODES = {"memory-only": "memory", "WAL: ours strict / ref default": "WAL: strict / default",
               "WAL: ours periodic / ref default": "WAL: periodic / default"}
FIGURES: tuple[tuple[str, str, str], ...] = (
    # (Run attribute, column heading, format)
    ("events_per_s", "events/s", ",.0f"),
    ("cpu_us_per_event", "CPU us/ev", ".2f"),
    ("user_us_per_event", "user us/ev", ".2f"),
    ("sys_us_per_event", "sys us/ev", ".2f"),
    ("server_cores", "srv cores", ".2f"),
    ("get_idle_p50_ms", "GET idle p50", ".3f"),
    ("get_idle_p99_ms", "GET idle p99", ".3f"),
    ("get_load_p50_ms", "GET load p50", ".2f"),
    ("get_load_p99_ms", "GET load p99", ".2f"),
)
# Shown with --perf: (Run attribute, column heading, format)
PROFILE_FIGURES: tuple[tuple[str, str, str], ...] = (
    ("libpython_share", "libpython", ".1%"),
    ("allocator_share", "allocator", ".1%"),
)


@dataclass
class Run:
    workload: str
    side: str
    mode: str
    round: int
    events_per_s: float = 0.0
    cpu_us_per_event: float = 0.0
    user_us_per_event: float = 0.0
    sys_us_per_event: float = 0.0
    server_cores: float = 0.0
    """Server CPU seconds per wall-clock second over the timed window."""
    get_idle_p50_ms: float = 0.0
    get_idle_p99_ms: float = 0.0
    get_load_p50_ms: float = 0.0
    get_load_p99_ms: float = 0.0
    replies: int = 0
    """Push replies over the whole run (warm-up, timed window, load while sampling GETs)."""
    errors: int = 0
    """Error replies among ``replies``."""
    data_bytes: int = 0
    libpython_share: float = 0.0
    """With --perf: the share of the server's CPU samples in libpython (0..1)."""
    allocator_share: float = 0.0
    """With --perf: the share in the C library's allocator."""
    profile_samples: int = 0
    top_symbols: list[tuple[float, str, str]] = field(default_factory=list)
    """With --perf: (share, shared object, symbol) of the busiest symbols."""
    """Bytes in the data directory (WAL) when the server stopped; 0 in memory mode."""
    failure: str = ""
    """Why the run has no figures or bad ones: a rejected payload, the first error reply,
    a server that stopped."""

    @property
    def ok(self) -> bool:
        return not self.errors and not self.failure


def reference_binary(given: str | None) -> str:
    """``--reference`` or ``$BEAVA_REFERENCE_BINARY``; an executable file, else ValueError."""
    path = given or os.environ.get(REFERENCE_ENV)
    if not path:
        raise ValueError(f"no reference server: pass --reference PATH or set {REFERENCE_ENV}")
    found = shutil.which(path)
    if found is None:
        raise ValueError(f"the reference server {path!r} is not an executable file")
    return found


def version(command: Sequence[str]) -> str:
    try:
        out = subprocess.run([*command, "--version"], capture_output=True, text=True,
                             timeout=30, check=False)
    except OSError as exc:
        return f"? ({exc})"
    return (out.stdout or out.stderr).strip() or f"? (exit code {out.returncode})"


def wait_http_ready(http_addr: str, proc: ServerProcess, timeout: float) -> None:
    """Poll ``GET /ready`` until it answers 200 (both servers have it; the reference
    reports no ``server.ready`` line, only its bind lines)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://{http_addr}/ready", timeout=5) as resp:
                if resp.status == 200:
                    return
        except (OSError, urllib.error.URLError):
            pass
        if proc.poll() is not None:
            raise proc.start_failure(timeout, "that it is ready")
        if time.monotonic() > deadline:
            raise proc.start_failure(timeout, "ready on GET /ready")
        time.sleep(0.05)


def start_server(setup: Setup, reference: str, data_dir: str | None) -> ServerProcess:
    """A started and ready server for ``setup`` (inherited ``BEAVA_*`` variables dropped,
    every listener on an OS-assigned port)."""
    if setup.mode == "memory":
        args, env = ["--memory-only"], {}
    else:
        assert data_dir is not None
        args = ["--data-dir", data_dir]
        env = {"BEAVA_SNAPSHOT_INTERVAL_MS": SNAPSHOT_INTERVAL_MS}
        if setup.side == "ours":
            env["BEAVA_WAL_SYNC_MODE"] = setup.mode
    command = installed_server_command() if setup.side == "ours" else [reference]
    server = ServerProcess(args, command=command, env=env, inherit_beava=False,
                           keep_output=False)
    server.start()
    server.wait_bound(START_TIMEOUT_S)
    wait_http_ready(server.addrs["http"], server, START_TIMEOUT_S)
    return server


def register(http_addr: str, payload: dict[str, Any]) -> str:
    """POST /register; "" when accepted, else the server's reply."""
    req = urllib.request.Request(f"http://{http_addr}/register",
                                 data=json.dumps(payload).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            body = resp.read()
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}: {exc.read()[:300]!r}"
    try:
        reply = json.loads(body)
    except ValueError:
        return f"not JSON: {body[:300]!r}"
    if isinstance(reply, dict) and "error" in reply:
        return json.dumps(reply)[:300]
    return ""


@dataclass
class Window:
    """What the server used over a timed window: CPU seconds per wall-clock second, in all
    and split into user and system time, and its profile (with --perf)."""

    cores: float
    user_cores: float
    sys_cores: float
    profile: server_profile.Profile | None


async def timed_blast(addr: tuple[str, int], frames: list[bytes], pid: int, *, seconds: float,
                      connections: int, depth: int,
                      perf: bool) -> tuple[loadgen.BlastResult, Window]:
    """Push for ``seconds``; the result and what the server used over the same window."""
    recording = server_profile.Recording(pid) if perf else None
    if recording is not None:
        recording.start()
    user0, sys0 = user_system_seconds(pid)
    cpu0, wall0 = cpu_seconds(pid), time.perf_counter()
    task = asyncio.ensure_future(loadgen.blast(addr, frames, connections=connections,
                                               depth=depth, seconds=seconds))
    await asyncio.sleep(seconds)
    cpu1, wall1 = cpu_seconds(pid), time.perf_counter()
    user1, sys1 = user_system_seconds(pid)
    profile = recording.stop() if recording is not None else None
    result = await task
    wall = wall1 - wall0
    return result, Window((cpu1 - cpu0) / wall, (user1 - user0) / wall, (sys1 - sys0) / wall,
                          profile)


def measure(setup: Setup, wl: workloads.Workload, frames: list[bytes], key: str, *,
            reference: str, rnd: int, seconds: float, samples: int, connections: int,
            depth: int, perf: bool = False) -> Run:
    run = Run(wl.name, setup.side, setup.mode, rnd)
    data_dir = None if setup.mode == "memory" else tempfile.mkdtemp(prefix="beava-compare-")
    server: ServerProcess | None = None
    try:
        server = start_server(setup, reference, data_dir)
        rejected = register(server.addrs["http"], wl.register)
        if rejected:
            run.failure = f"register rejected: {rejected}"
            return run
        addr = split_addr(server.addrs["tcp"])
        warm = asyncio.run(loadgen.blast(addr, frames, connections=connections, depth=depth,
                                         seconds=WARM_UP_S))
        timed, window = asyncio.run(timed_blast(addr, frames, server.pid, seconds=seconds,
                                                connections=connections, depth=depth,
                                                perf=perf))
        for result in (warm, timed):
            run.replies += result.replies
            run.errors += result.errors
            if result.errors and not run.failure:
                run.failure = f"error reply: {result.first_error[:200]!r}"
        run.events_per_s = timed.rate
        run.server_cores = window.cores
        if timed.rate:
            run.cpu_us_per_event = window.cores / timed.rate * 1e6
            run.user_us_per_event = window.user_cores / timed.rate * 1e6
            run.sys_us_per_event = window.sys_cores / timed.rate * 1e6
        if window.profile is not None:
            run.libpython_share = window.profile.libpython
            run.allocator_share = window.profile.allocator
            run.profile_samples = window.profile.samples
            run.top_symbols = window.profile.top
        lat = sample_get_latencies(addr, wl.first_table(), key, frames, samples=samples,
                                   connections=connections, depth=depth)
        run.replies += lat.push_replies
        run.errors += lat.push_errors
        if lat.push_errors and not run.failure:
            run.failure = f"error reply: {lat.first_push_error[:200]!r}"
        run.get_idle_p50_ms, run.get_idle_p99_ms = _p50_p99(lat.idle)
        run.get_load_p50_ms, run.get_load_p99_ms = _p50_p99(lat.under_push_load)
    except Exception as exc:  # noqa: BLE001 - one failed run must not end the comparison
        run.failure = f"{type(exc).__name__}: {str(exc)[-4000:]}"
    finally:
        if server is not None:
            code = server.stop(10)
            if code not in (0, -15) and not run.failure:
                run.failure = f"the server exited with code {code}"
        if data_dir is not None:
            run.data_bytes = sum(os.path.getsize(os.path.join(top, name))
                                 for top, _, files in os.walk(data_dir) for name in files)
            shutil.rmtree(data_dir, ignore_errors=True)
    return run


def _p50_p99(samples: list[float]) -> tuple[float, float]:
    ms = sorted(s * 1000 for s in samples)
    return statistics.median(ms), ms[max(0, int(len(ms) * 0.99) - 1)]


@dataclass
class Comparison:
    """One row of the table: a workload, a mode pair, and the runs of both sides."""

    workload: str
    mode: str
    ours: list[Run] = field(default_factory=list)
    ref: list[Run] = field(default_factory=list)

    def median(self, side: str, figure: str) -> float | None:
        runs = [r for r in (self.ours if side == "ours" else self.ref) if r.ok]
        return statistics.median(getattr(r, figure) for r in runs) if runs else None

    def ratio(self, figure: str) -> float | None:
        """Median over rounds of ours/ref, pairing the runs of the same round."""
        ref_by_round = {r.round: r for r in self.ref if r.ok}
        ratios = [getattr(o, figure) / getattr(ref_by_round[o.round], figure)
                  for o in self.ours
                  if o.ok and o.round in ref_by_round and getattr(ref_by_round[o.round], figure)]
        return statistics.median(ratios) if ratios else None

    def flags(self, side: str) -> str:
        runs = self.ours if side == "ours" else self.ref
        bad = [r for r in runs if not r.ok]
        if not bad:
            return ""
        errors = sum(r.errors for r in bad)
        return f"FLAGGED {len(bad)}/{len(runs)} runs" + (f", {errors} errors" if errors else "")


def compare(reference: str, names: Sequence[str], modes: Sequence[str], *, rounds: int,
            seconds: float, samples: int, connections: int, depth: int, perf: bool = False,
            log: bool = True) -> tuple[list[Comparison], list[Run]]:
    loaded = {name: workloads.load(name) for name in names}
    prepared = {}
    for name, wl in loaded.items():
        bodies = workloads.events(wl, 100_000)
        prepared[name] = (loadgen.push_frames(wl.event, bodies), bodies[0][wl.key_fields[0]])
    runs: list[Run] = []
    for rnd in range(1, rounds + 1):
        for name, wl in loaded.items():
            frames, key = prepared[name]
            for mode in modes:
                for setup in RUN_ORDER[mode]:
                    run = measure(setup, wl, frames, key, reference=reference, rnd=rnd,
                                  seconds=seconds, samples=samples, connections=connections,
                                  depth=depth, perf=perf)
                    runs.append(run)
                    if log:
                        print(f"  round {rnd} {name:<20} {setup.label:<14} "
                              f"{run.events_per_s:>10,.0f} ev/s {run.cpu_us_per_event:7.2f} "
                              f"us/ev  GET load p99 {run.get_load_p99_ms:6.2f} ms"
                              + (f"  libpython {run.libpython_share:.1%} allocator "
                                 f"{run.allocator_share:.1%}" if perf else "")
                              + (f"  !! {run.failure.splitlines()[0][:200]}" if run.failure
                                 else ""), flush=True)
    rows = []
    for name in names:
        for mode in modes:
            for label, ours, ref in PAIRS[mode]:
                rows.append(Comparison(
                    name, label,
                    [r for r in runs if r.workload == name and Setup(r.side, r.mode) == ours],
                    [r for r in runs if r.workload == name and Setup(r.side, r.mode) == ref]))
    return rows, runs


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def print_table(rows: list[Comparison], perf: bool = False) -> None:
    figures = FIGURES + PROFILE_FIGURES if perf else FIGURES
    heads = [head for _, head, _ in figures]
    print("events/s: higher is better; CPU us per event (srv cores: server CPU seconds per "
          "second) and GET latencies (ms): lower is better")
    print(f"{'workload':<20}{'mode':<34}{'side':<9}"
          + "".join(f"{h:>13}" for h in heads) + "  notes")
    for row in rows:
        for side in ("ours", "ref"):
            cells = "".join(f"{_cell(row.median(side, fig), fmt):>13}" for fig, _, fmt in figures)
            print(f"{row.workload:<20}{row.mode:<34}{side:<9}{cells}  {row.flags(side)}")
        cells = "".join(f"{_cell(row.ratio(fig), '.2f'):>13}" for fig, _, _ in figures)
        print(f"{row.workload:<20}{row.mode:<34}{'ours/ref':<9}{cells}")
    failures = [(r, run) for r in rows for run in (*r.ours, *r.ref) if not run.ok]
    seen = set()
    for _, run in failures:
        key = (run.workload, run.side, run.mode, run.round)
        if key in seen:
            continue
        seen.add(key)
        print(f"!! {run.workload} {run.side} {run.mode} round {run.round}: "
              f"{run.errors} error replies of {run.replies}; {run.failure}")
    if perf:
        print_profiles(rows)


def print_profiles(rows: list[Comparison]) -> None:
    """The busiest symbols of each workload and setup (its first profiled run)."""
    shown = set()
    for row in rows:
        for run in (*row.ours, *row.ref):
            key = (run.workload, run.side, run.mode)
            if key in shown or not run.top_symbols:
                continue
            shown.add(key)
            print(f"\n{run.workload} {run.side} {run.mode} (round {run.round}, "
                  f"{run.profile_samples:,} samples): libpython {run.libpython_share:.1%}, "
                  f"allocator {run.allocator_share:.1%}")
            for share, dso, symbol in run.top_symbols:
                print(f"  {share:6.1%}  {dso[:28]:<28}  {symbol[:90]}")


def chart(rows: list[Comparison], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("events_per_s", "events/s"), ("cpu_us_per_event", "server CPU us / event"),
              ("get_idle_p99_ms", "GET p99 idle (ms)"),
              ("get_load_p99_ms", "GET p99 under push load (ms)"))
    fig, axes = plt.subplots(len(panels), 1, figsize=(max(8.0, 1.3 * len(rows)), 13))
    labels = [f"{r.workload}\n{SHORT_MODES.get(r.mode, r.mode)}" for r in rows]
    x = range(len(rows))
    width = 0.38
    for ax, (figure, heading) in zip(axes.flat, panels, strict=True):
        ours = [row.median("ours", figure) or 0.0 for row in rows]
        ref = [row.median("ref", figure) or 0.0 for row in rows]
        ax.bar([i - width / 2 for i in x], ours, width, label="ours", color="#4C72B0")
        ax.bar([i + width / 2 for i in x], ref, width, label="reference", color="#DD8452")
        for i, row in enumerate(rows):
            ratio = row.ratio(figure)
            if ratio is not None:
                ax.annotate(f"{ratio:.2f}x", (i, max(ours[i], ref[i])), ha="center",
                            va="bottom", fontsize=7)
        ax.set_yscale("log")
        ax.set_title(heading + " (log scale)", fontsize=10)
        ax.set_xticks(list(x))
        ax.set_xticklabels(labels, fontsize=7)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(reference: str | None, names: Sequence[str], modes: Sequence[str], *, rounds: int,
         seconds: float, samples: int, connections: int, depth: int, chart_path: str | None,
         json_path: str | None, perf: bool = False) -> None:
    ref = reference_binary(reference)
    if perf and server_profile.unavailable():
        raise ValueError(f"--perf: {server_profile.unavailable()}")
    unknown = [n for n in names if not (workloads.WORKLOADS_DIR / f"{n}.json").exists()]
    if unknown:
        raise ValueError(f"unknown workloads: {', '.join(unknown)}")
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    host = machine.describe()
    ours_version = version(installed_server_command())
    ref_version = version([ref])
    print(f"{when}: ours = {ours_version}, ref = {ref_version} ({ref}); {rounds} rounds, "
          f"{seconds:g} s timed after {WARM_UP_S:g} s warm-up, {connections} connections x "
          f"{depth} in flight, MessagePack; {samples} GETs idle and under load; "
          f"{host.cores} CPUs shared with the load generator")
    print(f"machine: {host.summary()}")
    rows, runs = compare(ref, names, modes, rounds=rounds, seconds=seconds, samples=samples,
                         connections=connections, depth=depth, perf=perf)
    print()
    print_table(rows, perf)
    if json_path:
        with open(json_path, "w") as fh:
            json.dump({"when": when, "ours": ours_version, "ref": ref_version,
                       "machine": host.as_json(), "runs": [asdict(r) for r in runs]},
                      fh, indent=1)
    if chart_path:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("no chart: matplotlib is missing (pip install -e '.[bench]')")
            return
        chart(rows, chart_path, f"beava: ours ({ours_version}) vs reference ({ref_version}), "
                                f"medians of {rounds} rounds, {when}")
        print(f"chart: {chart_path}")
