"""Type stub of replay_batch.pyx: a batch of history replayed in one C loop."""

from typing import Any

READ: int
NO_READ: int
KINDS: tuple[str, ...]

def replay_rows(batch: Any, routes: dict[str, Any], checkers: dict[str, Any],
                names: tuple[str, ...], fields: tuple[tuple[tuple[int, str], ...], ...],
                tables: list[tuple[Any, tuple[tuple[str, int], ...]]], encode_json: Any,
                rows: list[int], columns: list[list[Any]]
                ) -> tuple[int, str, int | None, str] | None: ...
