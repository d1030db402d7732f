"""``beava quickstart`` (spec/server.md §12): a real server with a temporary data directory,
the pipeline registered through the SDK, live rows printed, nothing left behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import BeavaProcess

REPO = Path(__file__).resolve().parents[2]

FINAL_ROW = ('{"median_dwell_1h": 2110.0, "page_views_today": 5, '
             '"top_page_1h": [{"count": 2, "value": "/"}]}')
ROWS_AFTER_EACH_PUSH = [
    '{"median_dwell_1h": 1240.0, "page_views_today": 1, "top_page_1h": [{"count": 1, '
    '"value": "/"}]}',
    '"page_views_today": 2,',
    '"page_views_today": 3,',
    '{"median_dwell_1h": 1675.0, "page_views_today": 4, "top_page_1h": [{"count": 2, '
    '"value": "/"}]}',
    FINAL_ROW,
]


def quickstart(cwd: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BEAVA_")}
    env.update({"PYTHONPATH": str(REPO), "TMPDIR": str(tmp)})
    return subprocess.run([sys.executable, "-m", "beava", "quickstart", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=30)


def test_quickstart(tmp_path: Path) -> None:
    cwd, tmp = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir()
    tmp.mkdir()
    proc = quickstart(cwd, tmp)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    positions = [out.index(row) for row in ROWS_AFTER_EACH_PUSH]
    assert positions == sorted(positions)  # one row per push, in push order
    assert f"SiteMetrics {FINAL_ROW}" in out
    assert "ENGAGED" in out and "'/'" in out
    assert "WAL on, test mode" in out
    assert list(cwd.iterdir()) == []  # nothing written to the working directory
    assert list(tmp.iterdir()) == []  # the temporary data directory is removed


def test_quickstart_from_the_repository_root(tmp_path: Path) -> None:
    """README's first command runs ``.venv/bin/beava quickstart`` in the repository root,
    where ``beava/`` is the source tree: the quickstart's server must still start (the
    installed server is run with ``-P``; with the editable install it is this tree)."""
    command = Path(sys.executable).with_name("beava")
    assert command.is_file(), f"no beava command beside {sys.executable}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BEAVA_")}
    env.pop("PYTHONPATH", None)
    env["TMPDIR"] = str(tmp_path)
    proc = subprocess.run([str(command), "quickstart"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"SiteMetrics {FINAL_ROW}" in proc.stdout
    assert "ENGAGED: median dwell 2110 ms" in proc.stdout
    assert list(tmp_path.iterdir()) == []


def test_quickstart_write_example(tmp_path: Path, clean_server: BeavaProcess) -> None:
    cwd, tmp = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir()
    tmp.mkdir()
    proc = quickstart(cwd, tmp, "--write-example", "demo.py")
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in cwd.iterdir()] == ["demo.py"]
    # the script reproduces the demo against the running server it is pointed at
    run = subprocess.run([sys.executable, "demo.py", clean_server.http_url], cwd=cwd,
                         capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=30)
    assert run.returncode == 0, run.stderr
    assert ("SiteMetrics: {'median_dwell_1h': 2110.0, 'page_views_today': 5, "
            "'top_page_1h': [{'count': 2, 'value': '/'}]}") in run.stdout
    assert "decision: engaged traffic - top page /" in run.stdout
