"""Where a server's CPU goes, by shared object and symbol: ``perf record`` attached to the
server process for a timed window, read back with ``perf report`` (Linux, where perf is
installed and allowed to attach: ``kernel.perf_event_paranoid`` <= 2 for a process of the
same user). Samples are taken without call graphs (self time only), at SAMPLE_HZ.

The shares reported: libpython (the interpreter: eval loop, dicts, objects, its own
allocator), the C library's allocator (malloc, realloc, free and their internals), and the
symbols taking the most samples."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field

SAMPLE_HZ = 1999
TOP_SYMBOLS = 12
# Symbols of glibc's allocator (its entry points and the internals perf names).
ALLOCATOR_SYMBOLS = frozenset({
    "malloc", "free", "realloc", "calloc", "cfree", "memalign", "posix_memalign",
    "__libc_malloc", "__libc_free", "__libc_realloc", "__libc_calloc", "_int_malloc",
    "_int_free", "_int_realloc", "_int_memalign", "unlink_chunk", "malloc_consolidate",
    "sysmalloc", "systrim", "tcache_init", "__malloc_arena_thread_freeres", "alloc_perturb",
    "_int_free_merge_chunk", "_int_free_create_chunk", "_int_free_maybe_consolidate",
    "malloc_printerr", "tcache_get", "tcache_put",
})


@dataclass
class Profile:
    samples: int = 0
    libpython: float = 0.0
    """Share of the server's samples (0..1) in libpython."""
    allocator: float = 0.0
    """Share in the C library's allocator (ALLOCATOR_SYMBOLS)."""
    top: list[tuple[float, str, str]] = field(default_factory=list)
    """(share, shared object, symbol) of the symbols with the most samples, most first."""


def is_allocator(dso: str, symbol: str) -> bool:
    """A symbol of glibc's allocator (``cfree@GLIBC_2.2.5``: its version dropped)."""
    return dso.startswith("libc") and symbol.split("@", 1)[0] in ALLOCATOR_SYMBOLS


def parse_report(text: str) -> Profile:
    """A Profile from ``perf report --stdio --no-children --sort dso,sym -t TAB`` text: a
    header line ``# Samples: 12K of event ...``, then lines ``<share>%\\t<dso>\\t[.]
    <symbol>`` (``[k]``: the kernel's)."""
    profile = Profile()
    rows = []
    for line in text.splitlines():
        if line.startswith("# Samples:"):
            profile.samples = _count(line.split(":", 1)[1].split()[0])
        parts = line.split("\t")
        if len(parts) != 3 or not parts[0].strip().endswith("%"):
            continue
        share = float(parts[0].strip().rstrip("%")) / 100
        dso = parts[1].strip()
        symbol = parts[2].strip()
        if symbol[:1] == "[" and "]" in symbol:
            symbol = symbol.split("]", 1)[1].strip()
        rows.append((share, dso, symbol))
        if dso.startswith("libpython"):
            profile.libpython += share
        if is_allocator(dso, symbol):
            profile.allocator += share
    profile.top = sorted(rows, reverse=True)[:TOP_SYMBOLS]
    return profile


def unavailable() -> str:
    """Why perf cannot profile here, or "" when it is installed."""
    return "" if shutil.which("perf") else "perf is not installed (apt-get install linux-perf)"


class Recording:
    """``perf record`` attached to ``pid`` from start() until stop(); then ``profile()``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.dir = tempfile.mkdtemp(prefix="beava-perf-")
        self.data = os.path.join(self.dir, "perf.data")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["perf", "record", "-q", "-F", str(SAMPLE_HZ), "-p", str(self.pid), "-o",
             self.data], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def stop(self) -> Profile:
        """Stop recording (SIGINT, as perf expects) and read the profile; RuntimeError with
        perf's words when it recorded nothing."""
        assert self.proc is not None
        try:
            self.proc.send_signal(2)
            _, err = self.proc.communicate(timeout=60)
            if self.proc.returncode not in (0, -2) or not os.path.exists(self.data):
                raise RuntimeError(f"perf record failed: {err.decode(errors='replace')[-500:]}")
            report = subprocess.run(
                ["perf", "report", "-i", self.data, "--stdio", "--no-children",
                 "--sort", "dso,sym", "-t", "\t", "-g", "none"],
                capture_output=True, text=True, timeout=300, check=False)
            if report.returncode != 0:
                raise RuntimeError(f"perf report failed: {report.stderr[-500:]}")
            return parse_report(report.stdout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            shutil.rmtree(self.dir, ignore_errors=True)


def _count(text: str) -> int:
    """perf's rounded count: ``950``, ``12K``, ``1M``."""
    scale = {"K": 1_000, "M": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("KM")) * scale)
