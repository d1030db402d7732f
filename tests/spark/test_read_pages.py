"""A scan page becomes an Arrow record batch column by column (beava_spark.reader
PageColumns): the values Spark gets are the ones a value-by-value conversion gives, for
columns whose values all fit their type and for columns holding values that do not."""

from __future__ import annotations

import math
from typing import Any

import pytest

pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install ./spark_connector)")

from beava_spark.reader import Column, PageColumns  # noqa: E402

COLUMNS = [Column("k", "str", True), Column("a_long", "i64", False),
           Column("b_double", "f64", False), Column("c_bool", "bool", False),
           Column("d_text", "str", False), Column("e_json", "map", False),
           Column("f_time", "epoch_ms", False)]


def rows_of(*values: tuple[Any, ...]) -> list[dict[str, Any]]:
    """Rows as the server sends them: every entry, names in sorted order."""
    return [dict(sorted(zip([c.name for c in COLUMNS], row, strict=True))) for row in values]


def test_columns_whose_values_fit_are_read_as_they_are() -> None:
    rows = rows_of(("u1", 5, 1.5, True, "x", {"b": [1, 2.5], "a": None}, 1_700_000_000_000),
                   ("u2", None, 3, None, None, None, None),
                   ("u3", -2**63, None, False, "é\n\"", "line\nbreak", 0))
    batch = PageColumns(COLUMNS).batch(rows)
    assert batch.schema.names == [c.name for c in COLUMNS]
    assert [str(t) for t in batch.schema.types] == [
        "string", "int64", "double", "bool", "string", "string", "int64"]
    assert batch.to_pydict() == {
        "k": ["u1", "u2", "u3"], "a_long": [5, None, -2**63], "b_double": [1.5, 3.0, None],
        "c_bool": [True, None, False], "d_text": ["x", None, "é\n\""],
        "e_json": ['{"a":null,"b":[1,2.5]}', None, '"line\\nbreak"'],
        "f_time": [1_700_000_000_000, None, 0]}


def test_values_that_do_not_fit_their_column_are_converted_one_by_one() -> None:
    rows = rows_of(("u1", 2.5, True, 1, {"m": 1}, [1], 3.0),
                   ("u2", 3.0, 2.0, "yes", 7, "null", True),
                   ("u3", 4, math.inf, True, "t", 0.5, 2))
    assert PageColumns(COLUMNS).batch(rows).to_pydict() == {
        "k": ["u1", "u2", "u3"],
        "a_long": [None, 3, 4],             # an i64 column may hold floats: integral ones fit
        "b_double": [None, 2.0, math.inf],  # a bool is not a number
        "c_bool": [None, None, True],
        "d_text": ['{"m":1}', "7", "t"],    # text of anything else: its JSON
        "e_json": ["[1]", '"null"', "0.5"],
        "f_time": [3, None, 2]}


def test_rows_with_other_entries_are_read_by_name() -> None:
    """Rows missing an entry, or with their entries in another order, or a page whose
    layout differs from the page before."""
    pages = PageColumns(COLUMNS[:3])
    first = pages.batch([{"a_long": 1, "b_double": 1.0, "k": "u1"}])
    shuffled = pages.batch([{"k": "u2", "b_double": 2.0, "a_long": 2},
                            {"k": "u3", "a_long": 3}])
    assert first.to_pydict() == {"k": ["u1"], "a_long": [1], "b_double": [1.0]}
    assert shuffled.to_pydict() == {"k": ["u2", "u3"], "a_long": [2, 3],
                                    "b_double": [2.0, None]}
