"""Snapshot files, retention and the snapshot runner (spec/durability.md §8).

File (§8.3): a 64-byte header followed by one MessagePack map::

    magic "BVSNAP01" | format_version u32 | flags u32 | snapshot_lsn u64 | created_at_ms u64 |
    watermark_ms u64 | registry_version u32 | body_len u64 | body_crc u32 | reserved u32 |
    header_crc u32 (of bytes 0-59)

Files are written to ``snap-<S>.bsnap.tmp``, fsynced, renamed to ``snap-<S>.bsnap`` and the
directory fsynced. :class:`SnapshotRunner` does that in a forked child (default, like Redis
BGSAVE) or on a worker thread, and reports the outcome to the loop through :meth:`poll`.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import struct
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgspec

from beava.durability.crash_points import CrashPoints, kill_self
from beava.durability.data_files import open_regular
from beava.durability.wal import FILE_MODE, now_ms, sync_dir, sync_fd
from beava.durability.wal_format import (
    SNAPSHOT_SUFFIX,
    SNAPSHOT_TMP_SUFFIX,
    is_snapshot_tmp_name,
    parse_snapshot_name,
    snapshot_name,
)
from beava.process_bond import parent_death_signal

SNAPSHOT_MAGIC = b"BVSNAP01"
SNAPSHOT_FORMAT_VERSION = 1
SNAPSHOT_HEADER_SIZE = 64
# Encoding of the body's "state" (§8.3): 2 = the engine state as nested MessagePack data
# (EngineState.dump: plain values, column buffers as bin). Format 1 (a pickled blob) is not
# supported: such snapshots are invalid and never unpickled.
STATE_FORMAT = 2
BODY_KEYS = ("registry", "next_lsn", "state_format", "state", "dedupe")

_HEADER_BODY = struct.Struct("<8sIIQQQIQII")
_U32 = struct.Struct("<I")
_encode_msgpack = msgspec.msgpack.Encoder().encode
_decode_msgpack = msgspec.msgpack.Decoder().decode
_encode_json = msgspec.json.Encoder().encode
_decode_json = msgspec.json.Decoder().decode
# The child reports to the parent through a pipe it writes once before exiting; keep the
# message far below the pipe buffer so the write never blocks.
_MAX_REASON = 1000
_READ_CHUNK = 4 << 20  # a body's CRC is checked in reads of this size before it is read whole


class SnapshotInvalid(Exception):
    """A snapshot file failed validation; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SnapshotHeader(NamedTuple):
    snapshot_lsn: int
    created_at_ms: int
    watermark_ms: int
    registry_version: int
    body_len: int
    body_crc: int


class LoadedSnapshot(NamedTuple):
    """A validated snapshot: its header fields and the decoded body map."""

    path: str
    header: SnapshotHeader
    body: dict[str, Any]


class WrittenSnapshot(NamedTuple):
    path: str
    bytes: int
    fsync_seconds: float


# -- format ------------------------------------------------------------------------------------


def encode_snapshot_header(snapshot_lsn: int, created_at_ms: int, watermark_ms: int,
                           registry_version: int, body: bytes | memoryview) -> bytes:
    head = _HEADER_BODY.pack(SNAPSHOT_MAGIC, SNAPSHOT_FORMAT_VERSION, 0, snapshot_lsn,
                             created_at_ms, watermark_ms, registry_version, len(body),
                             zlib.crc32(body), 0)
    return head + _U32.pack(zlib.crc32(head))


def decode_snapshot_header(data: bytes | memoryview) -> SnapshotHeader:
    """Decode and check the 64-byte header; SnapshotInvalid when it is not valid."""
    if len(data) < SNAPSHOT_HEADER_SIZE:
        raise SnapshotInvalid(f"short header ({len(data)} bytes)")
    (magic, version, flags, lsn, created, watermark, registry_version, body_len, body_crc,
     _reserved) = _HEADER_BODY.unpack_from(data, 0)
    if magic != SNAPSHOT_MAGIC:
        raise SnapshotInvalid("bad magic")
    if _U32.unpack_from(data, 60)[0] != zlib.crc32(memoryview(data)[:60]):
        raise SnapshotInvalid("header CRC mismatch")
    if version != SNAPSHOT_FORMAT_VERSION:
        raise SnapshotInvalid(f"unsupported format_version {version}")
    if flags != 0:
        raise SnapshotInvalid(f"unknown flags 0x{flags:08x}")
    return SnapshotHeader(lsn, created, watermark, registry_version, body_len, body_crc)


