"""The Grafana dashboard in docs/grafana: every metric its queries name is one the server
exposes (the catalogue in beava.server.metrics), it covers the metrics operators watch,
and every panel reads the dashboard's Prometheus data source variable."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from beava.server import metrics
from tests.support import REPO

DASHBOARD = REPO / "docs" / "grafana" / "beava.json"
_METRIC = re.compile(r"\bbeava_[a-zA-Z0-9_]+")
# series a histogram family exposes besides its own name
_HISTOGRAM_SERIES = ("_bucket", "_count", "_sum")


def catalogue() -> set[str]:
    """Every metric name of the catalogue: the first item of each entry of its tables
    (GAUGES, COUNTERS, LABELLED_COUNTERS, ... and any table of that shape added later)."""
    tables = [value for name, value in vars(metrics).items()
              if name.isupper() and isinstance(value, tuple)]
    return {entry[0] for table in tables for entry in table
            if isinstance(entry, tuple) and str(entry[0]).startswith("beava_")}


def load() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return doc


def panels(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in doc["panels"]:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row holds its panels


def queries(doc: dict[str, Any]) -> list[str]:
    exprs = [target["expr"] for panel in panels(doc) for target in panel.get("targets", [])]
    for variable in doc["templating"]["list"]:
        query = variable.get("query")
        if variable["type"] == "query":
            exprs.append(query["query"] if isinstance(query, dict) else query)
    return exprs


def metric_names(exprs: list[str]) -> set[str]:
    return {name for expr in exprs for name in _METRIC.findall(expr)}


def known(name: str, names: set[str]) -> bool:
    return name in names or any(
        name.endswith(suffix) and name.removesuffix(suffix) in names
        for suffix in _HISTOGRAM_SERIES)


def test_every_metric_in_the_dashboard_is_in_the_catalogue() -> None:
    names = catalogue()
    assert {"beava_pushes_total", "beava_push_rejections_total",
            "beava_table_entities"} <= names
    used = metric_names(queries(load()))
    assert used, "no beava metric found in the dashboard's queries"
    assert sorted(name for name in used if not known(name, names)) == []


def test_the_dashboard_covers_what_operators_watch() -> None:
    used = metric_names(queries(load()))
    for name in ("beava_pushes_total", "beava_push_rejections_total", "beava_table_entities",
                 "beava_entity_count_resident", "beava_wal_fsyncs_total",
                 "beava_wal_last_fsync_seconds", "beava_snapshot_last_duration_seconds",
                 "beava_pushes_by_event_total", "beava_request_duration_seconds_bucket",
                 "beava_wal_fsync_duration_seconds_bucket",
                 "beava_snapshot_duration_seconds_bucket"):
        assert name in used, name
    rejections = [expr for expr in queries(load()) if "beava_push_rejections_total" in expr]
    assert any("by (event, code)" in expr for expr in rejections)
    assert any("by (table)" in expr for expr in queries(load())
               if "beava_table_entities" in expr)


def test_every_panel_reads_the_prometheus_variable() -> None:
    doc = load()
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    source = {"type": "prometheus", "uid": "${datasource}"}
    ids = []
    for panel in panels(doc):
        ids.append(panel["id"])
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == source, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == source, panel["title"]
            assert '{instance=~"$instance"}' in target["expr"], panel["title"]
    assert len(ids) == len(set(ids))
