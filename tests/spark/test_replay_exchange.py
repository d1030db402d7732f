"""The exchange of an offline replay: one row per (event, bucket) with a mask of the key
groups whose keys fall in that bucket, and buckets that never share a task."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install ./spark_connector)")

import beava as bv  # noqa: E402
from beava.offline import Pipeline  # noqa: E402
from beava_spark import historical_features  # noqa: E402
from beava_spark import replay_exchange as exchange  # noqa: E402
from tests.spark.test_historical import T0, VISIT_TABLES, Visit  # noqa: E402

VISIT_KEYS = ("user_id", "page", "region", "device", "host")


def test_bucket_b_goes_to_partition_b(spark: Any) -> None:
    from pyspark.sql import functions as f

    for buckets in (2, 3, 16):
        keys = spark.createDataFrame([(f"k{i}",) for i in range(200)], "k string")
        parts = (keys.select(f.expr(exchange.bucket_of("k", buckets)).alias(exchange.BK),
                             f.pmod(f.xxhash64("k"), f.lit(buckets)).alias("b"))
                 .repartition(buckets, exchange.BK)
                 .select("b", f.spark_partition_id().alias("p")).distinct().collect())
        assert {(r["b"], r["p"]) for r in parts} == {(b, b) for b in range(buckets)}


def _visits(spark: Any) -> Any:
    rows = [(f"u{i}", f"p{i % 7}", f"r{i % 3}", f"d{i % 5}", f"h{i % 11}", float(i), T0 + i)
            for i in range(60)]
    return spark.createDataFrame(rows, "user_id string, page string, region string, "
                                       "device string, host string, ms double, ts long")


def _exchange_rows(spark: Any, buckets: int) -> tuple[list[Any], list[exchange.KeyGroup]]:
    """The exchange rows of ``_visits`` for the five Visit tables (one key group each)."""
    pipeline = Pipeline([Visit, *VISIT_TABLES])
    groups = exchange.key_groups(pipeline, [pipeline.table(t._name) for t in VISIT_TABLES])
    stream, wire = exchange.event_stream(_visits(spark), pipeline, "Visit", "ts", None,
                                         ValueError)
    values = exchange.ValueColumns.of({"Visit": wire})
    frames = exchange.event_rows(stream, wire, groups, "Visit", pipeline, 0, ValueError,
                                 values, buckets)
    return [r for frame in frames for r in frame.collect()], groups


def test_an_event_is_one_row_per_bucket_of_its_groups_with_their_bits(spark: Any) -> None:
    from pyspark.sql import functions as f

    # one bucket: every group's key falls in it, one row per event holds every bit
    rows, groups = _exchange_rows(spark, 1)
    assert len(groups) == 5 and len(rows) == 60
    assert {r[exchange.M] for r in rows} == {0b11111}
    assert {r[exchange.W] for r in rows} == {0}
    # 16 buckets: a row per distinct bucket of the event's five keys, its mask the bits of
    # the groups whose key falls in it (and every event keeps all its values)
    buckets = 16
    rows, groups = _exchange_rows(spark, buckets)
    keys = exchange.partition_keys(buckets)
    got: dict[int, dict[int, int]] = {}
    for r in rows:
        assert r[exchange.V + "0"] is not None  # ms, whichever groups the row is for
        assert keys.index(r[exchange.BK]) not in got.setdefault(r[exchange.S], {})
        got[r[exchange.S]][keys.index(r[exchange.BK])] = r[exchange.M]
    expected: dict[int, dict[int, int]] = {}
    visits = _visits(spark).select(f.monotonically_increasing_id().alias("s"), *[
        f.pmod(f.xxhash64(k), f.lit(buckets)).alias(k) for k in VISIT_KEYS])
    for visit in visits.collect():
        mine = expected.setdefault(visit["s"], {})
        for group, key in zip(groups, VISIT_KEYS, strict=True):
            mine[visit[key]] = mine.get(visit[key], 0) | 1 << group.bit
    assert got == expected
    assert any(len(buckets_of) < 5 for buckets_of in got.values())  # some share a bucket
    assert any(len(buckets_of) > 1 for buckets_of in got.values())  # and some do not
    assert len(rows) < 5 * 60


def test_groups_beyond_one_mask_word_take_rows_of_their_own(
        spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """With two groups per mask word, the five Visit groups take three words: an event is
    a row per (bucket, word), and the features are those of one word for all."""
    visits = _visits(spark)
    spine = visits.select(*VISIT_KEYS, (visits.ts + 10).alias("ts"))

    def features() -> list[tuple[Any, ...]]:
        out = historical_features(spine, {"Visit": visits}, [Visit, *VISIT_TABLES])
        return sorted(tuple(r) for r in out.collect())

    expected = features()
    monkeypatch.setattr(exchange, "WORD_BITS", 2)
    rows, groups = _exchange_rows(spark, 1)
    assert [(g.word, g.bit) for g in groups] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)]
    assert sorted((r[exchange.W], r[exchange.M]) for r in rows if r[exchange.S] == 0) == [
        (0, 0b11), (1, 0b11), (2, 0b1)]
    assert features() == expected
    # u0's row at T0 + 10 sees visits 0..10: its one visit, page p0's 0 and 7, region r0's
    # ms 0 + 3 + 6 + 9, device d0's 0, 5 and 10, host h0's ms 0
    assert expected[0][6:] == (1, 2, 18.0, 3, 0.0)


def test_a_spine_row_is_one_row_per_bucket_of_its_keys_holding_every_key(spark: Any) -> None:
    from beava.offline import READ
    from beava_spark.historical import _spine_rows

    pipeline = Pipeline([Visit, *VISIT_TABLES])
    groups = exchange.key_groups(pipeline, [pipeline.table(t._name) for t in VISIT_TABLES])
    spine = _visits(spark).select(*VISIT_KEYS, "ts")
    values = exchange.ValueColumns.of({"Visit": {"ms": "f64"}}, keys=5)
    rows = _spine_rows(spine, groups, "ts", 1, values, 1).collect()
    assert len(rows) == 60  # one bucket: one row per spine row, for all five groups
    keys = [values.names[values.key_slot(i)] for i in range(5)]
    row = next(r for r in rows if r[keys[0]] == "u7")
    assert (row[exchange.M], row[exchange.E]) == (0b11111, READ)
    assert [row[key] for key in keys] == ["u7", "p0", "r1", "d2", "h7"]  # one per key tuple
    assert row["__bv_r"]["user_id"] == "u7"  # the spine's columns, once
    rows = _spine_rows(spine, groups, "ts", 1, values, 16).collect()
    assert 60 < len(rows) < 5 * 60
    by_row: dict[int, int] = {}
    for r in rows:
        assert not by_row.get(r[exchange.S], 0) & r[exchange.M]  # each group once
        by_row[r[exchange.S]] = by_row.get(r[exchange.S], 0) | r[exchange.M]
    assert set(by_row.values()) == {0b11111}
    assert sum(r["__bv_r"] is not None for r in rows) == 60


def test_a_backfill_of_groups_over_several_mask_words(
        spark: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each group's store takes the rows of its word and bit only, and counts them."""
    import beava as bv
    from beava_spark import backfill
    from tests.support import BeavaProcess

    monkeypatch.setattr(exchange, "WORD_BITS", 2)
    server = BeavaProcess("--data-dir", str(tmp_path), memory_only=False)
    try:
        url = f"tcp://{server.addrs['tcp']}"
        with bv.App(url) as app:
            app.register(Visit, *VISIT_TABLES)
            totals = backfill({"Visit": _visits(spark)}, [Visit, *VISIT_TABLES], url)
            assert {name: t.events for name, t in totals.tables.items()} == {
                t._name: 60 for t in VISIT_TABLES}
            assert {name: t.entities for name, t in totals.tables.items()} == {
                "VisitsByUser": 60, "VisitsByPage": 7, "VisitsByRegion": 3,
                "VisitsByDevice": 5, "VisitsByHost": 11}
            assert app.get("VisitsByPage", "p0")["page_visits"] == 9  # visits 0, 7, ... 56
            assert app.get("VisitsByRegion", "r0")["region_ms"] == sum(range(0, 60, 3))
            assert app.get("VisitsByHost", "h0")["host_ms"] == 55.0  # the max of 0 ... 55
    finally:
        server.terminate()