def encode_snapshot_body(snapshot_lsn: int, registry_version: int, nodes: list[Any],
                         state: Any, dedupe: list[Any], state_format: int = STATE_FORMAT
                         ) -> bytes:
    """The §8.3 body map as MessagePack."""
    return _encode_msgpack({
        "registry": {"version": registry_version, "nodes": nodes},
        "next_lsn": snapshot_lsn + 1,
        "state_format": state_format,
        "state": state,
        "dedupe": dedupe,
    })


def read_snapshot_header(path: str, expected_lsn: int | None = None) -> SnapshotHeader:
    """Check a snapshot's header and file length without reading the body."""
    fd = open_regular(path)
    try:
        return _checked_header(fd, path, expected_lsn)
    finally:
        os.close(fd)


def _checked_header(fd: int, path: str, expected_lsn: int | None) -> SnapshotHeader:
    header = decode_snapshot_header(os.pread(fd, SNAPSHOT_HEADER_SIZE, 0))
    size = os.fstat(fd).st_size
    if expected_lsn is not None and header.snapshot_lsn != expected_lsn:
        raise SnapshotInvalid(f"snapshot_lsn {header.snapshot_lsn} does not match the name")
    if size != SNAPSHOT_HEADER_SIZE + header.body_len:
        raise SnapshotInvalid(f"file is {size} bytes, header says "
                              f"{SNAPSHOT_HEADER_SIZE + header.body_len}")
    return header


def _read_body(fd: int, header: SnapshotHeader) -> bytes:
    """The body, once its CRC is known to match (checked in bounded reads first, so that
    a header claiming a huge body allocates nothing)."""
    crc = 0
    pos = SNAPSHOT_HEADER_SIZE
    stop = SNAPSHOT_HEADER_SIZE + header.body_len
    while pos < stop:
        chunk = os.pread(fd, min(_READ_CHUNK, stop - pos), pos)
        if not chunk:
            raise SnapshotInvalid("file shrank while being read")
        crc = zlib.crc32(chunk, crc)
        pos += len(chunk)
    if crc != header.body_crc:
        raise SnapshotInvalid("body CRC mismatch")
    parts = []
    pos = SNAPSHOT_HEADER_SIZE
    while pos < stop:
        chunk = os.pread(fd, stop - pos, pos)
        if not chunk:
            raise SnapshotInvalid("file shrank while being read")
        parts.append(chunk)
        pos += len(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def read_snapshot(path: str, state_formats: frozenset[int] = frozenset({STATE_FORMAT})
                  ) -> LoadedSnapshot:
    """Read and fully validate a snapshot (header, length, body CRC, body shape).

    Raises SnapshotInvalid (with a reason) for anything a recovery must not load, including an
    unsupported ``state_format``; UnusableEntry when the entry is a link or not a regular
    file. OSError propagates.
    """
    fd = open_regular(path)
    try:
        header = _checked_header(fd, path, parse_snapshot_name(os.path.basename(path)))
        data = _read_body(fd, header)
    finally:
        os.close(fd)
    try:
        body = _decode_msgpack(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise SnapshotInvalid(f"body is not MessagePack: {exc}") from None
    if not isinstance(body, dict):
        raise SnapshotInvalid("body is not a map")
    missing = [key for key in BODY_KEYS if key not in body]
    if missing:
        raise SnapshotInvalid(f"body lacks {', '.join(missing)}")
    if body["state_format"] not in state_formats:
        raise SnapshotInvalid(f"unsupported state_format {body['state_format']!r}")
    if body["next_lsn"] != header.snapshot_lsn + 1:
        raise SnapshotInvalid(f"next_lsn {body['next_lsn']!r} is not snapshot_lsn + 1")
    registry = body["registry"]
    if not isinstance(registry, dict) or registry.get("version") != header.registry_version:
        raise SnapshotInvalid("registry version does not match the header")
    return LoadedSnapshot(path, header, body)


# -- files -------------------------------------------------------------------------------------


def write_snapshot_file(snapshot_dir: str, snapshot_lsn: int, watermark_ms: int,
                        registry_version: int, body: bytes | memoryview, *,
                        before_rename: Callable[[], None] | None = None) -> WrittenSnapshot:
    """Write ``snap-<S>.bsnap`` durably: temp file, fsync, rename, fsync directory.

    ``before_rename`` runs after the temp file is fsynced (crash point / cancellation). On any
    exception the temp file is removed and the exception propagates.
    """
    path = os.path.join(snapshot_dir, snapshot_name(snapshot_lsn))
    tmp = path[:-len(SNAPSHOT_SUFFIX)] + SNAPSHOT_TMP_SUFFIX
    header = encode_snapshot_header(snapshot_lsn, now_ms(), watermark_ms, registry_version, body)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0),
                     FILE_MODE)
        try:
            _write_all(fd, header)
            _write_all(fd, body)
            started = time.perf_counter()
            sync_fd(fd)
            fsync_seconds = time.perf_counter() - started
        finally:
            os.close(fd)
        if before_rename is not None:
            before_rename()
        os.rename(tmp, path)
        started = time.perf_counter()
        sync_dir(snapshot_dir)
        fsync_seconds += time.perf_counter() - started
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return WrittenSnapshot(path, SNAPSHOT_HEADER_SIZE + len(body), fsync_seconds)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(28, "no progress writing snapshot")
        view = view[n:]


