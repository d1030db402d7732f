"""Snapshot file format, retention and the fork / in-process runner (spec/durability.md §8)."""

from __future__ import annotations

import os
import random
import struct
import threading
import time
import zlib
from pathlib import Path

import msgspec
import pytest

from beava.durability import snapshots as sn
from beava.durability.crash_points import CrashPoints
from beava.engine.store import FeatureStore


def body_for(lsn: int, version: int = 3, state: object = None) -> bytes:
    return sn.encode_snapshot_body(lsn, version, [{"kind": "event", "name": "txn"}],
                                   state if state is not None else {"t": {"u1": [1, 2.5]}},
                                   [["txn", "k1", lsn, 1234, version]])


def poll_until_done(runner: sn.SnapshotRunner, timeout: float = 20.0) -> sn.SnapshotOutcome:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        outcome = runner.poll()
        if outcome is not None:
            return outcome
        time.sleep(0.01)
    raise AssertionError("snapshot did not finish")


# -- format ------------------------------------------------------------------------------------


def test_header_layout() -> None:
    body = b"\x80"
    header = sn.encode_snapshot_header(0x186A0, 1_700_000_000_000, 1_699_999_999_000, 4, body)
    assert len(header) == 64
    assert header[0:8] == b"BVSNAP01"
    assert struct.unpack_from("<IIQQQIQII", header, 8) == (
        1, 0, 0x186A0, 1_700_000_000_000, 1_699_999_999_000, 4, 1, zlib.crc32(body), 0)
    assert struct.unpack_from("<I", header, 60)[0] == zlib.crc32(header[:60])
    assert sn.decode_snapshot_header(header) == sn.SnapshotHeader(
        0x186A0, 1_700_000_000_000, 1_699_999_999_000, 4, 1, zlib.crc32(body))


def test_body_shape() -> None:
    decoded = msgspec.msgpack.decode(body_for(20))
    assert decoded == {"registry": {"version": 3, "nodes": [{"kind": "event", "name": "txn"}]},
                       "next_lsn": 21, "state_format": 2, "state": {"t": {"u1": [1, 2.5]}},
                       "dedupe": [["txn", "k1", 20, 1234, 3]]}


def test_write_and_read_round_trip(tmp_path: Path) -> None:
    state = {"t": {"u1": b"\x00\x01raw column bytes", "f": 0.1 + 0.2}}
    body = body_for(20, state=state)
    written = sn.write_snapshot_file(str(tmp_path), 20, 777, 3, body)
    assert written.path == str(tmp_path / "snap-0000000000000014.bsnap")
    assert written.bytes == 64 + len(body) == os.path.getsize(written.path)
    assert written.fsync_seconds >= 0
    assert os.listdir(tmp_path) == ["snap-0000000000000014.bsnap"]
    loaded = sn.read_snapshot(written.path)
    assert loaded.path == written.path
    assert (loaded.header.snapshot_lsn, loaded.header.watermark_ms,
            loaded.header.registry_version, loaded.header.body_len) == (20, 777, 3, len(body))
    assert loaded.body["state"] == state  # floats and bytes exact
    assert sn.read_snapshot_header(written.path, 20).snapshot_lsn == 20


def _rewrite(path: str, mutate) -> None:
    data = bytearray(Path(path).read_bytes())
    Path(path).write_bytes(bytes(mutate(data)))


def _fix_header_crc(data: bytearray) -> bytearray:
    struct.pack_into("<I", data, 60, zlib.crc32(bytes(data[:60])))
    return data


def _set(fmt: str, offset: int, value: int):
    def mutate(data: bytearray) -> bytearray:
        struct.pack_into(fmt, data, offset, value)
        return _fix_header_crc(data)
    return mutate


def _flip(offset: int):
    def mutate(data: bytearray) -> bytearray:
        data[offset] ^= 0x01
        return data
    return mutate


