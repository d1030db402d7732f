"""beava.offline: the one door into the engine for tools away from a server (the Spark
connector's historical_features and backfill)."""

from __future__ import annotations

import ast
from pathlib import Path

import msgspec
import pytest

import beava as bv
from beava.offline import FeatureInfo, Pipeline, Replay, ReplayRefused, float_key
from tests.support import REPO

HOUR = 3_600_000


@bv.event(dedupe_key="txn_id")
class Pay(bv.Event):
    txn_id: str
    user: str
    card: str
    amount: float
    tag: str


@bv.table(key="user")
def PayUser(p: Pay) -> bv.Table:  # noqa: N802
    return p.group_by("user").agg(n_1h=bv.count(window="1h"), spend=bv.sum("amount"),
                                  top_tag=bv.max("tag"))


@bv.table(key="card")
def BigCard(p: Pay) -> bv.Table:  # noqa: N802
    return p.filter(bv.col("amount") > 100).group_by("card").agg(n=bv.count())


def _pay(txn: str, user: str = "u1", amount: float = 10.0, card: str = "c1"
         ) -> dict[str, object]:
    return {"txn_id": txn, "user": user, "card": card, "amount": amount, "tag": "t" + txn}


def test_pipeline_describes_tables_as_the_server_compiles_them() -> None:
    pipeline = Pipeline([Pay, PayUser, BigCard])
    assert pipeline.table_names == ["PayUser", "BigCard"]
    assert set(pipeline.events) == {"Pay"}
    user = pipeline.table("PayUser")
    assert (user.source, user.keys, user.chained, user.events) == ("Pay", ("user",), False,
                                                                   ("Pay",))
    assert user.features == (FeatureInfo("n_1h", "long"), FeatureInfo("spend", "double"),
                             FeatureInfo("top_tag", "string"))
    card = pipeline.table("BigCard")
    assert card.chained and card.keys == ("card",)
    names = [n["name"] for n in msgspec.json.decode(card.payload)["nodes"]]
    assert "PayUser" not in names and "BigCard" in names and "Pay" in names
    events_only = msgspec.json.decode(pipeline.events_payload())["nodes"]
    assert [n["name"] for n in events_only] == ["Pay"]


def test_pipeline_refuses_what_the_server_refuses() -> None:
    bad = {"nodes": [{"kind": "event", "name": "E", "schema": {"fields": {"k": "nope"}}}]}
    with pytest.raises(ValueError, match="does not register"):
        Pipeline(bad)


