# Accepted pushes per event of one registry version (push_counts.pyx); the intake
# increments ``values[index]`` in C.

from libc.stdint cimport int64_t

cdef class PushCounts:
    cdef int64_t* values    # one count per event, in ``names`` order
    cdef readonly tuple names
