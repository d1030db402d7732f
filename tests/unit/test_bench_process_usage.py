"""bench's reading of another process's CPU time and memory (bench/process_usage.py)."""

from __future__ import annotations

import subprocess
import sys

from bench.process_usage import cpu_seconds, rss_kb, tree_cpu_seconds, user_system_seconds

# Burns CPU in a thread that then exits, prints its own CPU time, waits for a line.
CHILD = """
import sys, threading, time
def burn():
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
worker = threading.Thread(target=burn)
worker.start()
worker.join()
print(time.process_time(), flush=True)
sys.stdin.readline()
"""


def test_cpu_seconds_counts_every_thread_exited_ones_included() -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        own = float(child.stdout.readline())
        seen = cpu_seconds(child.pid)
        assert own >= 0.2
        # the child's own reading came first; little more runs between the two
        assert own <= seen < own + 0.5
        # the same time split in two, counted in 10 ms ticks (the burn reads a CPU clock, a
        # system call: it is split between both)
        user, system = user_system_seconds(child.pid)
        assert user > 0 and system > 0
        assert abs(user + system - seen) < 0.05
        assert rss_kb(child.pid) is not None
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.wait(timeout=30) == 0
    finally:
        child.kill()
        child.wait()
    assert rss_kb(child.pid) is None  # gone


def test_tree_cpu_seconds_counts_the_processes_below_but_the_excluded() -> None:
    # a parent that waits for the burning child, which shares its stdin and stdout
    spawn = f"import subprocess, sys; sys.exit(subprocess.call([sys.executable, '-c', {CHILD!r}]))"
    parent = subprocess.Popen([sys.executable, "-c", spawn], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None and parent.stdin is not None
        own = float(parent.stdout.readline())  # the grandchild's burn is over
        total = tree_cpu_seconds(parent.pid)
        assert own <= total < own + 0.5
        assert tree_cpu_seconds(parent.pid, frozenset({parent.pid})) == 0.0
        parent.stdin.write("\n")
        parent.stdin.flush()
        assert parent.wait(timeout=30) == 0
    finally:
        parent.kill()
        parent.wait()
