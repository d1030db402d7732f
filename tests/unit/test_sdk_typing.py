"""The DSL type-checks: the pipeline of docs/sdk.md passes ``mypy --strict``, and a
mistake in it is reported, not hidden behind ``Any``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import beava as bv
from tests.support import REPO

_PIPELINE = re.compile(r"^## Declaring a pipeline\n\n```python\n(?P<code>.*?)^```$",
                       re.MULTILINE | re.DOTALL)


def documented_pipeline() -> str:
    """The sample of docs/sdk.md's "Declaring a pipeline" (the page's later samples use it)."""
    match = _PIPELINE.search((REPO / "docs" / "sdk.md").read_text())
    assert match is not None
    return match["code"]


def mypy_strict(tmp_path: Path, code: str) -> tuple[str, int]:
    sample = tmp_path / "pipeline.py"
    sample.write_text(code)
    return mypy_files(tmp_path, [sample])


def mypy_files(tmp_path: Path, files: list[Path]) -> tuple[str, int]:
    (tmp_path / "none.ini").write_text("[mypy]\n")  # none of the repository's settings
    # the packages as a user's checker finds them installed (py.typed), from this checkout;
    # in a process of its own (mypy raises the recursion limit of the process it runs in)
    env = {**os.environ, "MYPYPATH": f"{REPO}:{REPO / 'client'}"}
    proc = subprocess.run([
        sys.executable, "-m", "mypy", "--strict", "--no-incremental",
        "--cache-dir", str(tmp_path / "cache"), "--config-file", str(tmp_path / "none.ini"),
        *map(str, files)], capture_output=True, text=True, env=env, timeout=600, check=False)
    return proc.stdout + proc.stderr, proc.returncode


def test_the_documented_pipeline_passes_mypy_strict(
        tmp_path: Path) -> None:
    code = documented_pipeline()
    assert "class Txn(bv.Event):" in code and "declined: bv.Event" in code
    report, status = mypy_strict(tmp_path, code)
    assert status == 0, report


@pytest.mark.parametrize(("mistake", "fixed", "reported"), [
    ('.group_by("user_id")', ".group_by(42)", 'Argument 1 to "group_by" of "Event"'),
    ('txn.filter(bv.col("status") == "declined")', 'txn.filter("declined")',
     'Argument 1 to "filter" of "Event"'),
    ("def UserRisk(txn: Txn) -> bv.Table:", "def UserRisk(txn: Txn) -> bv.Event:",
     "Incompatible return value type"),
    ("class Txn(bv.Event):", "class Txn:", '"Txn" has no attribute'),
])
def test_mistakes_in_the_pipeline_are_reported(
        tmp_path: Path,
        mistake: str, fixed: str, reported: str) -> None:
    code = documented_pipeline()
    assert mistake in code
    report, status = mypy_strict(tmp_path, code.replace(mistake, fixed, 1))
    assert status == 1 and reported in report, report


def test_an_event_typed_parameter_binds_by_name_only() -> None:
    @bv.event
    class Txn(bv.Event):
        user_id: str
        status: str

    @bv.event
    def Declined(txn: Txn) -> bv.Event:  # noqa: N802
        return txn.filter(bv.col("status") == "declined")

    @bv.table(key="user_id")
    def UserDeclines(declined: bv.Event) -> bv.Table:  # noqa: N802
        return declined.group_by("user_id").agg(n=bv.count())

    # the call's only event source is Txn, but the parameter names Declined
    with pytest.raises(TypeError, match="annotated bv.Event, it is bound to the event of its"):
        bv.compile_register_payload(Txn, UserDeclines)
    nodes = bv.compile_register_payload(Txn, Declined, UserDeclines)["nodes"]
    table = nodes[-1]
    assert table["name"] == "UserDeclines"
    assert table["ops"][0] == {"op": "filter", "expr": "(status == 'declined')"}


def test_streams_and_aggregations_are_the_annotated_types() -> None:
    @bv.event
    class Click(bv.Event):
        page: str

    derived = Click.filter(bv.col("page") == "/")
    assert isinstance(derived, bv.Event)
    assert isinstance(derived.group_by("page").agg(n=bv.count()), bv.Table)


def test_the_examples_pass_mypy_strict(tmp_path: Path) -> None:
    examples = sorted((REPO / "examples").glob("*.py"))
    assert examples
    report, status = mypy_files(tmp_path, examples)
    assert status == 0, report
