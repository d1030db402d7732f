# The clocks read in C on the hot path (no Python call).

from libc.stdint cimport int64_t


cdef extern from "<time.h>" nogil:
    ctypedef long time_t
    struct timespec:
        time_t tv_sec
        long tv_nsec
    int clock_gettime(int clk_id, timespec* tp)
    int CLOCK_REALTIME
    int CLOCK_MONOTONIC


cdef inline int64_t wall_ms() noexcept nogil:
    """time.time_ns() // 1_000_000, without the call."""
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000


cdef inline double monotonic() noexcept nogil:
    """time.perf_counter() (CLOCK_MONOTONIC on Linux), without the call."""
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <double>ts.tv_sec + <double>ts.tv_nsec * 1e-9
