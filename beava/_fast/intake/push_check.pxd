# Compiled push checks of one event schema (push_check.pyx); the push pass calls check()
# without a Python-level call.

from libc.stdint cimport uint8_t, uint64_t

from beava._fast.intake.name_table cimport RawName
from beava._fast.ops.row cimport Row


# type codes of declared fields (EventChecker.declared; the offline replay reads them too)
cdef enum:
    T_ANY = 0       # bytes, datetime, json: any non-null value
    T_STR = 1
    T_NUM = 2       # i64, f64: int or float, never bool
    T_BOOL = 3

# flags of a declared name beside its type code (EventChecker.declared)
cdef enum:
    TYPE_BITS = 3
    REQUIRED = 4    # a required field
    CONTROL = 8     # the name holds a control character (pushing it is refused)


cdef class EventChecker:
    cdef dict declared      # every pushable name -> its type code and flags (push_check.pyx)
    cdef tuple required     # ((name, type code), ...)
    cdef tuple defaults     # ((name, value), ...)
    cdef bint changed       # the last accepted body was changed (a default, a widening)

    # Steps 3, 5 and 6 of spec/wire.md §6.2 on ``fields`` (defaults filled in, big integers
    # widened, in place): None when accepted, else the error code. ``changed`` says whether
    # an accepted body differs from what was pushed.
    cpdef object check(self, dict fields)

    # for check_msgpack: the declared names' UTF-8 bytes in an open-addressing table
    cdef tuple raw_names    # the bytes the table points into
    cdef RawName* table
    cdef Py_ssize_t mask    # table size - 1
    cdef uint64_t required_bits
    cdef uint64_t default_bits
    cdef bint takes_msgpack  # False: every body goes through check() (over 64 names)
    cdef tuple name_objects  # the declared names (interned str), by bit
    cdef uint8_t last_slots[64]  # table slots of the names of the last body read, by key

    # 1 when a MessagePack body (``n`` bytes at ``p``) is one that check() would accept
    # unchanged, read from its bytes without decoding it. 0 means "decode it and ask
    # check()": an error, a default to fill, a value to widen, or only something this scan
    # leaves to check() (nested values, nil, binary, non-ASCII text).
    cdef int check_msgpack(self, const char* p, Py_ssize_t n) except -1

    # The row of a body check_msgpack accepts, built in the same pass (None when it does
    # not): what msgspec decodes from it, its keys the interned declared names (the objects
    # the columns look them up with, so a lookup matches on identity).
    cdef dict row_msgpack(self, const char* p, Py_ssize_t n)

    # The same body's values in a C row (row.pxd; its text views into the body's bytes):
    # 1 when check_msgpack accepts it, 0 otherwise (``row`` then holds nothing of use).
    cdef int fill_row(self, const char* p, Py_ssize_t n, Row* row) except -1

    cdef const RawName* _name_at(self, const unsigned char* b, Py_ssize_t n, Py_ssize_t at,
                                 Py_ssize_t size, Py_ssize_t i) noexcept
    cdef object _settle(self, const char* p, Py_ssize_t n, bint build, Row* crow)
