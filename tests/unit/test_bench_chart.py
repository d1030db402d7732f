"""`python -m bench ... --chart` refuses at once, naming the bench extra, without matplotlib."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.support import REPO

# Hide matplotlib from the child, whatever is installed: a meta path finder that finds it
# nowhere, then run bench's command line.
_NO_MATPLOTLIB = """
import sys
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ModuleNotFoundError(name)
        return None
sys.meta_path.insert(0, Hide())
import importlib.util
importlib.util.find_spec = (lambda f: lambda name, *a: None if name == "matplotlib"
                            else f(name, *a))(importlib.util.find_spec)
sys.argv = ["bench"] + sys.argv[1:]
import runpy
runpy.run_module("bench", run_name="__main__")
"""


def test_chart_without_matplotlib_fails_before_running() -> None:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", _NO_MATPLOTLIB, "push", "small", "--chart", "out.png"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    assert "matplotlib" in result.stderr and "[bench]" in result.stderr
    assert time.monotonic() - started < 20  # no benchmark ran


def test_chart_problem_is_none_with_matplotlib() -> None:
    from bench.__main__ import chart_problem

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert chart_problem() is not None
    else:
        assert chart_problem() is None
