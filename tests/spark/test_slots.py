"""The slot vectors (tests/vectors/slots.json) against Spark SQL's own
``pmod(xxhash64(text), 16384)``: the JVM routes rows to the same slots as the clients and
the server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support import TESTS

pytest.importorskip("pyspark")


def test_spark_xxhash64_gives_the_committed_vectors(spark: Any) -> None:
    vectors = json.loads((TESTS / "vectors" / "slots.json").read_text(encoding="utf-8"))
    rows = [(i, v["text"]) for i, v in enumerate(vectors["vectors"])]
    df = spark.createDataFrame(rows, "i int, text string")
    got = {r["i"]: (r["h"], r["s"]) for r in df.selectExpr(
        "i", "xxhash64(text) AS h", "pmod(xxhash64(text), 16384) AS s").collect()}
    expected = {i: (v["xxhash64"], v["slot"]) for i, v in enumerate(vectors["vectors"])}
    assert got == expected
