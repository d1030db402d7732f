"""JSON columns of a scan page read in C (beava._fast.wire.msgpack_json.page_columns): the
text of each MessagePack value, written byte by byte, is the text msgspec gives the decoded
value: every type a reply holds, integers of every width, floats (their shortest digits in
msgspec's layout), text needing escapes, nesting; floats beyond the range written in C and
other types go through msgspec itself."""

from __future__ import annotations

import math
import random
import struct

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from beava._fast.wire.msgpack_json import page_columns

pack = msgspec.msgpack.Encoder(order="sorted").encode
JSON_KIND = 4  # page_columns's kind of a column read as JSON text


def expected(value: object) -> str | None:
    return None if value is None else msgspec.json.encode(value).decode()


def json_column(page: bytes) -> list[str | None]:
    """The texts of column ``v`` of ``page`` (a MessagePack array of maps, the rows of a
    scan reply), None where null."""
    count, ((valid, values, offsets, nulls),), _ = page_columns(
        b"\x81\xa4rows" + page, [b"v"], bytes([JSON_KIND]))
    ends = struct.unpack(f"<{count + 1}i", offsets)
    present = [bool(valid[i >> 3] >> (i & 7) & 1) for i in range(count)] if nulls \
        else [True] * count
    return [values[ends[i]:ends[i + 1]].decode("utf-8", "surrogatepass") if present[i]
            else None for i in range(count)]


EDGES = [0, 1, 31, 32, 127, 128, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1,
         2**32, 2**63 - 1, 2**63, 2**64 - 1]


@pytest.mark.parametrize("value", [
    *EDGES, *[-e for e in EDGES if e <= 2**63], -33, -129, -32769, -(2**31) - 1,
    None, True, False, "", "a" * 31, "a" * 32, "a" * 256, "a" * 65536,
    "é€😀\x7f\u2028/", "".join(map(chr, range(0x20))) + '"\\', [], list(range(20)),
    {"b": [1, None, {"c": "x"}], "a": {}}, {str(i): i for i in range(200)},
    1.5, [1, 2.5], {"x": math.inf}, b"bytes", 0.0, -0.0, 1e-5, -1.2345e-5, 1e-6, 1e15, 1e16,
    5e-324, 1.7976931348623157e308, 0.30000000000000004, [0.1, {"y": 2.5e-7, "z": 1 / 3}],
])
def test_values_read_as_msgspec_writes_them(value: object) -> None:
    page = pack([{"v": value}])
    assert json_column(page) == [expected(msgspec.msgpack.decode(pack(value)))]


JSON_LIKE = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats() | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=40)


@given(st.lists(JSON_LIKE, max_size=5))
def test_any_values_read_as_msgspec_writes_them(values: list[object]) -> None:
    page = pack([{"v": v} for v in values])
    assert json_column(page) == [expected(msgspec.msgpack.decode(pack(v))) for v in values]


def test_bytes_that_are_not_one_value_are_refused() -> None:
    for broken in (b"", b"\x92\x01", b"\xc1"):
        with pytest.raises(ValueError, match="MessagePack"):
            json_column(b"\x91\x81\xa1v" + broken)


def test_doubles_are_written_as_msgspec_writes_them() -> None:
    """Every decade, each side of the range written in C and of the notations' bounds,
    powers of two and their neighbours (a smaller gap below), exact ties between two
    shortest texts, random bit patterns and values of every size."""
    rnd = random.Random(26)
    edges = [float(f"{m}e{k}") for k in range(-330, 309)
             for m in (1, 1.2345, 3, 9.87654321, 9.999999999999998, 9.9999999999999996)]
    for y in [2.0**e for e in range(-40, 60)] + [10.0**d for d in range(-7, 17)]:
        edges += [y, math.nextafter(y, 0), math.nextafter(y, math.inf)]
    # exact ties: n / 2^j lies halfway between two 16- or 17-digit texts, both of which
    # read back as it; the shortest repr takes the even one, rounding down (...3125 ->
    # ...312, ...24.125 -> ...24.12, ...0625 -> ...062) or up (...375 -> ...38, ...875 -> ...88)
    ties = [128257 / 2**17, 18015 / 2**18, 16461675 / 2**14, 996692324352193 / 2**3,
            73 / 2**22]
    values = [*edges, *ties, 0.5, 0.1, 1 / 3, 2 / 3, 123.45, 999999999999999.9, math.inf,
              math.nan]
    values += [struct.unpack("<d", rnd.getrandbits(64).to_bytes(8, "little"))[0]
               for _ in range(50_000)]
    values += [rnd.random() * 10.0 ** rnd.randint(-7, 17) for _ in range(50_000)]
    values += [rnd.uniform(0, 1000) for _ in range(50_000)]
    values += [-x for x in values[-1000:]]
    page = pack([{"v": x} for x in values])
    assert json_column(page) == [expected(x) for x in values]


