"""Spark writes and reads with ``shard_map`` (docs/sharding.md) against ``beava cluster up
--shards 3``: the owners computed in the JVM are the client's, a write (batch, streaming,
backfill) reaches every table's owner and reads back as one server's, a read covers every
shard, and routing by one key warns when it splits a table."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install ./spark_connector)")

import beava as bv  # noqa: E402
import beava_spark  # noqa: E402
from beava.dsl.compiler import compile_register_payload  # noqa: E402
from beava.launcher import split_addr  # noqa: E402
from beava_client import ShardedClient, TcpClient  # noqa: E402
from beava_client.shard_routes import Routes  # noqa: E402
from beava_client.slots import SLOTS, Shard, ShardMap, split_slots  # noqa: E402
from beava_spark.access import Access  # noqa: E402
from beava_spark.shards import ShardRouting, load_shard_map  # noqa: E402
from tests.support import BeavaCluster, BeavaProcess  # noqa: E402


@bv.event
class Pay:
    user_id: str
    card: str | None
    merchant: str
    n: int
    ok: bool
    amount: float
    channel: str = "web"


@bv.table(key="user_id")
def PayUser(p: Pay) -> bv.Table:  # noqa: N802
    return p.group_by("user_id").agg(spend=bv.sum("amount"), user_count=bv.count())


@bv.table(key="card")
def PayCard(p: Pay) -> bv.Table:  # noqa: N802
    return p.filter(bv.col("amount") > 1).group_by("card").agg(card_count=bv.count())


@bv.table(key=["user_id", "merchant", "n", "ok", "channel"])
def PayPlace(p: Pay) -> bv.Table:  # noqa: N802
    return p.group_by("user_id", "merchant", "n", "ok", "channel").agg(place_count=bv.count())


@bv.table
def PayAll(p: Pay) -> bv.Table:  # noqa: N802
    return p.agg(all_count=bv.count(), total=bv.sum("amount"))


@bv.event
class Visit:
    user_id: str
    page: str


@bv.table(key="user_id")
def VisitUser(v: Visit) -> bv.Table:  # noqa: N802
    return v.group_by("user_id").agg(visits=bv.count())


PIPELINE = (Pay, PayUser, PayCard, PayPlace, PayAll, Visit, VisitUser)
USERS = ["u1", "é|ü", "", "漢字", "a%7Cb", "x|y|z"]


def pays(spark: Any, rows: int = 300) -> Any:
    data = [(USERS[i % 6], None if i % 7 == 0 else f"c{i % 11}", f"m|{i % 4}", i % 3 - 1,
             i % 2 == 0, float(i % 13)) for i in range(rows)]
    return spark.createDataFrame(
        data, "user_id string, card string, merchant string, n long, ok boolean, "
              "amount double").repartition(3)


def _routing(urls: tuple[str, ...]) -> ShardRouting:
    shard_map = ShardMap(1, [Shard(f"s{i}", (r,), u.removeprefix("tcp://"), "http://x")
                             for i, (u, r) in enumerate(zip(urls, split_slots(len(urls)),
                                                            strict=True))])
    owners = bytes(int(shard_map.owner(s).id[1:]) for s in range(SLOTS))
    return ShardRouting("Pay", urls, owners,
                        Routes(compile_register_payload(*PIPELINE)["nodes"]))


def test_the_jvm_places_each_row_where_the_client_does(spark: Any) -> None:
    routing = _routing(("tcp://127.0.0.1:1", "tcp://127.0.0.1:2", "tcp://127.0.0.1:3",
                        "tcp://127.0.0.1:4"))
    df = pays(spark, 400)
    rows = df.withColumn("owners", routing.owner_column(df.schema)).collect()
    for row in rows:
        fields = {k: v for k, v in row.asDict().items() if k != "owners" and v is not None}
        assert row["owners"] == routing.owners(fields), fields
    assert {len(row["owners"]) for row in rows} >= {2, 3}


def test_a_map_of_tls_shards_is_written_to_over_tls(tmp_path: Path) -> None:
    shards = [Shard(f"s{i}", (r,), f"127.0.0.1:{i + 1}", f"https://127.0.0.1:{i + 1}",
                    tcps=f"127.0.0.1:{i + 1}") for i, r in enumerate(split_slots(2))]
    path = tmp_path / "cluster.json"
    path.write_text(ShardMap(1, shards).to_json())
    # the shards are not up: the map is read again from the file
    assert load_shard_map(str(path), Access(), 1.0) == ("tcps://127.0.0.1:1",
                                                          "tcps://127.0.0.1:2")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[BeavaCluster, BeavaProcess]]:
    """``beava cluster up --shards 3`` and one server as the reference, both with a WAL
    (which a backfill needs)."""
    cluster = BeavaCluster(tmp_path_factory.mktemp("cluster"))
    try:
        reference = BeavaProcess("--data-dir", str(tmp_path_factory.mktemp("ref")),
                                 memory_only=False)
        try:
            yield cluster, reference
        finally:
            reference.terminate()
    finally:
        cluster.stop()


@pytest.fixture
def reference(servers: tuple[BeavaCluster, BeavaProcess]) -> BeavaProcess:
    return servers[1]


@pytest.fixture
def shard_map(servers: tuple[BeavaCluster, BeavaProcess], spark: Any) -> str:
    """The cluster's map file, every shard and the reference reset and registered."""
    cluster, reference = servers
    payload = compile_register_payload(*PIPELINE)
    for address in [s.tcp for s in cluster.map.shards] + [reference.addrs["tcp"]]:
        with TcpClient(*split_addr(address)) as client:
            client.reset()
            client.register(payload)
    beava_spark.register(spark)
    return str(cluster.map_file)


