"""Type stub of ops_quantile.pyx: quantile."""

from beava._fast.ops.column import Column
from beava._fast.ops.sketch_base import SketchColumn

COLUMNS: dict[str, type[Column]]

class QuantileColumn(SketchColumn):
    @property
    def q(self) -> float: ...
    def read_q(self, slot: int, T: int, q: float) -> float | None: ...
