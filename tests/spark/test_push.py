"""push_dataframe into one real server from a local[2] Spark session: 200,000 rows whose
features must equal those computed directly from the same rows, the OP_PUSH fallback,
on_error, and the checks made before anything is sent."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install ./spark_connector)")

import beava as bv  # noqa: E402
from beava_spark import (  # noqa: E402
    PushTotals,
    RowsRejectedError,
    ServerCheckError,
    push_dataframe,
)
from tests.support import BeavaProcess  # noqa: E402

ROWS = 200_000
USERS = 2_000


@bv.event
class Txn:
    user_id: str
    merchant: str
    amount: float
    qty: int
    ok: bool
    at: int


@bv.table(key="user_id")
def UserTxn(t: Txn) -> bv.Table:
    return t.group_by("user_id").agg(
        n=bv.count(), total=bv.sum("amount"), avg=bv.mean("amount"), lo=bv.min("qty"),
        hi=bv.max("qty"), ok_n=bv.count(where=bv.col("ok")), latest=bv.max("at"),
        merchants=bv.n_unique("merchant"),
    )


@bv.table
def AllTxn(t: Txn) -> bv.Table:
    return t.agg(rows=bv.count(), qty_sum=bv.sum("qty"))


@pytest.fixture
def app(clean_server: BeavaProcess) -> Iterator[bv.App]:
    with bv.App(f"tcp://{clean_server.addrs['tcp']}") as remote:
        remote.register(Txn, UserTxn, AllTxn)
        yield remote


def url_of(server: BeavaProcess) -> str:
    return f"tcp://{server.addrs['tcp']}"


def txn_frame(spark: Any, rows: int, partitions: int = 2) -> Any:
    """Deterministic rows made by Spark: amounts are multiples of 0.25, so every sum is
    exact whatever the order the server sees them in."""
    from pyspark.sql import functions as f

    i = f.col("id")
    return spark.range(rows, numPartitions=partitions).select(
        f.concat(f.lit("u"), (i * 7919 % USERS).cast("string")).alias("user_id"),
        f.concat(f.lit("m"), (i % 13).cast("string")).alias("merchant"),
        ((i * 31 % 4001) / 4).cast("double").alias("amount"),
        (i * 17 % 101 - 50).cast("int").alias("qty"),
        (i % 3 != 0).alias("ok"),
        f.timestamp_millis(f.lit(1_700_000_000_000) + i * 1000).alias("at"),
    )


def expected_features(rows: list[Any]) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[Any]] = defaultdict(list)
    for row in rows:
        groups[row.user_id].append(row)
    expected = {}
    for user, items in groups.items():
        total = sum(r.amount for r in items)
        expected[user] = {
            "n": len(items), "total": total, "avg": total / len(items),
            "lo": min(r.qty for r in items), "hi": max(r.qty for r in items),
            "ok_n": sum(1 for r in items if r.ok),
            # collect() gives naive local times; timestamp() reads them back as local.
            "latest": max(int(r.at.timestamp()) * 1000 for r in items),
            "merchants": len({r.merchant for r in items}),
        }
    return expected


def read_users(app: bv.App, users: list[str]) -> dict[str, Any]:
    got = {}
    for start in range(0, len(users), 500):
        part = users[start:start + 500]
        got.update(zip(part, app.batch_get([("UserTxn", u) for u in part]), strict=True))
    return got


def test_200k_rows_land_with_the_features_of_the_rows(spark: Any, app: bv.App,
                                                      clean_server: BeavaProcess) -> None:
    df = txn_frame(spark, ROWS).cache()
    rows = df.collect()
    totals = push_dataframe(df, "Txn", url_of(clean_server), batch_size=1000,
                            max_in_flight=8000)
    assert isinstance(totals, PushTotals)
    assert (totals.rows, totals.sent, totals.acknowledged, totals.rejected) == (
        ROWS, ROWS, ROWS, 0)
    assert (totals.partitions, totals.stopped_partitions, totals.rejected_by_code) == (2, 0, {})
    assert totals.servers[url_of(clean_server)].acknowledged == ROWS
    assert totals.seconds > 0 and totals.rows_per_second > 0
    expected = expected_features(rows)
    assert len(expected) == USERS
    got = read_users(app, sorted(expected))
    mismatched = {u: (got[u], expected[u]) for u in expected if got[u] != expected[u]}
    assert not mismatched, list(mismatched.items())[:3]
    assert app.get("AllTxn") == {"rows": ROWS, "qty_sum": float(sum(r.qty for r in rows))}
    df.unpersist()


def test_without_push_many_rows_go_as_single_pushes(spark: Any, app: bv.App, make_proxy: Any,
                                                    clean_server: BeavaProcess) -> None:
    proxy = make_proxy(clean_server.tcp, hide_push_many=True)  # plays beava 0.0.6
    df = txn_frame(spark, 3000)
    totals = push_dataframe(df, "Txn", proxy.url, batch_size=100, max_in_flight=500)
    assert (totals.sent, totals.acknowledged, totals.rejected) == (3000, 3000, 0)
    # the driver's probe and its read of the event's schema, then one per row
    assert proxy.ops == {0x0012: 1, 0x0026: 1, 0x0010: 3000}
    assert app.get("AllTxn") == {"rows": 3000,
                                 "qty_sum": float(sum(i * 17 % 101 - 50 for i in range(3000)))}


def broken_rows(spark: Any) -> Any:
    """4000 rows over 2 partitions; every 100th lacks the required ``qty``."""
    from pyspark.sql import functions as f

    df = txn_frame(spark, 4000)
    return df.withColumn("qty", f.when(f.col("at").cast("long") % 100 == 0, None)
                         .otherwise(f.col("qty")))


def test_on_error_collect_pushes_everything_and_counts_rejections(
        spark: Any, app: bv.App, clean_server: BeavaProcess) -> None:
    totals = push_dataframe(broken_rows(spark), "Txn", url_of(clean_server), batch_size=250,
                            on_error="collect")
    assert (totals.sent, totals.acknowledged, totals.rejected) == (4000, 3960, 40)
    assert totals.rejected_by_code == {"invalid_event": 40}
    assert len(totals.rejections) == 20
    assert all('"qty"' not in r.row and r.code == "invalid_event" for r in totals.rejections)
    assert app.get("AllTxn")["rows"] == 3960


def test_on_error_raise_stops_partitions_and_raises_with_the_totals(
        spark: Any, app: bv.App, clean_server: BeavaProcess) -> None:
    with pytest.raises(RowsRejectedError) as info:
        push_dataframe(broken_rows(spark), "Txn", url_of(clean_server), batch_size=250,
                       max_in_flight=250)
    totals = info.value.totals
    assert totals.stopped_partitions == 2  # each partition holds rejected rows
    assert totals.rejected_by_code == {"invalid_event": totals.rejected}
    assert totals.sent < 4000 and totals.acknowledged == totals.sent - totals.rejected
    assert app.get("AllTxn")["rows"] == totals.acknowledged
    assert str(info.value).startswith(f"{totals.rejected} row(s) rejected (invalid_event x")


def test_unregistered_event_or_unreachable_server_stop_before_sending(
        spark: Any, clean_server: BeavaProcess, make_proxy: Any) -> None:
    proxy = make_proxy(clean_server.tcp)
    df = txn_frame(spark, 10)
    with pytest.raises(ServerCheckError, match=r"event 'Txn' is not registered on tcp://"):
        push_dataframe(df, "Txn", proxy.url)
    assert proxy.ops == {0x0012: 1}  # the empty probe only
    with pytest.raises(ServerCheckError, match=r"cannot reach tcp://127\.0\.0\.1:1: "):
        push_dataframe(df, "Txn", "tcp://127.0.0.1:1")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"url": ["tcp://127.0.0.1:1", "tcp://127.0.0.1:2"]}, "key: required with several"),
    ({"url": "http://127.0.0.1:1"}, "is not a tcp://host:port URL"),
    ({"url": []}, "give at least one"),
    ({"batch_size": 0}, r"batch_size must be in \[1, 10000\]"),
    ({"batch_size": 10_001, "max_in_flight": 20_000}, r"batch_size must be in \[1, 10000\]"),
    ({"batch_size": 100, "max_in_flight": 99}, r"max_in_flight \(99\) must be >= batch_size"),
    ({"on_error": "ignore"}, "on_error must be 'raise' or 'collect'"),
    ({"key": ["user_id", "shop"]}, "key: no column 'shop'"),
])
def test_bad_options_are_refused(spark: Any, kwargs: dict[str, Any], message: str) -> None:
    options = {"url": "tcp://127.0.0.1:1", **kwargs}
    with pytest.raises(ValueError, match=message):
        push_dataframe(txn_frame(spark, 1), "Txn", **options)
