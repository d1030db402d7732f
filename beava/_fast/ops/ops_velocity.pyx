# cython: language_level=3
"""Family F, velocity and anomaly operators (spec/operators.md §15): rate_of_change,
inter_arrival_stats, burst_count, delta_from_prev, trend, trend_residual, outlier_count,
value_change_count, z_score.

All run lifetime: a `window` is accepted and ignored. Per entity an op keeps one C struct
(16-64 bytes) in a column-wide growable array. Two ops also own a lazily allocated side
block: burst_count for sub-window slots other than the current one (only after events in
two different sub-windows), value_change_count for a remembered string longer than 16 bytes.
Every op takes C rows: what an event feeds it is one number (NumberColumn), the match alone
(inter_arrival_stats, burst_count) or the value's type and bytes (value_change_count).
"""

from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.ref cimport PyObject
from cpython.unicode cimport PyUnicode_DATA, PyUnicode_GET_LENGTH, PyUnicode_KIND
from libc.math cimport fabs, isnan, sqrt
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy, memset

from beava._fast.ops.column cimport VALUE_FLOAT, VALUE_INT, VALUE_NULL, Number
from beava._fast.ops.moments cimport Moments, moments_add
from beava._fast.ops.row cimport ROW_BOOL, ROW_FLOAT, ROW_TEXT, Row, RowField, row_field
from beava._fast.ops.slot_buffers cimport row_value
from beava._fast.ops.struct_column cimport NO_TIME, NumberColumn, StructColumn, block_entries
from beava._fast.ops.window cimport floor_div

cdef double NAN = float("nan")


# ---- rate_of_change, inter_arrival_stats, delta_from_prev ---------------------------------

ctypedef struct RateState:
    double last_x
    double rate      # NaN until a pair with dt > 0 (a NaN rate reads null all the same)
    int64_t last_t   # NO_TIME: no value yet


cdef class RateOfChangeColumn(NumberColumn):
    """rate_of_change: (x - last_x) / dt per millisecond over the last pair with dt > 0."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        cdef RateState empty = RateState(0.0, NAN, NO_TIME)
        NumberColumn.__init__(self, name, field, where, params, window_ms)
        self.set_layout(&empty, sizeof(RateState), False)

    cdef int add(self, Py_ssize_t slot, double x, int64_t now) except -1:
        cdef RateState* s = (<RateState*>self.buf) + slot
        if s.last_t != NO_TIME and now > s.last_t:
            s.rate = (x - s.last_x) / <double>(now - s.last_t)
        s.last_x = x
        s.last_t = now  # also for dt <= 0: the pair is skipped, the point replaced
        return 0

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        out.f = (<RateState*>self.buf)[slot].rate
        return VALUE_NULL if isnan(out.f) else VALUE_FLOAT


ctypedef struct GapState:
    double mean      # Welford mean of the gaps
    int64_t n        # gaps seen
    int64_t last_t   # NO_TIME: no matched event yet


cdef class InterArrivalStatsColumn(StructColumn):
    """inter_arrival_stats: mean gap in ms between matched events (gaps clamp at 0)."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        cdef GapState empty = GapState(0.0, 0, NO_TIME)
        StructColumn.__init__(self, name, field, where, params, window_ms)
        self.set_layout(&empty, sizeof(GapState), False)
        self.takes_row = True

    cdef int update(self, Py_ssize_t slot, dict row, bint matched, int64_t now) except -1:
        cdef GapState* s
        cdef double gap
        if not matched:
            return 0
        s = (<GapState*>self.buf) + slot
        if s.last_t != NO_TIME:
            gap = <double>(now - s.last_t) if now > s.last_t else 0.0
            s.n += 1
            s.mean += (gap - s.mean) / <double>s.n
        s.last_t = now
        return 0

    cdef int update_row(self, Py_ssize_t slot, const Row* row, bint matched,
                        int64_t now) except -1:
        return self.update(slot, None, matched, now)  # reads nothing of the row

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        cdef GapState* s = (<GapState*>self.buf) + slot
        out.f = s.mean
        return VALUE_NULL if s.n == 0 else VALUE_FLOAT


ctypedef struct DeltaState:
    # Both NaN when empty. A NaN `prev` always comes with a NaN `delta` (x - NaN is NaN),
    # so treating a NaN `prev` as "no previous value" changes no read: both read null.
    double prev
    double delta


