"""The catalogue's JSON copy in the TypeScript SDK is the generator's output (so the
catalogue, the Python SDK and the TypeScript SDK cannot drift)."""

from __future__ import annotations

import json

from beava.catalogue.operators import CATALOGUE
from beava.dsl import catalogue_export as export


def test_committed_copy_is_the_generators_output() -> None:
    assert export.TARGET.read_text() == export.render(), (
        "sdk/typescript/src/catalogue.json is stale: run "
        "python -m beava.dsl.catalogue_export --write"
    )


def test_export_holds_every_operator_and_its_function() -> None:
    doc = json.loads(export.render())
    assert [op["name"] for op in doc["operators"]] == list(CATALOGUE)
    assert set(doc["functions"]) == {*CATALOGUE, "ema"}
    outlier = doc["functions"]["outlier_count"]["params"]
    assert {"name": "sigma", "positional": False, "required": False, "default": 3.0} in outlier
    assert doc["durations"]["max_ms"] == str((1 << 63) - 1)  # beyond 2^53: a string
