# Text of numbers built in C without an intermediate str: a float as spec/operators.md §1
# writes it (keystr of group keys, entropy and bloom_member categories, sketch items), an
# integer in decimal (ack frames, JSON written from the columns).
from cpython.conversion cimport Py_DTSF_ADD_DOT_0, PyOS_double_to_string
from cpython.mem cimport PyMem_Free
from libc.math cimport isnan
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcpy, memmove, strlen


cdef inline Py_ssize_t repr_double(double x, bint debug, char* out) except -1:
    # Python ``repr(x)`` into ``out`` (>= 32 bytes); ``debug`` = Rust ``{:?}`` instead
    # (fmt_f64_debug: ``NaN``, exponent without ``+`` or leading zeros). Returns the length.
    cdef char* text
    cdef Py_ssize_t n, i, j
    if isnan(x):
        memcpy(out, b"NaN" if debug else b"nan", 3)
        return 3
    text = PyOS_double_to_string(x, b'r', 0, Py_DTSF_ADD_DOT_0, NULL)
    n = strlen(text)
    if n > 31:
        n = 31
    memcpy(out, text, n)
    PyMem_Free(text)
    if not debug:
        return n
    for i in range(n):
        if out[i] == b'e':
            j = i + 1
            if out[j] == b'-':
                j += 1
            # drop the '+' sign, then leading zeros of the exponent
            i = j
            while j < n and (out[j] == b'+' or (out[j] == b'0' and j + 1 < n)):
                j += 1
            memmove(out + i, out + j, n - j)
            return n - (j - i)
    return n


cdef inline Py_ssize_t uint_text(char* p, uint64_t v) noexcept nogil:
    """Decimal text of ``v`` at ``p`` (room for 20 bytes); returns its length."""
    cdef char tmp[24]
    cdef Py_ssize_t n = 0, i
    while True:
        tmp[n] = <char>(48 + v % 10)
        n += 1
        v //= 10
        if v == 0:
            break
    for i in range(n):
        p[i] = tmp[n - 1 - i]
    return n


cdef inline Py_ssize_t int_text(char* p, int64_t v) noexcept nogil:
    """Decimal text of ``v`` at ``p`` (room for 20 bytes); returns its length."""
    if v >= 0:
        return uint_text(p, <uint64_t>v)
    p[0] = b'-'
    return 1 + uint_text(p + 1, <uint64_t>0 - <uint64_t>v)
