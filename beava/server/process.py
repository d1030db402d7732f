"""The running process: listeners, start-up sequence, shutdown (spec/server.md §5-§9).

The only module that knows both the transports and the store.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any, NoReturn

from beava import __version__
from beava.durability.crash_points import CrashPoints
from beava.durability.group_commit import Waiter
from beava.durability.recovery import RecoveryFatal
from beava.durability.wal import DataDirLocked, lock_wal_dir
from beava.durability.wal_format import LOCK_FILE
from beava.engine.sharding import ShardOwnership
from beava.engine.store import FeatureStore
from beava.protocol.admin import AdminResponder
from beava.protocol.auth import AccessControl
from beava.protocol.connection import ServerConnection, tls_accept
from beava.protocol.dispatch import FrameDispatch, HttpDispatch, error_frame
from beava.protocol.http import HttpProtocol
from beava.protocol.reply_slots import PendingReply
from beava.protocol.server_state import ConnectionLimits, ServerState
from beava.protocol.tcp import FramedTcpProtocol
from beava.server.config import Config, format_addr
from beava.server.log_lines import LogLines
from beava.server.metrics import ServerMetrics
from beava.server.persistence import Persistence
from beava.server.security import is_loopback
from beava.server.service import PUSH_ACK_OP, Service, unwritten_error

SHUTDOWN_DEADLINE_S = 4.0
BACKLOG = 1024

EXIT_OK = 0
EXIT_CONFIG = 1
EXIT_DATA_DIR = 3
# Young-generation GC threshold of the serving process (CPython's default is 700). The hot
# path allocates bursts of short-lived tracked objects (a read's frame tuples, its reply
# queue, a durable batch's lists): at 700 they set off young collections costing 2-4% of
# the loop thread's CPU under a pipelined push load, at this threshold next to none.
# Collections still run as soon as tracked objects really accumulate; the older
# generations keep their defaults.
GC_YOUNG_THRESHOLD = 10_000


class StartupError(Exception):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def tune_gc() -> None:
    """Set the serving process's GC thresholds (see GC_YOUNG_THRESHOLD)."""
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


