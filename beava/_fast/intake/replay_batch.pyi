"""Type stub of replay_batch.pyx: a batch of history replayed in one C loop."""

from typing import Any

READ: int
NO_READ: int

def replay_rows(batch: Any, routes: dict[str, Any], checkers: dict[str, Any],
                names: tuple[str, ...], decode_json: Any, tables: list[Any],
                reads: list[tuple[int, list[dict[str, Any] | None]]]
                ) -> tuple[int, str, int | None, str] | None: ...
