"""Sequential GET round trips from a process of its own, so that the load generator's
threads never share a GIL with the latency measurement.

``python -m bench.get_sampler HOST PORT TABLE KEY COUNT OUT`` writes the latencies
(seconds) as a JSON list to the file OUT.
"""

from __future__ import annotations

import json
import sys

from bench.loadgen import get_latencies

if __name__ == "__main__":
    host, port, table, key, count, out = sys.argv[1:7]
    latencies = get_latencies((host, int(port)), table, key, int(count))
    with open(out, "w") as fh:
        json.dump(latencies, fh)
