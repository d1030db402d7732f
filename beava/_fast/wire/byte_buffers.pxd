# Growing a bytearray that is appended to many times (the pending WAL batch, a run's ack
# frames).

from cpython.bytearray cimport PyByteArray_Resize


cdef extern from "Python.h":
    ctypedef struct PyByteArrayObject:
        Py_ssize_t ob_alloc  # bytes allocated, the trailing NUL included


cdef inline int resize_growing(bytearray buf, Py_ssize_t size) except -1:
    """Resize ``buf`` to ``size`` bytes; when that outgrows its allocation, at least double
    the allocation (PyByteArray_Resize alone grows by an eighth, or to the exact size for an
    append over an eighth of the buffer: a realloc, and a copy, every few appends)."""
    cdef Py_ssize_t alloc = (<PyByteArrayObject*>buf).ob_alloc
    if alloc <= size < 2 * alloc:
        # to twice the allocation, then down to ``size``: over half of it, which keeps it
        PyByteArray_Resize(buf, 2 * alloc)
    PyByteArray_Resize(buf, size)
    return 0
