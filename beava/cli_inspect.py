"""``beava registry``, ``beava get`` and ``beava stats``: look inside a running server.

``registry`` and ``get`` talk to the data plane (framed TCP or HTTP, as ``bv.App`` does);
``stats`` samples the admin sidecar's ``/metrics`` and prints live rates, one line per
interval, like ``redis-cli --stat``. ``--url`` of every command takes either address of a
server: an HTTP URL is asked ``GET /server``, which only an admin sidecar answers (with
the server's listeners), so each command finds the listener it needs. Every command takes
``--token`` (default ``$BEAVA_TOKEN``). Errors go to stderr with exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple, TextIO
from urllib.parse import urlsplit

from beava.cli_usage import UsageParser
from beava.launcher import split_addr
from beava.protocol import commands as wire_commands
from beava.server.config import Config, format_addr

COMMANDS = ("registry", "get", "stats")
DEFAULT_URL = "tcp://127.0.0.1:8081"
DEFAULT_ADMIN_URL = f"http://{format_addr(*Config.admin_addr)}"
_TIMEOUT_S = 10.0
_WILDCARD_HOSTS = ("0.0.0.0", "::")
_LISTENERS = ("tcp", "http", "admin")  # as a server line names them: data plane first


class CommandFailed(Exception):
    """A request failed; the message is printed as ``error: ...``."""


def _common(parser: argparse.ArgumentParser, url_default: str) -> None:
    default = f"$BEAVA_URL or {url_default}" if url_default == DEFAULT_URL else url_default
    parser.add_argument("--url", default=None, metavar="URL",
                        help="the server: its data-plane URL (tcp://, tcps://, http://, "
                        f"https://) or its admin sidecar's URL (default {default})")
    parser.add_argument("--token", default=None, metavar="TOKEN",
                        help="access token (default $BEAVA_TOKEN)")


def build_parser() -> argparse.ArgumentParser:
    parser = UsageParser(prog="beava", description="Look inside a running beava server.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=UsageParser)
    reg = sub.add_parser("registry", help="what the registry holds: events, tables, features")
    _common(reg, DEFAULT_URL)
    reg.add_argument("--json", action="store_true", help="print the JSON document")
    get = sub.add_parser("get", help="one entity's feature row")
    _common(get, DEFAULT_URL)
    get.add_argument("table", help="table name")
    get.add_argument("key", nargs="?", default=None,
                     help="entity key; KEY1|KEY2 for several key columns; none: global row")
    get.add_argument("--features", default=None, metavar="A,B",
                     help="only these features (comma-separated)")
    stats = sub.add_parser("stats", help="live rates from the admin sidecar's /metrics")
    _common(stats, DEFAULT_ADMIN_URL)
    stats.add_argument("--interval", type=float, default=1.0, metavar="SECONDS",
                       help="seconds between samples (default 1)")
    stats.add_argument("--count", type=int, default=0, metavar="N",
                       help="stop after N lines (default: run until interrupted)")
    return parser


def main(argv: Sequence[str], out: TextIO | None = None) -> int:
    args = build_parser().parse_args(list(argv))
    stream = sys.stdout if out is None else out
    token = args.token if args.token is not None else os.environ.get("BEAVA_TOKEN") or None
    try:
        if args.command == "stats":
            if args.interval <= 0:
                raise CommandFailed("--interval must be positive")
            admin = find_admin(args.url or DEFAULT_ADMIN_URL, token)
            if admin.server is not None:
                stream.write(f"server: {describe_server(admin.server)}\n")
            return run_stats(lambda: scrape(admin.url, token), args.interval, args.count,
                             stream)
        url = find_data_plane(args.url or os.environ.get("BEAVA_URL") or DEFAULT_URL, token)
        if args.command == "registry":
            doc = _with_app(url, token, lambda app: app.describe())
            stream.write(json.dumps(doc, indent=2) + "\n" if args.json
                         else format_registry(doc))
            return 0
        features = None if args.features is None else [
            name.strip() for name in args.features.split(",") if name.strip()]
        row = _with_app(url, token, lambda app: app.get(args.table, args.key, features))
        stream.write(json.dumps(row, indent=2, sort_keys=True) + "\n")
        return 0
    except CommandFailed as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    except KeyboardInterrupt:
        return 130


def _with_app(url: str, token: str | None, call: Callable[[Any], Any]) -> Any:
    import beava as bv

    try:
        with bv.App(url, token=token, timeout=_TIMEOUT_S) as app:
            return call(app)
    except ValueError as exc:  # a malformed URL
        raise CommandFailed(str(exc)) from None
    except bv.RegistrationError as exc:
        raise CommandFailed(str(exc)) from None
    except OSError as exc:  # TransportError is a ConnectionError
        raise CommandFailed(f"cannot reach {url}: {exc}") from None


# -- which server ------------------------------------------------------------------------


class Admin(NamedTuple):
    """An admin sidecar and what its ``/server`` says (None: it did not say, e.g. the
    token lacks the admin scope)."""

    url: str
    server: dict[str, Any] | None


def _get(url: str, path: str, token: str | None) -> tuple[int, bytes]:
    """``GET url+path``: the status and body, HTTP errors included."""
    request = urllib.request.Request(url.rstrip("/") + path)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    context = None
    if url.startswith("https://"):
        ca = os.environ.get("BEAVA_CA")
        context = ssl.create_default_context(cafile=ca or None)
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S, context=context) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CommandFailed(f"cannot reach {url}: {reason}") from None


def probe(url: str, token: str | None) -> Admin | None:
    """The admin sidecar at the HTTP ``url``, or None when ``url`` is a data-plane URL: the
    data plane answers the unknown ``/server`` with a ``not_found`` error before any token
    check, a sidecar with its server document or, without an admin token, 401/403."""
    if not url.startswith(("http://", "https://")):
        return None
    status, body = _get(url, "/server", token)
    try:
        doc = json.loads(body) if body else None
    except ValueError:
        doc = None
    if status == 404 and isinstance(doc, dict) and "error" in doc:
        return None
    served = status == 200 and isinstance(doc, dict) and "listeners" in doc
    return Admin(url, doc if served else None)


def _endpoint(url: str) -> tuple[str, int | None]:
    try:
        parts = urlsplit(url)
        return parts.hostname or "", parts.port
    except ValueError as exc:
        raise CommandFailed(f"--url {url!r}: {exc}") from None


def _listener_url(scheme: str, bound: str, host: str) -> str:
    """A URL for the listener ``bound`` reports, reached at ``host`` when it was bound to
    every interface."""
    bound_host, port = split_addr(bound)
    return f"{scheme}://{format_addr(host if bound_host in _WILDCARD_HOSTS else bound_host, port)}"


def serves(server: dict[str, Any], url: str) -> bool:
    """Does the server that ``/server`` describes listen where ``url`` points (the same
    port, on the same host or on a listener bound to every interface)?"""
    host, port = _endpoint(url)
    for name in ("tcp", "http"):
        bound_host, bound_port = split_addr(server["listeners"][name])
        if bound_port == port and (
                bound_host in (host, *_WILDCARD_HOSTS)
                or {bound_host, host} <= {"127.0.0.1", "localhost", "::1"}):
            return True
    return False


def describe_server(server: dict[str, Any]) -> str:
    """One line naming a server: process id, listeners, data directories."""
    bound = server["listeners"]
    listeners = ", ".join(f"{name} {bound[name]}" for name in _LISTENERS if name in bound)
    wal = server.get("wal_dir")
    data = f"WAL {wal}, snapshots {server.get('snapshot_dir')}" if wal else "memory only"
    return f"pid {server.get('pid')}, {listeners}; {data}"


def find_data_plane(url: str, token: str | None) -> str:
    """``url`` itself for a data-plane URL; for an admin sidecar's, the framed-TCP
    listener of its server."""
    admin = probe(url, token)
    if admin is None:
        return url
    if admin.server is None:
        raise CommandFailed(
            f"{url} is an admin sidecar, which names its server's data plane only to a "
            "token with the admin scope: pass the data-plane URL (tcp://HOST:PORT or "
            "http://HOST:PORT) or an admin token")
    secure = url.startswith("https://")
    return _listener_url("tcps" if secure else "tcp", admin.server["listeners"]["tcp"],
                         _endpoint(url)[0])


def find_admin(url: str, token: str | None) -> Admin:
    """The admin sidecar of the server at ``url``: ``url`` itself when it is one; for a
    data-plane URL, the sidecar at the default admin port of the same host, with a warning
    on stderr when that sidecar belongs to another server."""
    admin = probe(url, token)
    if admin is not None:
        return admin
    host = _endpoint(url)[0]
    scheme = "https" if url.startswith(("https://", "tcps://")) else "http"
    candidate = f"{scheme}://{format_addr(host, Config.admin_addr[1])}"
    hint = ("pass --url with the server's admin sidecar URL (its server.admin_bound log "
            "line; a server that logged server.admin_bind_failed has no sidecar)")
    try:
        admin = probe(candidate, token)
    except CommandFailed as exc:
        raise CommandFailed(f"{url} is a data-plane URL and no admin sidecar answers at "
                            f"the default admin address ({exc}): {hint}") from None
    if admin is None:
        raise CommandFailed(f"{url} is a data-plane URL and {candidate}, the default admin "
                            f"address, is not an admin sidecar: {hint}")
    if admin.server is not None and not serves(admin.server, url):
        sys.stderr.write(
            f"warning: the admin sidecar at {candidate} belongs to another server "
            f"({describe_server(admin.server)}), not to the one at {url}; the figures "
            f"below are that other server's: {hint}\n")
    return admin


# -- registry ------------------------------------------------------------------------------


def _fields(node: dict[str, Any]) -> str:
    optional = set(node.get("optional_fields", []))
    parts = [f"{name} {kind}{'?' if name in optional else ''}"
             for name, kind in node.get("fields", {}).items()]
    parts += [f"{name} ?" for name in optional if name not in node.get("fields", {})]
    return ", ".join(parts)


def format_registry(doc: dict[str, Any]) -> str:
    """The describe document as text: one line per event, one block per table."""
    nodes = doc.get("nodes", [])
    lines = [f"registry version {doc.get('version')}, {doc.get('node_count')} nodes"]
    if not nodes:
        lines.append("(empty: nothing registered)")
    for node in nodes:
        kind, name = node.get("kind"), node.get("name")
        if kind == "event":
            lines.append(f"event {name}: {_fields(node)}")
            continue
        upstreams = ", ".join(node.get("upstreams", []))
        steps = " -> ".join(node.get("steps", []))
        via = f" via {steps}" if steps else ""
        if kind != "table":
            lines.append(f"event {name} <- {upstreams}{via}")
            continue
        keys = ", ".join(node.get("keys", [])) or "global"
        lines.append(f"table {name} [key: {keys}] <- {upstreams}{via}")
        features = node.get("features", {})
        width = max((len(f) for f in features), default=0)
        for feature, spec in features.items():
            params = ", ".join(f"{k}={json.dumps(v)}" for k, v in spec.get("params", {}).items())
            window = spec.get("window") or "lifetime"
            lines.append(f"  {feature:<{width}}  {spec.get('op')}({params})  {window}")
    return "\n".join(lines) + "\n"


# -- stats ---------------------------------------------------------------------------------


def scrape(url: str, token: str | None) -> dict[str, float]:
    """The admin ``/metrics`` as ``{series: value}`` (a series keeps its labels)."""
    status, body = _get(url, "/metrics", token)
    if status != 200:
        hint = " (the admin sidecar needs a token with the admin scope)" \
            if status in (401, 403) else ""
        raise CommandFailed(f"{url}/metrics answered HTTP {status}{hint}")
    return parse_metrics(body.decode("utf-8", "replace"))


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text exposition -> ``{"name{labels}": value}`` (comments skipped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        try:
            out[series] = float(value)
        except ValueError:
            continue
    return out


def total(sample: dict[str, float], names: tuple[str, ...]) -> float:
    """The sum of every series of the metrics ``names`` (all label sets of a name without
    labels, the one series of a name with them)."""
    return sum(v for k, v in sample.items()
               if k in names or k.partition("{")[0] in names)


# the request counts of the commands whose answers are features
READS = tuple(f'beava_request_duration_seconds_count{{op="{c.name}"}}'
              for c in wire_commands.COMMANDS if c.reads_state)

# (column title, metrics summed, rate?) of each column of `beava stats`
COLUMNS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("pushes", ("beava_pushes_total",), False),
    ("push/s", ("beava_pushes_total",), True),
    ("rejected", ("beava_push_rejections_total",), False),
    ("rej/s", ("beava_push_rejections_total",), True),
    ("replays", ("beava_push_replays_total",), False),
    ("read/s", READS, True),
    ("entities", ("beava_entity_count_resident",), False),
    ("fsync/s", ("beava_wal_fsyncs_total",), True),
    ("registry", ("beava_registry_version",), False),
)


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 10_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 100_000:
        return f"{value / 1000:.1f}K"
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def stat_lines(samples: Iterator[tuple[float, dict[str, float]]]) -> Iterator[str]:
    """The header, then one line per ``(monotonic time, sample)``; a rate is the change
    since the previous sample per second ("-" on the first line)."""
    yield "  ".join(f"{title:>9}" for title, _, _ in COLUMNS)
    previous: tuple[float, dict[str, float]] | None = None
    for at, sample in samples:
        cells = []
        for _title, metric, rate in COLUMNS:
            now = total(sample, metric)
            if not rate:
                cells.append(_cell(now))
            elif previous is None or at <= previous[0]:
                cells.append("-")
            else:
                per_second = (now - total(previous[1], metric)) / (at - previous[0])
                cells.append(_cell(max(per_second, 0.0)))
        yield "  ".join(f"{cell:>9}" for cell in cells)
        previous = (at, sample)


def run_stats(sample: Callable[[], dict[str, float]], interval: float, count: int,
              out: TextIO) -> int:
    def samples() -> Iterator[tuple[float, dict[str, float]]]:
        taken = 0
        while True:
            yield time.monotonic(), sample()
            taken += 1
            if count and taken >= count:
                return
            time.sleep(interval)

    for line in stat_lines(samples()):
        out.write(line + "\n")
        out.flush()
    return 0
