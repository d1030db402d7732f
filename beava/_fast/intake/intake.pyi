"""Type stub of intake.pyx: the one owner of accepted pushes' LSNs, counters and WAL
records."""

from collections.abc import Callable, Iterable
from typing import Any

from beava._fast.intake.push_check import EventChecker

MEMORY: int
STRICT: int
PERIODIC: int

class CheckerEntry:
    spec: Any
    checker: EventChecker
    index: int
    deduped: bool
    name: bytes
    def __init__(self, name: str, spec: Any, checker: EventChecker, index: int) -> None: ...

class EventRoute:
    event: str
    entry: CheckerEntry
    pushes: tuple[Callable[[dict[str, Any], int], Any], ...] | None
    by_row: bool
    def __init__(self, event: str, entry: CheckerEntry,
                 pushes: tuple[Callable[[dict[str, Any], int], Any], ...] | None) -> None: ...

class Intake:
    mode: int
    log: Any
    wal: Any
    last_lsn: int
    applied_lsn: int
    hold_lsn: int
    watermark_ms: int
    pushes_total: int
    replays_total: int
    def __init__(self, encode_into: Callable[[Any, bytearray, int], None],
                 log: Any) -> None: ...
    def attach(self, log: Any) -> None: ...
    @property
    def sealed_lsn(self) -> int: ...
    @property
    def next_lsn(self) -> int: ...
    def count_events(self, names: Iterable[str]) -> None: ...
    def pushes_by_event(self) -> dict[str, int]: ...
    def push(self, event: str, entry: CheckerEntry, row: dict[str, Any], now: int,
             version: int, routes: dict[str, Any],
             on_durable: Callable[[], None] | None) -> tuple[int, bool]: ...
    def replayed(self, original: int, on_durable: Callable[[], None] | None) -> bool: ...
    def unwritten(self, first_lsn: int, indexes: Iterable[int]) -> None: ...
    def applied(self, lsn: int, newest_ms: int) -> None: ...
    def restore(self, lsn: int, watermark_ms: int) -> None: ...
    def advance(self, lsn: int) -> None: ...
    def write_sync(self, record_type: int, body_format: int, clock: Callable[[], int],
                   version: int,
                   name: bytes, body: bytes | bytearray | memoryview, boundary: bool) -> int: ...
