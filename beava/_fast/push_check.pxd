# Compiled push checks of one event schema (push_check.pyx); the push pass calls check()
# without a Python-level call.

cdef class EventChecker:
    cdef dict declared      # every pushable name -> True
    cdef tuple required     # ((name, type code), ...)
    cdef tuple defaults     # ((name, value), ...)

    # Steps 3, 5 and 6 of spec/wire.md §6.2 on ``fields`` (defaults filled in, big integers
    # widened, in place): None when accepted, else the error code.
    cpdef object check(self, dict fields)
