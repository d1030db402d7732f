"""``python -m beava_spark``: Parquet, CSV and JSON-lines files into a running server, with
progress lines while it runs and a summary at the end."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install ./spark_connector)")

import beava as bv  # noqa: E402
from beava_spark.__main__ import input_format, main  # noqa: E402
from tests.support import REPO, BeavaProcess  # noqa: E402

ROWS = 30_000
PROGRESS = re.compile(r"^sent [\d,]+  acknowledged [\d,]+  replays (?:[\d,]+|\?)  "
                      r"rejected [\d,]+  [\d,]+ rows/s  [\d.]+ s$")
REPLAYS = r"replays (?:0|\?)"


@bv.event
class Reading:
    sensor: str
    value: float
    at: int
    note: str | None


@bv.table(key="sensor")
def SensorStats(r: Reading) -> bv.Table:
    return r.group_by("sensor").agg(readings=bv.count(), value_sum=bv.sum("value"),
                                    last_at=bv.max("at"))


@pytest.fixture
def app(clean_server: BeavaProcess) -> Iterator[bv.App]:
    with bv.App(f"tcp://{clean_server.addrs['tcp']}") as remote:
        remote.register(Reading, SensorStats)
        yield remote


def reading(i: int) -> dict[str, Any]:
    return {"sensor": f"s{i % 10}", "value": (i % 40) / 8, "at": 1_700_000_000_000 + i,
            "note": None if i % 2 else "n"}


def expected(sensor: int) -> dict[str, Any]:
    mine = [reading(i) for i in range(sensor, ROWS, 10)]
    return {"readings": len(mine), "value_sum": sum(r["value"] for r in mine),
            "last_at": max(r["at"] for r in mine)}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("inputs")
    rows = [reading(i) for i in range(ROWS)]
    with (root / "readings.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with (root / "readings.jsonl").open("w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    spark.createDataFrame(rows, "sensor string, value double, at long, note string") \
        .write.parquet(str(root / "readings.parquet"))
    return {"csv": root / "readings.csv", "json": root / "readings.jsonl",
            "parquet": root / "readings.parquet"}


def test_format_is_told_from_extensions(files: dict[str, Path], tmp_path: Path) -> None:
    assert [input_format([str(files[k])]) for k in ("csv", "json", "parquet")] == [
        "csv", "json", "parquet"]
    (tmp_path / "data.txt").write_text("x")
    with pytest.raises(ValueError, match="cannot tell the format of .*data.txt; use --format"):
        input_format([str(tmp_path / "data.txt")])


@pytest.mark.parametrize("kind", ["parquet", "json"])
def test_ingests_a_file_in_process(kind: str, files: dict[str, Path], app: bv.App,
                                   clean_server: BeavaProcess,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    code = main([str(files[kind]), "--event", "Reading", "--url",
                 f"tcp://{clean_server.addrs['tcp']}", "--progress-interval", "0.05",
                 "--partitions", "2"])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = err.splitlines()
    assert lines and all(PROGRESS.match(line) for line in lines), lines
    assert re.search(f"rows {ROWS:,}  sent {ROWS:,}  acknowledged {ROWS:,}  {REPLAYS}  "
                     f"rejected 0", out), out
    assert "rows/s  partitions 2" in out
    for sensor in range(10):
        assert app.get("SensorStats", f"s{sensor}") == expected(sensor)


def test_rejected_rows_give_exit_status_1(files: dict[str, Path], app: bv.App,
                                          clean_server: BeavaProcess,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    # "at" sent as text: the event's i64 field takes numbers only (wire.md §6.3). A wrong
    # --event-schema stands in for the server's (which would refuse before sending); the
    # early stop on schema rejections is switched off.
    code = main([str(files["json"]), "--event", "Reading", "--url",
                 f"tcp://{clean_server.addrs['tcp']}", "--schema", "at=str",
                 "--event-schema", "sensor:str, value:f64, at:str, note:str?",
                 "--schema-check-rows", "0", "--progress-interval", "0", "--json"])
    out, _ = capsys.readouterr()
    totals = json.loads(out)
    assert code == 1
    assert (totals["acknowledged"], totals["rejected"]) == (0, ROWS)
    assert totals["rejected_by_code"] == {"invalid_event": ROWS}


def test_unregistered_event_gives_exit_status_2(files: dict[str, Path],
                                                clean_server: BeavaProcess,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code = main([str(files["csv"]), "--event", "Nope", "--url",
                 f"tcp://{clean_server.addrs['tcp']}"])
    _, err = capsys.readouterr()
    assert code == 2
    assert err == (f"beava-spark: event 'Nope' is not registered on "
                   f"tcp://{clean_server.addrs['tcp']}; register it first (nothing was sent)\n")


def test_python_dash_m_ingests_a_csv_file(files: dict[str, Path], app: bv.App,
                                         clean_server: BeavaProcess) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "beava_spark", str(files["csv"]), "--event", "Reading",
         "--url", f"tcp://{clean_server.addrs['tcp']}", "--master", "local[2]",
         "--progress-interval", "0.1", "--schema", "at=i64"],
        capture_output=True, text=True, timeout=300, cwd=REPO, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert any(PROGRESS.match(line) for line in proc.stderr.splitlines()), proc.stderr[-3000:]
    assert proc.stdout.startswith(f"beava-spark: {files['csv']} -> event Reading on tcp://")
    assert re.search(f"acknowledged {ROWS:,}  {REPLAYS}  rejected 0", proc.stdout), proc.stdout
    for sensor in range(10):
        assert app.get("SensorStats", f"s{sensor}") == expected(sensor)
