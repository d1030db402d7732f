"""Slow and greedy clients all at once (slowloris on both ports, TCP and HTTP pipeliners that
never read their replies, back-to-back BATCH_GETs of 100,000 keys) leave a second client's
GETs answered promptly. The clients are those of ``python -m bench greedy``, which reports
the figures; the bounds here are generous liveness bounds (the loaded CI machine is slower
than the figures the bench reports), and the greedy clients must have been at it."""

from __future__ import annotations

import time
from pathlib import Path

from bench.get_sampler import Sampler
from bench.greedy import SAMPLE_KEY, TABLE, GreedyClients, percentiles, prepare
from tests.support import BeavaProcess


def test_a_second_client_is_answered_while_greedy_clients_hold_the_server(
        tmp_path: Path) -> None:
    server = BeavaProcess("--data-dir", str(tmp_path), memory_only=False)
    try:
        prepare(server.addrs["http"], server.tcp)
        clients = GreedyClients(server.http, server.tcp, "all")
        try:
            time.sleep(1.0)
            latencies = Sampler(server.tcp, TABLE, SAMPLE_KEY, 1000).latencies()
        finally:
            clients.stop()
        got = percentiles(latencies)
        done = clients.counts
        # they were really at it: connections held, pipelines pushed back, batches served
        assert done.get("slowloris connections", 0) >= 100, done
        assert done.get("unread tcp blocked sends", 0) >= 1, done
        assert done.get("unread http blocked sends", 0) >= 1, done
        assert done.get("batches answered", 0) >= 2 and "batches failed" not in done, done
        assert got["p99_ms"] < 250 and got["max_ms"] < 2000, (got, done)
    finally:
        assert server.terminate() == 0
