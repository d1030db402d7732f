"""A connection killed mid-partition: the task fails with a clear error, Spark runs it
again, and with a ``dedupe_key`` on the event the retry does not count rows twice."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install ./spark_connector)")

import beava as bv  # noqa: E402
from beava_spark import PushFailedError, push_dataframe  # noqa: E402
from tests.support import BeavaProcess  # noqa: E402

ROWS = 20_000
USERS = 50
DROP_AFTER = 150_000  # request bytes: about a third of one partition's rows


@bv.event(dedupe_key="seq")
class Pay:
    seq: int
    user_id: str
    cents: int


@bv.table(key="user_id")
def PayStats(p: Pay) -> bv.Table:
    return p.group_by("user_id").agg(pays=bv.count(), cents=bv.sum("cents"))


@bv.table
def AllPay(p: Pay) -> bv.Table:
    return p.agg(all_pays=bv.count())


@bv.event
class PayNoDedupe:
    seq: int
    user_id: str
    cents: int


@bv.table
def AllPayNoDedupe(p: PayNoDedupe) -> bv.Table:
    return p.agg(all_plain=bv.count())


@pytest.fixture
def app(clean_server: BeavaProcess) -> Iterator[bv.App]:
    with bv.App(f"tcp://{clean_server.addrs['tcp']}") as remote:
        remote.register(Pay, PayStats, AllPay, PayNoDedupe, AllPayNoDedupe)
        yield remote


def payments(spark: Any) -> Any:
    from pyspark.sql import functions as f

    return spark.range(ROWS, numPartitions=2).select(
        f.col("id").alias("seq"),
        f.concat(f.lit("u"), (f.col("id") % USERS).cast("string")).alias("user_id"),
        (f.col("id") % 997).alias("cents"),
    )


def test_retried_partition_is_not_double_counted_with_dedupe(
        spark: Any, app: bv.App, make_proxy: Any, clean_server: BeavaProcess) -> None:
    proxy = make_proxy(clean_server.tcp, drop_after=DROP_AFTER, max_drops=1)
    totals = push_dataframe(payments(spark), "Pay", proxy.url, batch_size=500,
                            max_in_flight=1000)
    assert proxy.drops == 1
    assert proxy.connections == 4  # check, two tasks, and the retry of the dropped one
    # The accumulator keeps the successful attempts: each row once, either acknowledged as
    # new or, for the rows the dropped attempt had delivered, answered as a replay.
    assert (totals.sent, totals.acknowledged + totals.replays, totals.rejected,
            totals.partitions) == (ROWS, ROWS, 0, 2)
    assert totals.replays_reported and 0 < totals.replays < ROWS
    assert app.get("AllPay") == {"all_pays": ROWS}
    for user in range(USERS):
        cents = sum(i % 997 for i in range(user, ROWS, USERS))
        assert app.get("PayStats", f"u{user}") == {"pays": ROWS // USERS, "cents": float(cents)}


def test_without_dedupe_the_same_fault_counts_rows_twice(
        spark: Any, app: bv.App, make_proxy: Any, clean_server: BeavaProcess) -> None:
    proxy = make_proxy(clean_server.tcp, drop_after=DROP_AFTER, max_drops=1)
    totals = push_dataframe(payments(spark), "PayNoDedupe", proxy.url, batch_size=500,
                            max_in_flight=1000)
    assert proxy.drops == 1 and totals.acknowledged == ROWS
    # The rows the dropped attempt had delivered were applied by both attempts.
    assert ROWS + 1000 <= app.get("AllPayNoDedupe")["all_plain"] < 2 * ROWS


def test_a_partition_that_keeps_failing_fails_the_job_with_the_cause(
        spark: Any, app: bv.App, make_proxy: Any, clean_server: BeavaProcess) -> None:
    proxy = make_proxy(clean_server.tcp, drop_after=DROP_AFTER, max_drops=None)
    with pytest.raises(PushFailedError) as info:
        push_dataframe(payments(spark), "Pay", proxy.url, batch_size=500, max_in_flight=1000)
    # One line: the task's error, out of Spark's long job failure (kept as the cause).
    text = str(info.value)
    assert text.startswith("the push failed: connection to " + proxy.url + " lost after ")
    assert "\n" not in text
    assert "the task fails so that Spark retries the partition" in text
    assert "PartitionPushError: connection to" in str(info.value.__cause__)
    # The totals so far: what every attempt reported before the job failed.
    assert info.value.totals.sent > 0
    assert proxy.drops >= 4  # every attempt of a partition was cut (4 tries in local[2,4])
