# cython: language_level=3
"""Family H, geo operators (spec/operators.md §17): geo_velocity, geo_distance, geo_spread,
distance_from_home.

Lifetime only. The latitude and longitude (degrees) come from the row fields named by the
params `lat_field` / `lon_field` (default "lat" / "lon"); a matched event counts only when
both are numeric. Distances are haversine great-circle km with R = 6371. Per entity an op
keeps one C struct (16-40 bytes) in a column-wide growable array; distance_from_home also
owns a ring of its last `samples` points, grown as points arrive.
"""

from cpython.mem cimport PyMem_Realloc
from libc.math cimport atan2, cos, sin, sqrt
from libc.stdint cimport int64_t, uint8_t

from beava._fast.ops.column cimport VALUE_FLOAT, VALUE_NULL, Number, row_key
from beava._fast.ops.moments cimport welford_step
from beava._fast.ops.op_params cimport lifetime_only
from beava._fast.ops.row cimport Row, field_number, row_field
from beava._fast.ops.slot_buffers cimport row_number
from beava._fast.ops.struct_column cimport NO_TIME, StructColumn, block_entries

cdef double EARTH_RADIUS_KM = 6371.0
cdef double DEG = 0.017453292519943295  # pi / 180, as Rust's f64::to_radians multiplies
cdef double KM_PER_DEG = 111.32
cdef double MS_PER_HOUR = 3600000.0


cdef inline double haversine_km(double lat1, double lon1, double lat2, double lon2) noexcept nogil:
    cdef double s_lat = sin((lat2 - lat1) * DEG / 2.0)
    cdef double s_lon = sin((lon2 - lon1) * DEG / 2.0)
    cdef double a = s_lat * s_lat + s_lon * s_lon * cos(lat1 * DEG) * cos(lat2 * DEG)
    return EARTH_RADIUS_KM * 2.0 * atan2(sqrt(a), sqrt(1.0 - a))


ctypedef struct Point:
    double lat
    double lon


cdef class _GeoColumn(StructColumn):
    """Reads the point of a matched event from the lat/lon fields named in the params and
    feeds it to ``feed``, from a dict row or a C row alike."""

    cdef readonly str lat_field
    cdef readonly str lon_field
    cdef uint8_t lat_guess      # where the last C row had each field (row_field)
    cdef uint8_t lon_guess

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        lifetime_only(type(self).__name__, window_ms)
        StructColumn.__init__(self, name, field, where, params, window_ms)
        lat_field = params.get("lat_field")
        lon_field = params.get("lon_field")
        # interned, as the push checks name a row's fields: a C row's field is found by identity
        self.lat_field = row_key("lat" if lat_field is None else lat_field)
        self.lon_field = row_key("lon" if lon_field is None else lon_field)
        self.takes_row = True

    cdef int update(self, Py_ssize_t slot, dict row, bint matched, int64_t now) except -1:
        cdef Point p
        if (matched and row_number(row, self.lat_field, &p.lat)
                and row_number(row, self.lon_field, &p.lon)):
            return self.feed(slot, &p, now)
        return 0

    cdef int update_row(self, Py_ssize_t slot, const Row* row, bint matched,
                        int64_t now) except -1:
        cdef Point p
        if (matched and field_number(row_field(row, self.lat_field, &self.lat_guess), &p.lat)
                and field_number(row_field(row, self.lon_field, &self.lon_guess), &p.lon)):
            return self.feed(slot, &p, now)
        return 0

    cdef int feed(self, Py_ssize_t slot, const Point* p, int64_t now) except -1:
        """One point of a matched event at ``now``."""
        raise NotImplementedError(type(self).__name__)


ctypedef struct VelocityState:
    Point prev
    double best      # km/h, max over consecutive pairs with dt > 0
    int64_t prev_t   # NO_TIME: no point yet


cdef class GeoVelocityColumn(_GeoColumn):
    """geo_velocity: the highest km/h between consecutive points (0.0 after one point)."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        cdef VelocityState empty = VelocityState(Point(0.0, 0.0), 0.0, NO_TIME)
        _GeoColumn.__init__(self, name, field, where, params, window_ms)
        self.set_layout(&empty, sizeof(VelocityState), False)

    cdef int feed(self, Py_ssize_t slot, const Point* p, int64_t now) except -1:
        cdef VelocityState* s = (<VelocityState*>self.buf) + slot
        cdef double kmh
        if s.prev_t != NO_TIME and now > s.prev_t:
            kmh = (haversine_km(s.prev.lat, s.prev.lon, p.lat, p.lon)
                   / (<double>(now - s.prev_t) / MS_PER_HOUR))
            if kmh > s.best:  # a NaN speed never wins (f64::max semantics)
                s.best = kmh
        s.prev = p[0]  # replaced always, also when dt <= 0
        s.prev_t = now
        return 0

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        cdef VelocityState* s = (<VelocityState*>self.buf) + slot
        out.f = s.best
        return VALUE_NULL if s.prev_t == NO_TIME else VALUE_FLOAT


ctypedef struct DistanceState:
    Point prev
    double total
    int64_t has_prev


cdef class GeoDistanceColumn(_GeoColumn):
    """geo_distance: total km travelled along consecutive points (0.0 when empty)."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        cdef DistanceState empty = DistanceState(Point(0.0, 0.0), 0.0, 0)
        _GeoColumn.__init__(self, name, field, where, params, window_ms)
        self.set_layout(&empty, sizeof(DistanceState), False)

    cdef int feed(self, Py_ssize_t slot, const Point* p, int64_t now) except -1:
        cdef DistanceState* s = (<DistanceState*>self.buf) + slot
        if s.has_prev:
            s.total += haversine_km(s.prev.lat, s.prev.lon, p.lat, p.lon)
        s.prev = p[0]
        s.has_prev = 1
        return 0

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        out.f = (<DistanceState*>self.buf)[slot].total
        return VALUE_FLOAT