@pytest.mark.parametrize("mutate, reason", [
    (lambda d: d[:40], "short header"),
    (lambda d: b"BVSNAP02" + d[8:], "bad magic"),
    (_flip(20), "header CRC mismatch"),
    (_set("<I", 8, 2), "unsupported format_version 2"),
    (_set("<I", 12, 1), "unknown flags"),
    (_flip(70), "body CRC mismatch"),
    (lambda d: d[:-1], "header says"),
    (lambda d: d + b"\x00", "header says"),
    (_set("<Q", 16, 21), "does not match the name"),
])
def test_read_rejects_damage(tmp_path: Path, mutate, reason) -> None:
    written = sn.write_snapshot_file(str(tmp_path), 20, 0, 3, body_for(20))
    _rewrite(written.path, mutate)
    with pytest.raises(sn.SnapshotInvalid, match=reason):
        sn.read_snapshot(written.path)


@pytest.mark.parametrize("body, reason", [
    (msgspec.msgpack.encode([1, 2]), "not a map"),
    (b"\xc1", "not MessagePack"),
    (msgspec.msgpack.encode({"registry": {"version": 3}}), "lacks next_lsn, state_format"),
    # 1: the pickled state of earlier versions, never unpickled
    (sn.encode_snapshot_body(20, 3, [], b"\x80\x04N.", [], state_format=1),
     "unsupported state_format 1"),
    (sn.encode_snapshot_body(20, 3, [], {}, [], state_format=3), "unsupported state_format 3"),
    (b"\x91" * 100_000 + b"\xc0", "not MessagePack"),  # nested beyond the decoder's depth
    (sn.encode_snapshot_body(19, 3, [], {}, []), "next_lsn 20 is not snapshot_lsn"),
    (sn.encode_snapshot_body(20, 4, [], {}, []), "registry version does not match"),
])
def test_read_rejects_bad_bodies(tmp_path: Path, body: bytes, reason: str) -> None:
    written = sn.write_snapshot_file(str(tmp_path), 20, 0, 3, body)
    with pytest.raises(sn.SnapshotInvalid, match=reason):
        sn.read_snapshot(written.path)


def test_read_accepts_extra_state_formats(tmp_path: Path) -> None:
    written = sn.write_snapshot_file(str(tmp_path), 20, 0, 3,
                                     sn.encode_snapshot_body(20, 3, [], {}, [], state_format=3))
    assert sn.read_snapshot(written.path, frozenset({2, 3})).body["state_format"] == 3


def test_write_failure_before_rename_removes_temp(tmp_path: Path) -> None:
    def boom() -> None:
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError):
        sn.write_snapshot_file(str(tmp_path), 5, 0, 3, body_for(5), before_rename=boom)
    assert os.listdir(tmp_path) == []


# -- retention ---------------------------------------------------------------------------------


def test_retention_keeps_newest(tmp_path: Path) -> None:
    for lsn in (5, 40, 12, 100):
        sn.write_snapshot_file(str(tmp_path), lsn, 0, 3, body_for(lsn))
    (tmp_path / "snap-0000000000000200.bsnap.tmp").write_bytes(b"partial")
    (tmp_path / "notes.txt").write_bytes(b"mine")
    assert sn.apply_retention(str(tmp_path), 2) == [40, 100]
    assert sorted(os.listdir(tmp_path)) == ["notes.txt", "snap-0000000000000028.bsnap",
                                            "snap-0000000000000064.bsnap"]
    assert sn.apply_retention(str(tmp_path), 5) == [40, 100]
    assert [lsn for lsn, _ in sn.list_snapshots(str(tmp_path))] == [40, 100]


# -- runner: fork mode -------------------------------------------------------------------------