def bind_listener(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def _bound(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return format_addr(host, port)


class DataDirLock:
    """Exclusive advisory lock on ``<wal_dir>/LOCK`` for the life of the process."""

    def __init__(self, wal_dir: str) -> None:
        self.path = os.path.join(wal_dir, LOCK_FILE)
        try:
            self._fd = lock_wal_dir(wal_dir)
        except DataDirLocked:
            raise StartupError("data directory locked", EXIT_DATA_DIR) from None
        except OSError as exc:  # read-only, not ours, not a file: the directory is unusable
            raise StartupError(f"data directory unusable: cannot open {self.path}: "
                               f"{exc.strerror}", EXIT_DATA_DIR) from None

    def release(self) -> None:
        os.close(self._fd)


class BeavaServer:
    def __init__(self, cfg: Config, log: LogLines) -> None:
        self.cfg = cfg
        self.log = log
        try:
            self.crash = CrashPoints(cfg.crash_at if cfg.test_mode else None)
        except ValueError as exc:
            raise StartupError(f"invalid BEAVA_CRASH_AT: {exc}", EXIT_CONFIG) from None
        shard = (ShardOwnership(cfg.shard_map, cfg.shard_id)
                 if cfg.shard_map is not None and cfg.shard_id is not None else None)
        self.store = FeatureStore(memory_governance_enforce=cfg.memory_governance_enforce,
                                  crash=self.crash, shard=shard)
        self.state = ServerState(self.store.intake, ConnectionLimits(
            cfg.max_connections, cfg.request_timeout_ms / 1000, cfg.idle_timeout_ms / 1000,
            cfg.request_buffer_bytes))
        self.persistence = Persistence(cfg, self.store, log, self.crash,
                                       flush_replies=self.state.flush_dirty,
                                       on_pressure=self.state.intake.set,
                                       fail_replies=self._fail_unwritten)
        self.service = Service(self.store, test_mode=cfg.test_mode, on_reset=self._on_reset,
                               on_alias=self._on_alias)
        # the command table's handlers, checked here: a command without one fails the start
        self.frames = FrameDispatch(self.service.frame_handlers(),
                                    push_run=self.service.push_pass.run)
        tokens = cfg.security.tokens
        self.access = AccessControl(tokens, self.frames) if tokens is not None else None
        self.http = HttpDispatch(self.service.http_handlers(), self.service.wait_applied,
                                 self.access.authorize_http if self.access else None,
                                 self.state.timings)
        self.metrics = ServerMetrics(self._metrics_sample, self.persistence.mode)
        self.admin = AdminResponder(self.service.describe, self.metrics.render,
                                    self.service.entity, self._server_doc)
        self.sockets: dict[str, socket.socket] = {}
        self.lock: DataDirLock | None = None
        self._servers: list[asyncio.AbstractServer] = []
        self._stopping = False
        self._serving = False
        self._stop: asyncio.Event | None = None
        self._exit_code = EXIT_OK

    # start-up -------------------------------------------------------------------------

    def prepare_data_dirs(self) -> None:
        if self.cfg.memory_only:
            return
        try:
            os.makedirs(self.cfg.wal_dir, exist_ok=True)
            os.makedirs(self.cfg.snapshot_dir, exist_ok=True)
        except OSError as exc:
            raise StartupError(f"cannot create data directories: {exc}", EXIT_DATA_DIR) from None
        self.lock = DataDirLock(self.cfg.wal_dir)

    def bind(self) -> None:
        cfg = self.cfg
        for name, (host, port) in (("http", cfg.http_addr), ("tcp", cfg.tcp_addr)):
            try:
                self.sockets[name] = bind_listener(host, port)
            except OSError as exc:
                raise StartupError(f"cannot bind {name} listener on "
                                   f"{format_addr(host, port)}: {exc}", EXIT_CONFIG) from None
        try:
            self.sockets["admin"] = bind_listener(*cfg.admin_addr)
        except OSError as exc:
            addr = format_addr(*cfg.admin_addr)
            if cfg.admin_explicit:
                raise StartupError(f"cannot bind admin listener on {addr}: {exc}",
                                   EXIT_CONFIG) from None
            self.log.warn("server.admin_bind_failed", "admin sidecar disabled: bind failed",
                          addr=addr, error=str(exc))
            # Among the JSON lines the WARN is easy to miss, and the sidecar answering at
            # the default address is then another server's: say so where a person looks.
            sys.stderr.write(
                f"beava: admin sidecar not started: the default admin address {addr} is "
                f"busy ({exc.strerror or exc}); whatever answers there is not this server. "
                "This server runs without /metrics, /health and the status page; pick "
                "another address with --admin-addr HOST:PORT (or BEAVA_ADMIN_ADDR; port 0 "
                "for any free port).\n")
            sys.stderr.flush()
        self.log.info("server.http_bound", "HTTP server bound", addr=_bound(self.sockets["http"]))
        self.log.info("server.tcp_bound", "TCP server bound", addr=_bound(self.sockets["tcp"]))
        if "admin" in self.sockets:
            self.log.info("server.admin_bound", "admin sidecar bound",
                          addr=_bound(self.sockets["admin"]))
        self._log_security()

    def _log_security(self) -> None:
        sec = self.cfg.security
        if sec.tokens is not None:
            self.log.info("server.auth_enabled", "access control on: tokens required",
                          tokens=len(sec.tokens), source=sec.token_source)
        else:
            exposed = sorted(name for name, sock in self.sockets.items()
                             if not is_loopback(sock.getsockname()[0]))
            if exposed:
                self.log.warn("server.auth_disabled",
                              "listening beyond loopback without access control: anyone "
                              "who reaches these ports may read, write and register",
                              listeners=",".join(exposed))
        if sec.ssl_context is not None:
            self.log.info("server.tls_enabled", "TLS on every listener",
                          client_certificates=sec.tls_client_ca is not None)

    async def serve(self) -> NoReturn:
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        # Handlers first: a client may send SIGTERM as soon as it has read the bound lines.
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        self.bind()
        if self.cfg.test_mode:
            self.log.warn("server.test_mode_enabled", "test mode enabled: reset is allowed")
        elif self.cfg.crash_at is not None:
            self.log.warn("server.crash_hook_ignored",
                          "BEAVA_CRASH_AT is honoured only in test mode")
        try:
            self.persistence.start()
        except RecoveryFatal as exc:
            raise StartupError(str(exc), EXIT_DATA_DIR) from None
        except OSError as exc:  # recovery could not read or repair the data directory
            raise StartupError(f"data directory unusable: {exc}", EXIT_DATA_DIR) from None
        tune_gc()
        state = self.state
        http, frames = self.http, self.frames
        max_payload = self.cfg.max_frame_bytes
        access = self.access
        admin = self.admin if access is None else access.admin(self.admin)

        def tcp_connection() -> FramedTcpProtocol:
            if access is None:
                return FramedTcpProtocol(frames, max_payload, state)
            gate = access.tcp_gate()  # this connection's routes, by its token's scopes
            conn = FramedTcpProtocol(gate, max_payload, state)
            gate.bind(conn.end_after_replies)
            return conn

        factories: dict[str, Callable[[], ServerConnection]] = {
            "http": lambda: HttpProtocol(http.respond, http.protocol_error, state),
            "tcp": tcp_connection,
            "admin": lambda: HttpProtocol(admin, self.admin.protocol_error, state,
                                          limited=False),
        }
        tls = self.cfg.security.ssl_context
        for name, sock in self.sockets.items():
            factory: Callable[[], asyncio.BaseProtocol] = factories[name]
            if tls is not None:  # counted from the accept, the handshake within a timeout
                factory = partial(tls_accept, factories[name], tls)
            server = await loop.create_server(factory, sock=sock, backlog=BACKLOG)
            self._servers.append(server)
        self._serving = True
        if self._stopping:  # a signal arrived during start-up
            await self._shutdown()
        else:
            self.log.info("server.ready", "server ready")
        await self._stop.wait()
        # Leave without tearing the loop down: closing it restores the default signal
        # dispositions, and a signal still queued for the process would then kill it with
        # 143 instead of the clean exit code. Everything that matters is closed already.
        sys.stdout.flush()
        os._exit(self._exit_code)

    # shutdown -------------------------------------------------------------------------

    def _on_signal(self, sig: signal.Signals) -> None:
        if self._stopping:
            os._exit(1)
        self._stopping = True
        self.log.info("server.shutdown_initiated", "shutdown initiated", signal=sig.name)
        if self._serving:
            asyncio.get_running_loop().create_task(self._shutdown())

    async def _shutdown(self) -> None:
        started = time.monotonic()
        for server in self._servers:
            server.close()
        # Every request whose bytes were fully received has been answered synchronously;
        # stop reading, then let the transports flush their replies while closing.
        connections = self.state.connections
        for conn in list(connections):
            conn.stop_reading()
        # Answer every request already received: frames left for a later turn run now, and
        # a barrier applies the pushes that reads are waiting behind, until none is left.
        self.service.finish_slices()
        while any([conn.drain() for conn in list(connections)]):
            self.service.finish_slices()
            self.store.log.barrier()
            self.state.flush_dirty()
        self.persistence.shutdown()
        for conn in list(connections):
            conn.close()
        while connections and time.monotonic() - started < SHUTDOWN_DEADLINE_S:
            await asyncio.sleep(0.005)
        if connections:
            self.log.error("server.fatal", "shutdown deadline exceeded",
                           reason="shutdown deadline exceeded", exit_code=1)
            self._exit_code = 1
        else:
            if self.lock is not None:
                self.lock.release()
            self.log.info("server.shutdown_complete", "shutdown complete",
                          duration_ms=int((time.monotonic() - started) * 1000))
        assert self._stop is not None
        self._stop.set()

    # state for admin ------------------------------------------------------------------

    def _server_doc(self) -> dict[str, Any]:
        """Which server this is (admin ``/server``, docs/operations.md)."""
        cfg = self.cfg
        return {
            "pid": os.getpid(),
            "version": __version__,
            "listeners": {name: _bound(sock) for name, sock in self.sockets.items()},
            "wal_dir": None if cfg.memory_only else os.path.abspath(cfg.wal_dir),
            "snapshot_dir": None if cfg.memory_only else os.path.abspath(cfg.snapshot_dir),
        }

    def _on_reset(self, version: int) -> None:
        self.log.info("server.reset_completed", "reset applied", registry_version=version)

    def _on_alias(self, table: str) -> None:
        self.log.warn("batch_get.entity_id_alias", "batch_get entry used deprecated entity_id",
                      table=table)

    def _fail_unwritten(self, first_lsn: int, waiters: list[Waiter]) -> None:
        """Pushes from ``first_lsn`` on were never written (disk full): their held framed-TCP
        acks and their reply slots answer ``wal_unavailable`` instead."""
        error = error_frame(unwritten_error(self.store.registry_version))
        slots = [callback for _, callback in waiters if isinstance(callback, PendingReply)]
        self.state.fail_unwritten(PUSH_ACK_OP, first_lsn, error, slots)

    def _metrics_sample(self) -> dict[str, Any]:
        store = self.store
        return {
            **self.persistence.metrics(),
            "beava_registry_version": store.registry_version,
            "beava_node_count": store.node_count,
            "beava_entity_count_resident": store.engine.entity_count,
            "beava_cold_entity_evictions_total": store.engine.cold_evictions,
            "beava_bucket_reclaim_total": store.engine.bucket_reclaims,
            "beava_pushes_total": store.pushes_total,
            "beava_push_replays_total": store.replays_total,
            "beava_shard_skipped_table_updates_total": store.engine.skipped_updates,
            "beava_shard_wrong_shard_total": (
                {} if store.shard is None else
                {("push",): store.shard.wrong_pushes, ("read",): store.shard.wrong_reads}),
            "beava_push_rejections_total": dict(store.rejections),
            "beava_pushes_by_event_total": {(name,): count for name, count
                                            in store.pushes_by_event().items()},
            "beava_table_entities": {(name,): count for name, count
                                     in store.engine.table_entity_counts().items()},
            "beava_request_duration_seconds": {
                (name,): histogram for name, histogram in self.state.timings.by_name.items()},
        }


def run(cfg: Config, log: LogLines) -> int:
    """Start-up steps 3-9 and the serving loop; returns the exit code."""
    import uvloop

    log.info("server.starting", f"beava {__version__} starting", version=__version__,
             config_source=cfg.config_source, pid=os.getpid())
    for kind, message, fields in cfg.warnings:
        log.warn(kind, message, **fields)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    server = BeavaServer(cfg, log)
    server.prepare_data_dirs()
    return uvloop.run(server.serve())