cdef class DeltaFromPrevColumn(NumberColumn):
    """delta_from_prev: latest value minus the one before (F64), null before two values."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        cdef DeltaState empty = DeltaState(NAN, NAN)
        NumberColumn.__init__(self, name, field, where, params, window_ms)
        self.set_layout(&empty, sizeof(DeltaState), False)

    cdef int add(self, Py_ssize_t slot, double x, int64_t now) except -1:
        cdef DeltaState* s = (<DeltaState*>self.buf) + slot
        if not isnan(s.prev):
            s.delta = x - s.prev
        s.prev = x
        return 0

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        out.f = (<DeltaState*>self.buf)[slot].delta
        return VALUE_NULL if isnan(out.f) else VALUE_FLOAT


# ---- burst_count ---------------------------------------------------------------------------

cdef extern from *:
    """
    typedef struct { int64_t q; int64_t count; } beava_burst_entry;
    /* The ring slots other than the current one, unordered, one per residue q mod 64. */
    typedef struct { int64_t len; beava_burst_entry entries[]; } beava_burst_spill;
    """
    ctypedef struct BurstEntry "beava_burst_entry":
        int64_t q
        int64_t count
    ctypedef struct BurstSpill "beava_burst_spill":
        int64_t len
        BurstEntry entries[1]

cdef enum:
    RING_SLOTS = 64
    SPILL_MAX = RING_SLOTS - 1

ctypedef struct BurstState:
    # The spec's ring of 64 (epoch, count) slots, stored sparsely: the slot touched last
    # inline, every other slot ever written in the side block (BurstSpill). A sub-window is
    # identified by q = floor(now / s), its ring slot by q mod 64.
    int64_t cur_q
    int64_t cur_count
    int64_t max_seen  # 0: no matched event yet


cdef class BurstCountColumn(StructColumn):
    """burst_count: the most matched events ever seen inside one sub_window bucket (I64)."""

    cdef int64_t width  # sub_window in ms

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        cdef BurstState empty = BurstState(0, 0, 0)
        cdef object sub_window = params.get("sub_window")
        StructColumn.__init__(self, name, field, where, params, window_ms)
        if type(sub_window) is not int or sub_window <= 0:
            raise ValueError(f"sub_window must be a positive number of ms, got {sub_window!r}")
        self.width = sub_window
        self.set_layout(&empty, sizeof(BurstState), True)
        self.takes_row = True

    cdef Py_ssize_t block_size(self, Py_ssize_t slot) except -1:
        cdef BurstSpill* spill = <BurstSpill*>self.blocks[slot]
        return 0 if spill == NULL else sizeof(BurstSpill) + spill.len * sizeof(BurstEntry)

    cdef Py_ssize_t block_capacity(self, Py_ssize_t slot, Py_ssize_t used) except -1:
        cdef Py_ssize_t n = (used - <Py_ssize_t>sizeof(BurstSpill)) // sizeof(BurstEntry)
        if n < 1 or n > SPILL_MAX:
            raise ValueError(f"burst_count snapshot block of {used} bytes")
        return sizeof(BurstSpill) + block_entries(n, SPILL_MAX) * sizeof(BurstEntry)

    cdef int check_state(self, Py_ssize_t nslots) except -1:
        # _park relies on the sub-windows of the spill and the current one having distinct
        # ring slots (so the spill never outgrows SPILL_MAX entries).
        cdef Py_ssize_t slot
        cdef int64_t i
        cdef uint64_t taken
        cdef BurstState* s
        cdef BurstSpill* spill
        for slot in range(nslots):
            spill = <BurstSpill*>self.blocks[slot]
            if spill == NULL:
                continue
            s = (<BurstState*>self.buf) + slot
            if s.max_seen <= 0:
                raise ValueError(f"snapshot burst_count slot {slot}: spill without events")
            taken = (<uint64_t>1) << (s.cur_q & (RING_SLOTS - 1))
            for i in range(spill.len):
                if taken & ((<uint64_t>1) << (spill.entries[i].q & (RING_SLOTS - 1))):
                    raise ValueError(f"snapshot burst_count slot {slot}: repeated ring slot")
                taken |= (<uint64_t>1) << (spill.entries[i].q & (RING_SLOTS - 1))
        return 0

    cdef int64_t _park(self, Py_ssize_t slot, BurstState* s, int64_t q) except -1:
        # Moving to sub-window q whose ring slot differs from the current one: park the
        # current slot in the spill and return the count ring slot q mod 64 holds for q
        # (0 when it holds another sub-window or was never written).
        cdef BurstSpill* spill = <BurstSpill*>self.blocks[slot]
        cdef int64_t r = q & (RING_SLOTS - 1)
        cdef int64_t count = 0, i, n = 0
        if spill != NULL:
            n = spill.len
            for i in range(n):
                if (spill.entries[i].q & (RING_SLOTS - 1)) == r:
                    if spill.entries[i].q == q:
                        count = spill.entries[i].count
                    spill.entries[i].q = s.cur_q  # the parked slot takes its place
                    spill.entries[i].count = s.cur_count
                    return count
        # Not found: r is a new residue, so n < SPILL_MAX (the spill plus the current slot
        # never hold more than 64 distinct residues).
        if n == block_entries(n, SPILL_MAX):  # full (or absent): grow
            spill = <BurstSpill*>PyMem_Realloc(
                spill, sizeof(BurstSpill) + block_entries(n + 1, SPILL_MAX) * sizeof(BurstEntry))
            if spill == NULL:
                raise MemoryError()
            self.blocks[slot] = spill
        spill.entries[n].q = s.cur_q
        spill.entries[n].count = s.cur_count
        spill.len = n + 1
        return 0

    cdef int update(self, Py_ssize_t slot, dict row, bint matched, int64_t now) except -1:
        cdef BurstState* s
        cdef int64_t q
        if not matched:
            return 0
        s = (<BurstState*>self.buf) + slot
        q = floor_div(now, self.width)
        if s.max_seen == 0:
            s.cur_q = q
            s.cur_count = 1
        elif q == s.cur_q:
            s.cur_count += 1
        elif (q & (RING_SLOTS - 1)) == (s.cur_q & (RING_SLOTS - 1)):
            s.cur_q = q  # same ring slot, another sub-window: the count restarts
            s.cur_count = 1
        else:
            s.cur_count = self._park(slot, s, q) + 1
            s.cur_q = q
        if s.cur_count > s.max_seen:
            s.max_seen = s.cur_count
        return 0

    cdef int update_row(self, Py_ssize_t slot, const Row* row, bint matched,
                        int64_t now) except -1:
        return self.update(slot, None, matched, now)  # reads nothing of the row

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        out.i = (<BurstState*>self.buf)[slot].max_seen
        return VALUE_INT


# ---- trend, trend_residual -----------------------------------------------------------------

ctypedef struct TrendFit:
    # Welford co-moments of (x = now - t0 in ms, y = value)
    int64_t t0
    int64_t n
    double mean_x
    double mean_y
    double m2x
    double cxy

ctypedef struct ResidualState:
    TrendFit fit
    double last_x
    double last_y


cdef inline double _trend_add(TrendFit* f, int64_t now, double y) noexcept nogil:
    # Add the point (now, y); returns its x.
    cdef double x, dx
    if f.n == 0:
        f.t0 = now
    x = <double>(now - f.t0)
    f.n += 1
    dx = x - f.mean_x
    f.mean_x += dx / <double>f.n
    f.mean_y += (y - f.mean_y) / <double>f.n
    f.m2x += dx * (x - f.mean_x)
    f.cxy += dx * (y - f.mean_y)
    return x


cdef inline bint _slope(TrendFit* f, double* slope) noexcept nogil:
    # The least-squares slope (value per ms); false when undefined.
    if f.n < 2 or f.m2x == 0.0:
        return False
    slope[0] = f.cxy / f.m2x
    return True


cdef class TrendColumn(NumberColumn):
    """trend: least-squares slope of value over time since the first point, per ms."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        cdef TrendFit empty = TrendFit(0, 0, 0.0, 0.0, 0.0, 0.0)
        NumberColumn.__init__(self, name, field, where, params, window_ms)
        self.set_layout(&empty, sizeof(TrendFit), False)

    cdef int add(self, Py_ssize_t slot, double y, int64_t now) except -1:
        _trend_add((<TrendFit*>self.buf) + slot, now, y)
        return 0

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        return VALUE_FLOAT if _slope((<TrendFit*>self.buf) + slot, &out.f) else VALUE_NULL


