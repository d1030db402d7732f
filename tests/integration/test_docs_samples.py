"""Every Python sample of the documentation site runs against a live server.

The fenced ```python blocks of each page in docs/ run in order in one namespace per page
(a page's later blocks build on its earlier ones), against the session's test-mode server
after a reset: the addresses the pages use for a local server (127.0.0.1 ports 8081, 8080
and 8090) are rewritten to the live server's. A block after the marker
`<!-- sample: spark -->` needs a Spark session and runs in tests/spark instead. The
generated operator reference is checked here too: every example is a feature of one table
registered on the live server, and each feature's empty value is the one the page states.
"""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

import beava as bv
from tests.support import REPO, BeavaProcess, http_request

DOCS = REPO / "docs"
sys.path.insert(0, str(DOCS / "hooks"))
import reference  # noqa: E402  (docs/hooks/reference.py, the generator of the reference)

_BLOCK = re.compile(r"^(<!-- sample: (?P<marker>[a-z]+) -->\n)?```python\n(?P<code>.*?)^```$",
                    re.MULTILINE | re.DOTALL)
_LOCAL = re.compile(r'127\.0\.0\.1(?P<sep>:|", )(?P<port>8080|8081|8090)\b')


def python_blocks(text: str, marker: str | None = None) -> list[str]:
    """The ```python blocks of a page that carry `marker` (None: the unmarked ones)."""
    return [m["code"] for m in _BLOCK.finditer(text) if m["marker"] == marker]


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.parts)


def localise(code: str, server: BeavaProcess) -> str:
    ports = {"8081": server.tcp[1], "8080": server.http[1], "8090": server.admin[1]}
    return _LOCAL.sub(lambda m: f"127.0.0.1{m['sep']}{ports[m['port']]}", code)


def run_page(path: Path, blocks: list[str], server: BeavaProcess,
             namespace: dict[str, Any] | None = None) -> dict[str, Any]:
    status, _, _ = http_request(server.http, "POST", "/reset")
    assert status == 200
    ns: dict[str, Any] = {"__name__": f"docs_{path.stem}"} if namespace is None else namespace
    try:
        for i, code in enumerate(blocks):
            source = localise(code, server)
            exec(compile(source, f"{path.name} block {i + 1}", "exec"), ns)  # noqa: S102
    finally:
        for value in list(ns.values()):  # close the Apps a page left open
            if isinstance(value, bv.App):
                value.close()
    return ns


def test_every_page_has_a_runner() -> None:
    """A page's Python blocks are either run here or, marked spark, in tests/spark."""
    for path in pages():
        text = path.read_text()
        counted = len(python_blocks(text)) + len(python_blocks(text, "spark"))
        assert counted == text.count("```python"), f"{path.name}: a block with an unknown marker"


@pytest.mark.parametrize("page", [p.name for p in pages() if python_blocks(p.read_text())])
def test_page_samples_run(page: str, server: BeavaProcess) -> None:
    path = DOCS / page
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bv.WindowIgnoredWarning)
        run_page(path, python_blocks(path.read_text()), server)


def test_the_operator_reference_covers_the_catalogue() -> None:
    from beava.catalogue.operators import CATALOGUE

    assert set(reference.EXAMPLES) == set(CATALOGUE)
    assert set(reference.EMPTY) == set(CATALOGUE)
    page = reference.operators_page()
    for name in CATALOGUE:
        assert f"\n### {name}\n" in page
        assert reference.EXAMPLES[name].split("=", 1)[1].startswith(f"bv.{name}(")
    # the example event and table of the page's introduction are a runnable sample too
    assert len(python_blocks(page)) == 1 + len(CATALOGUE)


def _example_features() -> tuple[dict[str, Any], dict[str, Any]]:
    """The examples as `{feature name: (op, descriptor)}`, and the namespace with Txn."""
    ns: dict[str, Any] = {"bv": bv}
    exec(reference.EXAMPLE_EVENT, ns)  # noqa: S102
    features: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bv.WindowIgnoredWarning)
        for op, example in reference.EXAMPLES.items():
            name, call = example.split("=", 1)
            features[name] = (op, eval(call, ns))  # noqa: S307
    return features, ns


def test_operator_examples_register_on_a_live_server(server: BeavaProcess) -> None:
    """All examples as features of one table: registered, fed, read back whole."""
    features, ns = _example_features()

    def UserFeatures(txn: Any) -> Any:  # noqa: N802
        return txn.group_by("user_id").agg(**{n: agg for n, (_, agg) in features.items()})

    UserFeatures.__annotations__ = {"txn": ns["Txn"], "return": bv.Table}
    table = bv.table(key="user_id")(UserFeatures)
    http_request(server.http, "POST", "/reset")
    with bv.App(f"tcp://{server.addrs['tcp']}") as app:
        app.register(ns["Txn"], table)
        app.set_time(1_800_000_000_000)  # both pushes in one minute, whatever the wall clock
        for amount, status in ((20.0, "ok"), (700.0, "declined")):
            app.push("Txn", {"user_id": "u1", "amount": amount, "merchant": "cafe",
                             "country": "US", "status": status, "lat": 52.5, "lon": 13.4})
        row = app.get("UserFeatures", "u1")
    assert set(row) == set(features)
    assert row["txns_1h"] == 2 and row["spend_24h"] == 720.0
    assert row["max_txns_per_minute"] == 2 and row["declines_in_a_row"] == 1


def test_operator_empty_values_are_what_the_engine_reads() -> None:
    """The empty value the reference states for each operator is what the engine's column
    reads for an entity it never updated."""
    from tests.op_columns import engine_column

    features, _ = _example_features()
    for op, agg in features.values():
        wire = {k: v for k, v in agg.to_dict().items() if k not in ("op", "window")}
        value = engine_column(op, **wire).py_read(0, 10**12)
        empty = reference.EMPTY[op]
        if op == "histogram":
            assert isinstance(value, dict) and set(value.values()) == {0}, op
        elif op == "hour_of_day_histogram":
            assert value == [0] * 24, op
        elif op == "dow_hour_histogram":
            assert len(value) == 168 and set(value.values()) == {0}, op
        else:
            assert value == empty and type(value) is type(empty), (op, value)


def test_mkdocs_build_is_strict_and_clean(tmp_path: Path) -> None:
    mkdocs = pytest.importorskip("mkdocs")
    assert mkdocs
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "operators" / "index.html").read_text()
    assert "burst_count" in page and "sub_window" in page
