"""Type stub of ops_entropy.pyx: entropy."""

from beava._fast.ops.column import Column
from beava._fast.ops.sketch_base import SketchColumn

COLUMNS: dict[str, type[Column]]

def counters() -> dict[str, int]: ...

class EntropyColumn(SketchColumn): ...