cdef class TrendResidualColumn(NumberColumn):
    """trend_residual: the latest point's residual against the fitted line."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        cdef ResidualState empty
        empty.fit = TrendFit(0, 0, 0.0, 0.0, 0.0, 0.0)
        empty.last_x = 0.0
        empty.last_y = 0.0
        NumberColumn.__init__(self, name, field, where, params, window_ms)
        self.set_layout(&empty, sizeof(ResidualState), False)

    cdef int add(self, Py_ssize_t slot, double y, int64_t now) except -1:
        cdef ResidualState* s = (<ResidualState*>self.buf) + slot
        s.last_x = _trend_add(&s.fit, now, y)
        s.last_y = y
        return 0

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        cdef ResidualState* s = (<ResidualState*>self.buf) + slot
        cdef double slope
        if not _slope(&s.fit, &slope):
            return VALUE_NULL
        out.f = s.last_y - (s.fit.mean_y + slope * (s.last_x - s.fit.mean_x))
        return VALUE_FLOAT


# ---- outlier_count, z_score ----------------------------------------------------------------

ctypedef struct OutlierState:
    Moments m
    int64_t outliers


cdef class OutlierCountColumn(NumberColumn):
    """outlier_count: values farther than sigma sample-std from the mean of those before."""

    cdef double sigma

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        cdef OutlierState empty
        cdef object sigma = params.get("sigma")
        empty.m = Moments(0, 0.0, 0.0)
        empty.outliers = 0
        NumberColumn.__init__(self, name, field, where, params, window_ms)
        self.sigma = 3.0 if sigma is None else float(sigma)
        self.set_layout(&empty, sizeof(OutlierState), False)

    cdef int add(self, Py_ssize_t slot, double x, int64_t now) except -1:
        cdef OutlierState* s = (<OutlierState*>self.buf) + slot
        cdef double var
        if s.m.n >= 5:
            var = s.m.m2 / <double>(s.m.n - 1)
            if var > 0.0 and fabs(x - s.m.mean) > self.sigma * sqrt(var):
                s.outliers += 1
        moments_add(&s.m, x)
        return 0

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        out.i = (<OutlierState*>self.buf)[slot].outliers
        return VALUE_INT


ctypedef struct ZState:
    Moments m
    double last_x


cdef class ZScoreColumn(NumberColumn):
    """z_score: (latest - mean) / sample std over all values, the latest included."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        cdef ZState empty
        empty.m = Moments(0, 0.0, 0.0)
        empty.last_x = 0.0
        NumberColumn.__init__(self, name, field, where, params, window_ms)
        self.set_layout(&empty, sizeof(ZState), False)

    cdef int add(self, Py_ssize_t slot, double x, int64_t now) except -1:
        cdef ZState* s = (<ZState*>self.buf) + slot
        moments_add(&s.m, x)
        s.last_x = x
        return 0

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        cdef ZState* s = (<ZState*>self.buf) + slot
        cdef double var
        if s.m.n < 2:
            return VALUE_NULL
        var = s.m.m2 / <double>(s.m.n - 1)
        if var <= 0.0:
            return VALUE_NULL
        out.f = (s.last_x - s.m.mean) / sqrt(var)
        return VALUE_FLOAT


