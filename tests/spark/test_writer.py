"""The partition writer and the progress channel, against a real server, without Spark:
request splitting at the frame limit, rows too large, stop at the first rejection, the
OP_PUSH fallback, a dropped connection."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

import beava as bv
from beava_spark import PartitionPushError
from beava_spark.progress import Progress, ProgressListener, ProgressReporter
from beava_spark.writer import ROW_TOO_LARGE, PartitionWriter, WriterConfig
from tests.support import BeavaProcess


@bv.event
class Note:
    user_id: str
    text: str
    n: int


@bv.table(key="user_id")
def NoteStats(e: Note) -> bv.Table:
    return e.group_by("user_id").agg(notes=bv.count(), n_total=bv.sum("n"))


@pytest.fixture
def app(clean_server: BeavaProcess) -> Iterator[bv.App]:
    with bv.App(f"tcp://{clean_server.addrs['tcp']}") as remote:
        remote.register(Note, NoteStats)
        yield remote


def config(url: str, **overrides: Any) -> WriterConfig:
    options: dict[str, Any] = {
        "event": "Note", "urls": (url,), "push_many": (True,), "batch_size": 10,
        "max_in_flight": 30, "stop_on_rejection": False, "timeout": 10.0,
    }
    options.update(overrides)
    return WriterConfig(**options)


def line(user: str, text: str, n: int) -> bytes:
    return f'{{"user_id":"{user}","text":"{text}","n":{n}}}'.encode()


def test_requests_are_split_at_the_frame_limit(app: bv.App, make_proxy: Any,
                                               clean_server: BeavaProcess) -> None:
    proxy = make_proxy(clean_server.tcp)
    rows = [line("u1", "x" * 66, i) for i in range(100, 200)] + [line("u2", "y" * 400, 1)]
    assert {len(r) for r in rows[:100]} == {100}
    # Payload = 29 bytes of envelope + rows and commas: 4 rows of 100 bytes fit in 432.
    writer = PartitionWriter(config(proxy.url, batch_size=8, max_frame_bytes=432))
    totals = writer.run(iter(rows))
    assert proxy.ops == {0x0012: 25}
    assert (totals.rows, totals.sent, totals.acknowledged, totals.rejected) == (101, 100, 100, 1)
    assert totals.rejected_by_code == {ROW_TOO_LARGE: 1}
    assert totals.rejections[0].row.startswith('{"user_id":"u2"')
    assert app.get("NoteStats", "u1") == {"notes": 100, "n_total": float(sum(range(100, 200)))}
    assert app.get("NoteStats", "u2") == {}


def test_rejections_are_counted_or_stop_the_partition(app: bv.App,
                                                      clean_server: BeavaProcess) -> None:
    url = f"tcp://{clean_server.addrs['tcp']}"
    rows = [line("u1", "ok", 1)] * 25 + [b'{"user_id":"u1","text":"no n"}'] + [
        line("u1", "ok", 1)] * 74
    collect = PartitionWriter(config(url)).run(iter(rows))
    assert (collect.sent, collect.acknowledged, collect.rejected) == (100, 99, 1)
    assert collect.rejected_by_code == {"invalid_event": 1}
    assert collect.rejections[0].row == '{"user_id":"u1","text":"no n"}'
    assert collect.stopped_partitions == 0
    assert app.get("NoteStats", "u1")["notes"] == 99

    app.reset()
    app.register(Note, NoteStats)
    stop = PartitionWriter(config(url, stop_on_rejection=True)).run(iter(rows))
    # The bad row is in the 3rd request; requests already in flight (window 3) still count.
    assert stop.stopped_partitions == 1 and stop.rejected == 1
    assert stop.acknowledged == stop.sent - 1 and 29 <= stop.sent < 100
    assert app.get("NoteStats", "u1")["notes"] == stop.acknowledged


def test_fallback_sends_one_push_per_row(app: bv.App, make_proxy: Any,
                                         clean_server: BeavaProcess) -> None:
    proxy = make_proxy(clean_server.tcp)
    rows = [line(f"u{i % 3}", "t", i) for i in range(50)] + [b'{"user_id":"u0","bad":1}']
    totals = PartitionWriter(config(proxy.url, push_many=(False,))).run(iter(rows))
    assert proxy.ops == {0x0010: 51}
    assert (totals.sent, totals.acknowledged, totals.rejected) == (51, 50, 1)
    assert totals.rejected_by_code == {"unknown_field_v0": 1}
    assert totals.rejections[0].row == '{"user_id":"u0","bad":1}'
    assert app.get("NoteStats", "u0") == {
        "notes": 17, "n_total": float(sum(range(0, 50, 3)))}


def test_an_empty_partition_opens_no_connection(make_proxy: Any,
                                                clean_server: BeavaProcess) -> None:
    proxy = make_proxy(clean_server.tcp)
    totals = PartitionWriter(config(proxy.url)).run(iter([]))
    assert proxy.connections == 0
    assert (totals.rows, totals.sent, totals.partitions) == (0, 0, 1)


def test_a_dropped_connection_fails_with_a_clear_error(app: bv.App, make_proxy: Any,
                                                       clean_server: BeavaProcess) -> None:
    proxy = make_proxy(clean_server.tcp, drop_after=2000)
    rows = [line("u1", "z" * 40, i) for i in range(2000)]
    with pytest.raises(PartitionPushError) as info:
        PartitionWriter(config(proxy.url, batch_size=20, max_in_flight=40)).run(iter(rows))
    message = str(info.value)
    assert message.startswith(f"connection to {proxy.url} lost after ")
    assert "Spark retries the partition" in message and "dedupe_key" in message
    assert proxy.drops == 1
    # Only whole requests forwarded before the drop are applied: fewer than all rows. The
    # server reads them on the proxy's connection, maybe after this reader's GET: wait.
    deadline = time.monotonic() + 10
    while "notes" not in (row := app.get("NoteStats", "u1")) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert 0 < row["notes"] < 2000


def test_an_unreachable_server_fails_the_task() -> None:
    url = "tcp://127.0.0.1:1"
    with pytest.raises(PartitionPushError, match=r"^cannot connect to tcp://127\.0\.0\.1:1 \("):
        PartitionWriter(config(url)).run(iter([line("u1", "t", 1)]))


def test_progress_reports_reach_the_listener() -> None:
    seen: list[Progress] = []
    listener = ProgressListener(seen.append, interval=0.05).start()
    try:
        first = ProgressReporter(listener.address, "0:0:0")
        second = ProgressReporter(listener.address, "0:1:0")
        first.update(100, 90, 1, flush=True)
        second.update(50, 50, 0, flush=True)
        first.update(200, 180, 2, flush=True)  # cumulative: replaces the first report
        second.update(60, 60, 0)  # rate-limited: dropped (sent < 0.25 s after the last)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not (
                seen and (seen[-1].sent, seen[-1].acknowledged) == (250, 230)):
            time.sleep(0.02)
    finally:
        listener.close()
    assert (seen[-1].sent, seen[-1].acknowledged, seen[-1].rejected) == (250, 230, 2)
    assert seen[-1].elapsed > 0
