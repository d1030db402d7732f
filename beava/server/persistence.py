"""Disk persistence of a running server: recovery at boot, the WAL log behind the store,
periodic fork snapshots, WAL reclamation, dedupe sweeps (spec/durability.md).

``Persistence`` is built by the server; ``start`` runs on the event loop. It owns the WAL
writer, the snapshot runner and their timers, and hands the store its durability log, whose
batches resolve deferred replies: ``flush_replies`` then writes them out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from beava._fast.intake.intake import PERIODIC
from beava._fast.timing.histogram import Histogram
from beava.durability.crash_points import CrashPoints
from beava.durability.group_commit import (
    GroupCommit,
    MemoryLog,
    PeriodicLog,
    Waiter,
    fatal_exit,
)
from beava.durability.recovery import recover
from beava.durability.snapshots import SnapshotRunner
from beava.durability.wal import WalFatal, WalWriter
from beava.engine.store import FeatureStore
from beava.server.config import Config
from beava.server.log_lines import LogLines

SNAPSHOT_POLL_S = 0.1
# The WAL fsync histogram of a memory-only server: nothing is ever observed in it.
_NO_FSYNCS = Histogram()


class Persistence:
    def __init__(self, cfg: Config, store: FeatureStore, log: LogLines, crash: CrashPoints,
                 flush_replies: Callable[[], None],
                 on_pressure: Callable[[bool], None] | None = None,
                 fail_replies: Callable[[int, list[Waiter]], None] | None = None) -> None:
        self.cfg = cfg
        self.flush_replies = flush_replies  # write the replies a durable batch resolved
        # answer wal_unavailable to the pushes from an LSN on, which were never written
        self.fail_replies = fail_replies
        self.on_pressure = on_pressure  # stop (True) / resume (False) reading clients
        self.store = store
        self.log = log
        self.crash = crash
        self.wal: WalWriter | None = None
        self.snapshots: SnapshotRunner | None = None
        self.quarantined = 0
        self.snapshot_last = {"duration": 0.0, "bytes": 0, "fsync": 0.0}
        self.snapshot_durations = Histogram()  # wall time of each successful snapshot
        self._records_at_snapshot = 0
        self._timers: list[asyncio.TimerHandle] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def mode(self) -> str:
        return "memory" if self.cfg.memory_only else self.cfg.wal_sync_mode

    def on_fatal(self, exc: BaseException) -> None:
        fatal_exit(self.log, exc)

    def _on_failed(self, first_lsn: int, waiters: list[Waiter], events: list[str]) -> None:
        """Strict mode, disk full: the pushes from ``first_lsn`` on were not written."""
        self.store.unwritten(first_lsn, events)
        if self.fail_replies is not None:
            self.fail_replies(first_lsn, waiters)

    def _on_writable(self, writable: bool, error: str) -> None:
        wal = self.wal
        path = wal.active_path if wal is not None else ""
        if writable:
            self.log.info("wal.write_resumed", "WAL writable again: writes accepted",
                          path=path)
        else:
            self.log.error("wal.write_refused",
                           "WAL disk full: writes refused (wal_unavailable) until space "
                           "returns; reads are served", path=path, error=error,
                           unwritten_bytes=self.store.log.pending_bytes)

    # start-up -------------------------------------------------------------------------

    def start(self) -> None:
        """Recovery (or its skip), then the durability log; call on the running loop."""
        self._loop = asyncio.get_running_loop()
        store = self.store
        store.on_fatal = self.on_fatal
        if self.cfg.memory_only:
            self.log.info("recovery.skipped_memory_mode", "memory-only mode: no recovery")
            store.log = MemoryLog()
            self._schedule(self.cfg.dedupe_sweep_secs, self._sweep_dedupe)
            return
        cfg = self.cfg
        result = recover(cfg.wal_dir, cfg.snapshot_dir, load_snapshot=store.load_snapshot,
                         apply=store.replay, log=self.log, crash_points=self.crash,
                         on_corruption=cfg.wal_on_corruption)
        store.intake.restore(result.next_lsn - 1, result.watermark_ms)
        store.sweep_dedupe()
        self.quarantined = result.quarantined
        self._records_at_snapshot = store.applied_lsn
        wal = WalWriter(cfg.wal_dir, cfg.snapshot_dir, segment_bytes=cfg.wal_segment_bytes,
                        crash_points=self.crash, log=self.log)
        try:
            wal.start(result.next_lsn)
        except WalFatal as exc:
            self.on_fatal(exc)
        self.wal = wal
        store.wal = wal
        common = {"apply_batch": store.apply_batch, "fsync_bytes": cfg.wal_fsync_bytes,
                  "crash": self.crash, "on_fatal": self.on_fatal, "after_batch": self.flush_replies,
                  "next_lsn": lambda: store.intake.next_lsn,
                  "limit_bytes": cfg.wal_buffers * cfg.wal_buffer_size_mb * 1024 * 1024,
                  "on_pressure": self.on_pressure, "on_failed": self._on_failed,
                  "on_writable": self._on_writable}
        if cfg.wal_sync_mode == "periodic":
            store.log = PeriodicLog(wal, tick_ms=cfg.wal_tick_ms, **common)
        else:
            store.log = GroupCommit(wal, **common)
        self.snapshots = SnapshotRunner(cfg.snapshot_dir, retain_count=cfg.snapshot_retain_count,
                                        fork=cfg.snapshot_fork, crash_points=self.crash)
        store.before_reset = self.snapshots.kill
        self.log.info("recovery.complete", "recovery complete",
                      snapshot_lsn=result.snapshot_lsn, records_replayed=result.records_replayed,
                      last_lsn=result.last_lsn, registry_version=store.registry_version,
                      duration_ms=result.duration_ms)
        if cfg.snapshot_interval_ms > 0:
            self._schedule(cfg.snapshot_interval_ms / 1000.0, self._snapshot_tick)
        self._schedule(cfg.dedupe_sweep_secs, self._sweep_dedupe)

    def _schedule(self, delay_s: float, callback: Any) -> None:
        assert self._loop is not None
        self._timers = [t for t in self._timers if not t.cancelled()]
        self._timers.append(self._loop.call_later(delay_s, callback))

    def _sweep_dedupe(self) -> None:
        self.store.sweep_dedupe()
        self._schedule(self.cfg.dedupe_sweep_secs, self._sweep_dedupe)

    # snapshots ------------------------------------------------------------------------

    def _snapshot_tick(self) -> None:
        runner = self.snapshots
        store = self.store
        assert runner is not None
        since = store.applied_lsn - self._records_at_snapshot
        if runner.running:
            pass
        elif since < max(1, self.cfg.snapshot_min_events):
            self.log.debug("snapshot.skipped_below_threshold", "snapshot skipped",
                           records_since_last=since, min_events=self.cfg.snapshot_min_events)
            self._schedule(self.cfg.snapshot_interval_ms / 1000.0, self._snapshot_tick)
            return
        elif not store.log.writable:  # the disk is full: try at the next interval
            self._schedule(self.cfg.snapshot_interval_ms / 1000.0, self._snapshot_tick)
            return
        else:
            if store.intake.mode == PERIODIC:
                store.log.barrier()
            lsn = store.applied_lsn
            self.log.info("snapshot.started", "snapshot started", snapshot_lsn=lsn,
                          fork=runner.fork)
            runner.start(store.snapshot_body, lsn, store.watermark_ms, store.registry_version)
            self._records_at_snapshot = lsn
        self._schedule(SNAPSHOT_POLL_S, self._snapshot_poll)

    def _snapshot_poll(self) -> None:
        runner = self.snapshots
        assert runner is not None and self.wal is not None
        outcome = runner.poll()
        if outcome is None:
            if runner.running:
                self._schedule(SNAPSHOT_POLL_S, self._snapshot_poll)
            return
        if outcome.ok:
            self.snapshot_last = {"duration": outcome.duration_seconds, "bytes": outcome.bytes,
                                  "fsync": outcome.fsync_seconds}
            self.snapshot_durations.observe(outcome.duration_seconds)
            self.log.info("snapshot.written", "snapshot written", path=outcome.path,
                          snapshot_lsn=outcome.snapshot_lsn, bytes=outcome.bytes,
                          duration_ms=int(outcome.duration_seconds * 1000))
            oldest = outcome.oldest_retained_lsn
            if oldest is not None:
                try:
                    self.wal.reclaim(oldest)  # logs wal.segments_reclaimed itself
                except WalFatal as exc:
                    self.on_fatal(exc)
        else:
            self.log.error("snapshot.failed", "snapshot failed", reason=outcome.reason)
        self._schedule(self.cfg.snapshot_interval_ms / 1000.0, self._snapshot_tick)

    # shutdown -------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Make every accepted record durable, stop the snapshot child, close the WAL."""
        for timer in self._timers:
            timer.cancel()
        self.store.log.close()
        self.flush_replies()
        if self.snapshots is not None:
            self.snapshots.kill()
        if self.wal is not None:
            self.wal.close()

    def metrics(self) -> dict[str, float | Histogram]:
        wal = self.wal
        return {
            "beava_wal_fsync_duration_seconds": wal.fsync_durations if wal else _NO_FSYNCS,
            "beava_snapshot_duration_seconds": self.snapshot_durations,
            "beava_wal_fsyncs_total": wal.fsyncs_total if wal else 0,
            "beava_wal_last_fsync_seconds": wal.last_fsync_seconds if wal else 0.0,
            "beava_wal_bytes_written_total": wal.bytes_written_total if wal else 0,
            "beava_wal_quarantined_records_total": self.quarantined,
            "beava_wal_writable": 1 if self.store.log.writable else 0,
            "beava_snapshot_last_duration_seconds": self.snapshot_last["duration"],
            "beava_snapshot_last_bytes": self.snapshot_last["bytes"],
            "beava_snapshot_last_fsync_seconds": self.snapshot_last["fsync"],
        }



