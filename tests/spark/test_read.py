"""``spark.read.format("beava")``: a table's current rows read back through the server's
table scan equal GETs of every key, on the shared local[2] session; schema, options and
failures before Spark runs a task."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install ./spark_connector)")
pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install ./spark_connector)")

import beava as bv  # noqa: E402
import beava_spark  # noqa: E402
from beava_client import TcpClient  # noqa: E402
from beava_spark.errors import ServerCheckError  # noqa: E402
from tests.support import BeavaProcess  # noqa: E402

USERS = 1500


@bv.event
class Pay:
    user_id: str
    merchant: str
    amount: float
    units: int


@bv.table(key="user_id")
def UserSpend(p: Pay) -> bv.Table:
    return p.group_by("user_id").agg(
        n=bv.count(),
        total=bv.sum("amount"),
        most_units=bv.max("units"),
        big=bv.has_seen(where=bv.col("amount") > 90),
        last_merchant=bv.last("merchant"),
        recent=bv.last_n("amount", n=3),
        top=bv.top_k("merchant", k=2),
        last_at=bv.last_seen(),
    )


@bv.table(key=["merchant", "units"])
def MerchantUnits(p: Pay) -> bv.Table:
    return p.group_by("merchant", "units").agg(mu_n=bv.count(), mu_total=bv.sum("amount"))


@bv.table
def AllPay(p: Pay) -> bv.Table:
    return p.agg(pays=bv.count())


@pytest.fixture
def loaded(clean_server: BeavaProcess, spark: Any) -> Iterator[TcpClient]:
    beava_spark.register(spark)
    with bv.App(f"tcp://{clean_server.addrs['tcp']}") as app:
        app.register(Pay, UserSpend, MerchantUnits, AllPay)
    with TcpClient(*clean_server.tcp) as client:
        bodies = [{"user_id": f"u{i % USERS}", "merchant": f"m|{i % 7}",
                   "amount": float(i % 101), "units": i % 4} for i in range(2 * USERS + 77)]
        assert client.push_pipelined("Pay", bodies)["acks"] == len(bodies)
        yield client


def read(spark: Any, server: BeavaProcess, table: str, **options: str) -> Any:
    reader = spark.read.format("beava").option("url", f"tcp://{server.addrs['tcp']}")
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.option("table", table).load()


def as_get(row: dict[str, Any], json_columns: tuple[str, ...]) -> dict[str, Any]:
    return {k: json.loads(v) if k in json_columns and v is not None else v
            for k, v in row.items()}


def test_read_back_equals_gets_of_every_key(spark: Any, loaded: TcpClient,
                                            clean_server: BeavaProcess) -> None:
    df = read(spark, clean_server, "UserSpend", page_size="200", partitions="3")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("user_id", "string"), ("big", "boolean"), ("last_at", "bigint"),
        ("last_merchant", "string"), ("most_units", "bigint"), ("n", "bigint"),
        ("recent", "string"), ("top", "string"), ("total", "double")]
    assert df.rdd.getNumPartitions() == 3
    rows = [r.asDict() for r in df.collect()]
    assert len(rows) == USERS
    assert sorted(r["user_id"] for r in rows) == sorted(f"u{i}" for i in range(USERS))
    got = {r["user_id"]: as_get({k: v for k, v in r.items() if k != "user_id"},
                                ("recent", "top")) for r in rows}
    keys = sorted(got)
    expected = loaded.batch_get([("UserSpend", k) for k in keys])
    assert [got[k] for k in keys] == expected
    assert got["u0"]["n"] == 3 and got["u100"]["n"] == 2


def test_composite_keys_and_global_table(spark: Any, loaded: TcpClient,
                                         clean_server: BeavaProcess) -> None:
    rows = [r.asDict() for r in read(spark, clean_server, "MerchantUnits").collect()]
    assert len(rows) == 28  # 7 merchants x 4 unit counts
    assert {type(r["units"]) for r in rows} == {int}
    keys = sorted((r["merchant"], r["units"]) for r in rows)
    expected = loaded.batch_get([("MerchantUnits", list(k)) for k in keys])
    by_key = {(r["merchant"], r["units"]): {"mu_n": r["mu_n"], "mu_total": r["mu_total"]}
              for r in rows}
    assert [by_key[k] for k in keys] == expected
    assert [r.asDict() for r in read(spark, clean_server, "AllPay").collect()] == [
        loaded.get("AllPay")]


def test_schema_subset_and_sql(spark: Any, loaded: TcpClient,
                               clean_server: BeavaProcess) -> None:
    df = (spark.read.format("beava").schema("user_id string, n long")
          .option("url", f"tcp://{clean_server.addrs['tcp']}").option("table", "UserSpend")
          .load())
    assert df.columns == ["user_id", "n"]
    assert df.groupBy("n").count().orderBy("n").collect() == [(2, USERS - 77), (3, 77)]
    with pytest.raises(Exception, match="no column 'nope'"):
        (spark.read.format("beava").schema("nope long")
         .option("url", f"tcp://{clean_server.addrs['tcp']}").option("table", "UserSpend")
         .load().collect())


def test_bad_options_and_tables_fail_before_any_task(spark: Any, loaded: TcpClient,
                                                      clean_server: BeavaProcess) -> None:
    with pytest.raises(Exception, match="not registered") as info:
        read(spark, clean_server, "Pay").collect()
    assert "Pay" in str(info.value)
    with pytest.raises(Exception, match="did you mean 'page_size'"):
        read(spark, clean_server, "UserSpend", page_sise="5").collect()
    with pytest.raises(Exception, match="page_size: must be from 1 to 10000"):
        read(spark, clean_server, "UserSpend", page_size="0").collect()
    with pytest.raises(Exception, match="cannot read from"):
        spark.read.format("beava").option("url", "tcp://127.0.0.1:9").option(
            "table", "UserSpend").load().collect()


def test_driver_helpers_without_spark(loaded: TcpClient, clean_server: BeavaProcess) -> None:
    from beava_spark.reader import ReadOptions, plan_read, read_range, table_columns

    url = f"tcp://{clean_server.addrs['tcp']}"
    options = ReadOptions.parse({"url": url, "table": "UserSpend", "partitions": "4",
                                 "pageSize": "128"})
    assert options.page_size == 128 and options.partitions == 4
    columns, ranges = plan_read(options)
    assert len(ranges) == 4 and ranges[-1].until is None
    ids = [u for r in ranges for batch in read_range(columns, "UserSpend", r, 128, 10.0)
           for u in batch.column(0).to_pylist()]
    assert ids == [f"u{i}" for i in range(USERS)]
    with pytest.raises(ServerCheckError, match="not registered"):
        table_columns(ReadOptions.parse({"url": url, "table": "Nope"}))
