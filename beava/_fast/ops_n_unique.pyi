"""Type stub of ops_n_unique.pyx: n_unique."""

from beava._fast.column import Column
from beava._fast.sketch_base import SketchColumn

COLUMNS: dict[str, type[Column]]

class NUniqueColumn(SketchColumn): ...
