# Checks of op params shared by the column constructors (params arrive resolved by the
# operator catalogue; these guard the column against a spec that bypassed it).
from libc.stdint cimport int32_t

cdef enum:
    MAX_N = 1024    # bound of the `n` param of first_n, last_n, lag, time_since_last_n


cdef inline int lifetime_only(str op, object window_ms) except -1:
    if window_ms is not None:
        raise ValueError(f"{op} is lifetime-only, got window_ms={window_ms!r}")
    return 0


cdef inline int32_t bounded_n(str op, dict params) except -1:
    # The `n` param, an integer in [1, MAX_N].
    n = params.get("n")
    if type(n) is not int or not 1 <= n <= MAX_N:
        raise ValueError(f"{op}: n must be an integer in [1, {MAX_N}], got {n!r}")
    return n