def test_fork_mode_writes_valid_snapshot_in_child(tmp_path: Path) -> None:
    parent = os.getpid()
    runner = sn.SnapshotRunner(str(tmp_path), retain_count=2)
    assert runner.fork

    def serialise() -> bytes:
        return body_for(30, state={"pid": os.getpid()})

    runner.start(serialise, 30, 5555, 3)
    assert runner.running
    outcome = poll_until_done(runner)
    assert not runner.running
    assert outcome.ok, outcome.reason
    assert outcome.path == str(tmp_path / "snap-000000000000001e.bsnap")
    assert outcome.bytes == os.path.getsize(outcome.path)
    assert outcome.duration_seconds > 0 and outcome.fsync_seconds > 0
    assert outcome.retained == [30] and outcome.oldest_retained_lsn == 30
    loaded = sn.read_snapshot(outcome.path)
    assert loaded.header.watermark_ms == 5555
    child = loaded.body["state"]["pid"]
    assert child != parent  # serialised in a forked child
    with pytest.raises(ChildProcessError):
        os.waitpid(child, os.WNOHANG)  # already reaped
    assert runner.poll() is None


def test_fork_mode_sees_state_as_of_fork(tmp_path: Path) -> None:
    state = {"n": 1}
    runner = sn.SnapshotRunner(str(tmp_path))

    def serialise() -> bytes:
        time.sleep(0.3)  # the parent mutates meanwhile; the child keeps its own copy
        return body_for(7, state=dict(state))

    runner.start(serialise, 7, 0, 3)
    state["n"] = 2
    outcome = poll_until_done(runner)
    assert outcome.ok
    assert sn.read_snapshot(outcome.path).body["state"] == {"n": 1}


def test_fork_mode_child_error_is_reported(tmp_path: Path) -> None:
    runner = sn.SnapshotRunner(str(tmp_path))

    def serialise() -> bytes:
        raise ValueError("cannot encode column")

    runner.start(serialise, 9, 0, 3)
    outcome = poll_until_done(runner)
    assert not outcome.ok
    assert outcome.reason == "ValueError: cannot encode column"
    assert outcome.oldest_retained_lsn is None
    assert os.listdir(tmp_path) == []


def test_fork_mode_crash_before_rename_kills_only_the_child(tmp_path: Path) -> None:
    runner = sn.SnapshotRunner(str(tmp_path),
                               crash_points=CrashPoints("snapshot_before_rename:2"))
    runner.start(lambda: body_for(10), 10, 0, 3)
    assert poll_until_done(runner).ok
    runner.start(lambda: body_for(20), 20, 0, 3)
    outcome = poll_until_done(runner)
    assert not outcome.ok
    assert outcome.reason == "snapshot child killed by signal 9"
    assert os.listdir(tmp_path) == ["snap-000000000000000a.bsnap"]
    runner.start(lambda: body_for(30), 30, 0, 3)
    assert poll_until_done(runner).ok


def test_fork_mode_kill(tmp_path: Path) -> None:
    snap_dir = tmp_path / "snaps"
    snap_dir.mkdir()
    pid_file = tmp_path / "child.pid"
    runner = sn.SnapshotRunner(str(snap_dir))

    def serialise() -> bytes:
        (snap_dir / "snap-0000000000000008.bsnap.tmp").write_bytes(b"partial")
        pid_file.write_text(str(os.getpid()))
        time.sleep(30)
        return b""

    runner.start(serialise, 8, 0, 3)
    deadline = time.monotonic() + 10
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    started = time.monotonic()
    runner.kill()
    assert time.monotonic() - started < 5
    assert not runner.running
    assert runner.poll() is None
    assert os.listdir(snap_dir) == []
    with pytest.raises(ChildProcessError):
        os.waitpid(int(pid_file.read_text()), os.WNOHANG)  # killed and reaped


def test_start_while_running_is_refused(tmp_path: Path) -> None:
    runner = sn.SnapshotRunner(str(tmp_path))
    runner.start(lambda: body_for(1), 1, 0, 3)
    with pytest.raises(RuntimeError):
        runner.start(lambda: body_for(2), 2, 0, 3)
    assert poll_until_done(runner).ok


