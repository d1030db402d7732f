"""docs/operations.md lists every metric /metrics serves, with its type, and nothing else:
the exposition (beava.server.metrics) is the source, the table is checked against it."""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

from beava._fast.timing.histogram import Histogram
from beava.server.metrics import ServerMetrics
from tests.support import REPO


def documented() -> set[tuple[str, str]]:
    """(metric, type) of each row of the metrics table in docs/operations.md."""
    text = (REPO / "docs" / "operations.md").read_text()
    section = text.split("## Health and metrics", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(beava_\w+)` \| (\w+) \|", section, re.MULTILINE))


def served() -> set[tuple[str, str]]:
    """(metric, type) of each family a server renders (counters with their _total)."""
    sample = {"beava_wal_fsync_duration_seconds": Histogram(),
              "beava_snapshot_duration_seconds": Histogram()}
    text = ServerMetrics(lambda: sample, "memory").render().decode()
    return {(f.name + "_total" if f.type == "counter" else f.name, f.type)
            for f in text_string_to_metric_families(text)}


def test_operations_doc_lists_exactly_the_served_metrics() -> None:
    docs, metrics = documented(), served()
    assert len(metrics) > 20
    assert docs - metrics == set(), "documented but not served"
    assert metrics - docs == set(), "served but not documented"