def test_replay_pushes_at_their_times_and_reads_at_a_time() -> None:
    pipeline = Pipeline([Pay, PayUser, BigCard])
    replay = Replay(pipeline.table("PayUser").payload)
    assert replay.push("Pay", 1_000, _pay("a")) is False
    assert replay.push("Pay", HOUR // 2, _pay("b", amount=5)) is False
    assert replay.push("Pay", HOUR // 2, _pay("a")) is True  # a dedupe replay: not applied
    row = replay.get("PayUser", ["u1"], HOUR // 2)
    assert row == {"n_1h": 2, "spend": 15.0, "top_tag": "tb"}
    later = replay.get("PayUser", ["u1"], HOUR + HOUR // 4)  # the first push left the window
    assert later["n_1h"] == 1 and later["spend"] == 15.0
    assert replay.get("PayUser", ["nobody"], 3_000) == {}
    assert replay.get("PayUser", [None], 3_000) == {}  # a key GET refuses: no row


def test_replay_refuses_what_a_push_would_refuse() -> None:
    replay = Replay(Pipeline([Pay, PayUser]).table("PayUser").payload)
    with pytest.raises(ReplayRefused) as refused:
        replay.push("Pay", 1_000, {"txn_id": "x", "user": "u", "card": "c", "amount": "ten",
                                   "tag": "t"})
    assert refused.value.code == "invalid_event" and refused.value.time_ms == 1_000
    with pytest.raises(ReplayRefused) as unknown:
        replay.push("Nope", 1_000, {})
    assert unknown.value.code == "event_not_found"


def test_key_of_runs_the_chain_and_the_key_function() -> None:
    pipeline = Pipeline([Pay, BigCard])
    replay = Replay(pipeline.table("BigCard").payload)
    assert replay.key_of("BigCard", "Pay", 1, _pay("a", amount=500, card="c|2")) == "c|2"
    assert replay.key_of("BigCard", "Pay", 1, _pay("b", amount=50)) is None  # filtered out
    assert replay.get("BigCard", ["c|2"], 10) == {}  # key_of applies nothing
    with pytest.raises(ReplayRefused):
        replay.key_of("BigCard", "Pay", 1, {"user": "u"})


def test_float_key_is_the_servers_key_text() -> None:
    assert float_key(2.5) == "2.5" and float_key(3.0) == "3.0"
    assert float_key(float("nan")) is None and float_key(None) is None


def test_state_is_the_table_dump_the_backfill_operation_takes() -> None:
    replay = Replay(Pipeline([Pay, PayUser]).table("PayUser").payload)
    empty = msgspec.msgpack.decode(replay.state("PayUser"))
    replay.push("Pay", 1_000, _pay("a"))
    full = msgspec.msgpack.decode(replay.state("PayUser"))
    assert full != empty
    assert "u1" in msgspec.json.encode(full).decode()


def test_the_spark_connector_enters_the_engine_through_beava_offline_only() -> None:
    reached: set[str] = set()
    for path in sorted((REPO / "spark_connector" / "beava_spark").glob("*.py")):
        for node in ast.walk(ast.parse(Path(path).read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            reached.update(n for n in names if n == "beava" or n.startswith("beava."))
    assert reached == {"beava.offline"}


_ARROW_TYPES = {str: "string", float: "float64", int: "int64", bool: "bool_"}


def _batch(rows: list[tuple[int, int | None, dict[str, object] | None, str | None]],
           event: str = "Pay"
           ) -> tuple[object, tuple[str], tuple[tuple[tuple[int, str], ...]]]:
    """``Replay.replay_batch``'s arguments for ``(code, time, fields, key)`` rows of
    ``event`` (code 0, the only one): one value column per (field, value type) met."""
    pa = pytest.importorskip("pyarrow")
    codes, times, bodies, keys = zip(*rows, strict=True)
    typed = list(dict.fromkeys((name, type(value)) for body in bodies if body
                               for name, value in body.items()))
    values = [pa.array([body.get(name) if body and type(body.get(name)) is kind else None
                        for body in bodies], getattr(pa, _ARROW_TYPES[kind])())
              for name, kind in typed]
    batch = pa.RecordBatch.from_arrays(
        [pa.array(codes, pa.int32()), pa.array(times, pa.int64()),
         pa.array(keys, pa.large_string()), *values],
        names=["code", "time", "key", *[f"v{i}" for i in range(len(values))]])
    return batch, (event,), (tuple((i, name) for i, (name, _) in enumerate(typed)),)


def test_replay_batch_applies_events_at_their_times_and_reads_as_get() -> None:
    from beava.offline import NO_READ, READ

    pipeline = Pipeline([Pay, PayUser, BigCard])
    payload = pipeline.payload(["PayUser", "BigCard"])
    pushes = [(1_000, _pay("a", amount=150.0)), (2_000, _pay("b", amount=5.0)),
              (HOUR + 1_500, _pay("c", user="u2", amount=300.0))]
    rows: list[tuple[int, int | None, dict[str, object] | None, str | None]] = [
        (0, t, p, None) for t, p in pushes[:2]]
    rows += [(READ, 2_000, None, "u1"), (READ, HOUR + 1_000, None, "c1"),
             (0, *pushes[2], None),
             (READ, HOUR + 1_500, None, "u1"), (NO_READ, HOUR + 2_000, None, "u2"),
             (READ, HOUR + 2_000, None, None)]
    user, card = pipeline.table("PayUser"), pipeline.table("BigCard")
    reads = [("PayUser", user.features), ("BigCard", card.features)]
    replay = Replay(payload)
    rows, arrays = replay.replay_batch(*_batch(rows), reads)
    columns = [array.to_pylist() for array in arrays]
    # the same history through the server's push and GET, one at a time
    live = Replay(payload)
    expected: list[list[object]] = [[] for _ in columns]

    def read(key: str, time_ms: int) -> None:
        values = [live.get("PayUser", [key], time_ms).get(f.name) for f in user.features]
        values += [live.get("BigCard", [key], time_ms).get(f.name) for f in card.features]
        for column, value in zip(expected, values, strict=True):
            column.append(value)

    for t, p in pushes[:2]:
        live.push("Pay", t, p)
    read("u1", 2_000)
    read("c1", HOUR + 1_000)
    live.push("Pay", *pushes[2])
    read("u1", HOUR + 1_500)
    assert rows == [2, 3, 5, 6, 7]
    assert [column[:3] for column in columns] == expected
    # (n_1h, spend, top_tag, n) after two pushes, an hour later, and after the third
    assert [[column[i] for column in columns] for i in range(3)] == [
        [2, 155.0, "tb", None], [None, None, None, 1], [0, 155.0, "tb", None]]
    assert all(column[3:] == [None, None] for column in columns)  # nothing read


def test_replay_batch_refuses_what_the_server_refuses() -> None:
    replay = Replay(Pipeline([Pay, PayUser]).table("PayUser").payload)
    good, bad = _pay("a"), {**_pay("b"), "amount": "lots"}
    with pytest.raises(ReplayRefused) as info:
        replay.replay_batch(*_batch([(0, 1_000, good, None), (0, 2_000, bad, None)]))
    assert (info.value.row, info.value.event, info.value.time_ms) == (1, "Pay", 2_000)
    with pytest.raises(ReplayRefused) as live:  # the code a live push answers
        Replay(Pipeline([Pay, PayUser]).table("PayUser").payload).push(
            "Pay", 2_000, bad)
    assert info.value.code == live.value.code
    assert replay.get("PayUser", ["u1"], 2_000)["spend"] == 10.0  # the row before applied
    with pytest.raises(ReplayRefused) as info:
        replay.replay_batch(*_batch([(0, None, good, None)]))
    assert (info.value.row, info.value.time_ms, info.value.code) == (0, None, "null_time")


def test_replay_batch_with_a_mask_takes_only_the_rows_of_its_bit() -> None:
    """Two stores share one batch: each applies and reads the rows whose mask has its
    bit, and a row of both is applied by both."""
    from beava.offline import READ

    pa = pytest.importorskip("pyarrow")
    payload = Pipeline([Pay, PayUser]).table("PayUser").payload
    rows: list[tuple[int, int | None, dict[str, object] | None, str | None]] = [
        (0, 1_000, _pay("a", amount=1.0), None), (0, 2_000, _pay("b", amount=2.0), None),
        (0, 3_000, _pay("c", amount=4.0), None), (READ, 4_000, None, "u1"),
        (READ, 5_000, None, "u1"), (0, 6_000, {"user": "refused"}, None)]
    batch, events, fields = _batch(rows)
    mask = pa.array([0b01, 0b10, 0b11, 0b01, 0b10, 0b100], pa.int64())
    reads = [("PayUser", (FeatureInfo("spend", "double"),))]
    first, second = Replay(payload), Replay(payload)
    for replay, bit, row, spend in ((first, 0, 3, 5.0), (second, 1, 4, 6.0)):
        rows, columns = replay.replay_batch(batch, events, fields, reads, mask, bit)
        assert (rows, [c.to_pylist() for c in columns]) == ([row], [[spend]])
    with pytest.raises(ReplayRefused) as info:  # the third bit's row is one the server refuses
        Replay(payload).replay_batch(batch, events, fields, reads, mask, 2)
    assert info.value.row == 5
    with pytest.raises(ValueError, match="must hold 6 values"):
        first.replay_batch(batch, events, fields, reads, mask.slice(1), 0)


@bv.event
class Shop(bv.Event):
    user: str
    amount: float
    qty: int
    gift: bool
    note: str | None
    region: str = "eu"


@bv.table(key="user")
def ShopUser(s: Shop) -> bv.Table:  # noqa: N802
    return s.group_by("user").agg(n=bv.count(), spend=bv.sum("amount"), units=bv.sum("qty"),
                                  top_region=bv.max("region"))


@bv.table(key="user")
def ShopNote(s: Shop) -> bv.Table:  # noqa: N802
    return s.group_by("user").agg(note=bv.last("note"), gifts=bv.count(where=bv.col("gift")))


@bv.table(key="region")
def BigShop(s: Shop) -> bv.Table:  # noqa: N802
    return s.filter(bv.col("amount") > 100).group_by("region").agg(big=bv.count(),
                                                                    top=bv.max("user"))


def test_replay_batch_takes_typed_values_as_a_push_takes_the_same_body() -> None:
    """Plain rows (C rows for ShopUser's store, dict rows for the others), an int in the
    f64 field, absent optional and defaulted fields, non-ASCII text: the state equals
    that of the same bodies pushed one by one; a refused row gets the push's code."""
    pipeline = Pipeline([Shop, ShopUser, ShopNote, BigShop])
    bodies: list[dict[str, object]] = [
        {"user": "u1", "amount": 12.5, "qty": 2, "gift": True, "region": "us", "note": "hi"},
        {"user": "u1", "amount": 3, "qty": 1, "gift": False},
        {"user": "zoë", "amount": 200.0, "qty": 5, "gift": True, "region": "ünï"},
        {"user": "u2", "amount": 150.0, "qty": -4, "gift": False, "region": "us"},
    ]
    for tables in (["ShopUser"], ["ShopNote", "BigShop"]):
        payload = pipeline.payload(tables)
        replay, live = Replay(payload), Replay(payload)
        replay.replay_batch(*_batch([(0, 1_000 * i, b, None) for i, b in enumerate(bodies)],
                                    "Shop"))
        for i, body in enumerate(bodies):
            live.push("Shop", 1_000 * i, dict(body))
        for table in tables:
            assert replay.state(table) == live.state(table)
        if "ShopUser" in tables:  # the int was summed
            assert replay.get("ShopUser", ["u1"], 5_000)["spend"] == 15.5
        for bad in ({"user": "u3", "qty": 1, "gift": True},  # no amount
                    {"user": "u3\x07", "amount": 1.0, "qty": 1, "gift": True},
                    {"user": "u3", "amount": 1.0, "qty": "1", "gift": True}):
            with pytest.raises(ReplayRefused) as info:
                Replay(payload).replay_batch(*_batch([(0, 1_000, bad, None)], "Shop"))
            with pytest.raises(ReplayRefused) as pushed:
                Replay(payload).push("Shop", 1_000, dict(bad))
            assert info.value.code == pushed.value.code


@bv.event
class Buy(bv.Event):
    user: str
    amount: float
    tag: str


@bv.table(key="user")
def BuyUser(b: Buy) -> bv.Table:  # noqa: N802
    return b.group_by("user").agg(
        n=bv.count(), spend=bv.sum("amount"), seen=bv.has_seen(), tag=bv.last("tag"),
        recent=bv.most_recent_n("tag", n=2),
        sizes=bv.histogram("amount", buckets=[0.0, 10.0, 100.0]))


def test_replay_batch_reads_into_arrow_arrays_of_each_kind() -> None:
    """Each read's features land in one Arrow array per feature, typed by its kind: a
    long, a double (an overflowing sum, inf, is null as GET's JSON has it), a boolean, a
    string, a list and a map as GET's JSON text; a key without a row (and a NO_READ row
    and a null key) gives nulls; a non-ASCII key finds its row."""
    pa = pytest.importorskip("pyarrow")
    from beava.offline import NO_READ, READ

    pipeline = Pipeline([Buy, BuyUser])
    table = pipeline.table("BuyUser")
    kinds = {f.name: f.kind for f in table.features}
    assert set(kinds.values()) == {"long", "double", "boolean", "string", "json"}
    pushes = [(1_000, {"user": "u1", "amount": 5.0, "tag": "a"}),
              (2_000, {"user": "u1", "amount": 50.0, "tag": "bé"}),
              (3_000, {"user": "zoë", "amount": 1e308, "tag": "z"}),
              (4_000, {"user": "zoë", "amount": 1e308, "tag": "z"})]
    rows: list[tuple[int, int | None, dict[str, object] | None, str | None]] = [
        (0, t, p, None) for t, p in pushes]
    keys = ["u1", "zoë", "nobody"]
    rows += [(READ, 5_000, None, key) for key in keys]
    rows += [(NO_READ, 5_000, None, "u1"), (READ, 5_000, None, None)]
    replay = Replay(table.payload)
    read_rows, arrays = replay.replay_batch(*_batch(rows, "Buy"),
                                            [("BuyUser", table.features)])
    assert read_rows == [4, 5, 6, 7, 8]
    types = {"long": pa.int64(), "double": pa.float64(), "boolean": pa.bool_(),
             "string": pa.string(), "json": pa.string()}
    got = {}
    for feature, array in zip(table.features, arrays, strict=True):
        assert isinstance(array, pa.Array) and array.type == types[feature.kind]
        array.validate(full=True)
        got[feature.name] = array.to_pylist()
    # what the server's GET answers, through its JSON
    live = Replay(table.payload)
    for t, p in pushes:
        live.push("Buy", t, p)
    encode = msgspec.json.Encoder(order="sorted").encode
    for i, key in enumerate(keys):
        row = msgspec.json.decode(encode(live.get("BuyUser", [key], 5_000)))
        for name, kind in kinds.items():
            value = row.get(name)
            if kind == "json" and value is not None:
                value = encode(value).decode()
            assert got[name][i] == value, (key, name)
    assert [got[name][0] for name in ("n", "spend", "seen", "tag", "recent", "sizes")] == [
        2, 55.0, True, "bé", '["a","bé"]', '{"0-10":1,"10-100":1,"<0":0,">=100":0}']
    assert got["spend"][1] is None and got["n"][1] == 2  # inf: null
    assert all(got[name][2:] == [None, None, None] for name in kinds)
