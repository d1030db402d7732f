"""ShardedClient, AsyncShardedClient and bv.App(shard_map=...) over three servers and a
map file: every table's rows are read from their key's owner and equal one server's fed
the same events. (The servers here apply whatever they are sent; that each shard then
holds only its own keys is the sharded server's side, tested with ``beava cluster up``.)"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import beava as bv
from beava.dsl.compiler import compile_register_payload
from beava_client import AsyncShardedClient, ShardedClient, TcpClient
from beava_client.slots import Shard, ShardMap, slot, split_slots
from tests.card_pipeline import Card, CardMerchant, CardSpend
from tests.support import BeavaProcess

PIPELINE = (Card, CardSpend, CardMerchant)
ROWS = [{"user_id": f"u{i % 7}", "merchant": f"m|{i % 3}", "amount": float(i)}
        for i in range(60)]
READS: list[tuple[str, Any]] = [("CardSpend", f"u{i}") for i in range(8)] + [
    ("CardMerchant", [f"u{i}", f"m|{j}"]) for i in range(7) for j in range(3)]


@pytest.fixture(scope="module")
def servers() -> Iterator[list[BeavaProcess]]:
    """Three shards and a reference server (the last), each with the pipeline."""
    procs: list[BeavaProcess] = []
    try:
        for _ in range(4):
            procs.append(BeavaProcess())
        yield procs
    finally:
        for proc in procs:
            proc.terminate()


@pytest.fixture
def shard_map(servers: list[BeavaProcess], tmp_path: Path) -> Path:
    payload = compile_register_payload(*PIPELINE)
    for proc in servers:
        with TcpClient(*proc.tcp) as client:
            client.reset()
            client.register(payload)
    shards = [Shard(f"s{i}", (r,), p.addrs["tcp"], p.http_url)
              for i, (p, r) in enumerate(zip(servers, split_slots(3), strict=False))]
    path = tmp_path / "cluster.json"
    path.write_text(ShardMap(1, shards).to_json())
    return path


def _reference(servers: list[BeavaProcess]) -> TcpClient:
    return TcpClient(*servers[-1].tcp)


def _owner_index(shard_map: Path, text: str) -> int:
    owner = ShardMap.load(str(shard_map)).owner(slot(text))
    return int(owner.id[1:])


def test_pushes_reach_each_tables_owner(servers: list[BeavaProcess], shard_map: Path) -> None:
    with ShardedClient(str(shard_map)) as sharded, _reference(servers) as ref:
        first = sharded.push("Card", ROWS[0])
        owners = {_owner_index(shard_map, t) for t in ("u0", "u0|m%7C0")}
        assert {int(sid[1:]) for sid in first["ack_lsn"]} == owners
        ref.push("Card", ROWS[0])
        result = sharded.push_many("Card", ROWS[1:], chunk_size=7)
        assert result["acks"] == len(ROWS) - 1 and result["errors"] == []
        ref.push_many("Card", ROWS[1:])
        assert sharded.batch_get(READS) == ref.batch_get(READS)
        assert sharded.get("CardSpend", "u3") == ref.get("CardSpend", "u3") != {}


def test_row_errors_keep_the_callers_index(servers: list[BeavaProcess],
                                           shard_map: Path) -> None:
    rows = [dict(r) for r in ROWS[:20]]
    rows[13]["amount"] = "not a number"
    with ShardedClient(str(shard_map)) as sharded:
        result = sharded.push_many("Card", rows)
    assert [e["index"] for e in result["errors"]] == [13]
    assert result["errors"][0]["error"]["code"] == "invalid_event"
    assert result["acks"] == 19


def test_async_client_and_app_agree(servers: list[BeavaProcess], shard_map: Path) -> None:
    async def run() -> list[Any]:
        async with AsyncShardedClient(str(shard_map)) as sharded:
            await sharded.push_many("Card", ROWS[:30])
            await asyncio.gather(*(sharded.push("Card", row) for row in ROWS[30:]))
            return await sharded.batch_get(READS)

    rows = asyncio.run(run())
    with bv.App(shard_map=str(shard_map)) as app, _reference(servers) as ref:
        ref.push_many("Card", ROWS)
        assert rows == app.batch_get(READS) == ref.batch_get(READS)
        assert app.get("CardMerchant", ["u1", "m|1"]) == ref.get("CardMerchant",
                                                                  ["u1", "m|1"])
        assert "shards" in app.ping()


def test_app_takes_a_url_or_a_shard_map_not_both(shard_map: Path) -> None:
    with pytest.raises(ValueError, match="not both"):
        bv.App("tcp://127.0.0.1:1", shard_map=str(shard_map))
    with pytest.raises(ValueError, match="pool_size"):
        bv.App(shard_map=str(shard_map), pool_size=2)
    assert "shard_map=" in repr(bv.App(shard_map=str(shard_map)))
    assert json.loads(shard_map.read_text())["epoch"] == 1
