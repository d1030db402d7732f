"""Type stub of struct_column.pyx: lifetime columns whose per-slot state is one C struct."""

from beava._fast.column import Column

class StructColumn(Column): ...