def test_runner_applies_retention(tmp_path: Path) -> None:
    runner = sn.SnapshotRunner(str(tmp_path), retain_count=2)
    retained = []
    for lsn in (10, 20, 30):
        runner.start(lambda lsn=lsn: body_for(lsn), lsn, 0, 3)
        outcome = poll_until_done(runner)
        assert outcome.ok
        retained.append(outcome.retained)
    assert retained == [[10], [10, 20], [20, 30]]
    assert [lsn for lsn, _ in sn.list_snapshots(str(tmp_path))] == [20, 30]


# -- runner: in-process mode -------------------------------------------------------------------


def test_in_process_mode(tmp_path: Path) -> None:
    runner = sn.SnapshotRunner(str(tmp_path), fork=False)
    caller = threading.get_ident()
    seen = []

    def serialise() -> bytes:
        seen.append((os.getpid(), threading.get_ident()))
        return body_for(12)

    runner.start(serialise, 12, 99, 3)
    assert seen == [(os.getpid(), caller)]  # serialised on the calling (loop) thread
    outcome = poll_until_done(runner)
    assert outcome.ok and outcome.retained == [12]
    assert outcome.bytes == os.path.getsize(outcome.path)
    assert sn.read_snapshot(outcome.path).header.watermark_ms == 99


def test_in_process_crash_point_fails_attempt(tmp_path: Path) -> None:
    runner = sn.SnapshotRunner(str(tmp_path), fork=False,
                               crash_points=CrashPoints("snapshot_before_rename"))
    runner.start(lambda: body_for(12), 12, 0, 3)
    outcome = poll_until_done(runner)
    assert not outcome.ok and "snapshot_before_rename" in outcome.reason
    assert os.listdir(tmp_path) == []


def test_in_process_serialise_error(tmp_path: Path) -> None:
    runner = sn.SnapshotRunner(str(tmp_path), fork=False)

    def serialise() -> bytes:
        raise KeyError("table")

    runner.start(serialise, 12, 0, 3)
    assert runner.running
    outcome = runner.poll()
    assert outcome is not None and not outcome.ok
    assert outcome.reason == "serialise failed: KeyError: 'table'"
    assert not runner.running


def test_in_process_kill_prevents_commit(tmp_path: Path, monkeypatch) -> None:
    release = threading.Event()
    in_fsync = threading.Event()
    real_sync = sn.sync_fd

    def slow_sync(fd: int) -> None:
        in_fsync.set()
        release.wait(10)
        real_sync(fd)

    monkeypatch.setattr(sn, "sync_fd", slow_sync)
    runner = sn.SnapshotRunner(str(tmp_path), fork=False)
    runner.start(lambda: body_for(12), 12, 0, 3)
    assert in_fsync.wait(10)
    assert os.listdir(tmp_path) == ["snap-000000000000000c.bsnap.tmp"]
    threading.Timer(0.2, release.set).start()
    runner.kill()  # waits for the writer, which must not rename
    assert not runner.running
    assert runner.poll() is None
    assert os.listdir(tmp_path) == []


# -- engine state through snapshot files (state_format 2) ----------------------------------------

T0 = 1_700_000_000_000
HOUR = 3_600_000


def _f(op: str, **params: object) -> dict:
    return {"op": op, "params": params}