def list_snapshots(snapshot_dir: str) -> list[tuple[int, str]]:
    """``(snapshot_lsn, path)`` of every committed snapshot name, oldest first."""
    found = []
    for name in os.listdir(snapshot_dir):
        lsn = parse_snapshot_name(name)
        if lsn is not None:
            found.append((lsn, os.path.join(snapshot_dir, name)))
    found.sort()
    return found


def apply_retention(snapshot_dir: str, retain_count: int) -> list[int]:
    """Keep the newest ``retain_count`` committed snapshots, delete older ones and every temp
    file, fsync the directory (§8.4). Call only while no snapshot is being written.

    Returns the retained snapshot LSNs, oldest first.
    """
    snapshots = list_snapshots(snapshot_dir)
    keep = max(1, retain_count)
    for _lsn, path in snapshots[:-keep]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    for name in os.listdir(snapshot_dir):
        if is_snapshot_tmp_name(name):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(snapshot_dir, name))
    sync_dir(snapshot_dir)
    return [lsn for lsn, _ in snapshots[-keep:]]


# -- runner ------------------------------------------------------------------------------------


@dataclass
class SnapshotOutcome:
    """Result of one snapshot attempt, as seen by the loop.

    On success ``reason`` is empty, unless retention failed (then ``retained`` is empty and no
    segment may be reclaimed).
    """

    ok: bool
    snapshot_lsn: int
    path: str
    reason: str = ""
    bytes: int = 0
    duration_seconds: float = 0.0
    fsync_seconds: float = 0.0
    retained: list[int] = field(default_factory=list)

    @property
    def oldest_retained_lsn(self) -> int | None:
        """``S_min`` for WAL reclamation (§7), None if nothing may be reclaimed."""
        return self.retained[0] if self.ok and self.retained else None


class _Cancelled(Exception):
    pass


