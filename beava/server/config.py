"""Server configuration: built-in defaults < YAML file < BEAVA_* env < command line.

spec/server.md §2-§5. ``resolve`` returns a :class:`Config` plus the WARN lines the
resolution produced (clamped or unparseable values), which the server logs once logging
is up.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from beava.durability.recovery import ON_CORRUPTION_POLICIES, ON_CORRUPTION_REPLAY
from beava.server.log_lines import parse_level
from beava.server.security import YAML_SCHEMA as SECURITY_YAML_SCHEMA
from beava.server.security import SecurityConfig, SecurityConfigError, resolve_security
from beava_client.slots import ShardMap, ShardMapError


class ConfigError(Exception):
    """Invalid configuration: the server exits 1 with ``Error: <message>``."""


def default_request_buffer_bytes() -> int:
    """256 MiB (64 requests of the largest frame in flight at once), or an eighth of the
    machine's memory when that is less."""
    cap = 256 * 1024 * 1024
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return cap
    return min(cap, memory // 8) if memory > 0 else cap


@dataclass
class Config:
    http_addr: tuple[str, int] = ("127.0.0.1", 8080)
    tcp_host: str = "127.0.0.1"
    tcp_port: int = 8081
    admin_addr: tuple[str, int] = ("127.0.0.1", 8090)
    admin_explicit: bool = False
    log_level: str = "INFO"
    test_mode: bool = False
    memory_only: bool = False
    memory_governance_enforce: bool = True
    max_frame_bytes: int = 4_194_304
    max_connections: int = 4096
    request_timeout_ms: int = 30_000
    idle_timeout_ms: int = 300_000
    # bytes of requests not yet complete, all connections together (docs/limits.md)
    request_buffer_bytes: int = field(default_factory=default_request_buffer_bytes)
    wal_dir: str = "./beava-wal"
    snapshot_dir: str = "./beava-snapshots"
    wal_sync_mode: str = "strict"
    wal_tick_ms: int = 20
    wal_buffers: int = 4
    wal_buffer_size_mb: int = 32
    wal_fsync_bytes: int = 1_048_576
    wal_segment_bytes: int = 67_108_864
    # valid records after damage in the newest segment: quarantine the tail, or refuse
    wal_on_corruption: str = ON_CORRUPTION_REPLAY
    dedupe_sweep_secs: int = 60
    snapshot_interval_ms: int = 60_000
    snapshot_retain_count: int = 2
    snapshot_min_events: int = 0
    snapshot_fork: bool = True
    crash_at: str | None = None
    security: SecurityConfig = field(default_factory=SecurityConfig)  # tokens, TLS
    # sharded serving (docs/sharding.md): the map and this server's shard in it
    shard_map: ShardMap | None = None
    shard_id: str | None = None
    config_source: str = "defaults"
    warnings: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    @property
    def tcp_addr(self) -> tuple[str, int]:
        return (self.tcp_host, self.tcp_port)


@dataclass
class CommandLine:
    """The options given on the command line (None = not given)."""

    config: str | None = None
    http_addr: str | None = None
    tcp_addr: str | None = None
    admin_addr: str | None = None
    data_dir: str | None = None
    memory_only: bool = False
    test_mode: bool = False
    auth_token_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    wal_on_corruption: str | None = None
    shard_map: str | None = None
    shard_id: str | None = None


def parse_addr(text: str, what: str) -> tuple[str, int]:
    """``IP:PORT`` or ``[IPv6]:PORT``; host names are rejected."""
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        if not sep:
            raise ConfigError(f"invalid {what} {text!r}: expected IP:PORT")
    else:
        host, sep, port = text.rpartition(":")
        if not sep:
            raise ConfigError(f"invalid {what} {text!r}: expected IP:PORT")
    return parse_ip(host, what), parse_port(port, what)


def parse_ip(text: str, what: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise ConfigError(f"invalid {what} {text!r}: not an IP address") from None


def parse_port(text: str, what: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise ConfigError(f"invalid {what} port {text!r}")
    return int(text)


def format_addr(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


SYNC_MODES = {"strict": "strict", "periodic": "periodic", "per-event": "strict",
              "perevent": "strict", "per_event": "strict"}

# YAML schema: key -> expected type. Nested sections are dicts.
_YAML_SCHEMA: dict[str, Any] = {
    "listen_addr": str, "admin_addr": str, "log_level": str, "test_mode": bool,
    "memory_only": bool, "memory_governance_enforce": bool,
    "tcp": {"enabled": bool, "host": str, "port": int, "max_frame_bytes": int},
    "connections": {"max": int, "request_timeout_ms": int, "idle_timeout_ms": int,
                    "request_buffer_bytes": int},
    "durability": {
        "wal_dir": str, "snapshot_dir": str, "wal_sync_mode": str, "wal_tick_ms": int,
        "wal_fsync_bytes": int, "wal_segment_bytes": int, "wal_fsync_interval_ms": int,
        "dedupe_sweep_interval_secs": int, "snapshot_interval_ms": int,
        "snapshot_retain_count": int, "snapshot_min_events": int, "snapshot_fork": bool,
        "wal_on_corruption": str,
    },
    "sharding": {"map": str, "id": str},
    **SECURITY_YAML_SCHEMA,
}


def _check_yaml(doc: Mapping[str, Any], schema: Mapping[str, Any], prefix: str) -> None:
    for key, value in doc.items():
        name = f"{prefix}{key}"
        if key not in schema:
            raise ConfigError(f"unknown config key '{name}'")
        expected = schema[key]
        if isinstance(expected, dict):
            if value is None:
                continue
            if not isinstance(value, dict):
                raise ConfigError(f"config key '{name}' must be a mapping")
            _check_yaml(value, expected, name + ".")
        elif expected is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"config key '{name}' must be an integer")
        elif not isinstance(value, expected):
            raise ConfigError(f"config key '{name}' must be a {expected.__name__}")


def load_yaml(path: str) -> dict[str, Any]:
    if not os.path.exists(path):
        raise ConfigError(f"config file not found: {path}")
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError(f"config file unreadable: {path}: {exc}") from None
    if not text.strip():
        return {}
    import yaml  # only when a real file is given: keeps it off the default start path

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML in {path}: {exc}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(f"config file {path} must contain a mapping")
    _check_yaml(doc, _YAML_SCHEMA, "")
    return doc


class _Resolver:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg

    def clamp(self, var: str, value: int, lo: int | None, hi: int | None) -> int:
        clamped = value
        if lo is not None and clamped < lo:
            clamped = lo
        if hi is not None and clamped > hi:
            clamped = hi
        if clamped != value:
            self.cfg.warnings.append(("wal.config.clamp", f"{var} clamped",
                                      {"var": var, "value": value, "clamped_to": clamped}))
        return clamped

    def env_int_strict(self, env: Mapping[str, str], var: str) -> int | None:
        raw = env.get(var)
        if raw is None:
            return None
        try:
            return int(raw.strip())
        except ValueError:
            raise ConfigError(f"invalid {var}={raw!r}: expected an integer") from None

    def env_int_lenient(self, env: Mapping[str, str], var: str, default: int) -> int | None:
        raw = env.get(var)
        if raw is None:
            return None
        try:
            return int(raw.strip())
        except ValueError:
            self.cfg.warnings.append(("wal.config.parse_error", f"{var} unparseable",
                                      {"var": var, "value": raw}))
            return default


def resolve(cli: CommandLine, env: Mapping[str, str]) -> Config:
    """Apply YAML, then env, then command line over the defaults."""
    cfg = Config()
    r = _Resolver(cfg)
    sources = []
    doc: dict[str, Any] = {}
    if cli.config is not None:
        doc = load_yaml(cli.config)
        sources.append(f"--config {cli.config}")
    else:
        sources.append("defaults")

    # YAML
    if "listen_addr" in doc:
        cfg.http_addr = parse_addr(doc["listen_addr"], "listen_addr")
    if "admin_addr" in doc:
        cfg.admin_addr = parse_addr(doc["admin_addr"], "admin_addr")
        cfg.admin_explicit = True
    if "log_level" in doc:
        cfg.log_level = _level(doc["log_level"], "log_level")
    cfg.test_mode = doc.get("test_mode", cfg.test_mode)
    cfg.memory_only = doc.get("memory_only", cfg.memory_only)
    cfg.memory_governance_enforce = doc.get("memory_governance_enforce",
                                            cfg.memory_governance_enforce)
    tcp = doc.get("tcp") or {}
    if "host" in tcp:
        cfg.tcp_host = parse_ip(tcp["host"], "tcp.host")
    if "port" in tcp:
        cfg.tcp_port = r.clamp("tcp.port", tcp["port"], 0, 65535)
    if "max_frame_bytes" in tcp:
        cfg.max_frame_bytes = r.clamp("tcp.max_frame_bytes", tcp["max_frame_bytes"], 1,
                                      2**32 - 4)
    conns = doc.get("connections") or {}
    for key, attr in (("max", "max_connections"), ("request_timeout_ms", "request_timeout_ms"),
                      ("idle_timeout_ms", "idle_timeout_ms"),
                      ("request_buffer_bytes", "request_buffer_bytes")):
        if key in conns:
            setattr(cfg, attr, r.clamp(f"connections.{key}", conns[key], 0, None))
    dur = doc.get("durability") or {}
    cfg.wal_dir = dur.get("wal_dir", cfg.wal_dir)
    cfg.snapshot_dir = dur.get("snapshot_dir", cfg.snapshot_dir)
    if "wal_sync_mode" in dur:
        cfg.wal_sync_mode = _sync_mode(dur["wal_sync_mode"], "durability.wal_sync_mode")
    if "wal_on_corruption" in dur:
        cfg.wal_on_corruption = _corruption_policy(dur["wal_on_corruption"],
                                                   "durability.wal_on_corruption")
    yaml_ints = (("wal_tick_ms", 1, 1000), ("wal_fsync_bytes", 4096, None),
                 ("wal_segment_bytes", 1_048_576, None), ("snapshot_interval_ms", 0, None),
                 ("snapshot_retain_count", 1, None), ("snapshot_min_events", 0, None))
    for key, lo, hi in yaml_ints:
        if key in dur:
            setattr(cfg, key, r.clamp(f"durability.{key}", dur[key], lo, hi))
    if "dedupe_sweep_interval_secs" in dur:
        cfg.dedupe_sweep_secs = r.clamp("durability.dedupe_sweep_interval_secs",
                                        dur["dedupe_sweep_interval_secs"], 1, None)
    cfg.snapshot_fork = dur.get("snapshot_fork", cfg.snapshot_fork)

    # Environment
    if any(k.startswith("BEAVA_") for k in env):
        sources.append("BEAVA_* env")
    _apply_env(cfg, r, env)

    # Command line
    flags = []
    if cli.http_addr is not None:
        cfg.http_addr = parse_addr(cli.http_addr, "--http-addr")
        flags.append("--http-addr")
    if cli.tcp_addr is not None:
        cfg.tcp_host, cfg.tcp_port = parse_addr(cli.tcp_addr, "--tcp-addr")
        flags.append("--tcp-addr")
    if cli.admin_addr is not None:
        cfg.admin_addr = parse_addr(cli.admin_addr, "--admin-addr")
        cfg.admin_explicit = True
        flags.append("--admin-addr")
    if cli.data_dir is not None:
        cfg.wal_dir = os.path.join(cli.data_dir, "wal")
        cfg.snapshot_dir = os.path.join(cli.data_dir, "snapshots")
        flags.append("--data-dir")
    if cli.wal_on_corruption is not None:
        cfg.wal_on_corruption = _corruption_policy(cli.wal_on_corruption,
                                                   "--wal-on-corruption")
        flags.append("--wal-on-corruption")
    if cli.memory_only:
        cfg.memory_only = True
        flags.append("--memory-only")
    if cli.test_mode:
        cfg.test_mode = True
        flags.append("--test-mode")
    try:
        cfg.security = resolve_security(doc, env, token_file=cli.auth_token_file,
                                        tls_cert=cli.tls_cert, tls_key=cli.tls_key,
                                        tls_client_ca=cli.tls_client_ca)
    except SecurityConfigError as exc:
        raise ConfigError(str(exc)) from None
    flags.extend(flag for flag, value in (
        ("--auth-token-file", cli.auth_token_file), ("--tls-cert", cli.tls_cert),
        ("--tls-key", cli.tls_key), ("--tls-client-ca", cli.tls_client_ca))
        if value is not None)
    shard_map_path, shard_id = _shard_options(cli, doc, env, flags)
    if shard_map_path is not None or shard_id is not None:
        cfg.shard_map, cfg.shard_id = _shard(shard_map_path, shard_id)
    if flags:
        sources.append(f"CLI [{', '.join(flags)}]")
    cfg.config_source = " + ".join(sources)
    return cfg


def _shard_options(cli: CommandLine, doc: Mapping[str, Any], env: Mapping[str, str],
                   flags: list[str]) -> tuple[str | None, str | None]:
    """The shard map path and shard id, each from the command line, else BEAVA_SHARD_MAP /
    BEAVA_SHARD_ID, else the YAML ``sharding`` section."""
    section = doc.get("sharding") or {}
    found: list[str | None] = []
    for flag, given, var, key in (("--shard-map", cli.shard_map, "BEAVA_SHARD_MAP", "map"),
                                  ("--shard-id", cli.shard_id, "BEAVA_SHARD_ID", "id")):
        if given is not None:
            flags.append(flag)
            found.append(given)
        else:
            found.append(env.get(var, section.get(key)))
    return found[0], found[1]


def _shard(path: str | None, shard_id: str | None) -> tuple[ShardMap, str]:
    """The shard map at ``path`` and ``shard_id``, which must name one of its shards."""
    if path is None or shard_id is None:
        missing = "--shard-map" if path is None else "--shard-id"
        raise ConfigError(f"sharded serving needs both --shard-map and --shard-id; "
                          f"{missing} is missing")
    try:
        shard_map = ShardMap.load(path)
    except ShardMapError as exc:
        raise ConfigError(f"invalid --shard-map {path!r}: {exc}") from None
    if shard_id not in {shard.id for shard in shard_map.shards}:
        ids = ", ".join(shard.id for shard in shard_map.shards)
        raise ConfigError(f"invalid --shard-id {shard_id!r}: the shard map {path!r} has "
                          f"shards {ids}")
    return shard_map, shard_id


def _level(text: Any, what: str) -> str:
    try:
        return parse_level(str(text))
    except ValueError:
        raise ConfigError(f"invalid {what} {text!r}") from None


def _sync_mode(text: str, what: str) -> str:
    mode = SYNC_MODES.get(text.strip().lower())
    if mode is None:
        raise ConfigError(f"invalid {what} {text!r}: expected strict or periodic")
    return mode


def _corruption_policy(text: str, what: str) -> str:
    policy = text.strip().lower()
    if policy not in ON_CORRUPTION_POLICIES:
        raise ConfigError(f"invalid {what} {text!r}: expected "
                          f"{', '.join(ON_CORRUPTION_POLICIES[:-1])} or "
                          f"{ON_CORRUPTION_POLICIES[-1]}")
    return policy


def _apply_env(cfg: Config, r: _Resolver, env: Mapping[str, str]) -> None:
    if "BEAVA_LISTEN_ADDR" in env:
        cfg.http_addr = parse_addr(env["BEAVA_LISTEN_ADDR"], "BEAVA_LISTEN_ADDR")
    if "BEAVA_TCP_HOST" in env:
        cfg.tcp_host = parse_ip(env["BEAVA_TCP_HOST"], "BEAVA_TCP_HOST")
    if "BEAVA_TCP_PORT" in env:
        cfg.tcp_port = parse_port(env["BEAVA_TCP_PORT"].strip(), "BEAVA_TCP_PORT")
    if "BEAVA_ADMIN_ADDR" in env:
        cfg.admin_addr = parse_addr(env["BEAVA_ADMIN_ADDR"], "BEAVA_ADMIN_ADDR")
        cfg.admin_explicit = True
    frame = r.env_int_strict(env, "BEAVA_TCP_MAX_FRAME_BYTES")
    if frame is not None:
        if frame < 1:
            raise ConfigError("invalid BEAVA_TCP_MAX_FRAME_BYTES: must be >= 1")
        cfg.max_frame_bytes = frame
    for var, attr in (("BEAVA_MAX_CONNECTIONS", "max_connections"),
                      ("BEAVA_REQUEST_TIMEOUT_MS", "request_timeout_ms"),
                      ("BEAVA_IDLE_TIMEOUT_MS", "idle_timeout_ms"),
                      ("BEAVA_REQUEST_BUFFER_BYTES", "request_buffer_bytes")):
        value = r.env_int_strict(env, var)
        if value is not None:
            if value < 0:
                raise ConfigError(f"invalid {var}: must be >= 0 (0 = no limit)")
            setattr(cfg, attr, value)
    if "BEAVA_LOG_LEVEL" in env:
        cfg.log_level = _level(env["BEAVA_LOG_LEVEL"], "BEAVA_LOG_LEVEL")
    if "BEAVA_TEST_MODE" in env:
        cfg.test_mode = env["BEAVA_TEST_MODE"] == "1"
    if "BEAVA_MEMORY_GOV_ENFORCE" in env:
        cfg.memory_governance_enforce = env["BEAVA_MEMORY_GOV_ENFORCE"] != "0"
    if "BEAVA_WAL_DIR" in env:
        cfg.wal_dir = env["BEAVA_WAL_DIR"]
    if "BEAVA_SNAPSHOT_DIR" in env:
        cfg.snapshot_dir = env["BEAVA_SNAPSHOT_DIR"]
    if "BEAVA_WAL_SYNC_MODE" in env:
        cfg.wal_sync_mode = _sync_mode(env["BEAVA_WAL_SYNC_MODE"], "BEAVA_WAL_SYNC_MODE")
    if "BEAVA_WAL_ON_CORRUPTION" in env:
        cfg.wal_on_corruption = _corruption_policy(env["BEAVA_WAL_ON_CORRUPTION"],
                                                   "BEAVA_WAL_ON_CORRUPTION")
    for var, attr, lo, hi, default in (("BEAVA_WAL_TICK_MS", "wal_tick_ms", 1, 1000, 20),
                                       ("BEAVA_WAL_BUFFERS", "wal_buffers", 2, 32, 4),
                                       ("BEAVA_WAL_BUFFER_SIZE_MB", "wal_buffer_size_mb", 4,
                                        256, 32)):
        value = r.env_int_lenient(env, var, default)
        if value is not None:
            setattr(cfg, attr, r.clamp(var, value, lo, hi))
    for var, attr, lo in (("BEAVA_WAL_FSYNC_BYTES", "wal_fsync_bytes", 4096),
                          ("BEAVA_WAL_SEGMENT_BYTES", "wal_segment_bytes", 1_048_576),
                          ("BEAVA_SNAPSHOT_RETAIN_COUNT", "snapshot_retain_count", 1),
                          ("BEAVA_DEDUPE_SWEEP_SECS", "dedupe_sweep_secs", 1)):
        value = r.env_int_strict(env, var)
        if value is not None:
            setattr(cfg, attr, r.clamp(var, value, lo, None))
    for var, attr in (("BEAVA_SNAPSHOT_INTERVAL_MS", "snapshot_interval_ms"),
                      ("BEAVA_SNAPSHOT_MIN_EVENTS", "snapshot_min_events")):
        value = r.env_int_strict(env, var)
        if value is not None:
            if value < 0:
                raise ConfigError(f"invalid {var}: must be >= 0")
            setattr(cfg, attr, value)
    if "BEAVA_SNAPSHOT_FORK" in env:
        cfg.snapshot_fork = env["BEAVA_SNAPSHOT_FORK"].strip().lower() not in ("0", "false",
                                                                               "no", "")
    if "BEAVA_CRASH_AT" in env:
        cfg.crash_at = env["BEAVA_CRASH_AT"]
    # Accepted for compatibility, validated like the reference, without effect.
    r.env_int_strict(env, "BEAVA_WAL_FSYNC_INTERVAL_MS")