# One feature per operator (lifetime), the windowable ones again over two windows, and a
# global table: every op family, every column layout (buffers, side blocks, rings, value
# objects, bucket arenas, sketches in exact and in sketch mode).
LIFETIME = {
    "count": _f("count"), "sum": _f("sum", field="x"), "mean": _f("mean", field="x"),
    "min_s": _f("min", field="s"), "max_i": _f("max", field="i"), "var": _f("var", field="x"),
    "std": _f("std", field="x"), "ratio": _f("ratio", where="(b == true)"),
    "nu_s": _f("n_unique", field="s"), "nu_i": _f("n_unique", field="i"),
    "q": _f("quantile", field="x", q=0.9), "top": _f("top_k", field="s", k=3),
    "bloom": _f("bloom_member", field="c", expected_n=8), "ent": _f("entropy", field="c"),
    "first": _f("first", field="s"), "last": _f("last", field="x"),
    "first_n": _f("first_n", field="s", n=3), "last_n": _f("last_n", field="i", n=4),
    "lag": _f("lag", field="x", n=2), "first_seen": _f("first_seen"),
    "last_seen": _f("last_seen"), "age": _f("age"), "has_seen": _f("has_seen"),
    "since": _f("time_since"), "since_n": _f("time_since_last_n", n=3),
    "streak": _f("streak", where="(b == true)"),
    "max_streak": _f("max_streak", where="(b == true)"),
    "neg_streak": _f("negative_streak", where="(b == true)"),
    "fsiw": _f("first_seen_in_window", window="10m"),
    "ewma": _f("ewma", field="x", half_life="5s"), "ewvar": _f("ewvar", field="x", half_life="5s"),
    "ewz": _f("ew_zscore", field="x", half_life="5s"),
    "dsum": _f("decayed_sum", field="x", half_life="1m"),
    "dcount": _f("decayed_count", half_life="1m"), "twa": _f("twa", field="x"),
    "roc": _f("rate_of_change", field="x"), "ias": _f("inter_arrival_stats"),
    "burst": _f("burst_count", sub_window="1s"), "delta": _f("delta_from_prev", field="x"),
    "trend": _f("trend", field="x"), "resid": _f("trend_residual", field="x"),
    "outliers": _f("outlier_count", field="x", sigma=1.0),
    "changes": _f("value_change_count", field="c"), "z": _f("z_score", field="x"),
    "hist": _f("histogram", field="x", buckets=[0, 10, 100]),
    "hod": _f("hour_of_day_histogram"), "dow": _f("dow_hour_histogram"),
    "season": _f("seasonal_deviation", field="x"),
    "mix": _f("event_type_mix", field="c", max_categories=4),
    "recent": _f("most_recent_n", field="c", n=3),
    "sample": _f("reservoir_sample", field="i", samples=4),
    "geo_v": _f("geo_velocity"), "geo_d": _f("geo_distance"), "geo_s": _f("geo_spread"),
    "home": _f("distance_from_home", samples=5),
}
WINDOWED = {
    **{f"{op}_1h": _f(op, window="1h", **({} if op in ("count", "ratio") else {"field": "x"}))
       for op in ("count", "sum", "mean", "max", "var", "std")},
    "ratio_1h": _f("ratio", window="1h", where="(b == true)"),
    "min_s_1h": _f("min", field="s", window="1h"), "count_10m": _f("count", window="10m"),
    "max_c_10m": _f("max", field="c", window="10m"),
    "nu_1h": _f("n_unique", field="i", window="1h"), "q_1h": _f("quantile", field="x", window="1h"),
    "top_1h": _f("top_k", field="s", k=2, window="1h"),
    "ent_10m": _f("entropy", field="c", window="10m"),
}
GLOBAL = {"g_n": _f("count"), "g_s": _f("sum", field="x"), "g_last": _f("last", field="c"),
          "g_nu": _f("n_unique", field="c")}
EVERY_OP_NODES = [
    {"kind": "event", "name": "Ev", "schema": {"fields": {
        "user": "str", "x": "f64", "i": "i64", "s": "str", "c": "str", "b": "bool",
        "lat": "f64", "lon": "f64"}}},
    {"kind": "derivation", "name": "L", "upstreams": ["Ev"], "key": ["user"], "agg": LIFETIME},
    {"kind": "derivation", "name": "W", "upstreams": ["Ev"], "key": ["user"], "agg": WINDOWED},
    {"kind": "derivation", "name": "G", "upstreams": ["Ev"], "agg": GLOBAL},
]
USERS = ["u0", "u1", "u2", "u3", "u4"]


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def push_row(j: int) -> dict:
    """Push j: u0 gets every other push (past the exact limits of the sketches), u4 none."""
    user = "u0" if j % 2 == 0 else USERS[1 + j % 3]
    return {"user": user, "x": (j * 37) % 101 - 20.5 + j / 7, "i": j * 7919 % 4001,
            "s": f"s{j}" if user == "u0" else f"t{j % 5}",
            "c": f"category-{j % 6}-with-a-long-name" if j % 4 else f"c{j % 3}",
            "b": j % 3 != 0, "lat": 40.0 + (j % 10) * 0.01, "lon": -3.0 + (j % 7) * 0.02}


