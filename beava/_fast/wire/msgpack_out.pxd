# MessagePack written straight onto the end of a growing C buffer (msgpack_out.pyx).
from libc.stdint cimport int64_t


cdef struct Writer:
    char* data      # malloc'd; NULL until the first byte
    Py_ssize_t size
    Py_ssize_t cap


cdef int put_nil(Writer* out) except -1
cdef int put_bool(Writer* out, bint v) except -1
cdef int put_int(Writer* out, int64_t v) except -1
cdef int put_double(Writer* out, double x) except -1
cdef int put_str(Writer* out, str s) except -1
cdef int put_map_header(Writer* out, Py_ssize_t n) except -1
cdef int put_array_header(Writer* out, Py_ssize_t n) except -1
cdef int put_raw(Writer* out, const char* data, Py_ssize_t n) except -1
cdef int put_value(Writer* out, object value) except -1
# Room for ``n`` more bytes without a further allocation (a writer about to take a page).
cdef int reserve(Writer* out, Py_ssize_t n) except -1
# The bytes written so far, copied into a bytes object.
cdef bytes as_bytes(Writer* out)
# Free the buffer (the writer is empty again); callers release in a finally clause.
cdef void release(Writer* out) noexcept


cdef class RowPage:
    # Rows written one after another into ``out`` (a table scan's page): the writer calls
    # start_row() before each and end_row() after it; the reply is made around them in one
    # copy. ``separator`` (0: none) goes between two rows (a JSON page's ",").
    cdef Writer out
    cdef Py_ssize_t* ends       # where each row ends in out.data
    cdef readonly Py_ssize_t count
    cdef Py_ssize_t ends_cap
    cdef char separator
    cdef int start_row(self) except -1
    cdef int end_row(self) except -1