READS: list[tuple[str, Any]] = [("PayUser", u) for u in USERS] + [
    ("PayCard", f"c{i}") for i in range(11)] + [("PayAll", None)] + [
    ("PayPlace", [u, f"m|{m}", n, ok, "web"]) for u in USERS for m in range(4)
    for n in (-1, 0, 1) for ok in (True, False)]


def test_a_sharded_write_reads_back_as_one_server(spark: Any, reference: BeavaProcess,
                                                  shard_map: str) -> None:
    reference_url = f"tcp://{reference.addrs['tcp']}"
    totals = beava_spark.push_dataframe(pays(spark), "Pay", shard_map=shard_map,
                                        partitions_per_server=2)
    assert totals.rejected == 0 and totals.rows > 300  # rows sent to several owners
    (pays(spark).write.format("beava").option("shard_map", shard_map).option("event", "Pay")
     .mode("append").save())
    beava_spark.push_dataframe(pays(spark), "Pay", reference_url)
    beava_spark.push_dataframe(pays(spark), "Pay", reference_url)
    with ShardedClient(shard_map) as sharded, TcpClient(*reference.tcp) as ref:
        expected = ref.batch_get(READS)
        assert sharded.batch_get(READS) == expected
        assert expected[0]["user_count"] == 100


def test_a_streaming_write_with_a_shard_map(spark: Any, shard_map: str,
                                            tmp_path: Path) -> None:
    source = tmp_path / "in"
    source.mkdir()
    with (source / "part-0.json").open("w") as fh:
        for i in range(120):
            fh.write(json.dumps({"user_id": f"u{i % 30}", "page": "p"}) + "\n")
    query = (spark.readStream.schema("user_id string, page string").json(str(source))
             .writeStream.format("beava").option("shard_map", shard_map)
             .option("event", "Visit").option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    with ShardedClient(shard_map) as sharded:
        assert sharded.batch_get([("VisitUser", f"u{i}") for i in range(30)]) == \
            [{"visits": 4}] * 30


def test_a_read_covers_every_shard(spark: Any, shard_map: str) -> None:
    visits = spark.createDataFrame([(f"u{i % 50}", "p") for i in range(200)],
                                   "user_id string, page string")
    beava_spark.push_dataframe(visits, "Visit", shard_map=shard_map)
    read = (spark.read.format("beava").option("shard_map", shard_map)
            .option("table", "VisitUser").load().collect())
    assert sorted((r["user_id"], r["visits"]) for r in read) == sorted(
        (f"u{i}", 4) for i in range(50))
    with pytest.raises(ValueError, match="not both"):
        beava_spark.push_dataframe(visits, "Visit", "tcp://127.0.0.1:1", shard_map=shard_map)


def test_a_sharded_backfill_reads_back_as_one_server(
        spark: Any, reference: BeavaProcess, shard_map: str) -> None:
    from pyspark.sql import functions as f

    history = pays(spark).withColumn(
        "ts", f.lit(1_767_225_600_000) + f.monotonically_increasing_id())
    tables = ["PayUser", "PayCard", "PayAll"]  # two keys (one through a filter), global
    totals = beava_spark.backfill({"Pay": history}, PIPELINE, shard_map=shard_map,
                                  tables=tables)
    beava_spark.backfill({"Pay": history}, PIPELINE, f"tcp://{reference.addrs['tcp']}",
                         tables=tables)
    assert list(totals.tables) == ["PayAll", "PayUser", "PayCard"]
    assert totals.tables["PayUser"].entities == len(USERS)
    assert totals.tables["PayCard"].entities == 11
    with ShardedClient(shard_map) as sharded, TcpClient(*reference.tcp) as ref:
        reads = [r for r in READS if r[0] in tables]
        expected = ref.batch_get(reads)
        assert sharded.batch_get(reads) == expected
        assert expected[0]["user_count"] == 50
    with pytest.raises(ValueError, match="url .* or shard_map"):
        beava_spark.backfill({"Pay": history}, PIPELINE, tables=tables)


def test_routing_by_one_key_warns_when_it_splits_a_table(
        spark: Any, servers: tuple[BeavaCluster, BeavaProcess], shard_map: str) -> None:
    cluster, reference = servers
    urls = [f"tcp://{reference.addrs['tcp']}", f"tcp://{cluster.map.shards[0].tcp}"]
    # PayPlace, keyed by user_id and more, stays whole on one server
    with pytest.warns(UserWarning, match=r"splits the tables keyed otherwise \(PayAll by "
                                         r"no key, PayCard by \['card'\]\): their rows"):
        beava_spark.push_dataframe(pays(spark, 10), "Pay", urls, key="user_id",
                                   on_error="collect")
