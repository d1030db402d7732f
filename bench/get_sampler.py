"""Sequential GET round trips from a process of its own, so that the load generator's
threads never share a GIL with the latency measurement.

``python -m bench.get_sampler HOST PORT TABLE KEY COUNT`` prints the latencies (seconds)
as a JSON list.
"""

from __future__ import annotations

import json
import sys

from bench.loadgen import get_latencies

if __name__ == "__main__":
    host, port, table, key, count = sys.argv[1:6]
    print(json.dumps(get_latencies((host, int(port)), table, key, int(count))))
