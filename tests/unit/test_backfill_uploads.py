"""Bounds of the backfill staging area (beava.server.backfill_uploads)."""

from __future__ import annotations

import json

import pytest

import beava as bv
from beava.catalogue.errors import BeavaError
from beava.dsl.compiler import compile_register_payload
from beava.engine.store import FeatureStore
from beava.server.backfill_uploads import (
    IDLE_SECONDS,
    MAX_STAGED_BYTES,
    MAX_UPLOADS,
    BackfillUploads,
)


@bv.event
class Ping:
    host: str


@bv.table(key="host")
def ByHost(p: Ping) -> bv.Table:
    return p.group_by("host").agg(n=bv.count())


@bv.table
def AllPings(p: Ping) -> bv.Table:
    return p.agg(n_all=bv.count())


NODES = compile_register_payload(Ping, ByHost, AllPings)["nodes"]


def uploads() -> tuple[BackfillUploads, list[float]]:
    store = FeatureStore(memory_governance_enforce=False)
    assert store.register(json.dumps({"nodes": NODES}).encode())[0] == 200
    now = [0.0]
    return BackfillUploads(store, monotonic=lambda: now[0]), now


def begin(area: BackfillUploads, table: str, size: int) -> str:
    reply = area.handle({"action": "begin", "table": table, "until_ms": 0, "size": size,
                         "nodes": NODES})
    upload: str = reply["upload"]
    return upload


def test_staged_bytes_are_bounded_across_uploads() -> None:
    area, _ = uploads()
    begin(area, "ByHost", MAX_STAGED_BYTES - 10)
    with pytest.raises(BeavaError) as info:
        begin(area, "AllPings", 11)
    assert info.value.code == "backfill_too_large" and info.value.status == 413
    begin(area, "AllPings", 10)
    assert area.staged_bytes == MAX_STAGED_BYTES and MAX_UPLOADS >= 2


def test_idle_uploads_are_dropped_when_another_begins() -> None:
    area, now = uploads()
    first = begin(area, "ByHost", 5)
    now[0] += IDLE_SECONDS + 1
    begin(area, "AllPings", 5)
    with pytest.raises(BeavaError) as info:
        area.handle({"action": "commit", "upload": first})
    assert info.value.code == "backfill_upload_not_found"
