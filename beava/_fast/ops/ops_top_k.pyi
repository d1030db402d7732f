"""Type stub of ops_top_k.pyx: top_k."""

from beava._fast.ops.column import Column
from beava._fast.ops.sketch_base import SketchColumn

COLUMNS: dict[str, type[Column]]

class TopKColumn(SketchColumn):
    @property
    def k(self) -> int: ...
