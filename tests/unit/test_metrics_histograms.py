"""Duration histograms (beava._fast.timing.histogram), their Prometheus rendering
(beava.server.metrics), request timing (beava.protocol.request_timings) and the accepted
pushes per event (beava._fast.intake.push_counts, FeatureStore)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from beava._fast.intake.push_counts import PushCounts
from beava._fast.timing.histogram import BOUNDS, Histogram
from beava.catalogue.errors import BeavaError
from beava.engine.store import FeatureStore
from beava.protocol.reply_slots import PendingReply
from beava.protocol.request_timings import RequestTimings
from beava.server.metrics import ServerMetrics, histogram_buckets


def test_bounds_are_log_spaced_from_50_us_to_10_s() -> None:
    assert BOUNDS[0] == 0.00005 and BOUNDS[-1] == 10.0
    ratios = [b / a for a, b in zip(BOUNDS, BOUNDS[1:], strict=False)]
    assert all(2 <= r <= 2.5 for r in ratios)


@pytest.mark.parametrize("seconds,slot", [
    (0.0, 0), (0.00001, 0), (0.00005, 0),    # a bound belongs to its own bucket (le)
    (0.0000501, 1), (0.0001, 1), (0.0003, 3), (0.001, 4), (0.0011, 5), (9.99, 16),
    (10.0, 16), (10.01, 17), (3600.0, 17),   # above the last bound: the +Inf bucket only
])
def test_bucketing(seconds: float, slot: int) -> None:
    h = Histogram()
    h.observe(seconds)
    counts, total, count = h.read()
    assert len(counts) == len(BOUNDS) + 1
    assert counts == [1 if i == slot else 0 for i in range(len(counts))]
    assert (total, count) == (seconds, 1)


def test_sum_and_count_with_repeated_observations() -> None:
    h = Histogram()
    h.observe(0.002, 10)  # a turn of ten pushes that took 2 ms: ten observations of 2 ms
    h.observe(0.0004)
    counts, total, count = h.read()
    assert count == 11 and sum(counts) == 11
    assert counts[5] == 10 and counts[3] == 1
    assert total == pytest.approx(0.0204)


def test_read_is_a_copy() -> None:
    h = Histogram()
    h.observe(1.0)
    counts, _, _ = h.read()
    counts[0] = 99
    assert h.read()[0][0] == 0


def test_buckets_are_cumulative_with_inf_last() -> None:
    h = Histogram()
    for seconds in (0.00002, 0.0002, 0.0002, 0.3, 42.0):
        h.observe(seconds)
    buckets, total = histogram_buckets(h)
    assert [le for le, _ in buckets] == [repr(b) for b in BOUNDS] + ["+Inf"]
    by_le = dict(buckets)
    assert by_le["5e-05"] == 1 and by_le["0.00025"] == 3 and by_le["0.5"] == 4
    assert by_le["10.0"] == 4 and by_le["+Inf"] == 5
    assert total == pytest.approx(42.3004)


def _sample(**extra: Any) -> dict[str, Any]:
    return {"beava_wal_fsync_duration_seconds": Histogram(),
            "beava_snapshot_duration_seconds": Histogram(),
            "beava_request_duration_seconds": {}, **extra}


def _families(metrics: ServerMetrics) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}


def test_rendered_as_prometheus_histograms() -> None:
    fsyncs, get, scan = Histogram(), Histogram(), Histogram()
    fsyncs.observe(0.0007)
    fsyncs.observe(0.003)
    get.observe(0.00012, 3)
    sample = _sample(beava_wal_fsync_duration_seconds=fsyncs,
                     beava_request_duration_seconds={("get",): get, ("scan",): scan})
    text = ServerMetrics(lambda: sample, "strict").render().decode()
    assert "# TYPE beava_wal_fsync_duration_seconds histogram" in text
    assert "# TYPE beava_request_duration_seconds histogram" in text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for s in families["beava_wal_fsync_duration_seconds"].samples}
    assert samples[("beava_wal_fsync_duration_seconds_bucket", (("le", "0.0005"),))] == 0
    assert samples[("beava_wal_fsync_duration_seconds_bucket", (("le", "0.001"),))] == 1
    assert samples[("beava_wal_fsync_duration_seconds_bucket", (("le", "+Inf"),))] == 2
    assert samples[("beava_wal_fsync_duration_seconds_count", ())] == 2
    assert samples[("beava_wal_fsync_duration_seconds_sum", ())] == pytest.approx(0.0037)
    requests = families["beava_request_duration_seconds"].samples
    # a command that never ran has no series
    assert {s.labels["op"] for s in requests} == {"get"}
    count = next(s for s in requests if s.name.endswith("_count"))
    assert count.value == 3
    le = {s.labels["le"]: s.value for s in requests if s.name.endswith("_bucket")}
    assert le["0.0001"] == 0 and le["0.00025"] == 3


def test_rendered_pushes_by_event() -> None:
    sample = _sample(beava_pushes_by_event_total={("Txn",): 5, ("Click",): 0})
    family = _families(ServerMetrics(lambda: sample, "memory"))["beava_pushes_by_event"]
    assert family.type == "counter"
    assert {s.labels["event"]: s.value for s in family.samples} == {"Txn": 5, "Click": 0}


def test_request_timings_cover_the_command_table() -> None:
    timings = RequestTimings()
    assert {"push", "push_many", "get", "batch_get", "register", "scan"} <= set(timings.by_name)
    assert timings.by_op[0x0010] is timings.push is timings.by_name["push"]


def test_a_sliced_reply_is_timed_until_it_resolves() -> None:
    timings = RequestTimings()
    hist = timings.by_name["batch_get"]
    slot = PendingReply(holds_all=True)
    timings.finish(hist, 0.0, slot)
    assert hist.read()[2] == 0
    slot.resolve(b"done")
    assert hist.read()[2] == 1
    # a reply ready now, or one only waiting for durability, is timed at once
    timings.finish(hist, 0.0, b"reply")
    timings.finish(hist, 0.0, PendingReply())
    assert hist.read()[2] == 3


def test_push_counts_array() -> None:
    counts = PushCounts(["A", "B"])
    counts.add(1)
    counts.add(1)
    assert counts.totals() == {"A": 0, "B": 2}
    with pytest.raises(IndexError):
        counts.add(2)
    with pytest.raises(IndexError):
        counts.add(-1)
    assert PushCounts([]).totals() == {}


def _nodes(*events: str) -> bytes:
    return json.dumps({"nodes": [
        {"kind": "event", "name": name, "schema": {"fields": {"k": "str"}}}
        for name in events]}).encode()


def test_store_counts_per_event_across_registry_changes() -> None:
    store = FeatureStore()
    assert store.register(_nodes("A", "B"))[0] == 200
    for event in ("A", "A", "B"):
        store.push(event, {"k": "x"})
    with pytest.raises(BeavaError):
        store.push("A", {})  # refused: not counted
    assert store.pushes_by_event() == {"A": 2, "B": 1}
    # a re-register re-indexes the events (C first): the counts stay with their names
    assert store.register(_nodes("C", "A", "B"))[0] == 200
    assert store.checkers["A"].index == 1
    store.push("A", {"k": "x"})
    store.push("C", {"k": "x"})
    assert store.pushes_by_event() == {"A": 3, "B": 1, "C": 1}
    # a reset drops every event, not the counts
    store.reset()
    assert store.checkers == {}
    assert store.pushes_by_event() == {"A": 3, "B": 1, "C": 1}
    assert store.pushes_total == 5
