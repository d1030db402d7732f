"""Durability (spec/durability.md): the WAL format and writer, acknowledgement timing
(memory-only, periodic, strict group commit), fork snapshots and recovery. Knows bytes and
files; the state it persists is handed in by the engine's store."""
