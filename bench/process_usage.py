"""What a running process uses, read from outside it (Linux): the one place bench reads a
server's CPU time and resident memory."""

from __future__ import annotations

import os
import time

# clock_getcpuclockid(pid): the CPU-time clock of a whole process is (~pid << 3) | 2
# (CPUCLOCK_SCHED), what glibc computes; Python exposes only the clocks of its own threads.
_CPUCLOCK_SCHED = 2


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of process ``pid`` so far, in seconds: every thread,
    exited ones included, to the nanosecond (``/proc/<pid>/stat`` counts clock ticks of
    10 ms, too coarse for the cost of one read)."""
    return time.clock_gettime((~pid << 3) | _CPUCLOCK_SCHED)


def tree_cpu_seconds(root: int, exclude: frozenset[int] = frozenset()) -> float:
    """``cpu_seconds`` of ``root`` and of every process below it (a Spark driver's JVM and
    Python workers), the ``exclude`` processes and theirs left out. A process that exits
    between two readings takes its time away: meant for processes that live on (Spark
    reuses its Python workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                parent = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        children.setdefault(parent, []).append(int(entry))
    total = 0.0
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in exclude:
            continue
        try:
            total += cpu_seconds(pid)
        except OSError:
            continue  # gone meanwhile
        todo.extend(children.get(pid, ()))
    return total


def user_system_seconds(pid: int) -> tuple[float, float]:
    """User and system CPU time of process ``pid`` so far (every thread, exited ones
    included), in seconds, from ``/proc/<pid>/stat``: counted in clock ticks (10 ms), so
    only the split of a longer window; ``cpu_seconds`` is the precise total."""
    with open(f"/proc/{pid}/stat") as fh:
        # the fields after the command name, which is in parentheses and may hold spaces
        fields = fh.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    # utime and stime are fields 14 and 15 of the line, 12 and 13 after the name
    return int(fields[11]) / tick, int(fields[12]) / tick


def rss_kb(pid: int) -> int | None:
    """VmRSS of ``pid`` in KiB (None once the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None
