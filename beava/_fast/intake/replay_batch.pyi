"""Type stub of replay_batch.pyx: a batch of history replayed in one C loop."""

from typing import Any

from beava._fast.ops.column import Column
from beava._fast.ops.key_map import KeyMap

READ: int
NO_READ: int
KINDS: tuple[str, ...]

def replay_rows(batch: Any, routes: dict[str, Any], checkers: dict[str, Any],
                names: tuple[str, ...], fields: tuple[tuple[tuple[int, str], ...], ...],
                tables: list[tuple[KeyMap, tuple[tuple[str, Column, int], ...]]],
                encode_json: Any, rows: list[int],
                columns: list[tuple[bytes, bytes, bytes | None, int]], mask: Any = None,
                bit: int = 0
                ) -> tuple[int, str, int | None, str] | None: ...
