"""JSON log lines on stdout, one object per line, flushed (spec/server.md §7)."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

import msgspec

LEVELS = {"TRACE": 0, "DEBUG": 1, "INFO": 2, "WARN": 3, "ERROR": 4}
_encode = msgspec.json.Encoder().encode


def parse_level(text: str) -> str:
    """Config spelling (any case, ``warn``) to the line's level name; ValueError if unknown."""
    name = text.strip().upper()
    if name == "WARNING":
        name = "WARN"
    if name not in LEVELS:
        raise ValueError(f"invalid log level {text!r}")
    return name


def _timestamp() -> str:
    now = time.time()
    seconds = int(now)
    micros = int((now - seconds) * 1_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{micros:06d}Z"


class LogLines:
    """Writes ``{"timestamp","level","message","kind",...fields,"target"}`` lines."""

    def __init__(self, level: str = "INFO", stream: TextIO | None = None) -> None:
        self.threshold = LEVELS[level]
        self.stream = stream if stream is not None else sys.stdout

    def emit(self, level: str, kind: str, message: str, target: str = "beava.server",
             **fields: Any) -> None:
        if LEVELS[level] < self.threshold:
            return
        line = {"timestamp": _timestamp(), "level": level, "message": message, "kind": kind,
                **fields, "target": target}
        try:
            self.stream.write(_encode(line).decode() + "\n")
            self.stream.flush()
        except (BrokenPipeError, ValueError):
            # A reader that went away must never take the server down with it.
            pass

    def info(self, kind: str, message: str, **fields: Any) -> None:
        self.emit("INFO", kind, message, **fields)

    def warn(self, kind: str, message: str, **fields: Any) -> None:
        self.emit("WARN", kind, message, **fields)

    def error(self, kind: str, message: str, **fields: Any) -> None:
        self.emit("ERROR", kind, message, **fields)

    def debug(self, kind: str, message: str, **fields: Any) -> None:
        self.emit("DEBUG", kind, message, **fields)
