"""Type stub of ops_n_unique.pyx: n_unique."""

from beava._fast.ops.column import Column
from beava._fast.ops.sketch_base import SketchColumn

COLUMNS: dict[str, type[Column]]

class NUniqueColumn(SketchColumn): ...