def push_range(store: FeatureStore, clock: Clock, start: int, stop: int) -> None:
    for j in range(start, stop):
        # mostly forward in time, sometimes a step back (operators.md §3: arrival order)
        clock.now = T0 + j * 1_500 - (4_000 if j % 17 == 0 else 0)
        store.push("Ev", push_row(j))


def all_rows(store: FeatureStore, T: int) -> bytes:
    """Every row of every table at T, as MessagePack bytes (floats compared bit for bit)."""
    rows = {name: {key: store.table(name).row(key, T) for key in USERS}
            for name in ("L", "W")}
    rows["G"] = {"": store.table("G").row("", T)}
    return msgspec.msgpack.encode(rows)


def every_op_store(pushes: int = 2_400) -> tuple[FeatureStore, Clock]:
    clock = Clock()
    store = FeatureStore(clock=clock)
    status, body = store.register(msgspec.json.encode({"nodes": EVERY_OP_NODES}))
    assert status == 200, body
    push_range(store, clock, 0, pushes)
    return store, clock


def _write_and_read(store: FeatureStore, directory: Path) -> sn.LoadedSnapshot:
    written = sn.write_snapshot_file(str(directory), store.applied_lsn, store.watermark_ms,
                                     store.registry_version, store.snapshot_body())
    return sn.read_snapshot(written.path)


def _strictly_plain(value: object, path: str = "state") -> None:
    """Only the types a snapshot state may hold: no tuple, no other object; str map keys."""
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            assert type(key) is str, f"{path}: key {key!r}"
            _strictly_plain(item, f"{path}.{key}")
    elif kind is list:
        for index, item in enumerate(value):
            _strictly_plain(item, f"{path}[{index}]")
    else:
        assert kind in (type(None), bool, int, float, str, bytes), f"{path}: {kind.__name__}"


