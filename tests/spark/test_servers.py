"""Two servers: rows are routed by key (jump hash of the canonical key), each entity lives
on exactly one server, and each partition task talks to one server only."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install ./spark_connector)")

import beava as bv  # noqa: E402
from beava_spark import push_dataframe, server_for_key  # noqa: E402
from tests.support import BeavaProcess  # noqa: E402


@bv.event
class Click:
    user_id: str
    page: str
    ms: int


@bv.table(key="user_id")
def UserClicks(c: Click) -> bv.Table:
    return c.group_by("user_id").agg(clicks=bv.count(), ms=bv.sum("ms"))


@bv.event
class Order:
    shop_id: int
    vip: bool
    amount: float


@bv.table(key=["shop_id", "vip"])
def ShopVip(o: Order) -> bv.Table:
    return o.group_by("shop_id", "vip").agg(orders=bv.count(), revenue=bv.sum("amount"))


@pytest.fixture(scope="module")
def servers() -> Iterator[list[BeavaProcess]]:
    procs = [BeavaProcess(), BeavaProcess()]
    yield procs
    for proc in procs:
        proc.terminate()


@pytest.fixture
def apps(servers: list[BeavaProcess]) -> Iterator[list[bv.App]]:
    opened = [bv.App(f"tcp://{s.addrs['tcp']}") for s in servers]
    for app in opened:
        app.reset()
        app.register(Click, UserClicks, Order, ShopVip)
    yield opened
    for app in opened:
        app.close()


def test_rows_are_routed_by_key_and_each_task_talks_to_one_server(
        spark: Any, servers: list[BeavaProcess], apps: list[bv.App], make_proxy: Any) -> None:
    from pyspark.sql import functions as f

    proxies = [make_proxy(s.tcp) for s in servers]
    urls = [p.url for p in proxies]
    users = 500
    df = spark.range(20_000, numPartitions=3).select(
        f.concat(f.lit("user-"), (f.col("id") % users).cast("string")).alias("user_id"),
        f.concat(f.lit("/p"), (f.col("id") % 7).cast("string")).alias("page"),
        (f.col("id") % 1000).alias("ms"),
    )
    totals = push_dataframe(df, "Click", urls, key="user_id", partitions_per_server=2)

    owner = {f"user-{u}": urls.index(server_for_key(f"user-{u}", urls)) for u in range(users)}
    per_server = Counter(owner.values())
    assert 0.4 < per_server[0] / users < 0.6  # both servers own a fair share of the users
    assert (totals.sent, totals.acknowledged, totals.partitions) == (20_000, 20_000, 4)
    for index, url in enumerate(urls):
        assert totals.servers[url].acknowledged == 40 * per_server[index]
    # Every user is whole on its owner and absent from the other server.
    for user, index in owner.items():
        number = int(user.split("-")[1])
        clicks = [apps[index].get("UserClicks", user), apps[1 - index].get("UserClicks", user)]
        assert clicks == [{"clicks": 40, "ms": float(sum(
            i % 1000 for i in range(number, 20_000, users)))}, {}], user
    # One connection for the driver's check, then one per partition task of that server.
    assert [p.connections for p in proxies] == [3, 3]


def test_composite_keys_are_routed_like_the_stored_key(
        spark: Any, servers: list[BeavaProcess], apps: list[bv.App]) -> None:
    urls = [f"tcp://{s.addrs['tcp']}" for s in servers]
    rows = [(shop, vip, float(shop)) for shop in range(60) for vip in (True, False)
            for _ in range(3)]
    df = spark.createDataFrame(rows, "shop_id long, vip boolean, amount double")
    totals = push_dataframe(df, "Order", urls, key=["shop_id", "vip"])
    assert totals.acknowledged == len(rows)
    owners = Counter()
    for shop in range(60):
        for vip in (True, False):
            index = urls.index(server_for_key([shop, vip], urls))
            owners[index] += 1
            assert apps[index].get("ShopVip", [shop, vip]) == {
                "orders": 3, "revenue": 3.0 * shop}
            assert apps[1 - index].get("ShopVip", [shop, vip]) == {}
    assert min(owners.values()) > 30


def test_format_beava_routes_by_key_too(
        spark: Any, servers: list[BeavaProcess], apps: list[bv.App]) -> None:
    pytest.importorskip("pyarrow", reason="pyarrow is not installed")
    import beava_spark

    beava_spark.register(spark)
    urls = [f"tcp://{s.addrs['tcp']}" for s in servers]
    rows = [(shop, vip, float(shop)) for shop in range(40) for vip in (True, False)
            for _ in range(2)]
    df = spark.createDataFrame(rows, "shop_id long, vip boolean, amount double")
    (df.write.format("beava").option("url", ",".join(urls)).option("event", "Order")
     .option("key", "shop_id,vip").mode("append").save())
    result = beava_spark.last_write()
    assert result is not None and result.totals.sent == len(rows)
    for shop in range(40):
        for vip in (True, False):
            index = urls.index(server_for_key([shop, vip], urls))
            assert apps[index].get("ShopVip", [shop, vip]) == {
                "orders": 2, "revenue": 2.0 * shop}
            assert apps[1 - index].get("ShopVip", [shop, vip]) == {}
    assert sum(result.totals.servers[u].sent for u in urls) == len(rows)
    assert min(result.totals.servers[u].sent for u in urls) > 0



def test_a_read_places_each_servers_values_by_that_servers_columns(
        servers: list[BeavaProcess]) -> None:
    """Rows come as arrays in each server's own column order: a server whose table has one
    more feature (between two others) still gives every column read its own value."""
    from beava_client import TcpClient
    from beava_spark.reader import ReadOptions, plan_read, read_range

    event = {"kind": "event", "name": "E",
             "schema": {"fields": {"u": "str", "p": "str", "ms": "i64"}}}
    features = {"clicks": {"op": "count", "params": {}},
                "ms": {"op": "sum", "params": {"field": "ms"}}}
    wider = {**features, "first_page": {"op": "first", "params": {"field": "p"}}}
    for server, agg, users in ((servers[0], features, ("a", "b")),
                               (servers[1], wider, ("c",))):
        with TcpClient(*server.tcp) as client:
            client.reset()
            client.register({"nodes": [event, {"kind": "derivation", "name": "T",
                                               "upstreams": ["E"], "key": ["u"], "agg": agg}]})
            for n, user in enumerate(users):
                client.push("E", {"u": user, "p": f"page-{user}", "ms": 10 * (n + 1)})
    urls = ",".join(f"tcp://{s.addrs['tcp']}" for s in servers)
    columns, ranges = plan_read(ReadOptions.parse({"url": urls, "table": "T",
                                                   "partitions": "1"}))
    assert [c.name for c in columns] == ["u", "clicks", "ms"]  # the first server's
    assert [r.layout for r in ranges] == [("u", "clicks", "ms"),
                                          ("u", "clicks", "first_page", "ms")]
    rows = [row for r in ranges for batch in read_range(columns, "T", r, 10, 10.0)
            for row in batch.to_pylist()]
    assert rows == [{"u": "a", "clicks": 1, "ms": 10}, {"u": "b", "clicks": 1, "ms": 20},
                    {"u": "c", "clicks": 1, "ms": 10}]
