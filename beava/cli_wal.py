"""``beava wal check DATA_DIR`` and ``beava wal repair DATA_DIR [--yes]``.

``check`` reports every WAL segment (records, LSN range, damage) and the snapshot recovery
would start from; read-only, it may run while a server is up. Exit status: 0 clean, 1 only a
torn tail in the newest segment (an interrupted write; recovery removes it), 3 corruption
(damaged bytes anywhere else), 4 the directory cannot be read (an entry named like a segment
or snapshot that is a link or not a regular file included), 2 usage error.

``repair`` makes the WAL what recovery's default ``replay`` policy reads from it: damaged
bytes go to ``quarantine/``, every intact record stays (``wal_check``). Without ``--yes`` it
only prints what it would do. It refuses (exit 3) while a server holds the data directory's
lock; exit 4 on an I/O error or an unusable entry.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

from beava.cli_usage import UsageParser
from beava.durability import wal_check
from beava.durability.wal import DataDirLocked

EXIT_LOCKED = 3
EXIT_IO = wal_check.CHECK_UNREADABLE


def build_parser() -> argparse.ArgumentParser:
    parser = UsageParser(prog="beava wal", description="Check or repair a data directory's WAL.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=UsageParser)
    check = sub.add_parser(
        "check", help="report every segment and any damage (read-only)",
        description="Exit 0 clean, 1 torn tail only, 3 corruption, 4 unreadable.")
    check.add_argument("data_dir", metavar="DATA_DIR",
                       help="the server's --data-dir (or a WAL directory)")
    repair = sub.add_parser(
        "repair", help="move damaged WAL bytes to quarantine, keeping every intact record",
        description="Without --yes, print what would be done and change nothing.")
    repair.add_argument("data_dir", metavar="DATA_DIR",
                        help="the server's --data-dir (or a WAL directory)")
    repair.add_argument("--yes", action="store_true", help="make the changes")
    return parser


def main(argv: Sequence[str], out: TextIO | None = None) -> int:
    args = build_parser().parse_args(list(argv))
    stream = sys.stdout if out is None else out
    try:
        wal_dir, snapshot_dir = wal_check.resolve_dirs(args.data_dir)
        report = wal_check.check(wal_dir, snapshot_dir)
    except OSError as exc:
        sys.stderr.write(f"error: cannot read {args.data_dir}: {exc}\n")
        return EXIT_IO
    if args.command == "check":
        stream.write(format_report(report, args.data_dir))
        return report.exit_code
    return run_repair(report, args.data_dir, args.yes, stream)


def _lsns(first: int, last: int) -> str:
    return f"LSN {first}-{last}" if first else "no LSN"


def format_report(report: wal_check.WalReport, data_dir: str) -> str:
    lines = [f"WAL directory {report.wal_dir}: {len(report.segments)} segments"]
    if report.locked:
        lines.append("note: a running server holds the lock; its newest segment may be "
                     "mid-write")
    for seg in report.segments:
        role = "newest" if seg.newest else "sealed"
        state = "ok" if not seg.damage else f"{len(seg.damage)} damaged range(s)"
        lines.append(f"  {seg.name}  {role}  {seg.size} bytes  {seg.records} records  "
                     f"{_lsns(seg.first_lsn, seg.last_lsn)}  {state}")
        for damage in seg.damage:
            lines.append("    " + _describe(damage))
    if report.snapshot is not None:
        snap = report.snapshot
        lines.append(f"snapshot: {snap.path} (LSN {snap.snapshot_lsn}, registry version "
                     f"{snap.registry_version}); replay starts after LSN {snap.snapshot_lsn}")
    elif report.snapshot_dir is not None:
        lines.append("snapshot: none valid; replay starts at the first record")
    for path, reason in report.invalid_snapshots:
        lines.append(f"  invalid snapshot skipped: {path}: {reason}")
    code = report.exit_code
    if code == wal_check.CHECK_CLEAN:
        lines.append("result: clean")
    elif code == wal_check.CHECK_TORN_TAIL:
        lines.append("result: torn tail only (an interrupted write); the server removes it "
                     f"at start, or run 'beava wal repair {data_dir} --yes'")
    else:
        lines.append(
            "result: CORRUPTION. By default (--wal-on-corruption replay) the server starts, "
            "moves the damaged bytes to quarantine and applies every intact record; "
            "point-in-time stops at the first damage, refuse does not start. "
            f"'beava wal repair {data_dir} --yes' moves the damaged bytes to quarantine now")
    return "\n".join(lines) + "\n"


def _describe(damage: wal_check.Damage) -> str:
    where = "header" if damage.offset == 0 and damage.header_error else f"offset {damage.offset}"
    why = f" ({damage.header_error})" if damage.header_error else ""
    if damage.kind == wal_check.TORN_TAIL:
        return (f"torn tail at {where}{why}: {damage.bytes} bytes, no valid record after "
                "it")
    resumed = (f"replay resumes at LSN {damage.resumed_at_lsn}"
               if damage.resumed_at_lsn is not None else "nothing valid after it")
    return (f"CORRUPTION at {where}{why}: {damage.bytes} damaged bytes after LSN "
            f"{damage.last_good_lsn}; {resumed}")


def _locked(data_dir: str) -> int:
    sys.stderr.write(f"error: {data_dir} is locked by a running server; stop it first\n")
    return EXIT_LOCKED


def run_repair(report: wal_check.WalReport, data_dir: str, yes: bool,
               stream: TextIO) -> int:
    if yes and report.locked:
        return _locked(data_dir)
    if report.locked:
        stream.write("note: a running server holds the lock; repair refuses until it stops\n")
    steps = wal_check.repair_plan(report)
    if not steps:
        stream.write("nothing to repair\n")
        return 0
    if not yes:
        for step in steps:
            stream.write(f"would {step.describe(report.wal_dir)}\n")
        stream.write(f"nothing changed; run 'beava wal repair {data_dir} --yes' to do it\n")
        return 0
    try:
        wal_check.repair(report.wal_dir, steps)
    except DataDirLocked:
        return _locked(data_dir)
    except wal_check.SegmentChanged as exc:
        sys.stderr.write(f"error: {exc}; nothing more was changed, check again\n")
        return EXIT_LOCKED
    except OSError as exc:
        sys.stderr.write(f"error: repair failed: {exc}\n")
        return EXIT_IO
    for step in steps:
        stream.write(f"done: {step.describe(report.wal_dir)}\n")
    return 0