# ---- value_change_count --------------------------------------------------------------------

cdef enum:
    VC_NONE = 0      # nothing remembered yet
    VC_INT = 1       # v.i
    VC_FLOAT = 2     # v.f
    VC_BOOL = 3      # v.i is 0 or 1
    VC_STR = 4       # text: code units of `kind` bytes, inline or in the side block
    VC_BIGINT = 5    # text: decimal digits of an int beyond 64 bits
    VC_INLINE = 16   # text of at most this many bytes is kept in the struct

ctypedef union VcValue:
    int64_t i
    double f
    char text[VC_INLINE]

ctypedef struct VcState:
    int64_t changes
    uint32_t nbytes  # text length in bytes
    uint8_t tag
    uint8_t kind     # PEP 393 kind of VC_STR text (1, 2 or 4 bytes per code point)
    VcValue v


cdef class ValueChangeCountColumn(StructColumn):
    """value_change_count: how often the value differed from the previous one (typed)."""

    cdef uint8_t guess  # where the last C row had ``field`` (row_field)

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        cdef VcState empty
        memset(&empty, 0, sizeof(VcState))  # padding too: snapshots stay deterministic
        StructColumn.__init__(self, name, field, where, params, window_ms)
        self.set_layout(&empty, sizeof(VcState), True)
        self.takes_row = True

    cdef Py_ssize_t block_size(self, Py_ssize_t slot) except -1:
        cdef VcState* s = (<VcState*>self.buf) + slot
        if (s.tag == VC_STR or s.tag == VC_BIGINT) and s.nbytes > VC_INLINE:
            return s.nbytes
        return 0

    cdef Py_ssize_t block_capacity(self, Py_ssize_t slot, Py_ssize_t used) except -1:
        return used

    cdef int _keep_text(self, Py_ssize_t slot, VcState* s, uint8_t tag, uint8_t kind,
                        const char* data, Py_ssize_t nbytes) except -1:
        cdef void* block = self.blocks[slot]
        if nbytes > VC_INLINE:
            block = PyMem_Realloc(block, <size_t>nbytes)
            if block == NULL:
                raise MemoryError()
            memcpy(block, data, nbytes)
        else:
            PyMem_Free(block)
            block = NULL
            memcpy(s.v.text, data, nbytes)
        self.blocks[slot] = block
        s.tag = tag
        s.kind = kind
        s.nbytes = <uint32_t>nbytes
        return 0

    cdef int _text(self, Py_ssize_t slot, VcState* s, uint8_t tag, uint8_t kind,
                   const char* data, Py_ssize_t nbytes) except -1:
        # Compare a text (the code units, of PEP 393 ``kind``, of a str or of big int
        # digits) with the remembered value by tag, kind and code units: equal strings
        # always share the kind, so this is equality.
        cdef const char* kept
        if s.tag == tag and s.kind == kind and s.nbytes == nbytes:
            if nbytes <= VC_INLINE:
                kept = <const char*>s.v.text
            else:
                kept = <const char*>self.blocks[slot]
            if memcmp(kept, data, nbytes) == 0:
                return 0
        if s.tag != VC_NONE:
            s.changes += 1
        return self._keep_text(slot, s, tag, kind, data, nbytes)

    cdef int _scalar(self, Py_ssize_t slot, VcState* s, uint8_t tag, VcValue v) except -1:
        if s.tag == tag:
            if tag == VC_FLOAT:
                if s.v.f == v.f:  # IEEE: -0.0 == 0.0, NaN never equal
                    return 0
            elif s.v.i == v.i:
                return 0
        if s.tag != VC_NONE:
            s.changes += 1
        PyMem_Free(self.blocks[slot])  # the previous value may have been a long text
        self.blocks[slot] = NULL
        s.tag = tag
        s.nbytes = 0
        s.v.i = v.i  # the 8 payload bytes (also of v.f)
        return 0

    cdef int update(self, Py_ssize_t slot, dict row, bint matched, int64_t now) except -1:
        cdef PyObject* p
        cdef VcState* s
        cdef VcValue v
        cdef int overflow = 0
        if not matched:
            return 0
        p = row_value(row, self.field)
        if p == NULL:
            return 0
        value = <object>p
        s = (<VcState*>self.buf) + slot
        t = type(value)
        if t is str:
            return self._str(slot, s, VC_STR, value)
        if t is float:
            v.f = PyFloat_AS_DOUBLE(value)
            return self._scalar(slot, s, VC_FLOAT, v)
        if t is int:
            v.i = PyLong_AsLongLongAndOverflow(value, &overflow)
            if overflow:
                return self._str(slot, s, VC_BIGINT, str(value))
            return self._scalar(slot, s, VC_INT, v)
        if t is bool:
            v.i = value is True
            return self._scalar(slot, s, VC_BOOL, v)
        return 0  # anything that is not a row value

    cdef int _str(self, Py_ssize_t slot, VcState* s, uint8_t tag, str text) except -1:
        cdef uint8_t kind = PyUnicode_KIND(text)
        return self._text(slot, s, tag, kind, <const char*>PyUnicode_DATA(text),
                          PyUnicode_GET_LENGTH(text) * kind)

    cdef int update_row(self, Py_ssize_t slot, const Row* row, bint matched,
                        int64_t now) except -1:
        # A C row holds no big int, and its text is ASCII: one byte per code point, the
        # kind of the str a dict row holds for it.
        cdef const RowField* f
        cdef VcState* s
        cdef VcValue v
        if not matched:
            return 0
        f = row_field(row, self.field, &self.guess)
        if f == NULL:
            return 0
        s = (<VcState*>self.buf) + slot
        if f.tag == ROW_TEXT:
            return self._text(slot, s, VC_STR, 1, f.text, f.size)
        if f.tag == ROW_FLOAT:
            v.f = f.f
            return self._scalar(slot, s, VC_FLOAT, v)
        v.i = f.i  # an int, or a bool's 0 or 1
        return self._scalar(slot, s, VC_BOOL if f.tag == ROW_BOOL else VC_INT, v)

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        out.i = (<VcState*>self.buf)[slot].changes
        return VALUE_INT


COLUMNS = {
    "rate_of_change": RateOfChangeColumn,
    "inter_arrival_stats": InterArrivalStatsColumn,
    "burst_count": BurstCountColumn,
    "delta_from_prev": DeltaFromPrevColumn,
    "trend": TrendColumn,
    "trend_residual": TrendResidualColumn,
    "outlier_count": OutlierCountColumn,
    "value_change_count": ValueChangeCountColumn,
    "z_score": ZScoreColumn,
}
