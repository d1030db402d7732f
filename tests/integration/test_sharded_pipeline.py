"""A multi-key pipeline through ``bv.App(shard_map=...)`` against ``beava cluster up
--shards 3`` equals one server fed the same events, table by table, key by key, feature
by feature (clock pinned): after the pushes, after SIGKILL of every shard and a second
``cluster up`` on the same directory, and after a register that adds a feature. Routed by
one key instead, the tables keyed otherwise come out wrong."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

import beava as bv
from beava.dsl.compiler import compile_register_payload
from beava_client import ShardedClient, TcpClient
from beava_client.slots import SLOTS, Shard, ShardMap, split_slots
from tests.support import BeavaCluster, BeavaProcess

T0 = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=datetime.UTC)


@bv.event(dedupe_key="txn_id")
class Txn:
    txn_id: str
    user_id: str
    card: str
    merchant: str
    amount: float
    channel: str = "web"


@bv.event
def BigTxn(t: Txn) -> Any:  # noqa: N802  # an event derived by a chain
    return t.filter(bv.col("amount") > 40).with_columns(double=bv.col("amount") * 2)


def pipeline(extra: bool = False) -> tuple[Any, ...]:
    """The pipeline; ``extra`` adds a feature to UserSpend."""

    @bv.table(key="user_id")
    def UserSpend(t: Txn) -> bv.Table:  # noqa: N802
        features = {"spend_1h": bv.sum("amount", window="1h"), "txns": bv.count(),
                    "last_card": bv.last("card")}
        if extra:
            features["biggest"] = bv.max("amount")
        return t.group_by("user_id").agg(**features)

    @bv.table(key="card")
    def CardUse(t: Txn) -> bv.Table:  # noqa: N802
        return t.group_by("card").agg(card_txns=bv.count(window="10m"),
                                      card_merchants=bv.n_unique("merchant"))

    @bv.table(key=["user_id", "merchant"])
    def UserMerchant(t: Txn) -> bv.Table:  # noqa: N802
        return t.group_by("user_id", "merchant").agg(visits=bv.count(),
                                                     paid=bv.sum("amount"))

    @bv.table
    def Everything(t: Txn) -> bv.Table:  # noqa: N802
        return t.agg(all_txns=bv.count(), all_amount=bv.sum("amount", window="1h"))

    @bv.table(key="merchant")
    def BigMerchant(b: BigTxn) -> bv.Table:  # noqa: N802  # keyed through a chain
        return b.group_by("merchant").agg(big_txns=bv.count(), doubled=bv.sum("double"))

    return (Txn, BigTxn, UserSpend, CardUse, UserMerchant, Everything, BigMerchant)


USERS = [f"u{i}" for i in range(9)] + ["é|ü"]
CARDS = [f"c{i}" for i in range(7)]
MERCHANTS = [f"m{i}" for i in range(5)] + ["a|b"]


def txns(start: int, count: int) -> list[dict[str, Any]]:
    return [{"txn_id": f"t{i}", "user_id": USERS[i % 10], "card": CARDS[i * 3 % 7],
             "merchant": MERCHANTS[i * 5 % 6], "amount": float(i * 7 % 60)}
            for i in range(start, start + count)]


READS: list[tuple[str, Any]] = (
    [("UserSpend", [u]) for u in USERS] + [("CardUse", c) for c in CARDS]
    + [("UserMerchant", [u, m]) for u in USERS for m in MERCHANTS]
    + [("Everything", None)] + [("BigMerchant", [m]) for m in MERCHANTS])


def feed(app: bv.App, rows: list[dict[str, Any]]) -> None:
    """Half the rows pushed one by one, the rest with push_many; the clock moved between."""
    half = len(rows) // 2
    for row in rows[:half]:
        app.push("Txn", row)
    app.advance(minutes=20)
    assert app.push_many("Txn", rows[half:], chunk_size=17)["errors"] == []
    app.advance(minutes=25)


@pytest.fixture
def reference() -> Iterator[BeavaProcess]:
    server = BeavaProcess()
    try:
        yield server
    finally:
        server.terminate()


def test_a_sharded_pipeline_equals_one_server(tmp_path: Path, reference: BeavaProcess) -> None:
    ref = bv.App(f"tcp://{reference.addrs['tcp']}")
    cluster = BeavaCluster(tmp_path / "cluster")
    try:
        with bv.App(shard_map=str(cluster.map_file)) as app:
            for each in (app, ref):
                each.register(*pipeline())
                each.set_time(T0)
                feed(each, txns(0, 120))
                feed(each, txns(100, 20))  # again: the dedupe_key makes them no-ops
            expected = ref.batch_get(READS)
            assert app.batch_get(READS) == expected
            assert expected[0]["txns"] == 12 and not [r for r in expected if "error" in r]
            assert all(row.get("big_txns") for row in expected[-6:-1])  # m0..m4
            assert app.get("Everything") == ref.get("Everything")
            pinned = app._pinned_ms
        assert cluster.kill_shards() != 0
    finally:
        cluster.stop()
    again = BeavaCluster(tmp_path / "cluster")
    try:
        with bv.App(shard_map=str(again.map_file)) as app:
            app.set_time(pinned)  # the test clock is not durable
            assert app.batch_get(READS) == ref.batch_get(READS)
            for each in (app, ref):
                each.register(*pipeline(extra=True))
                feed(each, txns(120, 80))
            expected = ref.batch_get(READS)
            assert app.batch_get(READS) == expected
            assert "biggest" in expected[0]
            assert app.describe()["version"] == ref.describe()["version"]
    finally:
        assert again.stop() == 0
        ref.close()


def test_a_key_a_chain_computes_is_refused_before_any_shard_changes(tmp_path: Path) -> None:
    @bv.table(key="bucket")
    def Buckets(t: Txn) -> bv.Table:  # noqa: N802
        return t.with_columns(bucket=bv.col("amount") * 0).group_by("bucket").agg(
            n=bv.count())

    cluster = BeavaCluster(tmp_path / "cluster")
    try:
        with bv.App(shard_map=str(cluster.map_file)) as app:
            app.register(*pipeline())
            version = app.describe()["version"]
            with pytest.raises(bv.RegistrationError) as caught:
                app.register(*pipeline(), Buckets)
            assert caught.value.code == "unroutable_key"
            assert "'Buckets' is keyed by ['bucket'] after a 'with_columns' step" in str(
                caught.value)
            assert {s["registry_version"] for s in app.ping()["shards"].values()} == {version}
    finally:
        cluster.stop()


def test_the_map_comes_from_any_shards_url(tmp_path: Path) -> None:
    """tcp:// and http:// URLs of any shard, sync and asyncio; a wrong_shard answer (a
    client whose map is stale) refreshes the map and retries."""
    cluster = BeavaCluster(tmp_path / "cluster")
    try:
        shard = cluster.map.shards[1]
        with bv.App(shard_map=f"tcp://{shard.tcp}") as app:
            app.register(*pipeline())
            app.push_many("Txn", txns(0, 30))
            want = app.batch_get(READS)
            assert app.get("CardUse", "c3") == want[READS.index(("CardUse", "c3"))] != {}

        async def over_http() -> list[Any]:
            async with bv.AsyncApp(shard_map=shard.http) as aapp:
                # fenced, registered and unfenced over HTTP: nothing new, nothing lost
                assert (await aapp.register(*pipeline()))["added"] == []
                assert await aapp.batch_get(READS) == want
                pushed = await aapp.push_many("Txn", txns(30, 10))
                assert pushed["acks"] == 10 and pushed["errors"] == []
                await aapp.push("Txn", txns(40, 1)[0])
                return await aapp.batch_get(READS)

        want = asyncio.run(over_http())
        # a map whose every slot is s0's: each push and read s0 does not own comes back
        # wrong_shard, and the client reads the real map from s0 and goes on
        s0 = cluster.map.shards[0]
        stale = ShardMap(1, [Shard("s0", ((0, SLOTS),), s0.tcp, s0.http)])
        with ShardedClient(stale) as client:
            assert client.batch_get(READS) == want
            client.push("Txn", txns(41, 1)[0])
            assert client.map == cluster.map
    finally:
        cluster.stop()


def test_a_cluster_with_tls_is_reached_over_tls_from_its_map(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    for name, pem in (("cert.pem", cert.cert_chain_pems[0]), ("key.pem", cert.private_key_pem),
                      ("ca.pem", ca.cert_pem)):
        pem.write_to_path(str(tmp_path / name))
    cluster = BeavaCluster(tmp_path / "cluster", 2, "--tls-cert", str(tmp_path / "cert.pem"),
                           "--tls-key", str(tmp_path / "key.pem"))
    try:
        assert all(shard.tcps for shard in cluster.map.shards)
        with bv.App(shard_map=str(cluster.map_file), ca=str(tmp_path / "ca.pem")) as app:
            app.register(*pipeline())
            app.push_many("Txn", txns(0, 20))
            assert app.get("UserSpend", ["u3"])["txns"] == 2
    finally:
        cluster.stop()


def test_routing_by_one_key_gets_the_other_tables_wrong(reference: BeavaProcess) -> None:
    """Three unsharded servers, each event routed by its user_id (the single-key routing
    of the multi-URL options); each read goes where a one-key client sends it: by the
    user for the tables keyed by user, else by the key itself (or the table's name)."""
    servers = [BeavaProcess() for _ in range(3)]
    by_user = ShardMap(1, [Shard(f"s{i}", (r,), s.addrs["tcp"], s.http_url)
                           for i, (s, r) in enumerate(zip(servers, split_slots(3),
                                                          strict=True))])
    clients = [TcpClient(*s.tcp) for s in servers]

    def server_of(text: str) -> TcpClient:
        return clients[int(by_user.owner_of(text).id[1:])]

    def route(table: str, key: Any) -> str:
        if key is None:
            return table
        return key if isinstance(key, str) else key[0]  # by user in the user-keyed tables

    try:
        rows = txns(0, 120)
        payload = compile_register_payload(*pipeline())
        for client in clients:
            client.register(payload)
            client.test_clock(int(T0.timestamp() * 1000))
        for row in rows:
            server_of(row["user_id"]).push("Txn", row)
        with bv.App(f"tcp://{reference.addrs['tcp']}") as ref:
            ref.register(*pipeline())
            ref.set_time(T0)
            ref.push_many("Txn", rows)
            want = ref.batch_get(READS)
        got = [server_of(route(t, k)).get(t, k) for t, k in READS]
        wrong = {t for (t, _), g, w in zip(READS, got, want, strict=True) if g != w}
        assert wrong == {"CardUse", "Everything", "BigMerchant"}
    finally:
        for client in clients:
            client.close()
        for proc in servers:
            proc.terminate()
