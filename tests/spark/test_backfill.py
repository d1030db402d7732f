"""beava_spark.backfill against live servers driven by the test clock.

The main test backfills the history of test_historical's pipeline (fraud-team tables, a
dedupe-keyed event with a cold TTL, an event derivation, composite, integer and global
keys) into a durable server that has been receiving the live stream for a while, and
requires its reads to equal a server fed the whole history and live stream in time order,
and ``historical_features`` at the read time; then again after a restart.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install ./spark_connector)")

import beava as bv  # noqa: E402
from beava.dsl.compiler import compile_register_payload  # noqa: E402
from beava.offline import Pipeline  # noqa: E402
from beava_spark import BackfillError, backfill, historical_features  # noqa: E402
from tests.spark.test_historical import (  # noqa: E402
    HOUR,
    SPINE_SCHEMA,
    T0,
    TABLES,
    event_frames,
    fields_of,
    frame,
    fraud_nodes,
    history,
    registry,
    replay_on_server,
    same,
)
from tests.support import BeavaProcess  # noqa: E402

UNTIL = T0 + 48 * HOUR
LIVE_FROM = UNTIL - 6 * HOUR  # the live stream started before UNTIL (history covers that)
READ_AT = T0 + 80 * HOUR  # after every event (click replays run to 79 h): T = READ_AT
USERS = [f"u{i}" for i in range(8)] + ["nobody"]
IPS = [f"10.0.0.{i}" for i in range(5)]


def push_in_order(app: bv.App, events: dict[str, list[dict[str, Any]]]) -> int:
    timeline = sorted((row["ts"], row["seq"], name, row) for name, rows in events.items()
                      for row in rows)
    for ts, _, name, row in timeline:
        app.set_time(ts)
        app.push(name, fields_of(row))
    return len(timeline)


def select(events: dict[str, list[dict[str, Any]]], keep: Any) -> dict[str, list[Any]]:
    return {name: [row for row in rows if keep(row["ts"])] for name, rows in events.items()}


def read_spine() -> list[dict[str, Any]]:
    """Rows at READ_AT covering every key of every table (and keys nobody has)."""
    return [{"rid": i, "ts": READ_AT, "user_id": user, "ip_address": IPS[i % len(IPS)],
             "region": ("north", "south|east")[i % 2], "qty": 1 + i % 4, "label": 0}
            for i, user in enumerate(USERS * 2)]


@pytest.fixture
def durable(tmp_path: Path) -> Iterator[BeavaProcess]:
    server = BeavaProcess("--data-dir", str(tmp_path), memory_only=False)
    yield server
    server.terminate()


def test_backfill_into_a_live_server_equals_the_replayed_server(
        spark: Any, clean_server: BeavaProcess, tmp_path: Path) -> None:

    events, _ = history(seed=5)
    pipeline = Pipeline(registry())
    plans = {name: pipeline.table(name) for name in TABLES}
    keys = {name: plan.keys for name, plan in plans.items()}
    spine = read_spine()
    with bv.App(f"tcp://{clean_server.addrs['tcp']}") as reference:
        reference.register(*registry())
        push_in_order(reference, events)
        expected = replay_on_server(reference, {}, spine, keys)
        reference.reset()

    live = select(events, lambda ts: ts >= LIVE_FROM)
    past = select(events, lambda ts: ts <= UNTIL)
    server = BeavaProcess("--data-dir", str(tmp_path), memory_only=False)
    try:
        with bv.App(f"tcp://{server.addrs['tcp']}") as app:
            app.register(*registry())
            push_in_order(app, live)
            totals = backfill(event_frames(spark, past), registry(),
                              f"tcp://{server.addrs['tcp']}", until_ms=UNTIL,
                              order_col="seq")
            after = {name: sum(1 for r in rows if r["ts"] > UNTIL)
                     for name, rows in live.items()}
            assert totals.until_ms == UNTIL and list(totals.tables) == list(TABLES)
            assert totals.events >= sum(len(rows) for rows in past.values())
            assert all(t.entities > 0 and t.lsn > 0 for t in totals.tables.values())
            # the live pushes after UNTIL were applied on top (dedupe replays of clicks
            # were never written to the WAL)
            tails = {name: t.tail_events for name, t in totals.tables.items()}
            assert (tails["TxnByUser"], tails["LoginByUser"]) == (after["Txn"], after["Login"])
            assert 0.8 * after["Click"] < tails["UserClicks"] <= after["Click"]
            got = replay_on_server(app, {}, spine, keys)
        assert got == expected
        out = historical_features(frame(spark, spine, SPINE_SCHEMA),
                                  event_frames(spark, events), registry(),
                                  tables=list(TABLES), order_col="seq")
        rows = {row["rid"]: row.asDict() for row in out.collect()}
        nonnull = 0
        for source in spine:
            for plan in plans.values():
                for feature in plan.features:
                    mine = rows[source["rid"]][feature.name]
                    assert same(feature.kind, mine, got[source["rid"]].get(feature.name)), (
                        source, feature.name)
                    nonnull += mine is not None
        assert nonnull > 100
        server.terminate()
        server = BeavaProcess("--data-dir", str(tmp_path), memory_only=False)
        with bv.App(f"tcp://{server.addrs['tcp']}") as app:
            assert replay_on_server(app, {}, spine, keys) == expected
    finally:
        server.terminate()


def test_history_in_the_past_leaves_the_windows_empty(spark: Any, durable: BeavaProcess
                                                      ) -> None:
    """The user trial: 30 days of transactions loaded by pushing count as arriving now;
    backfilled, they sit at their own times and the short windows read 0."""
    start = int(datetime.datetime(2025, 10, 27, tzinfo=datetime.UTC).timestamp() * 1000)
    day = 24 * HOUR
    rows = [(start + i * 27 * day // 20, "u1", 50.0 + i) for i in range(21)]
    txns = spark.createDataFrame(
        [(ts, ts, user, "c1", "d1", "10.0.0.1", "b1", "m1", amount, "USD", "5411", "US",
          "US", "US", 40.0, -70.0, 0, 1, "credit", "s1") for ts, user, amount in rows],
        "ts long, event_time long, user_id string, card_fp string, device_id string, "
        "ip_address string, ip_block string, merchant_id string, amount double, "
        "currency string, mcc string, card_country string, ip_country string, "
        "billing_country string, lat double, lon double, declined long, is_3ds long, "
        "card_funding string, ssn_hash string")
    url = f"tcp://{durable.addrs['tcp']}"
    with bv.App(url) as app:
        app.register(*fraud_nodes())
        totals = backfill({"Txn": txns}, {"nodes": fraud_nodes()}, url, tables=["TxnByUser"])
        assert totals.until_ms == rows[-1][0] and totals.tables["TxnByUser"].events == 21
        row = app.get("TxnByUser", "u1")  # the wall clock: years after the history
    assert row["txn_count_lifetime"] == 21
    assert row["sum_amount_lifetime"] == sum(amount for _, _, amount in rows)
    assert row["txn_count_1h"] == 0 and row["txn_count_24h"] == 0


def test_refusals_are_errors(spark: Any, durable: BeavaProcess) -> None:
    url = f"tcp://{durable.addrs['tcp']}"
    txns = spark.createDataFrame([(T0, "u1", 1.0)], "ts long, user_id string, ms double")
    with bv.App(url) as app:
        app.register(Visit, Visits)
        with pytest.raises(ValueError, match="unknown table"):
            backfill({"Visit": txns}, [Visit, Visits], url, tables=["Nope"])
        other = json.loads(json.dumps(compile_register_payload(Visit, Visits))
                           .replace('"1h"', '"2h"'))
        with pytest.raises(BackfillError) as info:  # the server defines Visits otherwise
            backfill({"Visit": txns}, other, url)
        assert (info.value.code, info.value.table) == ("backfill_registry_mismatch", "Visits")
        assert app.get("Visits", "u1") == {}
        totals = backfill({"Visit": txns}, [Visit, Visits], durable.http_url)  # over HTTP
        assert totals.tables["Visits"].entities == 1
        assert app.get("Visits", "u1")["visits"] == 1


def test_a_backfill_that_would_drop_live_entities_is_refused(spark: Any,
                                                              durable: BeavaProcess) -> None:
    """The user trial: a history of 2 events for card h2 installed over a server whose
    card c2 had live pushes before until_ms left c2 reading {} without a word."""
    url = f"tcp://{durable.addrs['tcp']}"
    history = spark.createDataFrame([(T0 + 10_000, "h2", 1.0), (T0 + 20_000, "h2", 2.0)],
                                    "ts long, user_id string, ms double")
    with bv.App(url) as app:
        app.register(Visit, Visits)
        for i in range(3):
            app.set_time(T0 + i * 1000)
            app.push("Visit", {"user_id": "c2", "ms": 5.0})
        preview = backfill({"Visit": history}, [Visit, Visits], url, dry_run=True)
        counts = preview.tables["Visits"]
        assert preview.dry_run and counts.lsn == 0
        assert (counts.kept, counts.changed, counts.created, counts.dropped) == (0, 0, 1, 1)
        with pytest.raises(BackfillError) as info:
            backfill({"Visit": history}, [Visit, Visits], url)
        assert info.value.code == "backfill_would_drop"
        assert (info.value.error["dropped"], info.value.error["keys"]) == (
            1, [{"user_id": "c2"}])
        assert "would drop 1 entities" in str(info.value)
        assert app.get("Visits", "c2")["visits"] == 3 and app.get("Visits", "h2") == {}
        done = backfill({"Visit": history}, [Visit, Visits], url, drop_missing=True)
        assert done.tables["Visits"].dropped == 1 and done.tables["Visits"].lsn > 0
        assert app.get("Visits", "c2") == {} and app.get("Visits", "h2")["visits"] == 2


@bv.event
class Visit:
    user_id: str
    ms: float


@bv.table(key="user_id")
def Visits(v: Visit) -> bv.Table:
    return v.group_by("user_id").agg(visits=bv.count(), visits_1h=bv.count(window="1h"))



def test_a_table_is_replayed_in_key_disjoint_parts(spark: Any, durable: BeavaProcess) -> None:
    """Each task replays the keys of its partition and sends their state as one part; the
    server joins the parts. A table without keys stays one part."""
    url = f"tcp://{durable.addrs['tcp']}"
    users = [f"u{i}" for i in range(40)]
    visits = spark.createDataFrame([(T0 + i * 1000, users[i % 40], float(i))
                                    for i in range(400)], "ts long, user_id string, ms double")
    with bv.App(url) as app:
        app.register(Visit, Visits, AllVisits)
        totals = backfill({"Visit": visits.repartition(4)}, [Visit, Visits, AllVisits], url)
        assert totals.tables["Visits"].parts > 1 and totals.tables["AllVisits"].parts == 1
        assert totals.tables["Visits"].entities == 40 and totals.tables["Visits"].events == 400
        assert totals.events == 800
        app.set_time(T0 + 400 * 1000)
        assert [app.get("Visits", user)["visits"] for user in users] == [10] * 40
        assert app.get("AllVisits")["all_visits"] == 400


@bv.table
def AllVisits(v: Visit) -> bv.Table:
    return v.agg(all_visits=bv.count())


def test_the_uploads_are_kept_open_while_the_job_runs(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """The server drops an upload idle for 10 minutes: while the job runs, the driver
    asks for the status of every upload now and then."""
    import importlib

    module = importlib.import_module("beava_spark.backfill")

    calls: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(module, "KEEP_OPEN_SECONDS", 0.01)
    monkeypatch.setattr(module, "_request", lambda client, table, body: calls.append(
        (table, body)) or {})
    with module._KeptOpen("tcp://127.0.0.1:1", 1.0, {"A": "up-a", "B": "up-b"}):
        deadline = time.monotonic() + 30
        while len(calls) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert len(calls) >= 4
    assert {(table, body["action"], body["upload"]) for table, body in calls} == {
        ("A", "status", "up-a"), ("B", "status", "up-b")}


def test_the_newest_event_time_is_found_in_one_spark_job(spark: Any) -> None:
    """Without until_ms the backfill runs until the newest time of every event feeding
    the tables (epoch ms or timestamps, nulls and empty events ignored), found in one
    Spark query whatever the number of events: as many jobs for four events as for one."""
    import importlib

    module = importlib.import_module("beava_spark.backfill")
    newest = T0 + 5 * HOUR
    frames = {
        "A": spark.createDataFrame([(T0,), (None,), (T0 + HOUR,)], "ts long"),
        "B": spark.createDataFrame([(datetime.datetime.fromtimestamp(newest / 1000,
                                                                     datetime.UTC),)],
                                   "ts timestamp"),
        "C": spark.createDataFrame([], "ts long"),
        "D": spark.createDataFrame([(None,)], "ts long"),
    }
    context = spark.sparkContext

    def jobs(events: list[str]) -> tuple[int, int]:
        group = f"newest-of-{len(events)}"
        context.setJobGroup(group, "the newest event time")
        try:
            found = module._newest(frames, events, "ts")
        finally:
            context.setJobGroup("", "")
        return found, len(context.statusTracker().getJobIdsForGroup(group))

    (one, one_jobs), (every, every_jobs) = jobs(["A"]), jobs(["A", "B", "C", "D"])
    assert (one, every) == (T0 + HOUR, newest)
    assert every_jobs == one_jobs
    with pytest.raises(ValueError, match="no time to backfill until"):
        module._newest(frames, ["C", "D"], "ts")