def _same_data(a: object, b: object, path: str = "state") -> None:
    """Equal with equal types all the way down (True is not 1; floats by their bits)."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
    if type(a) is dict:
        assert list(a) == list(b), path
        for key in a:
            _same_data(a[key], b[key], f"{path}.{key}")
    elif type(a) is list:
        assert len(a) == len(b), path
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            _same_data(x, y, f"{path}[{index}]")
    elif type(a) is float:
        assert struct.pack("<d", a) == struct.pack("<d", b), path
    else:
        assert a == b, path


@pytest.fixture(scope="module")
def every_op() -> tuple[FeatureStore, Clock]:
    return every_op_store()


def test_every_operator_state_is_plain_data(every_op) -> None:
    store, _clock = every_op
    state = store.engine.dump()
    _strictly_plain(state)
    _same_data(msgspec.msgpack.decode(msgspec.msgpack.encode(state)), state)
    body = msgspec.msgpack.decode(store.snapshot_body())
    assert body["state_format"] == sn.STATE_FORMAT == 2
    _same_data(body["state"], state)  # nested in the body map, not an opaque blob


def test_every_operator_round_trips_through_a_snapshot_file(every_op, tmp_path: Path) -> None:
    store, clock = every_op
    loaded = _write_and_read(store, tmp_path)
    restored = FeatureStore(clock=clock)
    restored.load_snapshot(loaded)
    assert (restored.registry_version, restored.applied_lsn, restored.watermark_ms) == (
        store.registry_version, store.applied_lsn, store.watermark_ms)
    # sketches really left their exact modes for u0
    row = store.table("L").row("u0", clock.now)
    assert row["nu_i"] > 1024 and row["bloom"] in (True, False)
    end = clock.now
    for T in (end, end + 5 * 60_000, end + 2 * HOUR):
        assert all_rows(restored, T) == all_rows(store, T)
    # identical futures: rings, windows, sketches, spills and PRNG counts continue alike
    later, later_clock = every_op_store()
    twin = FeatureStore(clock=later_clock)
    twin.load_snapshot(loaded)
    push_range(later, later_clock, 2_400, 2_700)
    push_range(twin, later_clock, 2_400, 2_700)
    for T in (later_clock.now, later_clock.now + HOUR):
        assert all_rows(twin, T) == all_rows(later, T)


def _loaded(store: FeatureStore, body: dict) -> sn.LoadedSnapshot:
    """``body`` as recovery hands it over after read_snapshot (header fields from store)."""
    raw = msgspec.msgpack.encode(body)
    header = sn.SnapshotHeader(store.applied_lsn, T0, store.watermark_ms,
                               store.registry_version, len(raw), 0)
    return sn.LoadedSnapshot("snap", header, msgspec.msgpack.decode(raw))


def _column(name: str, feature: str):
    def get(state: dict) -> object:
        return state["tables"][name]["columns"][feature]
    return get


def _set_column(name: str, feature: str, value):
    def mutate(body: dict) -> None:
        columns = body["state"]["tables"][name]["columns"]
        columns[feature] = value(columns[feature]) if callable(value) else value
    return mutate


def _set_table(name: str, key: str, value):
    def mutate(body: dict) -> None:
        table = body["state"]["tables"][name]
        table[key] = value(table[key]) if callable(value) else value
    return mutate


def _records_slot(records: bytes, slot: int) -> bytes:
    """Block records with the first record's slot replaced."""
    return struct.pack("=q", slot) + records[8:]


PICKLED = b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00N\x85\x94."  # pickle of (None,)

BAD_BODIES = {
    "state is a pickled blob": lambda b: b.update(state=PICKLED),
    "state without tables": lambda b: b.update(state={}),
    "a table missing": lambda b: b["state"]["tables"].pop("G"),
    "an unknown table": lambda b: b["state"]["tables"].update(X=b["state"]["tables"]["G"]),
    "keys not a list": _set_table("L", "keys", "u0"),
    "a key not a str": _set_table("L", "keys", lambda keys: [7, *keys[1:]]),
    "a repeated key": _set_table("L", "keys", lambda keys: [keys[0], keys[0], *keys[2:]]),
    "keys of a global table": _set_table("G", "keys", ["a"]),
    "touch too short": _set_table("L", "touch", lambda touch: touch[:-8]),
    "touch not bytes": _set_table("L", "touch", lambda touch: list(touch)),
    "a column missing": lambda b: b["state"]["tables"]["L"]["columns"].pop("count"),
    "an unknown column": _set_column("L", "nope", b""),
    "words cut short": _set_column("L", "streak", lambda v: v[:-1]),
    "struct column not a pair": _set_column("L", "home", lambda v: v[0]),
    "side block slot out of range": _set_column("L", "home",
                                                lambda v: [v[0], _records_slot(v[1], 99)]),
    "ring slot out of range": _set_column("L", "last_n",
                                          lambda v: [_records_slot(v[0], 99), v[1]]),
    "ring objects missing": _set_column("L", "recent", lambda v: [v[0], []]),
    "first/last tags cut": _set_column("L", "first", lambda v: [v[0][:-1], *v[1:]]),
    "time ring header": _set_column("L", "since_n", lambda v: v[:16] + bytes(24) + v[40:]),
    "sketch cut short": _set_column("L", "q", lambda v: v[:-3]),
    "sketch of another op": lambda b: b["state"]["tables"]["L"]["columns"].update(
        nu_s=b["state"]["tables"]["L"]["columns"]["top"]),
    "sketch slot count": _set_column("L", "nu_s", lambda v: v[:3] + struct.pack("=I", 1 << 30)
                                     + v[7:]),
    "bloom bits": _set_column("L", "bloom", lambda v: v + b"\x01"),
    "mix category index": _set_column("L", "mix", lambda v: [v[0][:1], v[1]]),
    "core cells": _set_column("L", "sum", lambda v: {**v, "cells": v["cells"] + b"\0"}),
    "arena missing": _set_table("W", "arenas", lambda arenas: arenas[:1]),
    "arena of another window": _set_table("W", "arenas", lambda arenas: [
        {**arenas[0], "window_ms": 1}, *arenas[1:]]),
    "arena bucket counts": _set_table("W", "arenas", lambda arenas: [
        {**arenas[0], "counts": b"\xff" * len(arenas[0]["counts"])}, *arenas[1:]]),
    "dedupe entry": lambda b: b.update(dedupe=[["Ev", "k"]]),
    "registry nodes": lambda b: b["registry"].update(nodes=[{"kind": "nope"}]),
}