class SnapshotRunner:
    """Runs one snapshot at a time; the loop calls :meth:`poll` (every <= 100 ms) to reap it.

    Fork mode: ``start`` forks; the child calls ``serialise()`` on its copy-on-write view of
    memory, writes the file and ``os._exit``s; the parent never blocks. ``gc.freeze()`` is
    called before the fork and ``gc.unfreeze()`` once the child is reaped. In-process mode:
    ``serialise()`` runs in ``start`` (on the loop) and a thread writes the file; there the
    ``snapshot_before_rename`` crash point fails the attempt instead of killing anything.
    """

    def __init__(self, snapshot_dir: str, *, retain_count: int = 2, fork: bool = True,
                 crash_points: CrashPoints | None = None) -> None:
        self.snapshot_dir = snapshot_dir
        self.retain_count = retain_count
        self.fork = fork and hasattr(os, "fork")
        self.crash = crash_points if crash_points is not None else CrashPoints(None)
        self._lsn = 0
        self._started = 0.0
        self._pid: int | None = None
        self._pipe: int | None = None
        self._thread: threading.Thread | None = None
        self._cancel = threading.Event()
        self._thread_result: dict[str, Any] = {}
        self._ready: SnapshotOutcome | None = None

    @property
    def running(self) -> bool:
        """True from ``start`` until the outcome has been returned by ``poll`` (or ``kill``)."""
        return self._pid is not None or self._thread is not None or self._ready is not None

    def _paths(self) -> tuple[str, str]:
        path = os.path.join(self.snapshot_dir, snapshot_name(self._lsn))
        return path, path[:-len(SNAPSHOT_SUFFIX)] + SNAPSHOT_TMP_SUFFIX

    def start(self, serialise: Callable[[], bytes], snapshot_lsn: int, watermark_ms: int,
              registry_version: int) -> None:
        """Begin a snapshot of the state as of ``snapshot_lsn``. Failures surface in ``poll``."""
        if self.running:
            raise RuntimeError("a snapshot is already running")
        self._lsn = snapshot_lsn
        self._started = time.monotonic()
        # Counted here, acted on in the child: the n-th snapshot attempt is the one killed.
        crash_before_rename = self.crash.due("snapshot_before_rename")
        if self.fork:
            self._start_child(serialise, snapshot_lsn, watermark_ms, registry_version,
                              crash_before_rename)
        else:
            self._start_thread(serialise, snapshot_lsn, watermark_ms, registry_version,
                               crash_before_rename)

    def _fail_now(self, reason: str) -> None:
        self._ready = SnapshotOutcome(False, self._lsn, self._paths()[0], reason=reason)

    # fork mode

    def _start_child(self, serialise: Callable[[], bytes], snapshot_lsn: int,
                     watermark_ms: int, registry_version: int, crash_before_rename: bool
                     ) -> None:
        try:
            read_end, write_end = os.pipe()
        except OSError as exc:
            self._fail_now(f"pipe failed: {exc}")
            return
        # Objects frozen before the fork are skipped by the collector, so neither process's
        # GC writes to their headers and copy-on-write copies only what the loop mutates.
        gc.freeze()
        try:
            pid = os.fork()
        except OSError as exc:
            gc.unfreeze()
            os.close(read_end)
            os.close(write_end)
            self._fail_now(f"fork failed: {exc}")
            return
        if pid == 0:
            try:
                os.close(read_end)
                _detach_inherited_fds(write_end)
                _child_main(write_end, serialise, self.snapshot_dir, snapshot_lsn,
                            watermark_ms, registry_version, crash_before_rename)
            finally:
                os._exit(1)
        os.close(write_end)
        # Never block the loop on the pipe, even if some other process inherited its end.
        os.set_blocking(read_end, False)
        self._pid = pid
        self._pipe = read_end

    def _reap_child(self, blocking: bool) -> tuple[int, dict[str, Any]] | None:
        assert self._pid is not None and self._pipe is not None
        try:
            pid, status = os.waitpid(self._pid, 0 if blocking else os.WNOHANG)
        except ChildProcessError:
            pid, status = self._pid, -1  # reaped elsewhere; the pipe message decides
        if pid == 0:
            return None
        chunks = []
        # The child wrote its one message before exiting, so it is already in the pipe.
        with contextlib.suppress(OSError):
            while chunk := os.read(self._pipe, 65536):
                chunks.append(chunk)
        os.close(self._pipe)
        self._pid = None
        self._pipe = None
        gc.unfreeze()
        message: dict[str, Any] = {}
        if chunks:
            with contextlib.suppress(msgspec.DecodeError):
                decoded = _decode_json(b"".join(chunks))
                if isinstance(decoded, dict):
                    message = decoded
        return status, message

    def _child_outcome(self, status: int, message: dict[str, Any]) -> SnapshotOutcome:
        path, tmp = self._paths()
        exited_ok = status == -1 or (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0)
        if exited_ok and message.get("ok") is True:
            duration = float(message.get("finished", time.monotonic())) - self._started
            return self._commit(path, int(message.get("bytes", 0)), duration,
                                float(message.get("fsync_seconds", 0.0)))
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if message.get("reason"):
            reason = str(message["reason"])
        elif status != -1 and os.WIFSIGNALED(status):
            reason = f"snapshot child killed by signal {os.WTERMSIG(status)}"
        elif status != -1 and os.WIFEXITED(status):
            reason = f"snapshot child exited with status {os.WEXITSTATUS(status)}"
        else:
            reason = "snapshot child ended without reporting"
        return SnapshotOutcome(False, self._lsn, path, reason=reason)

    # in-process mode

    def _start_thread(self, serialise: Callable[[], bytes], snapshot_lsn: int,
                      watermark_ms: int, registry_version: int, crash_before_rename: bool
                      ) -> None:
        try:
            body = serialise()
        except Exception as exc:
            self._fail_now(f"serialise failed: {type(exc).__name__}: {exc}")
            return
        self._cancel.clear()
        self._thread_result = {}

        def before_rename() -> None:
            if crash_before_rename:
                raise _Cancelled("killed at snapshot_before_rename")
            if self._cancel.is_set():
                raise _Cancelled("cancelled")

        def write() -> None:
            try:
                written = write_snapshot_file(self.snapshot_dir, snapshot_lsn, watermark_ms,
                                              registry_version, body,
                                              before_rename=before_rename)
                self._thread_result.update(ok=True, bytes=written.bytes,
                                           fsync_seconds=written.fsync_seconds,
                                           finished=time.monotonic())
            except Exception as exc:
                self._thread_result.update(ok=False, reason=_reason(exc))

        self._thread = threading.Thread(target=write, name="beava-snapshot", daemon=True)
        self._thread.start()

    def _thread_outcome(self) -> SnapshotOutcome:
        result = self._thread_result
        path = self._paths()[0]
        if result.get("ok"):
            return self._commit(path, result["bytes"], result["finished"] - self._started,
                                result["fsync_seconds"])
        return SnapshotOutcome(False, self._lsn, path,
                               reason=str(result.get("reason", "snapshot writer failed")))

    # both modes

    def _commit(self, path: str, size: int, duration: float, fsync_seconds: float
                ) -> SnapshotOutcome:
        """The writer says the file is committed: check its header, then apply retention."""
        try:
            read_snapshot_header(path, self._lsn)
        except (OSError, SnapshotInvalid) as exc:
            with contextlib.suppress(OSError):
                os.unlink(path)
            return SnapshotOutcome(False, self._lsn, path,
                                   reason=f"written snapshot is invalid: {_reason(exc)}")
        outcome = SnapshotOutcome(True, self._lsn, path, bytes=size, duration_seconds=duration,
                                  fsync_seconds=fsync_seconds)
        try:
            outcome.retained = apply_retention(self.snapshot_dir, self.retain_count)
        except OSError as exc:
            outcome.reason = f"retention failed: {exc}"
        return outcome

    def poll(self) -> SnapshotOutcome | None:
        """Non-blocking: the outcome of the finished snapshot (once), else None."""
        if self._ready is not None:
            outcome, self._ready = self._ready, None
            return outcome
        if self._pid is not None:
            reaped = self._reap_child(blocking=False)
            if reaped is None:
                return None
            return self._child_outcome(*reaped)
        if self._thread is not None:
            if self._thread.is_alive():
                return None
            self._thread.join()
            self._thread = None
            return self._thread_outcome()
        return None

    def kill(self) -> None:
        """Abandon a running snapshot (reset, shutdown): SIGKILL the child and reap it, or let
        the writer thread finish without renaming; delete the temp file. No outcome follows.
        """
        self._ready = None
        if self._pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGKILL)
            self._reap_child(blocking=True)
        elif self._thread is not None:
            self._cancel.set()
            self._thread.join()
            self._thread = None
        else:
            return
        with contextlib.suppress(OSError):
            os.unlink(self._paths()[1])


