"""Type stub of ops_top_k.pyx: top_k."""

from beava._fast.column import Column
from beava._fast.sketch_base import SketchColumn

COLUMNS: dict[str, type[Column]]

class TopKColumn(SketchColumn):
    @property
    def k(self) -> int: ...
