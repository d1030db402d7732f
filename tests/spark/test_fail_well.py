"""The connector fails well: the worker interpreter is set for local masters, columns
that cannot fit the event are named before anything is sent (or the run stops early),
replays are counted apart, an HTTP port is recognised, and the CLI checks the server
before starting Spark and reports a failed job with its totals so far."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from beava_client.errors import ProtocolError
from beava_client.frames import FrameDecoder

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install ./spark_connector)")

import beava as bv  # noqa: E402
import beava_spark.__main__ as cli  # noqa: E402
from beava_spark import (  # noqa: E402
    ConversionError,
    Progress,
    PushTotals,
    SchemaMismatchError,
    ServerCheckError,
    push_dataframe,
)
from beava_spark.driver import check_server  # noqa: E402
from beava_spark.writer import PartitionWriter, WriterConfig  # noqa: E402
from tests.support import BeavaProcess  # noqa: E402

ROWS = 20_000


@bv.event
class Txn:
    user_id: str
    amount: float
    coupon: str | None


@bv.table
def AllTxn(t: Txn) -> bv.Table:
    return t.agg(txns=bv.count())


@pytest.fixture
def app(clean_server: BeavaProcess) -> Iterator[bv.App]:
    with bv.App(f"tcp://{clean_server.addrs['tcp']}") as remote:
        remote.register(Txn, AllTxn)
        yield remote


def url_of(server: BeavaProcess) -> str:
    return f"tcp://{server.addrs['tcp']}"


def txns(spark: Any, rows: int = ROWS, amount: str = "double") -> Any:
    from pyspark.sql import functions as f

    return spark.range(rows, numPartitions=2).select(
        f.concat(f.lit("u"), (f.col("id") % 10).cast("string")).alias("user_id"),
        (f.col("id") % 50 / 2).cast(amount).alias("amount"),
    )


def test_workers_run_this_interpreter_on_a_local_master(
        spark: Any, app: bv.App, clean_server: BeavaProcess,
        monkeypatch: pytest.MonkeyPatch) -> None:
    sc = spark.sparkContext
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.setattr(sc, "pythonExec", "python3")  # pyspark's default without the variable
    totals = push_dataframe(txns(spark, 100), "Txn", url_of(clean_server))
    assert sc.pythonExec == sys.executable
    assert totals.sent == 100 and app.get("AllTxn") == {"txns": 100}


def test_columns_that_cannot_fit_the_event_class_are_named_before_sending(
        spark: Any, app: bv.App, make_proxy: Any, clean_server: BeavaProcess) -> None:
    from pyspark.sql import functions as f

    proxy = make_proxy(clean_server.tcp)
    df = txns(spark, amount="string").withColumn("event_time", f.lit(1))
    with pytest.raises(ConversionError) as info:
        push_dataframe(df, Txn, proxy.url, on_error="collect")
    assert info.value.problems == [
        "column 'amount' (string, sent as str) does not fit field 'amount' of event Txn, "
        "declared f64: every row would be rejected (invalid_event); convert it in Spark, "
        "e.g. col('amount').cast('double')",
        "column 'event_time' is not a field of event Txn (int column; fields: user_id, "
        "amount, coupon); every row would be rejected (unknown_field_event_time_v0): rename "
        "or drop the column, or select the event's fields",
    ]
    assert proxy.connections == 0
    # The same check from an explicit schema; a missing required field is named too.
    with pytest.raises(ConversionError, match="field 'user_id' of event Txn is required"):
        push_dataframe(txns(spark).select("amount"), "Txn", proxy.url,
                       event_schema="user_id:str, amount:f64, coupon:str?")
    assert proxy.connections == 0


def test_columns_that_cannot_fit_the_registered_event_are_named_before_sending(
        spark: Any, app: bv.App, clean_server: BeavaProcess) -> None:
    """Given only the event's name, the columns are checked against the event the server
    has registered: a column holding text for an f64 field, or one that is no field
    (named with the nearest field), fails before the first row (it used to take 2,000
    rejected rows to find out). format("beava"): tests/spark/test_datasource.py."""
    url = url_of(clean_server)
    for df, expected in (
            (txns(spark, amount="string"),
             "column 'amount' (string, sent as str) does not fit field 'amount' of event "
             "Txn, declared f64"),
            (txns(spark).withColumnRenamed("amount", "amout"),
             "column 'amout' is not a field of event Txn (double column; did you mean field "
             "'amount', declared f64? fields: ")):
        with pytest.raises(ConversionError) as info:
            push_dataframe(df, "Txn", url)
        assert expected in str(info.value)
        assert f"the DataFrame does not fit event Txn (as registered on {url})" in \
            str(info.value)
    assert app.get("AllTxn").get("txns", 0) == 0  # not one row reached the server


def test_a_run_whose_first_rows_are_all_rejected_stops_early(
        spark: Any, app: bv.App, clean_server: BeavaProcess) -> None:
    """What no schema says (here: a required field null in every row) stops a partition
    after its first rejected rows."""
    from pyspark.sql import functions as f

    def no_amount(rows: int) -> Any:
        return txns(spark, rows).withColumn("amount", f.lit(None).cast("double"))

    with pytest.raises(SchemaMismatchError) as info:
        push_dataframe(no_amount(ROWS), "Txn", url_of(clean_server),
                       on_error="collect", batch_size=100, max_in_flight=200,
                       schema_check_rows=300)
    totals = info.value.totals
    assert totals.schema_stopped_partitions == 2
    assert totals.acknowledged == 0 and totals.rejected == totals.sent
    assert 600 <= totals.sent <= 1000  # per partition: 300 answered + at most 200 in flight
    message = str(info.value)
    assert message.startswith("the rows do not fit event Txn: the first rows of 2 "
                              "partition(s) were all rejected (invalid_event x")
    assert "column 'amount' is null in the rejected rows" in message
    # Switched off, every row is sent (and rejected).
    collected = push_dataframe(no_amount(2000), "Txn",
                               url_of(clean_server), on_error="collect", schema_check_rows=0)
    assert (collected.sent, collected.rejected) == (2000, 2000)
    assert app.get("AllTxn").get("txns", 0) == 0


def test_replays_are_counted_apart_and_progress_uses_the_summary_basis() -> None:
    config = WriterConfig(event="Txn", urls=("tcp://a:1",), push_many=(True,), batch_size=10,
                          max_in_flight=10, stop_on_rejection=False, timeout=1.0)
    writer = PartitionWriter(config)
    counts = writer.totals.server("tcp://a:1")
    rows = [b"{}"] * 10
    writer.sent(counts, 10)
    writer.answered("tcp://a:1", counts, 10, 10, [], rows)  # a re-run: all replays
    writer.sent(counts, 10)
    writer.answered("tcp://a:1", counts, 9, 2, [{"index": 0, "error": {"code": "x"}}], rows)
    totals = writer.totals
    assert (totals.sent, totals.acknowledged, totals.replays, totals.rejected) == (20, 7, 12, 1)
    assert (counts.acknowledged, counts.replays) == (7, 12)
    totals.seconds = 2.0
    progress = Progress(sent=20, acknowledged=7, rejected=1, elapsed=2.0,
                        rows_per_second=10.0, replays=12)
    assert progress.line() == "sent 20  acknowledged 7  replays 12  rejected 1  10 rows/s  2.0 s"
    assert totals.summary().splitlines()[:2] == [
        "rows 0  sent 20  acknowledged 7  replays 12  rejected 1",
        "2.00 s  10 rows/s  partitions 0"]
    # A reply without a replay count: acknowledged includes them, and the summary says so.
    writer.answered("tcp://a:1", counts, 10, None, [], rows)
    assert totals.replays_reported is False and totals.acknowledged == 17
    assert "replays ?" in totals.summary()
    assert "does not report dedupe replays" in totals.summary()
    merged = PushTotals(replays=3).merge(totals)
    assert merged.replays == 15 and merged.replays_reported is False


def test_an_http_port_is_recognised(clean_server: BeavaProcess) -> None:
    with pytest.raises(ProtocolError, match="this is an HTTP port; use the TCP port") as info:
        FrameDecoder().feed(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    assert info.value.code == "http_reply"
    http_url = f"tcp://{clean_server.addrs['http']}"
    with pytest.raises(ServerCheckError, match=re.escape(
            f"cannot reach {http_url}: [http_reply] the server answered in HTTP: this is an "
            f"HTTP port; use the TCP port")):
        check_server(http_url, "Txn", 5.0)


def test_cli_checks_the_server_before_starting_spark(
        clean_server: BeavaProcess, monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
        capsys: pytest.CaptureFixture[str]) -> None:
    def no_spark(master: str) -> Any:
        raise AssertionError("Spark was started")

    monkeypatch.setattr(cli, "_session", no_spark)
    data = tmp_path / "t.jsonl"
    data.write_text('{"user_id":"u1","amount":1.0}\n')
    for url, expected in (
            ("tcp://127.0.0.1:1", "beava-spark: cannot reach tcp://127.0.0.1:1: "),
            (f"tcp://{clean_server.addrs['http']}",
             "this is an HTTP port; use the TCP port")):
        code = cli.main([str(data), "--event", "Txn", "--url", url])
        assert code == 2
        assert expected in capsys.readouterr().err


def test_cli_reports_a_failed_job_with_its_totals_so_far(
        spark: Any, app: bv.App, make_proxy: Any, clean_server: BeavaProcess, tmp_path: Any,
        capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "t.parquet"
    txns(spark).write.parquet(str(data))
    # Every connection is cut after ~60 KB of requests, so each attempt of each task fails
    # and the job fails once Spark's retries are used up: a server that keeps dying.
    proxy = make_proxy(clean_server.tcp, drop_after=60_000, max_drops=None)
    code = cli.main([str(data), "--event", "Txn", "--url", proxy.url, "--batch-size", "200",
                     "--max-in-flight", "400", "--progress-interval", "0"])
    out, err = capsys.readouterr()
    assert code == 2
    assert out.startswith(f"beava-spark: {data} -> event Txn on {proxy.url} so far "
                          f"(every task attempt)\n")
    sent = int(re.search(r"sent ([\d,]+)", out).group(1).replace(",", ""))  # type: ignore[union-attr]
    assert sent > 0
    assert err.count("\n") == 1, err
    assert err.startswith(f"beava-spark: the push failed: connection to {proxy.url} lost "
                          f"after "), err
    assert "raise PartitionPushError(" not in err

