"""``format("beava")``: batch writes (commit totals, options, checks before anything is
sent) and streaming writes (per micro-batch commits; a micro-batch run again after a
crash is not counted twice when the event has a dedupe_key, and is without one)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install ./spark_connector)")
pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install ./spark_connector)")

import beava as bv  # noqa: E402
import beava_spark  # noqa: E402
from tests.support import BeavaProcess  # noqa: E402

ROWS = 3000


@bv.event(dedupe_key="seq")
class Sale:
    seq: int
    shop: str
    amount: float
    day: str | None


@bv.table(key="shop")
def ShopSales(s: Sale) -> bv.Table:
    return s.group_by("shop").agg(sales=bv.count(), amount=bv.sum("amount"))


@bv.table
def AllSales(s: Sale) -> bv.Table:
    return s.agg(all_sales=bv.count())


@bv.event
class Tick:
    seq: int
    shop: str


@bv.table
def AllTicks(t: Tick) -> bv.Table:
    return t.agg(ticks=bv.count())


@pytest.fixture
def app(clean_server: BeavaProcess, spark: Any) -> Iterator[bv.App]:
    beava_spark.register(spark)
    with bv.App(f"tcp://{clean_server.addrs['tcp']}") as remote:
        remote.register(Sale, ShopSales, AllSales, Tick, AllTicks)
        yield remote


def url_of(server: BeavaProcess) -> str:
    return f"tcp://{server.addrs['tcp']}"


def sales(spark: Any, rows: int = ROWS) -> Any:
    from pyspark.sql import functions as f

    return spark.range(rows, numPartitions=2).select(
        f.col("id").alias("seq"),
        f.concat(f.lit("s"), (f.col("id") % 5).cast("string")).alias("shop"),
        (f.col("id") % 100 / 4).alias("amount"),
        f.when(f.col("id") % 3 == 0, f.lit(None)).otherwise(
            f.date_add(f.lit("2024-01-01").cast("date"), (f.col("id") % 7).cast("int"))
        ).alias("day"),
    )


def test_batch_write_commits_totals(spark: Any, app: bv.App,
                                    clean_server: BeavaProcess) -> None:
    (sales(spark).write.format("beava").option("url", url_of(clean_server))
     .option("event", "Sale").option("batch_size", "250").mode("append").save())
    result = beava_spark.last_write()
    assert result is not None and result.batch_id is None and not result.failed
    totals = result.totals
    assert (totals.rows, totals.sent, totals.acknowledged + totals.replays, totals.rejected,
            totals.partitions) == (ROWS, ROWS, ROWS, 0, 2)
    # The summary line the commit wrote to the driver's stderr.
    assert re.search(rf"beava-spark: write of event Sale to {url_of(clean_server)}: rows "
                     rf"3,000  sent 3,000  acknowledged 3,000  replays (0|\?)  rejected 0  "
                     rf"[\d.]+ s  [\d,]+ rows/s$", result.line), result.line
    for shop in range(5):
        mine = range(shop, ROWS, 5)
        assert app.get("ShopSales", f"s{shop}") == {
            "sales": len(mine), "amount": sum(i % 100 / 4 for i in mine)}


def test_batch_write_sends_the_values_push_dataframe_sends(
        spark: Any, app: bv.App, clean_server: BeavaProcess) -> None:
    from pyspark.sql import functions as f

    # Declared as a str field: the date column is sent as YYYY-MM-DD text.
    df = sales(spark, 6).withColumn("amount", f.col("amount").cast("decimal(10,2)"))
    (df.write.format("beava").option("url", url_of(clean_server)).option("event", "Sale")
     .option("event_schema", "seq:i64, shop:str, amount:f64, day:str?")
     .option("schema", "day=str").mode("append").save())
    assert app.get("AllSales") == {"all_sales": 6}
    assert app.get("ShopSales", "s0") == {"sales": 2, "amount": 0.0 + 1.25}


def test_options_and_columns_are_checked_before_anything_is_sent(
        spark: Any, app: bv.App, clean_server: BeavaProcess) -> None:
    from pyspark.sql import functions as f

    writer = sales(spark).write.format("beava").mode("append")
    with pytest.raises(Exception, match="needs the options url"):
        writer.option("event", "Sale").save()
    with pytest.raises(Exception, match=r"only appends events: use mode\('append'\)"):
        (sales(spark).write.format("beava").option("url", url_of(clean_server))
         .option("event", "Sale").mode("overwrite").save())
    bad = sales(spark).withColumn("amount", f.col("amount").cast("string")) \
        .withColumn("event_time", f.lit(1))
    with pytest.raises(Exception) as info:
        (bad.write.format("beava").option("url", url_of(clean_server)).option("event", "Sale")
         .option("event_schema", "seq:i64,shop:str,amount:f64,day:str?").mode("append").save())
    text = str(info.value)
    assert "column 'amount' (string, sent as str) does not fit field 'amount' of event Sale, " \
           "declared f64" in text
    assert "column 'event_time' is not a field of event Sale" in text
    # Without event_schema, the columns are checked against the event the server has
    # registered, before the first row too.
    url = url_of(clean_server)
    with pytest.raises(Exception) as info:
        (bad.drop("event_time").withColumnRenamed("shop", "shops").write.format("beava")
         .option("url", url).option("event", "Sale").mode("append").save())
    text = str(info.value)
    assert f"the DataFrame does not fit event Sale (as registered on {url})" in text
    assert "column 'amount' (string, sent as str) does not fit field 'amount' of event Sale, " \
           "declared f64" in text
    assert "column 'shops' is not a field of event Sale (string column; did you mean field " \
           "'shop', declared str?" in text
    assert app.get("AllSales").get("all_sales", 0) == 0


def _stream(spark: Any, source: Path, checkpoint: Path, url: str, event: str,
            columns: str) -> None:
    query = (spark.readStream.schema(columns).json(str(source))
             .writeStream.format("beava").option("url", url).option("event", event)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
             .start())
    query.awaitTermination(120)
    assert query.exception() is None


def test_streaming_write_commits_micro_batches_and_replays_after_a_crash(
        spark: Any, app: bv.App, clean_server: BeavaProcess, tmp_path: Path) -> None:
    source = tmp_path / "in"
    source.mkdir()
    for part in range(2):
        with (source / f"part-{part}.json").open("w") as fh:
            for i in range(part * 500, part * 500 + 500):
                fh.write(json.dumps({"seq": i, "shop": f"s{i % 5}", "amount": 1.0}) + "\n")
    url = url_of(clean_server)
    for event, columns in (("Sale", "seq long, shop string, amount double"),
                           ("Tick", "seq long, shop string")):
        checkpoint = tmp_path / f"checkpoint-{event}"
        _stream(spark, source, checkpoint, url, event, columns)
        last = beava_spark.last_write()
        assert last is not None and last.batch_id == 0 and last.event == event
        assert last.totals.sent == 1000
        # A crash after the sink wrote micro-batch 0 and before Spark logged its commit:
        # the restarted query runs micro-batch 0 again.
        (checkpoint / "commits" / "0").unlink()
        (checkpoint / "commits" / ".0.crc").unlink(missing_ok=True)
        _stream(spark, source, checkpoint, url, event, columns)
        again = beava_spark.last_write()
        assert again is not None and again.batch_id == 0 and again.totals.sent == 1000
    # With a dedupe_key the second delivery is answered as replays: counted once.
    assert app.get("AllSales") == {"all_sales": 1000}
    # Without one, delivery is at-least-once: the replayed micro-batch counts twice.
    assert app.get("AllTicks") == {"ticks": 2000}