@bv.event
class Reading:
    label: str
    n: int
    m: int
    on: bool


@bv.table(key=["label", "n"])
def ByLabelAndN(r: Reading) -> bv.Table:
    return r.group_by("label", "n").agg(label_readings=bv.count())


@bv.table(key="on")
def ByOn(r: Reading) -> bv.Table:
    return r.group_by("on").agg(on_readings=bv.count())


@bv.table(key="m")
def ByM(r: Reading) -> bv.Table:
    return r.group_by("m").agg(m_readings=bv.count())


def test_a_spine_rows_keys_are_the_stored_keys_of_each_key_type(spark: Any) -> None:
    """A read row's key per key tuple is what the server makes of a GET with the spine's
    values as the key's parts (spec/wire.md §7.1): each part's keystr (a string as it is,
    an integer's digits, true/false, a float's text: a spine may hold a key in a double
    column) with ``|`` written ``%7C``, the parts joined by ``|``; null when a part is null
    or a float is not finite."""
    from beava.engine.state.keys import keystr
    from beava_spark.historical import _spine_rows

    pipeline = Pipeline([Reading, ByLabelAndN, ByOn, ByM])
    groups = exchange.key_groups(pipeline, [pipeline.table(name) for name in
                                            ("ByLabelAndN", "ByOn", "ByM")])
    spine = spark.createDataFrame(
        [("a|b", 7, True, 0.1, T0), ("plain", -3, False, 1e21, T0 + 1),
         (None, 5, True, float("nan"), T0 + 2), ("c", None, None, -2.5, T0 + 3)],
        "label string, n long, on boolean, m double, ts long")
    values = exchange.ValueColumns.of({"Reading": {"label": "str", "n": "i64"}}, keys=3)
    rows = _spine_rows(spine, groups, "ts", 1, values, 1).collect()

    def stored(*parts: Any) -> str | None:
        if any(p is None or p != p for p in parts):
            return None
        return "|".join(str(keystr(p)).replace("|", "%7C") for p in parts)

    # three key tuples, in the event's string column and two more
    assert values.types == ("long", "string", "string", "string")
    got = {r["__bv_r"]["ts"]: tuple(r[values.names[values.key_slot(i)]] for i in range(3))
           for r in rows}
    assert got == {
        T0: (stored("a|b", 7), stored(True), stored(0.1)),
        T0 + 1: (stored("plain", -3), stored(False), stored(1e21)),
        T0 + 2: (None, stored(True), None),
        T0 + 3: (stored("c", None), None, stored(-2.5))}
    assert got[T0] == ("a%7Cb|7", "true", "0.1")
