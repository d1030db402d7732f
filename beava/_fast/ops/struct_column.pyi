"""Type stub of struct_column.pyx: lifetime columns whose per-slot state is one C struct."""

from beava._fast.ops.column import Column

class StructColumn(Column): ...
