"""Type stub of block_column.pyx: columns keeping one owned heap block per slot."""

from beava._fast.ops.column import Column

class BlockColumn(Column): ...
