# cython: language_level=3
"""Family E, decay operators (spec/operators.md §14): ewma (alias ema), ewvar, ew_zscore,
decayed_sum, decayed_count, twa.

All run lifetime: a `window` is accepted and ignored. Each value is "as of the last
qualifying event"; nothing decays at read time, so reads ignore `T`. Per entity an op keeps
one small C struct in a column-wide growable array (16 or 32 bytes), never a Python object.
Every op takes C rows: what an event feeds it is one number (NumberColumn) or, for
decayed_count, the match alone.
"""

from libc.math cimport exp, fmax, sqrt
from libc.stdint cimport int64_t

from beava._fast.ops.column cimport VALUE_FLOAT, VALUE_NULL, Number
from beava._fast.ops.row cimport Row
from beava._fast.ops.struct_column cimport NO_TIME, NumberColumn

cdef double LN2 = 0.6931471805599453  # ln 2, correctly rounded (Rust's f64::consts::LN_2)


ctypedef struct EwmaState:       # also decayed_sum / decayed_count (v = S or C)
    double v
    int64_t last_t               # NO_TIME: no qualifying event yet

ctypedef struct EwvarState:      # ewvar, ew_zscore
    double mean
    double m2
    double last_x
    int64_t last_t

ctypedef struct TwaState:
    double last_v
    double sum_vdt
    double sum_dt
    int64_t last_t


cdef double _decay_rate(dict params) except -1.0:
    # λ = ln 2 / half_life_ms; half_life arrives resolved to ms (validated at register).
    cdef object half_life = params.get("half_life")
    if type(half_life) is not int or half_life <= 0:
        raise ValueError(f"half_life must be a positive number of ms, got {half_life!r}")
    return LN2 / <double>half_life


cdef class _DecayColumn(NumberColumn):
    """Base of the half-life ops: holds λ."""

    cdef double lam

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        NumberColumn.__init__(self, name, field, where, params, window_ms)
        self.lam = _decay_rate(params)


cdef class EwmaColumn(_DecayColumn):
    """ewma (and ema): exponentially weighted moving average, F64 or null."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        cdef EwmaState empty = EwmaState(0.0, NO_TIME)
        _DecayColumn.__init__(self, name, field, where, params, window_ms)
        self.set_layout(&empty, sizeof(EwmaState), False)

    cdef int add(self, Py_ssize_t slot, double x, int64_t now) except -1:
        cdef EwmaState* s = (<EwmaState*>self.buf) + slot
        cdef double alpha
        cdef int64_t dt
        if s.last_t == NO_TIME:
            s.v = x
            s.last_t = now
            return 0
        dt = now - s.last_t
        if dt > 0:
            alpha = 1.0 - exp(-<double>dt * self.lam)
            s.v = alpha * x + (1.0 - alpha) * s.v
            s.last_t = now
        else:  # same millisecond or clock stepped back: plain average, time kept
            s.v = 0.5 * x + 0.5 * s.v
        return 0

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        cdef EwmaState* s = (<EwmaState*>self.buf) + slot
        out.f = s.v
        return VALUE_NULL if s.last_t == NO_TIME else VALUE_FLOAT


cdef class EwvarColumn(_DecayColumn):
    """ewvar: exponentially weighted variance, F64 (0.0 after one value) or null."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        cdef EwvarState empty = EwvarState(0.0, 0.0, 0.0, NO_TIME)
        _DecayColumn.__init__(self, name, field, where, params, window_ms)
        self.set_layout(&empty, sizeof(EwvarState), False)

    cdef int add(self, Py_ssize_t slot, double x, int64_t now) except -1:
        cdef EwvarState* s = (<EwvarState*>self.buf) + slot
        cdef double alpha, delta, mean
        cdef int64_t dt
        if s.last_t == NO_TIME:
            s.mean = x
            s.m2 = 0.0
            s.last_t = now
            s.last_x = x
            return 0
        dt = now - s.last_t
        alpha = 1.0 - exp(-<double>dt * self.lam) if dt > 0 else 0.0
        delta = x - s.mean
        mean = s.mean + alpha * delta
        s.m2 = (1.0 - alpha) * s.m2 + alpha * delta * (x - mean)
        s.mean = mean
        if alpha > 0.0:  # a tiny dt can round alpha to 0: then time stays put too
            s.last_t = now
        s.last_x = x
        return 0

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        cdef EwvarState* s = (<EwvarState*>self.buf) + slot
        # fmax: a NaN m2 reads 0.0, as the reference's f64::max
        out.f = fmax(s.m2, 0.0)
        return VALUE_NULL if s.last_t == NO_TIME else VALUE_FLOAT


