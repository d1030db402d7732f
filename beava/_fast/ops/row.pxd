# A pushed event's row without Python objects: the push checks (push_check.pyx) fill it
# from a MessagePack body's bytes, and the tables whose columns can read it (TableKernel
# with ``takes_row``) are fed from it instead of a dict. Values are typed in place; text is
# a view of the body's bytes (printable ASCII: the checks leave any other text to the dict
# path), valid while the body is. A field is found by its name object: the interned
# declared names, the same objects the columns look dict rows up with.

from cpython.object cimport PyObject
from libc.stdint cimport int64_t, uint8_t
from libc.string cimport memcpy

from beava._fast.ops.key_map cimport text_key_hash

cdef extern from "Python.h":
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    void* PyUnicode_DATA(object o)


# RowField.tag
cdef enum:
    ROW_INT = 1     # i
    ROW_FLOAT = 2   # f (finite)
    ROW_BOOL = 3    # i: 0 or 1
    ROW_TEXT = 4    # text, size (printable ASCII)

cdef enum:
    ROW_FIELDS = 64         # fields of a row at most (push_check's MAX_RAW_NAMES)


ctypedef struct RowField:
    PyObject* name          # the declared name (interned str, borrowed from the checker)
    int tag
    int64_t i
    double f
    const char* text
    Py_ssize_t size
    Py_hash_t hash          # of ``text`` (key_map's text_key_hash), -1 until asked for


ctypedef struct Row:
    Py_ssize_t n            # fields [0, n), in the body's order
    RowField fields[ROW_FIELDS]


cdef inline const RowField* row_field(const Row* row, object name, uint8_t* guess) noexcept:
    """The field of ``row`` named ``name`` (compared by identity), or NULL when absent.
    ``guess``: the caller's memory of where the last row had it, tried first and updated."""
    cdef Py_ssize_t i = guess[0]
    cdef PyObject* wanted = <PyObject*>name
    if i < row.n and row.fields[i].name == wanted:
        return &row.fields[i]
    for i in range(row.n):
        if row.fields[i].name == wanted:
            guess[0] = <uint8_t>i
            return &row.fields[i]
    return NULL


cdef inline bint field_number(const RowField* f, double* x) noexcept:
    """True and the value as a double when ``f`` is an int or a float (a bool is not a
    number); False when absent (NULL) or of another type (row_number's rule)."""
    if f == NULL:
        return False
    if f.tag == ROW_FLOAT:
        x[0] = f.f
        return True
    if f.tag == ROW_INT:
        x[0] = <double>f.i
        return True
    return False


cdef inline Py_hash_t text_hash(RowField* f) noexcept:
    """The key map's hash of a text field's bytes (text_key_hash), computed once per row
    (every table keyed by the field shares it)."""
    if f.hash == -1:  # (a text hashing to -1 is hashed again each time it is asked)
        f.hash = text_key_hash(f.text, f.size)
    return f.hash


cdef inline object field_object(const RowField* f):
    """The value of ``f`` as the dict row holds it (an int, a float, True/False, a str):
    for a column that keeps the value itself. None when absent (NULL)."""
    if f == NULL:
        return None
    if f.tag == ROW_INT:
        return f.i
    if f.tag == ROW_FLOAT:
        return f.f
    if f.tag == ROW_BOOL:
        return f.i != 0
    text = PyUnicode_New(f.size, 127)  # printable ASCII
    memcpy(PyUnicode_DATA(text), f.text, f.size)
    return text
