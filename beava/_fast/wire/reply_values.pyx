# cython: language_level=3
"""Read replies' values before they are encoded as MessagePack (spec/wire.md §2.3).

MessagePack can carry NaN and infinities, JSON cannot; the reference answers ``null`` for a
non-finite float in either format, so a MessagePack reply's values are rewritten first. A
feature row is mostly finite: the rewrite copies only the containers that hold a non-finite
float and hands every other value back as it is (a row of histograms and maps costs one
walk, no copies).
"""

from cpython.dict cimport PyDict_Next, PyDict_SetItem
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject
from libc.math cimport isfinite


cdef extern from "Python.h":
    bint PyFloat_Check(object o)
    bint PyDict_Check(object o)
    bint PyList_Check(object o)


cpdef object finite_or_none(object value):
    """``value`` with every non-finite float, at any depth of maps and arrays, as None;
    ``value`` itself when it holds none."""
    if PyFloat_Check(value):
        return value if isfinite(PyFloat_AS_DOUBLE(value)) else None
    if PyDict_Check(value):
        return _dict(<dict>value)
    if PyList_Check(value):
        return _list(<list>value)
    return value


cdef object _dict(dict d):
    cdef Py_ssize_t pos = 0
    cdef PyObject* key
    cdef PyObject* item
    cdef bint changed = False
    while PyDict_Next(d, &pos, &key, &item):
        if finite_or_none(<object>item) is not <object>item:
            changed = True
            break
    if not changed:
        return d
    cdef dict copy = {}
    pos = 0
    while PyDict_Next(d, &pos, &key, &item):
        PyDict_SetItem(copy, <object>key, finite_or_none(<object>item))
    return copy


cdef object _list(list items):
    cdef Py_ssize_t i, n = PyList_GET_SIZE(items)
    cdef list copy = None
    for i in range(n):
        item = <object>PyList_GET_ITEM(items, i)
        if finite_or_none(item) is not item:
            copy = list(items)
            break
    if copy is None:
        return items
    for i in range(n):
        copy[i] = finite_or_none(copy[i])
    return copy
