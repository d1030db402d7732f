"""Type stub of push_pass.pyx: pushes accepted in one C loop."""

from collections.abc import Callable
from typing import Any

from beava._fast.intake.intake import CheckerEntry
from beava._fast.wire.frame_splitter import Frames

def apply_records(routes: dict[str, tuple[Callable[[dict[str, Any], int], Any], ...]],
                  checkers: dict[str, CheckerEntry],
                  events: list[str], data: bytearray, offset: int, start: int, stop: int,
                  deadline: float, decode_msgpack: Callable[[bytes], Any],
                  decode_json: Callable[[bytes], Any]) -> tuple[int, int, int]: ...

class PushPass:
    def __init__(self, store: Any, slow: Callable[[int, bytes], bytes],
                 failed: Callable[[Exception], bytes], decode_msgpack: Callable[[bytes], Any],
                 decode_body: Callable[[bytes], Any], decode_json: Callable[[bytes], Any],
                 decode_json_body: Callable[[Any], Any],
                 wall_clock: Callable[[], int],
                 reply_op: int) -> None: ...
    def run(self, frames: Frames, start: int, stop: int,
            out: bytearray, deadline: float = 0.0) -> int: ...
    def push_bodies(self, event: str, bodies: list[Any],
                    fallback: Callable[[int, Any], None]) -> tuple[int, int]: ...
