# Window bucket arithmetic (spec/operators.md §5), shared by every windowed column.
from libc.stdint cimport int64_t

cdef enum:
    MAX_BUCKETS = 64


cdef inline int64_t bucket_width(int64_t window_ms) noexcept nogil:
    # b = ceil(W / 64), without overflow for W up to 2^63 - 1
    return window_ms // MAX_BUCKETS + (1 if window_ms % MAX_BUCKETS else 0)


cdef inline int64_t floor_div(int64_t a, int64_t b) noexcept nogil:
    # floor(a / b) for either sign (cdivision truncates toward zero)
    cdef int64_t q = a // b
    if (a % b != 0) and ((a < 0) != (b < 0)):
        q -= 1
    return q


cdef inline int64_t bucket_epoch(int64_t now, int64_t width) noexcept nogil:
    # e = floor(now / b) * b, floor division also for negative now
    return floor_div(now, width) * width


cdef inline bint bucket_active(int64_t epoch, int64_t T, int64_t window_ms) noexcept nogil:
    # active iff 0 <= T - e < W
    cdef int64_t age = T - epoch
    return age >= 0 and age < window_ms


cdef inline bint bucket_expired(int64_t epoch, int64_t now, int64_t window_ms) noexcept nogil:
    # inactive at now and at every later T: e <= now - W (§5 lets such a bucket go)
    return now - epoch >= window_ms
