# Compiled push checks of one event schema (push_check.pyx); the push pass calls check()
# without a Python-level call.

cdef class EventChecker:
    cdef dict declared      # every pushable name -> its type code and flags (push_check.pyx)
    cdef tuple required     # ((name, type code), ...)
    cdef tuple defaults     # ((name, value), ...)
    cdef bint changed       # the last accepted body was changed (a default, a widening)

    # Steps 3, 5 and 6 of spec/wire.md §6.2 on ``fields`` (defaults filled in, big integers
    # widened, in place): None when accepted, else the error code. ``changed`` says whether
    # an accepted body differs from what was pushed.
    cpdef object check(self, dict fields)
