"""Spark types -> event fields: defaults, ``schema=`` overrides, the exact values that
leave the JVM (in a non-UTC session time zone), refusals before anything is sent, and
nulls for optional and required fields on a real server."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install ./spark_connector)")

import beava as bv  # noqa: E402
from beava_spark import ConversionError, plan_conversion, push_dataframe  # noqa: E402
from beava_spark.driver import json_lines  # noqa: E402
from tests.support import BeavaProcess  # noqa: E402

UTC = dt.UTC
ALL_TYPES = ("b byte, s short, i int, l long, f float, d double, nan double, dec decimal(10,2), "
             "dec0 decimal(18,0), txt string, flag boolean, day date, "
             "ts timestamp, ntz timestamp_ntz, nothing void")
ROW = (1, -2, 3, 2**40, 0.1, 1.5, float("nan"), decimal.Decimal("12.34"), decimal.Decimal(7),
       "a|b é", True, dt.date(2024, 1, 2),
       dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
       dt.datetime(2024, 1, 2, 3, 4, 5, 123456), None)
TS_MS = 1704164645123  # 2024-01-02T03:04:05.123Z
DAY_MS = 1704153600000  # 2024-01-02T00:00:00Z


@pytest.fixture
def new_york(spark: Any) -> Iterator[Any]:
    """The session time zone set far from UTC: conversions must not depend on it."""
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    yield spark
    spark.conf.set("spark.sql.session.timeZone", before)


def bodies(df: Any, schema: dict[str, str] | None = None) -> list[dict[str, Any]]:
    plan = plan_conversion(df.schema, schema)
    return [json.loads(line) for line in json_lines(plan.bodies(df)).collect()]


def all_types(spark: Any) -> Any:
    from pyspark.sql import functions as f

    # void cannot be given to createDataFrame: add it as a null literal.
    schema = ALL_TYPES.replace(", nothing void", "")
    return spark.createDataFrame([ROW[:-1]], schema).withColumn("nothing", f.lit(None))


def test_default_targets_per_spark_type(spark: Any) -> None:
    plan = plan_conversion(all_types(spark).schema)
    assert plan.wire_types() == {
        "b": "i64", "s": "i64", "i": "i64", "l": "i64", "f": "f64", "d": "f64", "nan": "f64",
        "dec": "f64", "dec0": "f64", "txt": "str", "flag": "bool", "day": "i64", "ts": "i64",
        "ntz": "i64", "nothing": "str",
    }


def test_char_and_varchar_columns_are_strings() -> None:
    from pyspark.sql import types as t

    # Such columns come from table schemas; a DataFrame built in Python cannot hold them.
    schema = t.StructType([t.StructField("c", t.CharType(3)), t.StructField("v", t.VarcharType(5))])
    assert plan_conversion(schema).wire_types() == {"c": "str", "v": "str"}
    assert plan_conversion(schema, {"v": "datetime"}).wire_types() == {"c": "str", "v": "datetime"}


def test_values_sent_by_default(new_york: Any) -> None:
    [body] = bodies(all_types(new_york))
    assert body == {
        "b": 1, "s": -2, "i": 3, "l": 2**40, "f": 0.10000000149011612, "d": 1.5,
        "dec": 12.34, "dec0": 7.0, "txt": "a|b é", "flag": True,
        "day": DAY_MS, "ts": TS_MS, "ntz": TS_MS,
    }  # NaN and the void column are null: left out of the body


def test_values_sent_with_overrides(new_york: Any) -> None:
    [body] = bodies(all_types(new_york), {
        "i": "f64", "l": "str", "dec": "str", "dec0": "i64", "txt": "datetime", "day": "str",
        "ts": "datetime", "ntz": "str", "nothing": "i64",
    })
    assert body["i"] == 3.0 and isinstance(body["i"], float)
    assert (body["l"], body["dec"], body["dec0"], body["txt"]) == ("1099511627776", "12.34", 7,
                                                                   "a|b é")
    assert (body["day"], body["ts"], body["ntz"]) == (
        "2024-01-02", "2024-01-02T03:04:05.123Z", "2024-01-02T03:04:05.123")
    assert "nothing" not in body


def test_times_before_1970_floor_to_the_millisecond(new_york: Any) -> None:
    df = new_york.createDataFrame(
        [(dt.datetime(1969, 12, 31, 23, 59, 59, 999500, tzinfo=UTC), dt.date(1969, 12, 31),
          float("-inf"))], "ts timestamp, day date, x double")
    assert bodies(df) == [{"ts": -1, "day": -86_400_000}]
    assert bodies(df, {"ts": "str"}) == [{"ts": "1969-12-31T23:59:59.999Z", "day": -86_400_000}]


def test_unsupported_columns_and_bad_overrides_are_all_reported(spark: Any) -> None:
    df = spark.createDataFrame(
        [(b"\x00", [1], {"k": 1}, (1, "x"), 1.5, "t", decimal.Decimal("1.5"))],
        "raw binary, tags array<int>, attrs map<string,int>, "
        "pair struct<a:int,b:string>, amount double, name string, price decimal(10,1)")
    with pytest.raises(ConversionError) as info:
        plan_conversion(df.schema, {"amount": "i64", "name": "int", "nope": "str",
                                    "price": "i64"})
    problems = info.value.problems
    assert problems == [
        "schema gives column 'name' the type 'int'; beava types are str, i64, f64, bool, "
        "datetime",
        "schema names column 'nope', which the DataFrame does not have (columns: raw, tags, "
        "attrs, pair, amount, name, price)",
        "column 'raw' has Spark type binary, which cannot be sent (supported: byte, short, "
        "int, long, float, double, decimal, string, char, varchar, boolean, date, timestamp, "
        "timestamp_ntz, void); drop it or convert it to a supported type first",
        "column 'tags' has Spark type array<int>, which cannot be sent (supported: byte, "
        "short, int, long, float, double, decimal, string, char, varchar, boolean, date, "
        "timestamp, timestamp_ntz, void); drop it or convert it to a supported type first",
        "column 'attrs' has Spark type map<string,int>, which cannot be sent (supported: "
        "byte, short, int, long, float, double, decimal, string, char, varchar, boolean, "
        "date, timestamp, timestamp_ntz, void); drop it or convert it to a supported type "
        "first",
        "column 'pair' has Spark type struct<a:int,b:string>, which cannot be sent "
        "(supported: byte, short, int, long, float, double, decimal, string, char, varchar, "
        "boolean, date, timestamp, timestamp_ntz, void); drop it or convert it to a "
        "supported type first",
        "column 'amount' (double) cannot be sent as i64; allowed: f64",
        "column 'price' (decimal(10,1)) cannot be sent as i64; allowed: f64, i64, str "
        "(i64 needs decimal(p, 0) with p <= 18)",
    ]
    assert str(info.value).startswith(
        "cannot convert the DataFrame to event bodies (nothing was sent):\n  - schema gives")


def test_duplicate_column_names_are_refused(spark: Any) -> None:
    df = spark.createDataFrame([(1, 2)], "a int, b int").toDF("a", "a")
    with pytest.raises(ConversionError, match="column 'a' appears 2 times"):
        plan_conversion(df.schema)


@bv.event
class Visit:
    user_id: str
    at: int
    price: float
    coupon: str | None


@bv.table(key="user_id")
def VisitStats(v: Visit) -> bv.Table:
    return v.group_by("user_id").agg(visits=bv.count(), last_at=bv.max("at"),
                                     spent=bv.sum("price"), coupons=bv.count(
                                         where=bv.col("coupon") == "SAVE"))


@pytest.fixture
def app(clean_server: BeavaProcess) -> Iterator[bv.App]:
    with bv.App(f"tcp://{clean_server.addrs['tcp']}") as remote:
        remote.register(Visit, VisitStats)
        yield remote


def test_an_unsupported_column_stops_the_push_before_anything_is_sent(
        spark: Any, app: bv.App, clean_server: BeavaProcess) -> None:
    df = spark.createDataFrame([("u1", 1, 2.0, None, [1])],
                               "user_id string, at long, price double, coupon string, "
                               "tags array<int>")
    with pytest.raises(ConversionError, match="column 'tags' has Spark type array<int>"):
        push_dataframe(df, "Visit", f"tcp://{clean_server.addrs['tcp']}")
    assert app.get("VisitStats", "u1") == {}


def test_nulls_pass_for_optional_fields_and_are_rejected_for_required_ones(
        new_york: Any, app: bv.App, clean_server: BeavaProcess) -> None:
    moments = [dt.datetime(2024, 1, 2, 3, 4, 5, 123000, tzinfo=UTC) + dt.timedelta(hours=h)
               for h in range(3)]
    df = new_york.createDataFrame(
        [("u1", moments[0], decimal.Decimal("9.99"), None),
         ("u1", moments[2], decimal.Decimal("0.01"), "SAVE"),
         ("u1", moments[1], None, "SAVE")],  # price is required: rejected
        "user_id string, at timestamp, price decimal(6,2), coupon string")
    totals = push_dataframe(df, "Visit", f"tcp://{clean_server.addrs['tcp']}",
                            on_error="collect")
    assert (totals.sent, totals.acknowledged, totals.rejected) == (3, 2, 1)
    assert totals.rejected_by_code == {"invalid_event": 1}
    assert json.loads(totals.rejections[0].row) == {
        "user_id": "u1", "at": TS_MS + 3_600_000, "coupon": "SAVE"}
    assert app.get("VisitStats", "u1") == {
        "visits": 2, "last_at": TS_MS + 7_200_000, "spent": 10.0, "coupons": 1}
