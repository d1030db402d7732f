"""Configuration precedence and parsing (spec/server.md §2-§4)."""

from __future__ import annotations

import pytest

from beava.server.config import CommandLine, ConfigError, parse_addr, resolve


def test_defaults():
    cfg = resolve(CommandLine(), {})
    assert cfg.http_addr == ("127.0.0.1", 8080)
    assert cfg.tcp_addr == ("127.0.0.1", 8081)
    assert cfg.admin_addr == ("127.0.0.1", 8090) and not cfg.admin_explicit
    assert cfg.wal_sync_mode == "strict" and cfg.max_frame_bytes == 4_194_304
    assert cfg.wal_dir == "./beava-wal" and cfg.snapshot_dir == "./beava-snapshots"
    assert not cfg.test_mode and cfg.memory_governance_enforce


def test_dev_null_config_is_defaults():
    assert resolve(CommandLine(config="/dev/null"), {}).http_addr == ("127.0.0.1", 8080)


@pytest.mark.parametrize("text,expected", [
    ("127.0.0.1:0", ("127.0.0.1", 0)), ("[::1]:8080", ("::1", 8080)),
    ("0.0.0.0:65535", ("0.0.0.0", 65535)),
])
def test_parse_addr(text, expected):
    assert parse_addr(text, "x") == expected


@pytest.mark.parametrize("text", ["localhost:80", "127.0.0.1", "127.0.0.1:70000",
                                  "[::1]8080", "127.0.0.1:-1", ":80"])
def test_parse_addr_rejects(text):
    with pytest.raises(ConfigError):
        parse_addr(text, "x")


def test_precedence_cli_over_env_over_yaml(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("listen_addr: 127.0.0.1:1000\ntcp:\n  host: 127.0.0.2\n  port: 1001\n"
                    "durability:\n  wal_dir: /y/wal\n  wal_tick_ms: 5000\n")
    env = {"BEAVA_LISTEN_ADDR": "127.0.0.1:2000", "BEAVA_TCP_PORT": "2001"}
    cfg = resolve(CommandLine(config=str(path)), env)
    assert cfg.http_addr == ("127.0.0.1", 2000)
    assert cfg.tcp_addr == ("127.0.0.2", 2001)      # env overrides only its own part
    assert cfg.wal_dir == "/y/wal"
    assert cfg.wal_tick_ms == 1000                   # clamped
    assert ("wal.config.clamp", "durability.wal_tick_ms clamped",
            {"var": "durability.wal_tick_ms", "value": 5000, "clamped_to": 1000}) in cfg.warnings
    cfg = resolve(CommandLine(config=str(path), http_addr="127.0.0.1:3000",
                              tcp_addr="127.0.0.3:3001", data_dir="/d"), env)
    assert cfg.http_addr == ("127.0.0.1", 3000)
    assert cfg.tcp_addr == ("127.0.0.3", 3001)
    assert (cfg.wal_dir, cfg.snapshot_dir) == ("/d/wal", "/d/snapshots")
    assert "CLI [--http-addr, --tcp-addr, --data-dir]" in cfg.config_source


def test_env_flags():
    cfg = resolve(CommandLine(), {"BEAVA_TEST_MODE": "true", "BEAVA_MEMORY_GOV_ENFORCE": "no",
                                  "BEAVA_WAL_SYNC_MODE": "Per-Event",
                                  "BEAVA_SNAPSHOT_FORK": "No"})
    assert not cfg.test_mode                  # exactly "1" turns it on
    assert cfg.memory_governance_enforce      # exactly "0" turns it off
    assert cfg.wal_sync_mode == "strict"
    assert not cfg.snapshot_fork
    cfg = resolve(CommandLine(), {"BEAVA_TEST_MODE": "1", "BEAVA_MEMORY_GOV_ENFORCE": "0",
                                  "BEAVA_WAL_SYNC_MODE": "periodic"})
    assert cfg.test_mode and not cfg.memory_governance_enforce
    assert cfg.wal_sync_mode == "periodic"


def test_lenient_and_strict_integer_env():
    cfg = resolve(CommandLine(), {"BEAVA_WAL_TICK_MS": "soon", "BEAVA_WAL_BUFFERS": "99"})
    assert cfg.wal_tick_ms == 20 and cfg.wal_buffers == 32
    kinds = [w[0] for w in cfg.warnings]
    assert kinds == ["wal.config.parse_error", "wal.config.clamp"]
    with pytest.raises(ConfigError):
        resolve(CommandLine(), {"BEAVA_WAL_SEGMENT_BYTES": "big"})
    with pytest.raises(ConfigError):
        resolve(CommandLine(), {"BEAVA_WAL_FSYNC_INTERVAL_MS": "x"})
    assert resolve(CommandLine(), {"BEAVA_WAL_SEGMENT_BYTES": "10"}).wal_segment_bytes == 1048576


def test_memory_only_wins(tmp_path):
    cfg = resolve(CommandLine(memory_only=True, data_dir=str(tmp_path)), {})
    assert cfg.memory_only


def test_connection_limits(tmp_path):
    cfg = resolve(CommandLine(), {})
    assert (cfg.max_connections, cfg.request_timeout_ms, cfg.idle_timeout_ms) == (
        4096, 30_000, 300_000)
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("connections:\n  max: 10\n  request_timeout_ms: 500\n"
                         "  idle_timeout_ms: -5\n")
    cfg = resolve(CommandLine(config=str(yaml_file)), {"BEAVA_REQUEST_TIMEOUT_MS": "700"})
    assert (cfg.max_connections, cfg.request_timeout_ms, cfg.idle_timeout_ms) == (10, 700, 0)
    assert [w[0] for w in cfg.warnings] == ["wal.config.clamp"]
    cfg = resolve(CommandLine(), {"BEAVA_MAX_CONNECTIONS": "0", "BEAVA_IDLE_TIMEOUT_MS": "1"})
    assert (cfg.max_connections, cfg.idle_timeout_ms) == (0, 1)
    for var in ("BEAVA_MAX_CONNECTIONS", "BEAVA_REQUEST_TIMEOUT_MS", "BEAVA_IDLE_TIMEOUT_MS"):
        with pytest.raises(ConfigError, match=var):
            resolve(CommandLine(), {var: "-1"})
        with pytest.raises(ConfigError, match=var):
            resolve(CommandLine(), {var: "many"})
    yaml_file.write_text("connections:\n  max: lots\n")
    with pytest.raises(ConfigError, match="connections.max"):
        resolve(CommandLine(config=str(yaml_file)), {})


def test_wal_on_corruption_policy(tmp_path):
    assert resolve(CommandLine(), {}).wal_on_corruption == "replay"
    path = tmp_path / "c.yaml"
    path.write_text("durability:\n  wal_on_corruption: refuse\n")
    assert resolve(CommandLine(config=str(path)), {}).wal_on_corruption == "refuse"
    env = {"BEAVA_WAL_ON_CORRUPTION": "Point-In-Time"}
    assert resolve(CommandLine(config=str(path)), env).wal_on_corruption == "point-in-time"
    cli = CommandLine(wal_on_corruption="refuse")
    assert resolve(cli, env).wal_on_corruption == "refuse"
    # the policy of earlier versions that quarantined everything after the damage is gone
    with pytest.raises(ConfigError, match="expected replay, point-in-time or refuse"):
        resolve(CommandLine(), {"BEAVA_WAL_ON_CORRUPTION": "quarantine"})
    with pytest.raises(ConfigError, match="BEAVA_WAL_ON_CORRUPTION"):
        resolve(CommandLine(), {"BEAVA_WAL_ON_CORRUPTION": "ignore"})


def test_request_buffer_budget(tmp_path):
    cfg = resolve(CommandLine(), {})
    assert 0 < cfg.request_buffer_bytes <= 256 * 1024 * 1024
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("connections:\n  request_buffer_bytes: 1048576\n")
    assert resolve(CommandLine(config=str(yaml_file)), {}).request_buffer_bytes == 1048576
    cfg = resolve(CommandLine(config=str(yaml_file)), {"BEAVA_REQUEST_BUFFER_BYTES": "0"})
    assert cfg.request_buffer_bytes == 0  # off
    for bad in ("-1", "many"):
        with pytest.raises(ConfigError, match="BEAVA_REQUEST_BUFFER_BYTES"):
            resolve(CommandLine(), {"BEAVA_REQUEST_BUFFER_BYTES": bad})


def _shard_map_file(tmp_path, ranges):
    import json

    shards = [{"id": f"s{i}", "ranges": r, "tcp": f"127.0.0.1:{7100 + i}",
               "http": f"http://127.0.0.1:{7200 + i}"} for i, r in enumerate(ranges)]
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"version": 1, "epoch": 1, "slots": 16384, "shards": shards}))
    return str(path)


