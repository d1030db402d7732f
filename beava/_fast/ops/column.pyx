# cython: language_level=3
"""Base class of feature state columns; see column.pxd for the contract."""

from cpython.long cimport PyLong_FromUnsignedLongLong
from libc.stdint cimport int64_t, uint8_t, uint64_t

from beava._fast.ops.row cimport Row
from beava._fast.wire.msgpack_bytes cimport INT_MAX_BYTES, big_endian
from beava._fast.wire.msgpack_out cimport (
    Writer,
    put_bool,
    put_double,
    put_int,
    put_nil,
    put_raw,
    put_value,
)

from sys import intern


cdef object number_object(int kind, const Number* n):
    if kind == VALUE_INT:
        return n.i
    if kind == VALUE_FLOAT:
        return n.f
    if kind == VALUE_BOOL:
        return n.i != 0
    if kind == VALUE_OBJECT:
        return <object>n.o
    if kind == VALUE_UINT:
        return PyLong_FromUnsignedLongLong(<uint64_t>n.i)
    return None


cdef int put_number(Writer* out, int kind, const Number* n) except -1:
    cdef char room[INT_MAX_BYTES]
    cdef uint8_t* big
    if kind == VALUE_INT:
        return put_int(out, n.i)
    if kind == VALUE_FLOAT:
        return put_double(out, n.f)
    if kind == VALUE_BOOL:
        return put_bool(out, n.i != 0)
    if kind == VALUE_OBJECT:
        return put_value(out, <object>n.o)
    if kind == VALUE_UINT and n.i < 0:  # past int64: uint 64
        big = <uint8_t*>room
        big[0] = 0xcf
        big_endian(big + 1, <uint64_t>n.i, 8)
        return put_raw(out, room, 9)
    if kind == VALUE_UINT:
        return put_int(out, n.i)
    return put_nil(out)


cpdef object row_key(object name):
    """A row key the push path looks rows up with: a str interned, as the push checks key
    the rows they decode (so a lookup matches on identity); anything else as it is."""
    return intern(name) if type(name) is str else name


cdef class Column:
    def __init__(self, str name, object field, object where, dict params, object window_ms):
        self.name = name
        self.field = row_key(field)
        self.where = where
        self.window_ms = window_ms
        self.capacity = 0

    cdef int ensure(self, Py_ssize_t capacity) except -1:
        raise NotImplementedError(type(self).__name__)

    cdef int clear(self, Py_ssize_t slot) except -1:
        raise NotImplementedError(type(self).__name__)

    cdef int update(self, Py_ssize_t slot, dict row, bint matched, int64_t now) except -1:
        raise NotImplementedError(type(self).__name__)

    cdef int update_row(self, Py_ssize_t slot, const Row* row, bint matched,
                        int64_t now) except -1:
        raise NotImplementedError(type(self).__name__)

    cdef object read(self, Py_ssize_t slot, int64_t T):
        cdef Number n
        cdef int kind = self.number(slot, T, &n)
        if kind == VALUE_OTHER:
            raise NotImplementedError(type(self).__name__)
        return number_object(kind, &n)

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        return VALUE_OTHER

    cdef int put_msgpack(self, Writer* out, Py_ssize_t slot, int64_t T) except -1:
        cdef Number n
        cdef int kind = self.number(slot, T, &n)
        if kind == VALUE_OTHER:
            return put_value(out, self.read(slot, T))
        return put_number(out, kind, &n)

    cdef object json_value(self, Py_ssize_t slot, int64_t T):
        return self.read(slot, T)

    cdef void prefetch(self, Py_ssize_t slot, int stage) noexcept:
        pass

    cpdef object dump(self, Py_ssize_t nslots):
        raise NotImplementedError(type(self).__name__)

    cpdef load(self, object state, Py_ssize_t nslots):
        raise NotImplementedError(type(self).__name__)

    cdef int take_slots(self, Column other, Py_ssize_t offset, Py_ssize_t n) except -1:
        raise NotImplementedError(type(self).__name__)

    # Python-level access for tests and for the table layer (one call each, not per event).
    def py_ensure(self, Py_ssize_t capacity):
        self.ensure(capacity)

    def py_clear(self, Py_ssize_t slot):
        self.clear(slot)

    def py_update(self, Py_ssize_t slot, dict row, bint matched, int64_t now):
        self.update(slot, row, matched, now)

    def py_read(self, Py_ssize_t slot, int64_t T):
        return self.read(slot, T)
