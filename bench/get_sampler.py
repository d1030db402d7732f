"""Sequential GET round trips from a process of their own, so that the load generator's
threads never share a GIL with the latency measurement.

``python -m bench.get_sampler HOST PORT TABLE KEY COUNT OUT`` writes the latencies
(seconds) as a JSON list to the file OUT; :class:`Sampler` runs it and reads them back.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

from bench.loadgen import get_latencies


class Sampler:
    """``count`` sequential GETs of ``key`` in ``table``, running in a child process."""

    def __init__(self, addr: tuple[str, int], table: str, key: str, count: int) -> None:
        self._dir = tempfile.mkdtemp(prefix="beava-bench-")
        self._out = os.path.join(self._dir, "latencies.json")
        host, port = addr
        self._command = [sys.executable, "-m", "bench.get_sampler", host, str(port), table,
                         key, str(count), self._out]
        self._proc = subprocess.Popen(self._command)

    def running(self) -> bool:
        return self._proc.poll() is None

    def latencies(self) -> list[float]:
        """Wait for the child; its latencies in seconds."""
        try:
            if self._proc.wait() != 0:
                raise subprocess.CalledProcessError(self._proc.returncode, self._command)
            with open(self._out) as fh:
                samples: list[float] = json.load(fh)
            return samples
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)


if __name__ == "__main__":
    host, port, table, key, count, out = sys.argv[1:7]
    latencies = get_latencies((host, int(port)), table, key, int(count))
    with open(out, "w") as fh:
        json.dump(latencies, fh)
