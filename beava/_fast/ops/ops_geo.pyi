"""Type stub of ops_geo.pyx: geo velocity, distance, spread, distance from home."""

from beava._fast.ops.column import Column
from beava._fast.ops.struct_column import StructColumn

COLUMNS: dict[str, type[Column]]

class _GeoColumn(StructColumn):
    @property
    def lat_field(self) -> str: ...
    @property
    def lon_field(self) -> str: ...

class GeoVelocityColumn(_GeoColumn): ...
class GeoDistanceColumn(_GeoColumn): ...
class GeoSpreadColumn(_GeoColumn): ...

class DistanceFromHomeColumn(_GeoColumn):
    @property
    def samples(self) -> int: ...
