"""A scan page becomes an Arrow record batch column by column (beava_spark.reader
PageBuffers for MessagePack, PageColumns for JSON): the values Spark gets are the ones a
value-by-value conversion of the decoded rows gives, from MessagePack and from JSON pages,
for columns whose values all fit their type and for columns holding values that do not."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import pytest

pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install ./spark_connector)")

from beava_spark.reader import Column, PageBuffers, PageColumns  # noqa: E402

COLUMNS = [Column("k", "str", True), Column("a_long", "i64", False),
           Column("b_double", "f64", False), Column("c_bool", "bool", False),
           Column("d_text", "str", False), Column("e_json", "map", False),
           Column("f time", "epoch_ms", False)]


FORMS = ["msgpack", "json"]


def batch(columns: list[Column], rows: list[dict[str, Any]], form: str) -> dict[str, Any]:
    """The batch of a page of ``rows`` as a server encodes it: a MessagePack page of rows
    as arrays (each row its values in the order of every column of COLUMNS and of the rows'
    other names) read in C (PageBuffers), a JSON one of rows as maps (keys sorted) by
    PageColumns."""
    codec = msgspec.json if form == "json" else msgspec.msgpack
    layout = [c.name for c in COLUMNS]
    layout += sorted({name for row in rows for name in row} - set(layout))
    page_rows = rows if form == "json" else [[row.get(name) for name in layout]
                                             for row in rows]
    body = codec.Encoder(order="sorted").encode({"cursor": None, "entities": 9,
                                                 "rows": page_rows})
    if form == "msgpack":
        read, cursor = PageBuffers(columns, layout).batch(body)
        assert read is not None and cursor is None
        return read.to_pydict()
    pages = PageColumns(columns)
    try:
        page, loose = codec.decode(body, type=pages.page_type), False
    except msgspec.ValidationError:  # as the reader reads such a page again
        page, loose = codec.decode(body, type=pages.loose_type), True
    result: dict[str, Any] = pages.batch(page["rows"], loose).to_pydict()
    return result


def rows_of(*values: tuple[Any, ...]) -> list[dict[str, Any]]:
    return [dict(zip([c.name for c in COLUMNS], row, strict=True)) for row in values]


@pytest.mark.parametrize("form", FORMS)
def test_columns_whose_values_fit_are_read_as_they_are(form: str) -> None:
    rows = rows_of(("u1", 5, 1.5, True, "x", {"b": [1, 2.5], "a": None}, 1_700_000_000_000),
                   ("u2", None, 3, None, None, None, None),
                   ("u3", -2**63, None, False, "é\n\"", "line\nbreak", 0))
    assert batch(COLUMNS, rows, form) == {
        "k": ["u1", "u2", "u3"], "a_long": [5, None, -2**63], "b_double": [1.5, 3.0, None],
        "c_bool": [True, None, False], "d_text": ["x", None, "é\n\""],
        "e_json": ['{"a":null,"b":[1,2.5]}', None, '"line\\nbreak"'],
        "f time": [1_700_000_000_000, None, 0]}


@pytest.mark.parametrize("form", FORMS)
def test_values_that_do_not_fit_their_column_are_converted_one_by_one(form: str) -> None:
    rows = rows_of(("u1", 2.5, True, 1, {"m": 1}, [1, {"z": [True]}], 3.0),
                   ("u2", 3.0, 2.0, "yes", 7, "null", True),
                   ("u3", 4, 1e300, True, "t", 0.5, 2))
    assert batch(COLUMNS, rows, form) == {
        "k": ["u1", "u2", "u3"],
        "a_long": [None, 3, 4],             # an i64 column may hold floats: integral ones fit
        "b_double": [None, 2.0, 1e300],     # a bool is not a number
        "c_bool": [None, None, True],
        "d_text": ['{"m":1}', "7", "t"],    # text of anything else: its JSON
        "e_json": ['[1,{"z":[true]}]', '"null"', "0.5"],
        "f time": [3, None, 2]}


@pytest.mark.parametrize("form", FORMS)
def test_rows_missing_entries_or_with_others_are_read_by_name(form: str) -> None:
    columns = [COLUMNS[0], COLUMNS[5], COLUMNS[2]]
    rows = [{"k": "u1", "zz": 1}, {"b_double": 2.0, "e_json": [math.pi], "k": "u2"}]
    assert batch(columns, rows, form) == {
        "k": ["u1", "u2"], "e_json": [None, f"[{math.pi!r}]"], "b_double": [None, 2.0]}
    assert batch(columns[:1], rows, form) == {"k": ["u1", "u2"]}


@pytest.mark.parametrize("scheme", ["tcp", "http"])
def test_a_page_with_a_float_in_an_i64_column_is_read_again_loosely(
        clean_server: Any, scheme: str) -> None:
    """An i64 field takes floats: its max can be 2.5 (not a long: null) or 3.0 (3)."""
    from beava_client import TcpClient
    from beava_spark.reader import ReadOptions, plan_read, read_range

    with TcpClient(*clean_server.tcp) as client:
        assert client.register({"nodes": [
            {"kind": "event", "name": "E", "schema": {"fields": {"u": "str", "n": "i64"}}},
            {"kind": "derivation", "name": "T", "upstreams": ["E"], "key": ["u"],
             "agg": {"top": {"op": "max", "params": {"field": "n"}},
                     "seen": {"op": "last_n", "params": {"field": "n", "n": 2}}}}]})
        for body in ({"u": "a", "n": 1}, {"u": "b", "n": 2.5}, {"u": "c", "n": 3.0},
                     {"u": "d", "n": 4}):
            client.push("E", body)
    url = f"{scheme}://{clean_server.addrs[scheme]}"
    options = ReadOptions.parse({"url": url, "table": "T", "partitions": "1"})
    columns, (scan_range,) = plan_read(options)
    pages = list(read_range(columns, "T", scan_range, 2, 10.0))
    assert [p.num_rows for p in pages] == [2, 2]
    rows = [row for page in pages for row in page.to_pylist()]
    assert rows == [{"u": "a", "seen": "[1]", "top": 1}, {"u": "b", "seen": "[2.5]", "top": None},
                    {"u": "c", "seen": "[3.0]", "top": 3}, {"u": "d", "seen": "[4]", "top": 4}]