ctypedef struct SpreadState:
    # population Welford moments of latitude and longitude (degrees)
    int64_t n
    double mean_lat
    double m2_lat
    double mean_lon
    double m2_lon


cdef class GeoSpreadColumn(_GeoColumn):
    """geo_spread: km standard deviation of the points around their mean."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        cdef SpreadState empty = SpreadState(0, 0.0, 0.0, 0.0, 0.0)
        _GeoColumn.__init__(self, name, field, where, params, window_ms)
        self.set_layout(&empty, sizeof(SpreadState), False)

    cdef int feed(self, Py_ssize_t slot, const Point* p, int64_t now) except -1:
        cdef SpreadState* s = (<SpreadState*>self.buf) + slot
        s.n += 1
        welford_step(p.lat, <double>s.n, &s.mean_lat, &s.m2_lat)
        welford_step(p.lon, <double>s.n, &s.mean_lon, &s.m2_lon)
        return 0

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        cdef SpreadState* s = (<SpreadState*>self.buf) + slot
        cdef double var_lat, var_lon, km_lon
        if s.n < 2:
            return VALUE_NULL
        var_lat = s.m2_lat / <double>s.n
        var_lon = s.m2_lon / <double>s.n
        km_lon = KM_PER_DEG * cos(s.mean_lat * DEG)
        out.f = sqrt(var_lat * (KM_PER_DEG * KM_PER_DEG) + var_lon * (km_lon * km_lon))
        return VALUE_FLOAT


ctypedef struct HomeState:
    # The ring of the last K points lives in the side block: ring[i] for i < min(seen, K),
    # the latest at (seen - 1) mod K. Its capacity follows block_entries(min(seen, K), K).
    int64_t seen


cdef class DistanceFromHomeColumn(_GeoColumn):
    """distance_from_home: km from the latest point to the mean of the last `samples`."""

    cdef readonly Py_ssize_t samples  # K; 0 is treated as 1

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        cdef HomeState empty = HomeState(0)
        cdef object samples = params.get("samples")
        _GeoColumn.__init__(self, name, field, where, params, window_ms)
        if samples is None:
            samples = 100
        if type(samples) is not int or samples < 0:
            raise ValueError(f"samples must be a non-negative integer, got {samples!r}")
        self.samples = max(samples, 1)
        self.set_layout(&empty, sizeof(HomeState), True)

    cdef Py_ssize_t _held(self, HomeState* s) noexcept nogil:
        return <Py_ssize_t>s.seen if s.seen < self.samples else self.samples

    cdef Py_ssize_t block_size(self, Py_ssize_t slot) except -1:
        return self._held((<HomeState*>self.buf) + slot) * sizeof(Point)

    cdef Py_ssize_t block_capacity(self, Py_ssize_t slot, Py_ssize_t used) except -1:
        return block_entries(used // sizeof(Point), self.samples) * sizeof(Point)

    cdef int feed(self, Py_ssize_t slot, const Point* p, int64_t now) except -1:
        cdef HomeState* s = (<HomeState*>self.buf) + slot
        cdef Point* ring = <Point*>self.blocks[slot]
        cdef Py_ssize_t held = self._held(s)
        if held < self.samples and held == block_entries(held, self.samples):
            ring = <Point*>PyMem_Realloc(
                ring, block_entries(held + 1, self.samples) * sizeof(Point))
            if ring == NULL:
                raise MemoryError()
            self.blocks[slot] = ring
        ring[s.seen % self.samples] = p[0]
        s.seen += 1
        return 0

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        cdef HomeState* s = (<HomeState*>self.buf) + slot
        cdef Point* ring = <Point*>self.blocks[slot]
        cdef Py_ssize_t held = self._held(s), i
        cdef double sum_lat = 0.0, sum_lon = 0.0
        cdef Point latest
        if held == 0:
            return VALUE_NULL
        for i in range(held):  # slot order, as the spec sums
            sum_lat += ring[i].lat
            sum_lon += ring[i].lon
        latest = ring[(s.seen - 1) % self.samples]
        out.f = haversine_km(latest.lat, latest.lon, sum_lat / <double>held,
                             sum_lon / <double>held)
        return VALUE_FLOAT


COLUMNS = {
    "geo_velocity": GeoVelocityColumn,
    "geo_distance": GeoDistanceColumn,
    "geo_spread": GeoSpreadColumn,
    "distance_from_home": DistanceFromHomeColumn,
}
