"""Prometheus exposition of the server's counters, gauges and duration histograms
(spec/server.md §8; every family is listed in docs/operations.md, which a test keeps in
step with the tables below).

prometheus-client is imported on the first scrape, not at start-up (fast start).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from beava._fast.timing.histogram import BOUNDS, Histogram


class ServerMetrics:
    """Collects values from live state at scrape time; no per-request bookkeeping here
    (the histograms are filled where the work is done and only read here)."""

    def __init__(self, sample: Callable[[], dict[str, Any]], sync_mode: str) -> None:
        self._sample = sample
        self._sync_mode = sync_mode
        self._registry: Any = None

    def _build(self) -> Any:
        from prometheus_client import CollectorRegistry
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        sample = self._sample
        mode = self._sync_mode

        class _Collector:
            def collect(self) -> Iterator[Any]:
                v = sample()
                for name, doc in GAUGES:
                    yield GaugeMetricFamily(name, doc, value=v.get(name, 0))
                for name, doc in COUNTERS:
                    yield CounterMetricFamily(name.removesuffix("_total"), doc,
                                              value=v.get(name, 0))
                for name, doc, labels in LABELLED_COUNTERS:
                    counter = CounterMetricFamily(name.removesuffix("_total"), doc,
                                                  labels=labels)
                    for values, count in sorted(v.get(name, {}).items()):
                        counter.add_metric(list(values), count)
                    yield counter
                for name, doc, labels in LABELLED_GAUGES:
                    gauge = GaugeMetricFamily(name, doc, labels=labels)
                    for values, value in sorted(v.get(name, {}).items()):
                        gauge.add_metric(list(values), value)
                    yield gauge
                for name, doc in HISTOGRAMS:
                    buckets, total = histogram_buckets(v[name])
                    yield HistogramMetricFamily(name, doc, buckets=buckets, sum_value=total)
                for name, doc, labels in LABELLED_HISTOGRAMS:
                    family = HistogramMetricFamily(name, doc, labels=labels)
                    for values, histogram in sorted(v.get(name, {}).items()):
                        buckets, total = histogram_buckets(histogram)
                        if buckets[-1][1]:  # only what was observed at least once
                            family.add_metric(list(values), buckets, total)
                    yield family
                runtime = GaugeMetricFamily("beava_runtime_kind", "event loop runtime",
                                            labels=["runtime"])
                runtime.add_metric(["uvloop"], 1)
                yield runtime
                sync = GaugeMetricFamily("beava_wal_sync_mode", "active WAL sync mode",
                                         labels=["mode"])
                sync.add_metric([mode], 1)
                yield sync

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector())
        return registry

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        if self._registry is None:
            self._registry = self._build()
        return generate_latest(self._registry)


def histogram_buckets(histogram: Histogram) -> tuple[list[tuple[str, int]], float]:
    """``([(le, cumulative count), ..., ("+Inf", count)], sum)`` of ``histogram``."""
    counts, total, _count = histogram.read()
    buckets = []
    running = 0
    for bound, count in zip((*(repr(b) for b in BOUNDS), "+Inf"), counts, strict=True):
        running += count
        buckets.append((bound, running))
    return buckets, total


GAUGES = (
    ("beava_registry_version", "current registry version"),
    ("beava_node_count", "registered descriptors (event sources + derivations)"),
    ("beava_entity_count_resident", "resident (table, entity) rows"),
    ("beava_snapshot_last_duration_seconds", "wall time of the last successful snapshot"),
    ("beava_snapshot_last_bytes", "size of the last successful snapshot file"),
    ("beava_snapshot_last_fsync_seconds", "file and directory fsync time of the last snapshot"),
    ("beava_wal_last_fsync_seconds", "duration of the most recent WAL fsync"),
    ("beava_wal_writable", "1 while the WAL takes writes, 0 while they are refused (disk full)"),
)
COUNTERS = (
    ("beava_entropy_categories_capped_total", "new categories dropped by the entropy cap"),
    ("beava_cold_entity_evictions_total", "entity rows reset by the cold TTL"),
    ("beava_lifetime_op_cap_hit_total", "cap hits of lifetime operators"),
    ("beava_bucket_reclaim_total", "window bucket evictions caused by the 64-bucket cap"),
    ("beava_wal_fsyncs_total", "WAL fsync calls"),
    ("beava_wal_bytes_written_total", "bytes appended to WAL segments"),
    ("beava_wal_quarantined_records_total", "records quarantined by the last recovery"),
    ("beava_pushes_total", "accepted pushes, excluding replays"),
    ("beava_push_replays_total", "dedupe replays"),
    ("beava_shard_skipped_table_updates_total",
     "table updates a shard skipped: their key's slot belongs to another shard (a pushed "
     "event feeding tables keyed by different fields reaches each owner)"),
)
# Families with labels: the sample holds ``{label values: value}`` for each.
LABELLED_COUNTERS = (
    ("beava_pushes_by_event_total",
     "accepted pushes by event, excluding replays (an event's count survives re-registers "
     "and resets)", ["event"]),
    ("beava_push_rejections_total",
     "refused pushes by event and error code (unregistered names: <unregistered>)",
     ["event", "code"]),
    ("beava_shard_wrong_shard_total",
     "requests a shard answered wrong_shard: pushes none of whose tables' keys it owns, "
     "reads of keys it does not own", ["kind"]),
)
LABELLED_GAUGES = (
    ("beava_table_entities", "resident entity rows per table", ["table"]),
)
# Duration histograms (buckets: beava._fast.timing.histogram.BOUNDS): the sample holds a
# Histogram for each, or ``{label values: Histogram}`` for a labelled one.
HISTOGRAMS = (
    ("beava_wal_fsync_duration_seconds",
     "duration of each WAL fsync (one per fsync counted in beava_wal_fsyncs_total), timed by "
     "the thread that fsyncs"),
    ("beava_snapshot_duration_seconds",
     "wall time of each successful snapshot, from its start until the file is durable"),
)
LABELLED_HISTOGRAMS = (
    ("beava_request_duration_seconds",
     "server time per request by command (op); a framed-TCP push is timed with the others of "
     "its turn, from the socket read (or scheduled turn) to the turn's replies written, each "
     "push counted once with that duration; any other request from its handler's start to "
     "its reply; a strict-mode ack's wait for its fsync is not included",
     ["op"]),
)
