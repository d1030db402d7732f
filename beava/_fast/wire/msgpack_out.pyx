# cython: language_level=3
"""MessagePack written straight onto the end of a growing buffer: the read fast path writes a
feature row from its columns without building the row's Python objects first
(spec/wire.md §7, docs/architecture.md).

The bytes are the ones the reply encoder gives the same values (``messages.encode_msgpack``
after ``finite_or_none``): integers in their smallest form, floats as float64, a non-finite
float as nil, text as fixstr / str8 / str16 / str32, arrays and maps with the smallest
header. A value of any other type (a map, a tuple, an integer beyond int64) is handed to
that encoder and its bytes appended: a map's keys are sorted there, as in every reply.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from libc.math cimport isfinite
from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy

from beava._fast.wire.msgpack_bytes cimport INT_MAX_BYTES, big_endian, int_at

import msgspec

from beava._fast.wire.reply_values import finite_or_none


cdef extern from "Python.h":
    long long PyLong_AsLongLongAndOverflow(object o, int* overflow) except? -1
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL


cdef object _encode_sorted = msgspec.msgpack.Encoder(order="sorted").encode


DEF FIRST_CAP = 1024


cdef inline uint8_t* _room(Writer* out, Py_ssize_t n) except NULL:
    """``n`` more bytes at the end of ``out`` (the allocation at least doubles when it
    grows); where they begin."""
    cdef Py_ssize_t size = out.size
    cdef Py_ssize_t cap
    cdef char* grown
    if size + n > out.cap:
        cap = out.cap * 2 if out.cap else FIRST_CAP
        while cap < size + n:
            cap *= 2
        grown = <char*>realloc(out.data, cap)
        if grown == NULL:
            raise MemoryError()
        out.data = grown
        out.cap = cap
    out.size = size + n
    return <uint8_t*>out.data + size


cdef inline void _copy(uint8_t* p, const char* data, Py_ssize_t n) noexcept:
    """memcpy, with the short copies a row is made of (names, small texts) done as two
    fixed-size moves that may overlap, where a call into the C library costs more than
    the bytes."""
    if n > 32:
        memcpy(p, data, n)
    elif n >= 16:
        memcpy(p, data, 16)
        memcpy(p + n - 16, data + n - 16, 16)
    elif n >= 8:
        memcpy(p, data, 8)
        memcpy(p + n - 8, data + n - 8, 8)
    elif n >= 4:
        memcpy(p, data, 4)
        memcpy(p + n - 4, data + n - 4, 4)
    elif n > 0:
        p[0] = data[0]
        p[n >> 1] = data[n >> 1]
        p[n - 1] = data[n - 1]


cdef int reserve(Writer* out, Py_ssize_t n) except -1:
    cdef Py_ssize_t size = out.size
    _room(out, n)
    out.size = size
    return 0


cdef bytes as_bytes(Writer* out):
    return PyBytes_FromStringAndSize(out.data, out.size)


cdef void release(Writer* out) noexcept:
    free(out.data)
    out.data = NULL
    out.size = out.cap = 0


cdef inline int _tagged(Writer* out, uint8_t tag, uint64_t v, int nbytes) except -1:
    cdef uint8_t* p = _room(out, 1 + nbytes)
    p[0] = tag
    big_endian(p + 1, v, nbytes)
    return 0


cdef int put_nil(Writer* out) except -1:
    _room(out, 1)[0] = 0xc0
    return 0


cdef int put_int(Writer* out, int64_t v) except -1:
    out.size -= INT_MAX_BYTES - int_at(_room(out, INT_MAX_BYTES), v)
    return 0


cdef int put_bool(Writer* out, bint v) except -1:
    _room(out, 1)[0] = 0xc3 if v else 0xc2
    return 0


cdef int put_double(Writer* out, double x) except -1:
    cdef uint64_t bits
    if not isfinite(x):
        return put_nil(out)
    memcpy(&bits, &x, 8)
    return _tagged(out, 0xcb, bits, 8)


cdef int put_str(Writer* out, str s) except -1:
    cdef Py_ssize_t n
    cdef const char* text = PyUnicode_AsUTF8AndSize(s, &n)
    cdef uint8_t* p
    if n < 32:
        p = _room(out, 1 + n)
        p[0] = <uint8_t>(0xa0 | n)
        _copy(p + 1, text, n)
        return 0
    if n <= 0xff:
        _tagged(out, 0xd9, <uint64_t>n, 1)
    elif n <= 0xffff:
        _tagged(out, 0xda, <uint64_t>n, 2)
    else:
        _tagged(out, 0xdb, <uint64_t>n, 4)
    memcpy(_room(out, n), text, n)
    return 0


cdef inline int _header(Writer* out, uint8_t fix, uint8_t tag16, Py_ssize_t n) except -1:
    if n < 16:
        _room(out, 1)[0] = <uint8_t>(fix | n)
    elif n <= 0xffff:
        _tagged(out, tag16, <uint64_t>n, 2)
    else:
        _tagged(out, tag16 + 1, <uint64_t>n, 4)
    return 0


cdef int put_map_header(Writer* out, Py_ssize_t n) except -1:
    return _header(out, 0x80, 0xde, n)


cdef int put_array_header(Writer* out, Py_ssize_t n) except -1:
    return _header(out, 0x90, 0xdc, n)


cdef int put_raw(Writer* out, const char* data, Py_ssize_t n) except -1:
    """Append ``n`` bytes that are MessagePack already."""
    _copy(_room(out, n), data, n)
    return 0


cdef int put_value(Writer* out, object value) except -1:
    """Append ``value`` as the reply encoder would (module docstring)."""
    cdef int overflow
    cdef long long v
    cdef Py_ssize_t i, n
    cdef object kind = type(value)
    if value is None:
        return put_nil(out)
    if kind is bool:
        return put_bool(out, value is True)
    if kind is int:
        v = PyLong_AsLongLongAndOverflow(value, &overflow)
        if not overflow:
            return put_int(out, v)
    elif kind is float:
        return put_double(out, PyFloat_AS_DOUBLE(value))
    elif kind is str:
        return put_str(out, <str>value)
    elif kind is list:
        n = PyList_GET_SIZE(value)
        put_array_header(out, n)
        for i in range(n):
            put_value(out, <object>PyList_GET_ITEM(value, i))
        return 0
    cdef bytes encoded = _encode_sorted(finite_or_none(value))
    return put_raw(out, encoded, len(encoded))


DEF SPARE_MAX = 8 << 20  # the largest RowPage buffer kept for the next page

# The buffer of the last RowPage freed, kept for the next one: a page (a megabyte) is then
# written into memory already mapped, where a fresh allocation of that size is a new
# mapping whose every 4 KiB page faults on its first write.
cdef char* _spare = NULL
cdef Py_ssize_t _spare_cap = 0


cdef class RowPage:
    """Rows written one after another into one buffer, as a table scan writes a page
    (TableKernel.scan_rows): MessagePack maps, or JSON texts with a ``separator`` ","
    between two. No bytes object per row: the reply is made around them with one copy of
    their bytes (:meth:`joined`)."""

    def __cinit__(self, bytes separator=b""):
        global _spare
        if len(separator) > 1:
            raise ValueError("a row separator is one byte or none")
        self.separator = separator[0] if separator else 0
        if _spare != NULL:
            self.out.data = _spare
            self.out.cap = _spare_cap
            _spare = NULL

    def __dealloc__(self):
        global _spare, _spare_cap
        if _spare == NULL and self.out.cap <= SPARE_MAX:
            _spare = self.out.data
            _spare_cap = self.out.cap
        else:
            release(&self.out)
        PyMem_Free(self.ends)

    cdef int start_row(self) except -1:
        """A row is written next (after the separator, if it is not the first)."""
        if self.count and self.separator:
            _room(&self.out, 1)[0] = <uint8_t>self.separator
        return 0

    cdef int end_row(self) except -1:
        """The row written since the previous one (or the start) ends here."""
        cdef Py_ssize_t cap
        cdef Py_ssize_t* grown
        if self.count == self.ends_cap:
            cap = self.ends_cap * 2 if self.ends_cap else 256
            grown = <Py_ssize_t*>PyMem_Realloc(self.ends, cap * sizeof(Py_ssize_t))
            if grown == NULL:
                raise MemoryError()
            self.ends = grown
            self.ends_cap = cap
        self.ends[self.count] = self.out.size
        self.count += 1
        return 0

    def __len__(self) -> int:
        return self.count

    @property
    def nbytes(self) -> int:
        """Bytes of all the rows."""
        return self.out.size

    def rows(self) -> list:
        """Each row's bytes, in order (separators left out)."""
        cdef Py_ssize_t i, begin = 0
        out = []
        for i in range(self.count):
            out.append(PyBytes_FromStringAndSize(self.out.data + begin, self.ends[i] - begin))
            begin = self.ends[i] + (self.separator != 0)
        return out

    def joined(self, bytes head, bytes tail) -> bytes:
        """``head``, the rows, then ``tail``, as one bytes object."""
        cdef Py_ssize_t nhead = len(head), ntail = len(tail), n = self.out.size
        cdef bytes out = PyBytes_FromStringAndSize(NULL, nhead + n + ntail)
        cdef char* p = PyBytes_AS_STRING(out)
        memcpy(p, <const char*>head, nhead)
        if n:
            memcpy(p + nhead, self.out.data, n)
        memcpy(p + nhead + n, <const char*>tail, ntail)
        return out


def packb(value) -> bytes:
    """``value``'s bytes as :func:`put_value` appends them (Python-level access for tests)."""
    cdef Writer out = Writer(NULL, 0, 0)
    try:
        put_value(&out, value)
        return as_bytes(&out)
    finally:
        release(&out)
