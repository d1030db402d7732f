"""The Spark samples of the documentation site (docs/spark.md, blocks marked
`<!-- sample: spark -->`) run on the shared local SparkSession against a live server."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.test_docs_samples import DOCS, python_blocks, run_page
from tests.support import BeavaProcess

pytest.importorskip("pyspark")


def test_spark_page_samples_run(spark: Any, server: BeavaProcess) -> None:
    path = DOCS / "spark.md"
    blocks = python_blocks(path.read_text(), "spark")
    assert len(blocks) == 2
    namespace = run_page(path, blocks, server, {"__name__": "docs_spark", "spark": spark})
    assert namespace["totals"].acknowledged == 3
