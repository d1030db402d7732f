"""Per-entity state: event checks, chain ops, tables of entity slots with their feature
columns, and the reads that render rows (spec/operators.md, spec/wire.md §6)."""
