"""historical_features against a live server driven by the test clock.

The main test pushes one history (fraud-team's Txn and Login tables, plus a dedupe-keyed
event with a cold TTL, an event derivation, a composite-key table, an integer-key table
and a global table: all 54 operators, families A-H) to a test-mode server with the clock at
each event's time, reads every spine row's tables with the clock at the row's time, and
requires ``historical_features`` over the same rows to give exactly the same values.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install ./spark_connector)")

import beava as bv  # noqa: E402
from beava.offline import Pipeline  # noqa: E402
from beava_spark import ConversionError, historical_features  # noqa: E402
from tests.support import BeavaProcess  # noqa: E402

T0 = 1_700_000_000_000
HOUR = 3_600_000
WORKLOAD = Path(__file__).resolve().parents[2] / "bench" / "workloads" / "fraud-team.json"
FRAUD_NODES = ("Txn", "Login", "TxnByUser", "TxnByIp", "LoginByUser")
encode_json = msgspec.json.Encoder(order="sorted").encode


@bv.event(dedupe_key="click_id", dedupe_window="1h", cold_after="2h")
class Click:
    click_id: str
    user_id: str
    region: str
    item: str
    price: float
    qty: int
    ok: bool


@bv.event
def BigClick(c: Click) -> bv.Event:
    return c.filter(bv.col("price") > 20).with_columns(spend=bv.col("price") * bv.col("qty"))


@bv.table(key=["user_id", "region"])
def RegionSpend(c: BigClick) -> bv.Table:
    return c.group_by("user_id", "region").agg(
        big_n=bv.count(),
        big_ok_ratio=bv.ratio(where=bv.col("ok")),
        spend_sum_1h=bv.sum("spend", window="1h"),
        spend_hist=bv.histogram("spend", buckets=[50.0, 100.0, 200.0]),
        last_item=bv.last("item"),
        spend_max=bv.max("spend"),
    )


@bv.table(key="qty")
def ByQty(c: Click) -> bv.Table:
    return c.group_by("qty").agg(
        qty_n=bv.count(), qty_users=bv.n_unique("user_id"),
        qty_first_price=bv.first("price"), qty_ok_n=bv.count(where=bv.col("ok")),
    )


@bv.table(key="user_id")
def UserClicks(c: Click) -> bv.Table:
    return c.group_by("user_id").agg(
        clicks=bv.count(), clicks_1h=bv.count(window="1h"), click_items=bv.last_n("item", n=3),
        price_q90=bv.quantile("price", q=0.9), click_mix=bv.event_type_mix("item"),
    )


@bv.table
def AllClicks(c: Click) -> bv.Table:
    return c.agg(all_n=bv.count(), all_price=bv.sum("price"), all_top=bv.top_k("item", k=2),
                 all_users=bv.n_unique("user_id"), all_min_qty=bv.min("qty"))


def fraud_nodes() -> list[dict[str, Any]]:
    nodes = json.loads(WORKLOAD.read_text())["register"]["nodes"]
    return [n for n in nodes if n["name"] in FRAUD_NODES]


def registry() -> list[Any]:
    return [*fraud_nodes(), Click, BigClick, RegionSpend, ByQty, UserClicks, AllClicks]


TABLES = ("TxnByUser", "TxnByIp", "LoginByUser", "RegionSpend", "ByQty", "UserClicks",
          "AllClicks")


def history(seed: int = 7) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
    """Events (each with ``ts`` and a global ``seq``) and spine rows over three days; many
    events share a millisecond, some click ids repeat (within and beyond the dedupe
    window), some users pause for longer than the cold TTL."""
    rnd = random.Random(seed)
    users = [f"u{i}" for i in range(8)]
    ips = [f"10.0.0.{i}" for i in range(5)]
    span = 72 * HOUR

    def moment() -> int:  # a coarse grid, so that times collide
        return T0 + rnd.randrange(0, span // 60_000) * 60_000 + rnd.choice((0, 0, 0, 17))

    txns = []
    for _ in range(700):
        user = rnd.choice(users)
        ts = moment()
        txns.append({
            "ts": ts, "event_time": ts, "user_id": user, "card_fp": f"c{rnd.randrange(10)}",
            "device_id": f"d{rnd.randrange(6)}", "ip_address": rnd.choice(ips),
            "ip_block": f"b{rnd.randrange(3)}", "merchant_id": f"m{rnd.randrange(9)}",
            "amount": round(rnd.uniform(1, 900), 2), "currency": rnd.choice(["USD", "EUR"]),
            "mcc": rnd.choice(["5411", "5812", "7995"]),
            "card_country": rnd.choice(["US", "FR"]), "ip_country": rnd.choice(["US", "DE"]),
            "billing_country": "US", "lat": rnd.uniform(25, 49), "lon": rnd.uniform(-124, -67),
            "declined": rnd.randrange(2), "is_3ds": rnd.randrange(2),
            "card_funding": rnd.choice(["credit", "debit"]), "ssn_hash": f"s{rnd.randrange(4)}",
        })
    logins = []
    for _ in range(250):
        ts = moment()
        logins.append({
            "ts": ts, "event_time": ts, "user_id": rnd.choice(users),
            "device_id": f"d{rnd.randrange(6)}", "ip_address": rnd.choice(ips),
            "success": rnd.randrange(2), "user_agent": rnd.choice(["ff", "chrome", "curl"]),
            "lat": rnd.uniform(25, 49), "lon": rnd.uniform(-124, -67),
        })
    clicks = []
    for i in range(450):
        ts = moment()
        # one click id in five is reused: a replay within the hour, or a new one later
        click_id = f"k{rnd.randrange(i)}" if i and rnd.random() < 0.2 else f"k{i}"
        clicks.append({
            "ts": ts, "click_id": click_id, "user_id": rnd.choice(users),
            "region": rnd.choice(["north", "south|east"]), "item": rnd.choice("abcde"),
            "price": round(rnd.uniform(1, 120), 1), "qty": rnd.randrange(1, 4),
            "ok": rnd.random() < 0.6,
        })
    # replays of recent clicks a few minutes later, under other users (dedupe is global)
    for source in rnd.sample(clicks, 40):
        clicks.append({**source, "ts": source["ts"] + rnd.choice((0, 60_000, 7 * HOUR)),
                       "user_id": rnd.choice(users)})
    events = {"Txn": txns, "Login": logins, "Click": clicks}
    timeline = sorted((row["ts"], name, i) for name, rows in events.items()
                      for i, row in enumerate(rows))
    for seq, (_, name, i) in enumerate(timeline):  # a global order: the server's
        events[name][i]["seq"] = seq
    event_times = [t for t, _, _ in timeline]
    spine = []
    for rid in range(160):
        ts = rnd.choice(event_times) if rid % 2 else moment() + rnd.randrange(60_000)
        spine.append({"rid": rid, "ts": ts, "user_id": rnd.choice(users + ["nobody"]),
                      "ip_address": rnd.choice(ips), "region": rnd.choice(["north", "south|east"]),
                      "qty": rnd.randrange(1, 5), "label": rnd.randrange(2)})
    return events, spine


def fields_of(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in ("ts", "seq")}


def replay_on_server(app: bv.App, events: dict[str, list[dict[str, Any]]],
                     spine: list[dict[str, Any]], tables: dict[str, tuple[str, ...]],
                     *, inclusive: bool = True) -> dict[int, dict[str, Any]]:
    """Push every event with the clock at its time, in (time, seq) order; GET each spine
    row's tables with the clock at its time (after the events of that millisecond, or
    before them when not inclusive). Returns ``{rid: {feature: value}}``."""
    spine_phase = 1 if inclusive else 0
    timeline: list[tuple[int, int, int, str, dict[str, Any]]] = []
    for name, rows in events.items():
        timeline += [(row["ts"], 1 - spine_phase, row["seq"], name, row) for row in rows]
    timeline += [(row["ts"], spine_phase, row["rid"], "", row) for row in spine]
    timeline.sort(key=lambda item: item[:3])
    clock = None
    out: dict[int, dict[str, Any]] = {}
    for ts, _, _, name, row in timeline:
        if ts != clock:
            app.set_time(ts)
            clock = ts
        if name:
            app.push(name, fields_of(row))
            continue
        found: dict[str, Any] = {}
        for table, keys in tables.items():
            key = [row[k] for k in keys] if keys else None
            found.update(app.get(table, key))
        out[row["rid"]] = found
    return out


SPINE_SCHEMA = ("rid long, ts long, user_id string, ip_address string, region string, "
                "qty long, label long")
SPINE_SCHEMA_COLUMNS = [part.split()[0] for part in SPINE_SCHEMA.split(",")]
TXN_SCHEMA = ("ts long, seq long, event_time long, user_id string, card_fp string, "
              "device_id string, ip_address string, ip_block string, merchant_id string, "
              "amount double, currency string, mcc string, card_country string, "
              "ip_country string, billing_country string, lat double, lon double, "
              "declined long, is_3ds long, card_funding string, ssn_hash string")
LOGIN_SCHEMA = ("ts long, seq long, event_time long, user_id string, device_id string, "
                "ip_address string, success long, user_agent string, lat double, lon double")
CLICK_SCHEMA = ("ts long, seq long, click_id string, user_id string, region string, "
                "item string, price double, qty long, ok boolean")


def frame(spark: Any, rows: list[dict[str, Any]], schema: str) -> Any:
    names = [part.split()[0] for part in schema.split(",")]
    return spark.createDataFrame([tuple(r[n] for n in names) for r in rows], schema)


def event_frames(spark: Any, events: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return {"Txn": frame(spark, events["Txn"], TXN_SCHEMA),
            "Login": frame(spark, events["Login"], LOGIN_SCHEMA),
            "Click": frame(spark, events["Click"], CLICK_SCHEMA)}


def same(kind: str, mine: Any, served: Any) -> bool:
    """Whether a historical value is the served one: exactly (JSON text for lists/maps)."""
    if kind == "json":
        return mine == (None if served is None else encode_json(served).decode())
    if isinstance(served, float) and isinstance(mine, float):
        return mine == served
    return mine == served and type(mine) is type(served)


@pytest.fixture
def app(clean_server: BeavaProcess) -> Iterator[bv.App]:
    with bv.App(f"tcp://{clean_server.addrs['tcp']}") as remote:
        remote.register(*registry())
        yield remote
        remote.reset()  # also returns the clock to the wall clock


def test_equals_a_server_replayed_with_the_test_clock(spark: Any, app: bv.App) -> None:

    events, spine = history()
    pipeline = Pipeline(registry())
    plans = {name: pipeline.table(name) for name in TABLES}
    served = replay_on_server(app, events, spine, {n: p.keys for n, p in plans.items()})
    out = historical_features(frame(spark, spine, SPINE_SCHEMA), event_frames(spark, events),
                              registry(), tables=list(TABLES), order_col="seq")
    features = [(f.name, f.kind) for plan in plans.values() for f in plan.features]
    assert out.columns == [*SPINE_SCHEMA_COLUMNS, *[name for name, _ in features]]
    rows = {row["rid"]: row.asDict() for row in out.collect()}
    assert sorted(rows) == [r["rid"] for r in spine]
    checked = nonnull = 0
    for source in spine:
        mine, theirs = rows[source["rid"]], served[source["rid"]]
        assert {k: mine[k] for k in SPINE_SCHEMA_COLUMNS} == {
            k: source[k] for k in SPINE_SCHEMA_COLUMNS}
        for name, kind in features:
            assert same(kind, mine[name], theirs.get(name)), (
                source, name, mine[name], theirs.get(name))
            checked += 1
            nonnull += mine[name] is not None
    # the history reaches most features: not a comparison of empty rows
    assert checked == len(spine) * len(features) and nonnull > checked * 0.6
    kinds = {kind for _, kind in features}
    assert kinds == {"long", "double", "boolean", "string", "json"}
    by_rid = {r["rid"]: r for r in spine}
    # the composite key with a '|' inside a part, and a key nobody has
    assert any(rows[rid]["big_n"] for rid in rows if by_rid[rid]["region"] == "south|east")
    assert all(rows[rid]["clicks"] is None for rid in rows
               if by_rid[rid]["user_id"] == "nobody")



def test_not_inclusive_and_the_default_order_equal_the_server(spark: Any, app: bv.App) -> None:
    """inclusive=False against reads made before the events of their millisecond; without
    order_col, same-millisecond events go by event name, then input order: the order the
    server got them in (``seq`` was given in that order)."""

    events, spine = history(seed=11)
    tables = ("UserClicks", "AllClicks", "RegionSpend", "LoginByUser")
    pipeline = Pipeline(registry())
    plans = [pipeline.table(name) for name in tables]
    served = replay_on_server(app, events, spine, {p.name: p.keys for p in plans},
                              inclusive=False)
    out = historical_features(frame(spark, spine, SPINE_SCHEMA), event_frames(spark, events),
                              registry(), tables=list(tables), inclusive=False)
    rows = {row["rid"]: row.asDict() for row in out.collect()}
    assert len(rows) == len(spine)
    for rid, theirs in served.items():
        for plan in plans:
            for feature in plan.features:
                assert same(feature.kind, rows[rid][feature.name], theirs.get(feature.name)), (
                    rid, feature.name)


@bv.event
class Tap:
    user_id: str
    value: float


@bv.table(key="user_id")
def Taps(t: Tap) -> bv.Table:
    return t.group_by("user_id").agg(taps=bv.count(), first_value=bv.first("value"),
                                     last_value=bv.last("value"),
                                     recent=bv.last_n("value", n=4), taps_1m=bv.count(window="1m"))


def test_inclusive_and_same_millisecond_order(spark: Any) -> None:
    taps = spark.createDataFrame(
        [("u1", 1.0, T0, 3), ("u1", 2.0, T0, 1), ("u1", 3.0, T0, 2), ("u1", 4.0, T0 + 5, 0),
         ("u2", 9.0, T0 + 90_000, 0)],
        "user_id string, value double, ts long, prio long")
    spine = spark.createDataFrame(
        [(1, "u1", T0), (2, "u1", T0 + 5), (3, "u2", T0), (4, "u1", T0 + 90_000),
         (5, "u2", T0 + 90_000)], "rid int, user_id string, ts long")

    def run(**options: Any) -> dict[int, tuple[Any, ...]]:
        out = historical_features(spine, {"Tap": taps}, [Tap, Taps], **options)
        assert out.columns == ["rid", "user_id", "ts", "first_value", "last_value", "recent",
                               "taps", "taps_1m"]
        return {r["rid"]: tuple(r)[3:] for r in out.collect()}

    # input order within the millisecond: 1.0, 2.0, 3.0
    assert run() == {
        1: (1.0, 3.0, "[1.0,2.0,3.0]", 3, 3), 2: (1.0, 4.0, "[1.0,2.0,3.0,4.0]", 4, 4),
        3: (None,) * 5, 4: (1.0, 4.0, "[1.0,2.0,3.0,4.0]", 4, 0),
        5: (9.0, 9.0, "[9.0]", 1, 1)}
    # order_col: 2.0 (1), 3.0 (2), 1.0 (3); not inclusive: events at the row's time left out
    assert run(order_col="prio", inclusive=False) == {
        1: (None,) * 5, 2: (2.0, 1.0, "[2.0,3.0,1.0]", 3, 3),
        3: (None,) * 5, 4: (2.0, 4.0, "[2.0,3.0,1.0,4.0]", 4, 0), 5: (None,) * 5}


def test_timestamp_time_columns(spark: Any) -> None:
    from pyspark.sql import functions as f

    taps = spark.createDataFrame(
        [("u1", 1.0, T0), ("u1", 2.0, T0 + 30_000), ("u1", 3.0, T0 + 61_500)],
        "user_id string, value double, ms long")
    spine = spark.createDataFrame([(1, "u1", T0 + 61_000), (2, "u1", T0 + 61_999)],
                                  "rid int, user_id string, ms long")

    def as_timestamp(df: Any) -> Any:
        return df.withColumn("at", f.timestamp_millis("ms")).drop("ms")

    by_ms = historical_features(spine, {"Tap": taps}, [Tap, Taps], time_col="ms")
    by_ts = historical_features(as_timestamp(spine), {"Tap": as_timestamp(taps)}, [Tap, Taps],
                                time_col="at")
    assert dict(by_ts.schema["at"].jsonValue()) == dict(
        as_timestamp(spine).schema["at"].jsonValue())
    expected = {1: (1.0, 2.0, 2, 1), 2: (1.0, 3.0, 3, 2)}
    for out in (by_ms, by_ts):
        got = {r["rid"]: (r["first_value"], r["last_value"], r["taps"], r["taps_1m"])
               for r in out.collect()}
        assert got == expected


def test_errors_name_the_problem(spark: Any) -> None:
    taps = spark.createDataFrame([("u1", 1.0, T0)], "user_id string, value double, ts long")
    spine = spark.createDataFrame([("u1", T0)], "user_id string, ts long")
    reg = [Tap, Taps]
    with pytest.raises(ValueError, match="unknown table 'Nope'"):
        historical_features(spine, {"Tap": taps}, reg, tables=["Nope"])
    with pytest.raises(ValueError, match="no key column 'user_id' of table Taps"):
        historical_features(spine.drop("user_id"), {"Tap": taps}, reg)
    with pytest.raises(ValueError, match="the spine has no time column 'when'"):
        historical_features(spine, {"Tap": taps}, reg, time_col="when")
    with pytest.raises(ValueError, match=r"events\['Tap'\] has no time column 'ts'"):
        historical_features(spine, {"Tap": taps.drop("ts")}, reg)
    with pytest.raises(ValueError, match="time column 'ts' is string"):
        historical_features(spine.withColumn("ts", spine.ts.cast("string")), {"Tap": taps}, reg)
    with pytest.raises(ValueError, match="fed by event Tap, which events does not give"):
        historical_features(spine, {}, reg)
    with pytest.raises(ValueError, match="'Visit', which the registry does not declare"):
        historical_features(spine, {"Tap": taps, "Visit": taps}, reg)
    with pytest.raises(ConversionError, match="value"):  # a required field without a column
        historical_features(spine, {"Tap": taps.drop("value")}, reg)
    with pytest.raises(ValueError, match="no order column 'prio'"):
        historical_features(spine, {"Tap": taps}, reg, order_col="prio")
    with pytest.raises(ValueError, match="spine has a column 'taps'"):
        historical_features(spine.withColumn("taps", spine.ts), {"Tap": taps}, reg)
    # a row the server would refuse fails the job, naming the event, the code and the row
    bad = spark.createDataFrame([(None, 1.0, T0)], "user_id string, value double, ts long")
    with pytest.raises(Exception, match=r"event Tap at 1700000000000 ms is refused .*"
                       r"invalid_event"):
        historical_features(spine, {"Tap": bad}, reg).collect()


@bv.event
class Visit:
    user_id: str
    page: str
    region: str
    device: str
    host: str
    ms: float


@bv.table(key="user_id")
def VisitsByUser(v: Visit) -> bv.Table:
    return v.group_by("user_id").agg(user_visits=bv.count())


@bv.table(key="page")
def VisitsByPage(v: Visit) -> bv.Table:
    return v.group_by("page").agg(page_visits=bv.count())


@bv.table(key="region")
def VisitsByRegion(v: Visit) -> bv.Table:
    return v.group_by("region").agg(region_ms=bv.sum("ms"))


@bv.table(key="device")
def VisitsByDevice(v: Visit) -> bv.Table:
    return v.group_by("device").agg(device_visits=bv.count())


@bv.table(key="host")
def VisitsByHost(v: Visit) -> bv.Table:
    return v.group_by("host").agg(host_ms=bv.max("ms"))


VISIT_TABLES = [VisitsByUser, VisitsByPage, VisitsByRegion, VisitsByDevice, VisitsByHost]


def test_one_exchange_whatever_the_number_of_tables(spark: Any) -> None:
    """Every table's events go through one shuffle (and the features of a spine row are
    joined back through one more): the plan does not grow with the tables asked."""
    visits = spark.createDataFrame(
        [("u1", "p1", "r1", "d1", "h1", 3.0, T0), ("u2", "p1", "r2", "d1", "h2", 4.0, T0 + 1)],
        "user_id string, page string, region string, device string, host string, ms double, "
        "ts long")
    spine = visits.select("user_id", "page", "region", "device", "host",
                          (visits.ts + 10).alias("ts"))

    def exchanges(tables: list[Any]) -> int:
        out = historical_features(spine, {"Visit": visits}, [Visit, *VISIT_TABLES],
                                  tables=tables)
        plan = out._jdf.queryExecution().executedPlan().toString()
        return sum(line.lstrip(" +-:").startswith("Exchange ") for line in plan.splitlines())

    assert exchanges(VISIT_TABLES[:1]) == 1
    assert exchanges(VISIT_TABLES[:2]) == exchanges(VISIT_TABLES) == 2
    out = historical_features(spine, {"Visit": visits}, [Visit, *VISIT_TABLES])
    got = {r["user_id"]: (r["user_visits"], r["page_visits"], r["region_ms"],
                          r["device_visits"], r["host_ms"]) for r in out.collect()}
    assert got == {"u1": (1, 2, 3.0, 2, 3.0), "u2": (1, 2, 4.0, 2, 4.0)}


def test_value_columns_are_typed_slots_as_many_as_the_widest_event_needs() -> None:
    from beava_spark.replay_exchange import ValueColumns

    values = ValueColumns.of({"Pay": {"user": "str", "amount": "f64", "tag": "str"},
                              "Visit": {"user": "str", "at": "datetime", "page": "str",
                                        "ok": "bool", "n": "i64"}})
    # three text slots (Visit's), one of each other type: not one column per field
    assert values.types == ("boolean", "double", "long", "string", "string", "string")
    assert values.fields("Pay", {"user", "amount", "tag"}) == ((3, "user"), (1, "amount"),
                                                              (4, "tag"))
    assert values.fields("Visit", {"page", "n"}) == ((5, "page"), (2, "n"))