cdef class EwZscoreColumn(EwvarColumn):
    """ew_zscore: (last value - ew mean) / ew std; null until the variance is positive."""

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        cdef EwvarState* s = (<EwvarState*>self.buf) + slot
        cdef double var
        if s.last_t == NO_TIME:
            return VALUE_NULL
        var = fmax(s.m2, 0.0)
        if var == 0.0:
            return VALUE_NULL
        out.f = (s.last_x - s.mean) / sqrt(var)
        return VALUE_FLOAT


cdef class DecayedSumColumn(_DecayColumn):
    """decayed_sum: S = S * exp(-λ max(dt, 0)) + x; F64 or null."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        cdef EwmaState empty = EwmaState(0.0, NO_TIME)
        _DecayColumn.__init__(self, name, field, where, params, window_ms)
        self.set_layout(&empty, sizeof(EwmaState), False)

    cdef int add(self, Py_ssize_t slot, double x, int64_t now) except -1:
        cdef EwmaState* s = (<EwmaState*>self.buf) + slot
        cdef int64_t dt
        if s.last_t == NO_TIME:
            s.v = x
            s.last_t = now
            return 0
        dt = now - s.last_t
        s.v = s.v * exp(-self.lam * <double>(dt if dt > 0 else 0)) + x
        if now > s.last_t:
            s.last_t = now
        return 0

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        cdef EwmaState* s = (<EwmaState*>self.buf) + slot
        out.f = s.v
        return VALUE_NULL if s.last_t == NO_TIME else VALUE_FLOAT


cdef class DecayedCountColumn(DecayedSumColumn):
    """decayed_count: decayed_sum of 1 per matched event (fieldless)."""

    cdef int update(self, Py_ssize_t slot, dict row, bint matched, int64_t now) except -1:
        return self.add(slot, 1.0, now) if matched else 0

    cdef int update_row(self, Py_ssize_t slot, const Row* row, bint matched,
                        int64_t now) except -1:
        return self.update(slot, None, matched, now)  # reads nothing of the row


cdef class TwaColumn(NumberColumn):
    """twa: time-weighted average of a step function up to the last event; F64 or null."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        cdef TwaState empty = TwaState(0.0, 0.0, 0.0, NO_TIME)
        NumberColumn.__init__(self, name, field, where, params, window_ms)
        self.set_layout(&empty, sizeof(TwaState), False)

    cdef int add(self, Py_ssize_t slot, double x, int64_t now) except -1:
        cdef TwaState* s = (<TwaState*>self.buf) + slot
        cdef int64_t d
        if s.last_t != NO_TIME:
            d = now - s.last_t
            if d > 0:
                s.sum_vdt += s.last_v * <double>d
                s.sum_dt += <double>d
        s.last_v = x
        s.last_t = now  # also when the clock stepped back
        return 0

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        cdef TwaState* s = (<TwaState*>self.buf) + slot
        if s.last_t == NO_TIME:
            return VALUE_NULL
        out.f = s.last_v if s.sum_dt == 0.0 else s.sum_vdt / s.sum_dt
        return VALUE_FLOAT


COLUMNS = {
    "ewma": EwmaColumn,
    "ewvar": EwvarColumn,
    "ew_zscore": EwZscoreColumn,
    "decayed_sum": DecayedSumColumn,
    "decayed_count": DecayedCountColumn,
    "twa": TwaColumn,
}