@pytest.fixture(scope="module")
def small_store() -> tuple[FeatureStore, Clock]:
    return every_op_store(700)


@pytest.mark.parametrize("name", sorted(BAD_BODIES))
def test_state_that_does_not_load_is_rejected_cleanly(small_store, name: str) -> None:
    store, clock = small_store
    body = msgspec.msgpack.decode(store.snapshot_body())
    BAD_BODIES[name](body)
    target, target_clock = every_op_store(30)  # state of its own, which must survive
    before = (all_rows(target, clock.now), target.applied_lsn, target.registry_version)
    with pytest.raises(sn.SnapshotInvalid, match="state does not load: "):
        target.load_snapshot(_loaded(store, body))
    assert (all_rows(target, clock.now), target.applied_lsn, target.registry_version) == before
    push_range(target, target_clock, 30, 40)  # and it keeps working


def test_damaged_state_is_rejected_or_loads_safely(small_store) -> None:
    """Random damage to every buffer and every value of a real state: each load either
    fails with SnapshotInvalid or gives a state that serves reads and pushes (no crash)."""
    store, clock = small_store
    body = msgspec.msgpack.decode(store.snapshot_body())
    paths: list[list] = []

    def walk(value: object, path: list) -> None:
        paths.append(path)
        if type(value) is dict:
            for key, item in value.items():
                walk(item, [*path, key])
        elif type(value) is list:
            for index, item in enumerate(value[:4]):
                walk(item, [*path, index])

    walk(body["state"], [])
    rng = random.Random(2024)
    outcomes = {"loaded": 0, "rejected": 0}
    for path in paths[1:]:
        for attempt in range(6):
            damaged = msgspec.msgpack.decode(msgspec.msgpack.encode(body))
            parent = damaged["state"]
            for key in path[:-1]:
                parent = parent[key]
            value = parent[path[-1]]
            if type(value) is bytes and value and attempt < 4:
                data = bytearray(value)
                if attempt < 1:
                    data = data[:rng.randrange(len(data))]
                else:
                    for _ in range(rng.randrange(1, 4)):
                        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
                parent[path[-1]] = bytes(data)
            else:
                parent[path[-1]] = rng.choice([None, -1, 2**63 - 1, 1.5, True, "x", [], {},
                                               b"\x00" * 9, [None]])
            target = FeatureStore(clock=clock)
            try:
                target.load_snapshot(_loaded(store, damaged))
            except sn.SnapshotInvalid:
                outcomes["rejected"] += 1
                continue
            outcomes["loaded"] += 1
            all_rows(target, clock.now)
            for j in range(700, 704):
                target.push("Ev", push_row(j))
            all_rows(target, clock.now + HOUR)
    assert outcomes["rejected"] > len(paths) and outcomes["loaded"] > 0, outcomes
