"""The machine a figure was measured on (Linux): CPU model, cores and caches, read from
/proc/cpuinfo and sysfs, so a figure that moves between two machines of the same kind
comes with what differs between them."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CPUINFO = Path("/proc/cpuinfo")
CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")


@dataclass(frozen=True)
class Cache:
    level: int
    kind: str  # "Data", "Instruction", "Unified"
    size: str  # as sysfs spells it: "48K", "2048K"
    shared_cpus: str  # the CPUs sharing it: "0", "0-1"

    @property
    def label(self) -> str:
        kind = {"Data": "d", "Instruction": "i"}.get(self.kind, "")
        return f"L{self.level}{kind} {self.size}"


@dataclass(frozen=True)
class Machine:
    cpu_model: str
    cores: int
    caches: list[Cache] = field(default_factory=list)

    def summary(self) -> str:
        """One line: ``Intel(R) Xeon(R) ..., 2 CPUs, L1d 48K, L1i 64K, L2 2048K, L3 ...``."""
        return ", ".join([self.cpu_model, f"{self.cores} CPUs",
                          *(cache.label for cache in self.caches)])

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def cpu_model(cpuinfo: str) -> str:
    """The first ``model name`` of a /proc/cpuinfo text (``?`` without one)."""
    for line in cpuinfo.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() == "model name":
            return value.strip()
    return "?"


def caches(cache_dir: Path) -> list[Cache]:
    """cpu0's caches from its sysfs directory (``index0``, ``index1``...), by level."""
    found = []
    for index in sorted(cache_dir.glob("index*")):
        level = _read(index / "level")
        if not level.isdigit():
            continue
        found.append(Cache(int(level), _read(index / "type"), _read(index / "size"),
                           _read(index / "shared_cpu_list")))
    return sorted(found, key=lambda c: (c.level, c.kind))


def describe() -> Machine:
    return Machine(cpu_model(_read(CPUINFO)), os.cpu_count() or 0, caches(CACHE_DIR))