def _detach_inherited_fds(keep: int) -> None:
    """In the snapshot child: drop every descriptor inherited from the server (the data
    directory lock, listening and client sockets, WAL segments, stdout) except ``keep``, so
    a killed server frees its lock and its clients see EOF at once, and the child can never
    write to them; ask the kernel to kill the child if the server dies."""
    # first: once the descriptors are gone, the child is already bound; an orphaned child
    # must not rename a snapshot after a new server has started on the same directory
    bind = parent_death_signal(signal.SIGKILL, parent=os.getppid())
    if bind is not None:
        with contextlib.suppress(OSError):
            bind()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    limit = os.sysconf("SC_OPEN_MAX")
    os.closerange(3, keep)
    os.closerange(keep + 1, limit)


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:_MAX_REASON]


def _child_main(report_fd: int, serialise: Callable[[], bytes], snapshot_dir: str,
                snapshot_lsn: int, watermark_ms: int, registry_version: int,
                crash_before_rename: bool) -> None:
    """Body of the forked child; never returns, never runs the loop or exit handlers."""
    code = 1
    try:
        # Signals meant for the server must not reach the parent's loop through the shared
        # wakeup fd; a SIGTERM to the child just ends it (the parent cleans up).
        with contextlib.suppress(ValueError, OSError):
            signal.set_wakeup_fd(-1)
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(ValueError, OSError):
                signal.signal(sig, signal.SIG_DFL)
        gc.disable()
        body = serialise()
        written = write_snapshot_file(snapshot_dir, snapshot_lsn, watermark_ms,
                                      registry_version, body,
                                      before_rename=kill_self if crash_before_rename else None)
        message: dict[str, Any] = {"ok": True, "bytes": written.bytes,
                                   "fsync_seconds": written.fsync_seconds,
                                   "finished": time.monotonic()}
        code = 0
    except BaseException as exc:
        message = {"ok": False, "reason": _reason(exc)}
    try:
        os.write(report_fd, _encode_json(message))
    finally:
        os._exit(code)