def test_shard_options_from_cli_env_and_yaml(tmp_path):
    path = _shard_map_file(tmp_path, [[[0, 9000]], [[9000, 16384]]])
    cfg = resolve(CommandLine(shard_map=path, shard_id="s1"), {})
    assert cfg.shard_id == "s1" and cfg.shard_map is not None
    assert cfg.shard_map.owner(9000).id == "s1"
    cfg = resolve(CommandLine(), {"BEAVA_SHARD_MAP": path, "BEAVA_SHARD_ID": "s0"})
    assert cfg.shard_id == "s0"
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text(f"sharding:\n  map: {path}\n  id: s0\n")
    cfg = resolve(CommandLine(config=str(yaml_file), shard_id="s1"), {})
    assert cfg.shard_id == "s1"  # the command line wins over the YAML
    assert resolve(CommandLine(), {}).shard_map is None


@pytest.mark.parametrize(("ranges", "shard_id", "needle"), [
    ([[[0, 9000]], [[9001, 16384]]], "s0", "slot 9000: owned by no shard"),
    ([[[0, 9001]], [[9000, 16384]]], "s0", "slot 9000: owned by both 's0' and 's1'"),
    ([[[0, 16384]]], "s7", "invalid --shard-id 's7'"),
    ([[[0, 16384]]], None, "--shard-id is missing"),
])
def test_shard_options_are_validated(tmp_path, ranges, shard_id, needle):
    path = _shard_map_file(tmp_path, ranges)
    with pytest.raises(ConfigError, match=needle):
        resolve(CommandLine(shard_map=path, shard_id=shard_id), {})
