"""``beava quickstart``: a self-contained demo against a real server (spec/server.md §12).

It starts the installed server (``python -P -m beava``, whatever the working directory)
on ephemeral ports with a temporary data directory (WAL on, test mode), registers a small
pipeline through the SDK, pushes five page views showing that each read reflects the push
before it, prints the live features and a decision taken from them, then stops the server
and removes the directory. Nothing is written to the working directory unless
``--write-example PATH`` is given. When the server cannot start, the error shows the last
lines of its stderr.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import beava as bv
from beava.launcher import EmbeddedServer, installed_server_command

__all__ = ["run_quickstart"]

PAGE_VIEWS: list[dict[str, Any]] = [
    {"session_id": "s_1", "path": "/", "dwell_ms": 1240},
    {"session_id": "s_2", "path": "/pricing", "dwell_ms": 3380},
    {"session_id": "s_3", "path": "/docs", "dwell_ms": 890},
    {"session_id": "s_4", "path": "/", "dwell_ms": 2110},
    {"session_id": "s_5", "path": "/docs", "dwell_ms": 5620},
]

ENGAGED_DWELL_MS = 2000.0
# The example script's server when it is given no URL and $BEAVA_URL is unset: a server
# started with the default options (`beava --test-mode`).
EXAMPLE_DEFAULT_URL = "http://127.0.0.1:8080"


# The demo pipeline, written once as SDK source: run here, and copied as is into the script
# that --write-example writes.
PIPELINE_SOURCE = """\
@bv.event
class PageView(bv.Event):
    session_id: str
    path: str
    dwell_ms: int


@bv.table
def SiteMetrics(views: PageView) -> bv.Table:
    return views.agg(
        median_dwell_1h=bv.quantile("dwell_ms", q=0.5, window="1h"),
        page_views_today=bv.count(window="24h"),
        top_page_1h=bv.top_k("path", k=1, window="1h"),
    )
"""

_pipeline: dict[str, Any] = {"__name__": __name__, "bv": bv}
exec(PIPELINE_SOURCE, _pipeline)  # our own constant source, not user input
PageView = _pipeline["PageView"]
SiteMetrics = _pipeline["SiteMetrics"]

EXAMPLE = '''"""beava quickstart, as an SDK script. Start a server first (`beava --test-mode`),
then run: python {name} [URL]
URL: the server's data-plane URL; default $BEAVA_URL, else {default_url}."""

import os
import sys

import beava as bv


{pipeline}

PAGE_VIEWS = {views}

URL = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("BEAVA_URL", "{default_url}")

with bv.App(URL) as app:
    print(app.register(PageView, SiteMetrics))
    for view in PAGE_VIEWS:
        app.push("PageView", view)
        print(view["path"], "->", app.get("SiteMetrics"))
    row = app.get("SiteMetrics")
    print("SiteMetrics:", row)
    engaged = (row["median_dwell_1h"] or 0) >= {threshold}
    print("decision:", "engaged traffic" if engaged else "bouncy traffic",
          "- top page", row["top_page_1h"][0]["value"])
'''


def _row_text(row: dict[str, Any]) -> str:
    return json.dumps(row, sort_keys=True)


def _decision(row: dict[str, Any]) -> str:
    median = row.get("median_dwell_1h")
    top = row.get("top_page_1h") or []
    page = f"{top[0]['value']!r} ({top[0]['count']} views in the last hour)" if top else "none"
    if isinstance(median, (int, float)) and median >= ENGAGED_DWELL_MS:
        verdict = (f"ENGAGED: median dwell {median:.0f} ms >= {ENGAGED_DWELL_MS:.0f} ms, "
                   f"feature the top page {page}")
    else:
        verdict = (f"BOUNCY: median dwell {median} ms < {ENGAGED_DWELL_MS:.0f} ms, "
                   f"review the top page {page}")
    return verdict


def _walkthrough(app: bv.App, out: Any) -> None:
    out.write("\n1. Register the pipeline through the SDK\n")
    out.write("   event PageView(session_id: str, path: str, dwell_ms: int)\n")
    out.write("   table SiteMetrics (global): median_dwell_1h = quantile(dwell_ms, q=0.5, 1h),\n"
              "         page_views_today = count(24h), top_page_1h = top_k(path, k=1, 1h)\n")
    answer = app.register(PageView, SiteMetrics)
    out.write(f"   -> added {answer.get('added')}, registry_version "
              f"{answer.get('registry_version')}\n")

    out.write("\n2. Push page views; the very next read already reflects each push\n")
    for view in PAGE_VIEWS:
        app.push("PageView", view)
        row = app.get("SiteMetrics")
        out.write(f"   push {json.dumps(view)}\n     SiteMetrics -> {_row_text(row)}\n")

    out.write("\n3. Live features\n")
    row = app.get("SiteMetrics")
    out.write(f"   SiteMetrics {_row_text(row)}\n")
    out.write("\n4. Decision taken from the live features\n")
    out.write(f"   {_decision(row)}\n")


def run_quickstart(write_example: str | None) -> int:
    """Run the demo; with ``write_example``, also write an SDK script reproducing it (against
    the URL it is given, else ``$BEAVA_URL``, else a default server) to that path. Returns
    the process exit code."""
    out = sys.stdout
    started = time.monotonic()
    server = EmbeddedServer(installed_server_command(), test_mode=True,
                            data_dir_flag=True)
    try:
        server.start()
        out.write(f"beava quickstart: started a beava server on {server.tcp_url} "
                  f"(and {server.http_url}), data in a temporary directory "
                  "(WAL on, test mode)\n")
        with bv.App(server.tcp_url) as app:
            _walkthrough(app, out)
    except Exception as exc:  # report, clean up, exit 1
        sys.stderr.write(f"beava quickstart failed: {exc}\n")
        return 1
    finally:
        server.stop()
    if write_example:
        with open(write_example, "w", encoding="utf-8") as fh:
            fh.write(EXAMPLE.format(name=write_example, pipeline=PIPELINE_SOURCE,
                                    views=repr(PAGE_VIEWS), threshold=ENGAGED_DWELL_MS,
                                    default_url=EXAMPLE_DEFAULT_URL))
        out.write(f"\nWrote an SDK script reproducing this demo to {write_example}\n")
    out.write(f"\nDone in {time.monotonic() - started:.1f}s: server stopped, temporary "
              "directory removed.\n")
    out.flush()
    return 0