@given(st.floats())
def test_any_double_is_written_as_msgspec_writes_it(x: float) -> None:
    assert json_column(pack([{"v": x}, {"v": [x, {"k": x}]}])) == [
        expected(x), expected([x, {"k": x}])]


def test_a_float_32_reads_as_the_double_msgspec_decodes() -> None:
    for x in (1.5, 0.1, -3.4e38, 1e-40, 0.0):
        page = b"\x91\x81\xa1v\xca" + struct.pack(">f", x)
        assert json_column(page) == [expected(msgspec.msgpack.decode(page)[0]["v"])]


def test_a_reply_body_gives_its_rows_and_cursor_and_skips_its_other_entries() -> None:
    """A scan reply's body is read in one pass: ``columns``, ``entities`` and
    ``splits`` are skipped, the cursor is returned, a row's entries are read by name."""
    rows = [{"k": "a", "n": 1, "x": [1.5]}, {"k": "b", "x": None, "zz": {"q": 1}}]
    for cursor in ("1.40", None):
        body = pack({"columns": [{"name": "k", "type": "str"}], "cursor": cursor,
                     "entities": 2, "rows": rows, "splits": ["1.0", "1.9"]})
        count, ((_, keys, _, key_nulls), (valid, numbers, _, nulls)), after = page_columns(
            body, [b"k", b"n"], bytes([3, 0]))
        assert (count, keys, key_nulls, after) == (2, b"ab", 0, cursor)
        assert (valid[0] & 3, struct.unpack("<2q", numbers)[0], nulls) == (1, 1, 1)
    assert page_columns(pack({"cursor": None, "rows": []}), [b"k"], bytes([3]))[::2] == (0, None)


ROW = st.fixed_dictionaries({}, optional={
    "n": st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.none(),
    "x": st.floats() | st.none(), "b": st.booleans() | st.none(),
    "s": st.text() | st.none(), "j": JSON_LIKE, "skipped": JSON_LIKE})


@given(st.lists(ROW, max_size=6), st.permutations(["n", "x", "b", "s", "j", "skipped"]))
def test_rows_as_arrays_read_as_the_same_rows_as_maps(rows: list[dict[str, object]],
                                                      layout: list[str]) -> None:
    """A page of rows as arrays (the scan's ``arrays``: values alone, in the columns'
    order) fills the columns as the same rows as maps do: each value goes to the column
    ``order`` names for its position, a position of no column (-1) is skipped, and a
    column that a row has no value for is null."""
    names = [b"b", b"j", b"n", b"s", b"x"]
    kinds = bytes([2, 4, 0, 3, 1])
    as_maps = pack({"cursor": None, "rows": rows})
    # every row its values in the layout's order, shortened after its last given value
    arrays = []
    for row in rows:
        values = [row.get(name) for name in layout]
        given_at = [i for i, name in enumerate(layout) if name in row]
        arrays.append(values[:given_at[-1] + 1] if given_at else [])
    as_arrays = pack({"cursor": None, "rows": arrays})
    order = [names.index(name.encode()) if name.encode() in names else -1 for name in layout]
    assert page_columns(as_arrays, names, kinds, order) == page_columns(as_maps, names, kinds)


def test_an_order_naming_no_column_is_refused() -> None:
    page = pack({"cursor": None, "rows": [[1]]})
    for order in ([1], [-2]):
        with pytest.raises(ValueError, match="order"):
            page_columns(page, [b"n"], bytes([0]), order)
    assert page_columns(page, [b"n"], bytes([0]), [0])[0] == 1


def test_a_column_whose_texts_are_all_empty() -> None:
    """A text column holding nothing but empty texts (a page of rows whose string feature is
    ``""``) has no value bytes at all: it reads as empty, not null, texts (its buffer used
    to be asked for no bytes first, which read as an error and crashed the reader)."""
    for rows in ([{"s": ""}], [{"s": ""}, {"s": None}, {"s": ""}], [[""]]):
        count, ((valid, values, offsets, nulls),), _ = page_columns(
            pack({"cursor": None, "rows": rows}), [b"s"], bytes([3]), [0])
        texts = [None if not valid[i >> 3] >> (i & 7) & 1 else "" for i in range(count)]
        assert texts == [None if r in ({"s": None},) else "" for r in rows]
        assert values == b"" and offsets == bytes(4 * (count + 1))
        assert nulls == sum(r == {"s": None} for r in rows)
