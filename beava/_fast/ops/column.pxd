# Shared interface of every feature state column (DESIGN.md §3).
from cpython.ref cimport PyObject
from libc.stdint cimport int64_t

from beava._fast.ops.row cimport Row
from beava._fast.wire.msgpack_out cimport Writer

cdef extern from *:
    # Ask for the cache line at an address ahead of its use (gcc/clang; a hint, never a
    # fault, whatever the address).
    void prefetch_line "__builtin_prefetch"(const void* p) noexcept nogil


# A feature value that is null, a bool or a number (or an object a column holds), as
# Column.number() gives it without a Python object: its kind, and a field of Number.
cdef enum:
    VALUE_OTHER = 0   # none of these: the column's read() gives the value
    VALUE_NULL = 1
    VALUE_BOOL = 2    # Number.i, 0 or 1
    VALUE_INT = 3     # Number.i
    VALUE_FLOAT = 4   # Number.f (a non-finite one reads as null once encoded)
    VALUE_OBJECT = 5  # Number.o, borrowed from the column, which holds it
    VALUE_UINT = 6    # Number.i's bits as an unsigned integer (a span of time past int64)


cdef struct Number:
    int64_t i
    double f
    PyObject* o


# A value of kind ``kind`` (not VALUE_OTHER) as read() gives it, and as the reply encoder
# writes it (column.pyx).
cdef object number_object(int kind, const Number* n)
cdef int put_number(Writer* out, int kind, const Number* n) except -1


# A row key as the push path looks rows up with it (column.pyx).
cpdef object row_key(object name)


cdef class Column:
    # The state of ONE feature for EVERY entity slot of a table, in typed buffers.
    cdef readonly str name        # feature name
    cdef readonly object field    # row key the op reads (str) or None
    cdef readonly object where    # compiled predicate (row -> bool) or None
    cdef readonly object window_ms  # int window length for windowed mode, None = lifetime
    cdef Py_ssize_t capacity      # slots [0, capacity) have storage
    cdef readonly bint takes_row  # update_row is implemented: it can be fed a C row

    # Grow storage so slots [0, capacity) exist; new slots are in the empty state.
    cdef int ensure(self, Py_ssize_t capacity) except -1
    # Put one slot back into the empty state (cold TTL reset, slot reuse).
    cdef int clear(self, Py_ssize_t slot) except -1
    # Apply one event: ``row`` is the post-chain row, ``matched`` the where verdict,
    # ``now`` the event's now_ms (never read the clock here).
    cdef int update(self, Py_ssize_t slot, dict row, bint matched, int64_t now) except -1
    # The same from a row without Python objects (row.pxd), for a column that
    # ``takes_row``: the state it leaves is the one update() leaves for the same event.
    cdef int update_row(self, Py_ssize_t slot, const Row* row, bint matched,
                        int64_t now) except -1
    # Before an update of an existing ``slot`` (the table calls it for every state column,
    # stage 0 then stage 1, so the cache misses of all its columns overlap): stage 0 asks
    # for the slot's cell, stage 1 for what the cell points to (it may read the cell), and
    # before a read of the slot by a scan, stage 2 for the objects that holds (a ring's
    # texts). Only hints: nothing changes. The default asks for nothing.
    cdef void prefetch(self, Py_ssize_t slot, int stage) noexcept
    # The feature value at query time ``T`` (JSON-ready Python value; the op's empty value
    # when the slot has no data). The default boxes number()'s value.
    cdef object read(self, Py_ssize_t slot, int64_t T)
    # The same value when it is null, a bool or a number (or an object the column holds),
    # without making one: its kind (VALUE_*), the value in ``out``. A column whose values
    # are of these kinds defines only this; the default, VALUE_OTHER, says read() gives it.
    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1
    # The same value appended to ``out`` as MessagePack, the bytes the reply encoder gives
    # read()'s value (msgpack_out.pyx); the default writes number()'s value, or encodes
    # read()'s. A column whose value is a big map or array writes it from its state.
    cdef int put_msgpack(self, Writer* out, Py_ssize_t slot, int64_t T) except -1
    # The same value for a JSON reply (encoded by msgspec): read()'s value, or, for a column
    # whose value is a big map it writes faster from its state, that value's JSON text as
    # msgspec.Raw (the bytes the encoder would give read()'s value).
    cdef object json_value(self, Py_ssize_t slot, int64_t T)
    # Snapshot support: the state of slots [0, nslots) as plain data (None, bool, int, float,
    # str, bytes, list, dict with str keys: values MessagePack encodes and decodes back to the
    # same thing; typed buffers as bytes, never tuples or other objects), and its inverse.
    # load() takes decoded snapshot data, which may be damaged or crafted: it checks types,
    # lengths and ranges before copying anything (snapshot_state.pxd) and raises ValueError
    # when the state cannot be this column's; the caller then discards the column.
    cpdef object dump(self, Py_ssize_t nslots)
    cpdef load(self, object state, Py_ssize_t nslots)
    # Parts of one table (a backfill from key-disjoint parts, TableKernel.absorb): move the
    # state of slots [0, n) of ``other``, a column of the same class built from the same
    # feature, into slots [offset, offset + n) of this one, which hold nothing. ``other`` is
    # discarded afterwards: it keeps nothing that its release would free twice.
    cdef int take_slots(self, Column other, Py_ssize_t offset, Py_ssize_t n) except -1
