"""The table scan (docs/wire.md, an extension): POST /scan and opcode 0x0025 page through
every entity of a table; the clients' ``scan`` / ``scan_rows``."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

import beava as bv
from beava.engine.state.scan import MAX_SCAN_LIMIT, SCAN_PAGE_BYTES
from beava.protocol.messages import encode_json, encode_msgpack
from beava_client import AsyncHttpClient, AsyncTcpClient, HttpClient, ServerError, TcpClient
from beava_client.opcodes import CT_JSON, CT_MSGPACK, OP_ERROR, OP_GET_RESPONSE, OP_SCAN
from beava_client.pool import ClientPool
from tests.support import BeavaProcess, FrameConn, http_request


@bv.event
class Txn:
    user_id: str
    merchant: str
    amount: float


@bv.event
class Order:
    shop_id: int
    vip: bool
    weight: int  # an i64 field also takes floats: the key keeps their text
    amount: float


@bv.table(key="user_id")
def UserSpend(t: Txn) -> bv.Table:
    return t.group_by("user_id").agg(
        n=bv.count(),
        total=bv.sum("amount"),
        spend_1h=bv.sum("amount", window="1h"),
        top=bv.top_k("merchant", k=2),
        last_amounts=bv.last_n("amount", n=3),
        biggest=bv.max("amount"),
        merchants=bv.event_type_mix("merchant"),
    )


@bv.table(key=["user_id", "merchant"])
def UserMerchant(t: Txn) -> bv.Table:
    return t.group_by("user_id", "merchant").agg(um_n=bv.count())


@bv.table
def AllTxn(t: Txn) -> bv.Table:
    return t.agg(all_n=bv.count(), all_total=bv.sum("amount"))


@bv.table(key=["shop_id", "vip", "weight"])
def ShopBox(o: Order) -> bv.Table:
    return o.group_by("shop_id", "vip", "weight").agg(orders=bv.count(),
                                                     revenue=bv.sum("amount"))


@bv.table(key="user_id")
def WideRows(t: Txn) -> bv.Table:
    return t.group_by("user_id").agg(recent=bv.most_recent_n("merchant", n=1000))


@bv.table(key="merchant")
def ByMerchant(t: Txn) -> bv.Table:
    return t.group_by("merchant").agg(merchant_n=bv.count())


TABLES = (Txn, Order, UserSpend, UserMerchant, AllTxn, ShopBox, WideRows)


def txn(i: int, merchant: str | None = None) -> dict[str, Any]:
    return {"user_id": f"u{i}", "merchant": merchant or f"m{i % 5}", "amount": float(i % 97)}


@pytest.fixture
def tcp(clean_server: BeavaProcess) -> Iterator[TcpClient]:
    with bv.App(f"tcp://{clean_server.addrs['tcp']}") as app:
        app.register(*TABLES)
    with TcpClient(*clean_server.tcp) as client:
        yield client


@pytest.fixture
def http(clean_server: BeavaProcess) -> Iterator[HttpClient]:
    with HttpClient(*clean_server.http) as client:
        yield client


def push_users(client: TcpClient, start: int, stop: int) -> None:
    result = client.push_pipelined("Txn", [txn(i) for i in range(start, stop)])
    assert result["acks"] == stop - start, result


def post_scan(server: BeavaProcess, body: Any) -> tuple[int, dict[str, Any]]:
    raw_body = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, _, raw = http_request(server.http, "POST", "/scan", raw_body,
                                  {"Content-Type": "application/json"})
    return status, json.loads(raw)


def tcp_scan(server: BeavaProcess, payload: bytes, ct: int = CT_JSON) -> tuple[int, Any]:
    conn = FrameConn(server.tcp)
    op, reply_ct, reply = conn.request(OP_SCAN, ct, payload)
    decoded = msgspec.msgpack.decode(reply) if reply_ct == CT_MSGPACK else json.loads(reply)
    # the page is the reply encoder's bytes of its value (keys sorted, smallest headers)
    assert reply == (encode_msgpack if reply_ct == CT_MSGPACK else encode_json)(decoded)
    return op, decoded


def gets(client: TcpClient, table: str, rows: list[dict[str, Any]],
         keys: tuple[str, ...]) -> list[Any]:
    requests = [(table, [row[k] for k in keys] if len(keys) > 1 else row[keys[0]])
                for row in rows]
    return client.batch_get(requests)


def features(row: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in keys}


# --- paging ---------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["tcp", "http"])
def test_pages_cover_every_entity_once_and_equal_get(tcp: TcpClient, http: HttpClient,
                                                     transport: str) -> None:
    push_users(tcp, 0, 2500)
    push_users(tcp, 0, 300)  # second events for some entities
    client = tcp if transport == "tcp" else http
    assert len(client.scan("UserSpend", limit=40)["rows"]) == 40
    first = client.scan("UserSpend", limit=1000)
    assert [c["name"] for c in first["columns"]] == [
        "user_id", "biggest", "last_amounts", "merchants", "n", "spend_1h", "top", "total"]
    assert first["columns"][0] == {"key": True, "name": "user_id", "type": "str"}
    assert {c["name"]: c["type"] for c in first["columns"][1:]} == {
        "biggest": "f64", "last_amounts": "list", "merchants": "map", "n": "i64",
        "spend_1h": "f64", "top": "top_k", "total": "f64"}
    # a page holds at most `limit` rows (fewer when it reaches its time budget)
    assert 0 < len(first["rows"]) <= 1000 and first["entities"] == 2500
    rows = first["rows"]
    cursor = first["cursor"]
    while cursor is not None:
        page = client.scan("UserSpend", cursor, limit=1000)
        assert "columns" not in page and 0 < len(page["rows"]) <= 1000
        rows += page["rows"]
        cursor = page["cursor"]
    assert [r["user_id"] for r in rows] == [f"u{i}" for i in range(2500)]  # slot order
    assert [features(r, ("user_id",)) for r in rows] == gets(tcp, "UserSpend", rows,
                                                            ("user_id",))
    assert rows[0]["n"] == 2 and rows[2499]["n"] == 1
    assert list(client.scan_rows("UserSpend", limit=700)) == rows


def test_default_and_maximum_page(tcp: TcpClient, clean_server: BeavaProcess) -> None:
    push_users(tcp, 0, 1200)
    page = tcp.scan("UserSpend")
    assert 0 < len(page["rows"]) <= 1000 and page["cursor"] is not None
    assert len(tcp.scan("UserSpend", limit=10)["rows"]) == 10
    assert len(list(tcp.scan_rows("UserSpend", limit=MAX_SCAN_LIMIT))) == 1200
    status, body = post_scan(clean_server, {"table": "UserSpend", "limit": MAX_SCAN_LIMIT + 1})
    assert status == 400
    assert body["error"]["code"] == "invalid_scan" and body["error"]["path"] == "limit"


def test_limit_zero_reads_nothing_and_keeps_the_position(tcp: TcpClient) -> None:
    push_users(tcp, 0, 10)
    page = tcp.scan("UserSpend", limit=0)
    assert page["rows"] == [] and page["entities"] == 10 and page["cursor"] is not None
    assert len(tcp.scan("UserSpend", page["cursor"], limit=20)["rows"]) == 10


def test_wide_rows_end_a_page_early(tcp: TcpClient) -> None:
    # 40 users, each with 40 distinct 1 KB merchants in its most_recent_n
    result = tcp.push_pipelined("Txn", [
        {"user_id": f"w{u}", "merchant": f"{i:04d}" + "x" * 1000, "amount": 1.0}
        for i in range(40) for u in range(40)])
    assert result["acks"] == 1600
    pages = []
    cursor = None
    while True:
        page = tcp.scan("WideRows", cursor, limit=1000)
        pages.append([len(json.dumps(r, separators=(",", ":"))) for r in page["rows"]])
        cursor = page["cursor"]
        if cursor is None:
            break
    assert sum(len(sizes) for sizes in pages) == 40 and len(pages) >= 2
    # a page stops at the latest at the first row that takes it past the byte budget
    assert all(sum(sizes[:-1]) < SCAN_PAGE_BYTES for sizes in pages)


def test_empty_and_global_tables(tcp: TcpClient) -> None:
    assert tcp.scan("AllTxn") == {
        "columns": [{"key": False, "name": "all_n", "type": "i64"},
                    {"key": False, "name": "all_total", "type": "f64"}],
        "cursor": None, "entities": 0, "registry_version": tcp.ping()["registry_version"],
        "rows": []}
    push_users(tcp, 0, 5)
    assert list(tcp.scan_rows("AllTxn")) == [tcp.get("AllTxn")] == [
        {"all_n": 5, "all_total": 10.0}]


def test_composite_keys_come_back_typed_and_address_the_same_entity(tcp: TcpClient) -> None:
    tcp.push_pipelined("Txn", [{"user_id": "a|b", "merchant": "m|1", "amount": 1.0},
                               {"user_id": "a", "merchant": "b|m|1", "amount": 2.0},
                               {"user_id": "plain", "merchant": "m", "amount": 3.0}])
    rows = list(tcp.scan_rows("UserMerchant"))
    assert [(r["user_id"], r["merchant"]) for r in rows] == [
        ("a|b", "m|1"), ("a", "b|m|1"), ("plain", "m")]
    assert [features(r, ("user_id", "merchant")) for r in rows] == gets(
        tcp, "UserMerchant", rows, ("user_id", "merchant"))
    orders = [{"shop_id": 7, "vip": True, "weight": 2.5, "amount": 1.0},
              {"shop_id": -3, "vip": False, "weight": 1e16, "amount": 2.0},
              {"shop_id": 7, "vip": True, "weight": 2.5, "amount": 4.0},
              {"shop_id": 8, "vip": False, "weight": 3, "amount": 8.0}]
    tcp.push_pipelined("Order", orders)
    page = tcp.scan("ShopBox")
    assert [c["type"] for c in page["columns"][:3]] == ["i64", "bool", "i64"]
    assert [(r["shop_id"], r["vip"], r["weight"]) for r in page["rows"]] == [
        (7, True, 2.5), (-3, False, 1e16), (8, False, 3)]
    assert type(page["rows"][2]["weight"]) is int  # pushed as 3: its key text is "3"
    assert [r["orders"] for r in page["rows"]] == [2, 1, 1]
    assert [features(r, ("shop_id", "vip", "weight")) for r in page["rows"]] == gets(
        tcp, "ShopBox", page["rows"], ("shop_id", "vip", "weight"))


def test_msgpack_request_gets_a_msgpack_page(tcp: TcpClient,
                                             clean_server: BeavaProcess) -> None:
    push_users(tcp, 0, 20)
    payload = msgspec.msgpack.encode({"table": "UserSpend", "cursor": None, "limit": 15,
                                      "splits": 3})
    op, page = tcp_scan(clean_server, payload, CT_MSGPACK)
    assert op == OP_GET_RESPONSE
    assert len(page["rows"]) == 15 and page["entities"] == 20 and len(page["splits"]) == 3
    payload = msgspec.msgpack.encode({"table": "UserSpend", "cursor": page["cursor"]})
    op, page = tcp_scan(clean_server, payload, CT_MSGPACK)
    assert len(page["rows"]) == 5 and page["cursor"] is None and "columns" not in page
    with TcpClient(*clean_server.tcp, content_type="msgpack") as mp:
        assert list(mp.scan_rows("UserSpend", limit=15)) == list(tcp.scan_rows("UserSpend"))


@pytest.mark.parametrize("transport", ["tcp json", "tcp msgpack", "http"])
def test_rows_as_arrays_hold_the_rows_values_in_the_order_of_the_columns(
        tcp: TcpClient, http: HttpClient, clean_server: BeavaProcess, transport: str) -> None:
    """``arrays``: each row an array of its values in the order of the first page's
    ``columns`` (key columns, then features), equal to the row as a map, page after page;
    composite keys come back typed as in a map."""
    push_users(tcp, 0, 30)
    tcp.push_pipelined("Order", [{"shop_id": 7, "vip": True, "weight": 2.5, "amount": 1.0},
                                 {"shop_id": -3, "vip": False, "weight": 1e16, "amount": 2.0},
                                 {"shop_id": 8, "vip": False, "weight": 3, "amount": 8.0}])
    with TcpClient(*clean_server.tcp, content_type="msgpack") as mp:
        client = {"tcp json": tcp, "tcp msgpack": mp, "http": http}[transport]
        for table in ("UserSpend", "ShopBox"):
            first = client.scan(table, limit=0)
            names = [c["name"] for c in first["columns"]]
            maps = list(tcp.scan_rows(table))
            arrays, cursor = [], None
            while True:
                page = client.scan(table, cursor, limit=7, arrays=True)
                assert all(isinstance(row, list) for row in page["rows"])
                arrays += page["rows"]
                cursor = page["cursor"]
                if cursor is None:
                    break
            assert len(arrays) == len(maps) >= 1
            assert arrays == [[row[name] for name in names] for row in maps]


# --- a scan while pushes go on ---------------------------------------------------------------


def test_cursor_stays_valid_while_pushes_add_and_update_entities(tcp: TcpClient) -> None:
    push_users(tcp, 0, 1000)
    seen: list[str] = []
    cursor = None
    added = 1000
    while True:
        page = tcp.scan("UserSpend", cursor, limit=150)
        seen += [row["user_id"] for row in page["rows"]]
        cursor = page["cursor"]
        if cursor is None:
            break
        # between pages: new entities, and more events for entities before and after
        push_users(tcp, added, added + 40)
        added += 40
        push_users(tcp, 0, 50)
        push_users(tcp, 900, 950)
    assert len(seen) == len(set(seen)) == added  # each entity once, the new ones too
    assert seen == [f"u{i}" for i in range(added)]


def test_pipelined_pushes_and_pages_on_one_connection(clean_server: BeavaProcess,
                                                      tcp: TcpClient) -> None:
    push_users(tcp, 0, 100)
    pipe = tcp.pipeline()
    pipe.request(OP_SCAN, {"table": "UserSpend", "limit": 60})
    pipe.push("Txn", txn(100))
    pipe.request(OP_SCAN, {"table": "UserSpend", "limit": 0})
    first, _, after = pipe.execute()
    assert len(first["rows"]) == 60
    assert after["entities"] == 101  # the scan waits behind the push before it


# --- registry changes ------------------------------------------------------------------------


@pytest.mark.parametrize("change", ["register", "reset"])
def test_registry_change_expires_the_cursor(tcp: TcpClient, http: HttpClient,
                                            clean_server: BeavaProcess, change: str) -> None:
    push_users(tcp, 0, 30)
    page = tcp.scan("UserSpend", limit=10)
    if change == "register":
        with bv.App(f"tcp://{clean_server.addrs['tcp']}") as app:
            app.register(*TABLES, ByMerchant)
    else:
        tcp.reset()
        with bv.App(f"tcp://{clean_server.addrs['tcp']}") as app:
            app.register(*TABLES)
    version = tcp.ping()["registry_version"]
    for client in (tcp, http):
        with pytest.raises(ServerError) as info:
            client.scan("UserSpend", page["cursor"])
        assert info.value.code == "scan_cursor_expired"
        assert info.value.body["registry_version"] == version
        assert "start the scan again" in info.value.message
    assert info.value.status == 409
    op, body = tcp_scan(clean_server, json.dumps({"table": "UserSpend",
                                                  "cursor": page["cursor"]}).encode())
    assert op == OP_ERROR and body["error"]["code"] == "scan_cursor_expired"


# --- bad requests ----------------------------------------------------------------------------

BAD = [
    (b"[1, 2]", "invalid_scan", ""),
    (b"{not json", "invalid_scan", ""),
    (b'{"cursor": null}', "invalid_scan", "table"),
    (b'{"table": 5}', "invalid_scan", "table"),
    (b'{"table": "UserSpend", "limt": 5}', "invalid_scan", "limt"),
    (b'{"table": "UserSpend", "limit": -1}', "invalid_scan", "limit"),
    (b'{"table": "UserSpend", "limit": true}', "invalid_scan", "limit"),
    (b'{"table": "UserSpend", "limit": 2.0}', "invalid_scan", "limit"),
    (b'{"table": "UserSpend", "splits": 0}', "invalid_scan", "splits"),
    (b'{"table": "UserSpend", "cursor": 12}', "invalid_scan", "cursor"),
    (b'{"table": "UserSpend", "cursor": "abc"}', "invalid_scan", "cursor"),
    (b'{"table": "UserSpend", "cursor": "1.2.zzzzzzzz"}', "invalid_scan", "cursor"),
    (b'{"table": "UserSpend", "until": "1.2"}', "invalid_scan", "until"),
    (b'{"table": "UserSpend", "arrays": 1}', "invalid_scan", "arrays"),
    (b'{"table": "UserSpend", "arrays": "true"}', "invalid_scan", "arrays"),
    (b'{"table": "Nope"}', "unknown_table", None),
    (b'{"table": "Txn"}', "unknown_table", None),  # an event, not a table
]


@pytest.mark.parametrize(("body", "code", "path"), BAD)
def test_bad_requests_on_both_transports(tcp: TcpClient, clean_server: BeavaProcess,
                                         body: bytes, code: str, path: str | None) -> None:
    version = tcp.ping()["registry_version"]
    status, reply = post_scan(clean_server, body)
    assert status == (404 if code == "unknown_table" else 400)
    assert reply["error"]["code"] == code and reply["registry_version"] == version
    if path is not None:
        assert reply["error"]["path"] == path
    op, frame_body = tcp_scan(clean_server, body)
    assert op == OP_ERROR and frame_body == reply


def test_a_cursor_with_too_many_digits_is_refused(tcp: TcpClient,
                                                  clean_server: BeavaProcess) -> None:
    """A version or position longer than any cursor the server writes (past Python's
    4,300-digit limit for ``int``, or just one digit past 20) is invalid_scan, not a 500."""
    version = tcp.ping()["registry_version"]
    tag = f"{zlib.crc32(b'UserSpend'):08x}"
    for field in ("cursor", "until"):
        for cursor in (f"{'9' * 5000}.0.{tag}", f"{version}.{'1' * 5000}.{tag}",
                       f"{version}.{'0' * 21}.{tag}", f"{'0' * 20}{version}.0.{tag}"):
            body = json.dumps({"table": "UserSpend", field: cursor}).encode()
            status, reply = post_scan(clean_server, body)
            assert status == 400 and reply["error"]["code"] == "invalid_scan"
            assert reply["error"]["path"] == field
            assert reply["error"]["message"] == f"`{field}` is not a scan cursor"
            op, frame_body = tcp_scan(clean_server, body)
            assert op == OP_ERROR and frame_body == reply
    assert tcp.scan("UserSpend", f"{version:020d}.0.{tag}")["rows"] == []  # 20 digits: read


def test_a_cursor_of_another_table_is_refused(tcp: TcpClient) -> None:
    push_users(tcp, 0, 10)
    cursor = tcp.scan("UserSpend", limit=2)["cursor"]
    with pytest.raises(ServerError) as info:
        tcp.scan("UserMerchant", cursor)
    assert info.value.code == "invalid_scan" and "another table" in info.value.message


# --- splits (parallel readers) ---------------------------------------------------------------


def test_splits_divide_the_table_into_ranges(tcp: TcpClient) -> None:
    push_users(tcp, 0, 1003)
    plan = tcp.scan("UserSpend", limit=0, splits=4)
    splits = plan["splits"]
    assert len(splits) == 4 and splits[0] == plan["cursor"]
    push_users(tcp, 1003, 1010)  # after planning: only the last (open) range reads them
    ranges = []
    for i, start in enumerate(splits):
        until = splits[i + 1] if i + 1 < len(splits) else None
        ranges.append([r["user_id"] for r in tcp.scan_rows("UserSpend", cursor=start,
                                                            until=until, limit=100)])
    assert [len(r) for r in ranges] == [250, 251, 251, 258]
    assert sum(ranges, []) == [f"u{i}" for i in range(1010)]
    small = tcp.scan("UserSpend", limit=0, splits=1024)
    assert len(small["splits"]) == 1010  # no empty ranges


# --- other clients ---------------------------------------------------------------------------


async def test_async_clients(tcp: TcpClient, clean_server: BeavaProcess) -> None:
    push_users(tcp, 0, 250)
    expected = list(tcp.scan_rows("UserSpend"))
    async with AsyncTcpClient(*clean_server.tcp) as atcp:
        page = await atcp.scan("UserSpend", limit=100)
        assert page["rows"] == expected[:100]
        assert [r async for r in atcp.scan_rows("UserSpend", limit=100)] == expected
    async with AsyncHttpClient(*clean_server.http) as ahttp:
        assert [r async for r in ahttp.scan_rows("UserSpend", limit=64)] == expected


def test_pool_scan_rows(tcp: TcpClient, clean_server: BeavaProcess) -> None:
    push_users(tcp, 0, 30)
    with ClientPool(lambda: TcpClient(*clean_server.tcp), size=2) as pool:
        assert list(pool.scan_rows("UserSpend", limit=7)) == list(tcp.scan_rows("UserSpend"))
