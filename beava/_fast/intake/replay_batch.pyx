# cython: language_level=3, boundscheck=False, wraparound=False
"""A batch of history replayed in one C loop: the offline path's entry into the kernels.

The rows of one Arrow batch (read through the Arrow C data interface: any object with
``__arrow_c_array__``, no Arrow library needed here) are applied in their order. A row is
either an event (its code >= 0 names it): its JSON body decoded, checked by its event's
compiled checker exactly as a live push is, then fed to its route's tables with the clock
at the row's own time (what recovery does with a record's time, ``apply_records``); or a
read (code ``READ``): the row of its key in each table asked, as a GET at the row's time
answers it (nothing applied after the row's time exists yet, so the query time is the
row's time), each feature's value converted in C to its kind (one column per feature). A
read with code ``NO_READ`` (a null key or time) or a null key finds no row.

No LSN, count or WAL record is made: the batch builds state that no server serves. Dedupe
is not applied here either: the caller removes replays first, over the whole history.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.object cimport PyObject
from cpython.pycapsule cimport PyCapsule_GetPointer
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t
from libc.string cimport strcmp

from beava._fast.intake.intake cimport CheckerEntry, feed
from beava._fast.intake.push_check cimport EventChecker
from beava._fast.ops.slot_buffers cimport dict_get

READ = -1
NO_READ = -2

# what a feature's value is read as (beava.offline.FeatureInfo.kind)
KINDS = ("long", "double", "boolean", "string", "json")
cdef enum:
    LONG = 0
    DOUBLE = 1
    BOOLEAN = 2
    STRING = 3
    JSON = 4


cdef extern from *:
    """
    struct ArrowSchema {
        const char* format; const char* name; const char* metadata; int64_t flags;
        int64_t n_children; struct ArrowSchema** children; struct ArrowSchema* dictionary;
        void (*release)(struct ArrowSchema*); void* private_data;
    };
    struct ArrowArray {
        int64_t length; int64_t null_count; int64_t offset; int64_t n_buffers;
        int64_t n_children; const void** buffers; struct ArrowArray** children;
        struct ArrowArray* dictionary; void (*release)(struct ArrowArray*); void* private_data;
    };
    """
    struct ArrowSchema:
        const char* format
        int64_t n_children
        ArrowSchema** children
    struct ArrowArray:
        int64_t length
        int64_t null_count
        int64_t offset
        int64_t n_children
        const void** buffers
        ArrowArray** children


cdef struct Text:
    const char* data
    const int32_t* narrow   # offsets of utf8 / binary
    const int64_t* wide     # offsets of large_utf8 / large_binary
    const unsigned char* valid
    int64_t offset


cdef inline void text_of(ArrowSchema* schema, ArrowArray* array, Text* out,
                         str name) except *:
    cdef const char* fmt = schema.format
    out.valid = <const unsigned char*>array.buffers[0] if array.null_count != 0 else NULL
    out.offset = array.offset
    out.data = <const char*>array.buffers[2]
    out.narrow = NULL
    out.wide = NULL
    if strcmp(fmt, b"u") == 0 or strcmp(fmt, b"z") == 0:
        out.narrow = <const int32_t*>array.buffers[1]
    elif strcmp(fmt, b"U") == 0 or strcmp(fmt, b"Z") == 0:
        out.wide = <const int64_t*>array.buffers[1]
    else:
        raise TypeError(f"column {name} must be text (Arrow format {fmt.decode()!r})")


cdef inline bint text_at(const Text* text, Py_ssize_t i, const char** p,
                         Py_ssize_t* n) noexcept:
    """Row ``i``'s bytes; False when it is null."""
    cdef int64_t at = text.offset + i
    if text.valid != NULL and not (text.valid[at >> 3] >> (at & 7)) & 1:
        return False
    if text.narrow != NULL:
        p[0] = text.data + text.narrow[at]
        n[0] = text.narrow[at + 1] - text.narrow[at]
    else:
        p[0] = text.data + text.wide[at]
        n[0] = text.wide[at + 1] - text.wide[at]
    return True


cdef inline void expect(ArrowSchema* schema, int64_t index, const char* fmt,
                        str name) except *:
    if strcmp(schema.children[index].format, fmt) != 0:
        raise TypeError(f"column {name} must have Arrow format {fmt.decode()!r}, not "
                        f"{schema.children[index].format.decode()!r}")


cdef object as_kind(int kind, object value, object name, object encode_json):
    """A GET row's value of feature ``name`` as its kind: a long (an integral float is
    one), a double (an integer widened; a non-finite one is None, as GET's JSON has
    null), a boolean, a string, or a list / map / other value as GET's JSON text."""
    if value is None:
        return None
    cdef type kind_of = type(value)
    cdef double x
    if kind == LONG:
        if kind_of is int:
            return value
        if kind_of is float and value.is_integer():
            return int(value)
    elif kind == DOUBLE:
        if kind_of is float or kind_of is int or kind_of is bool:
            x = <double>value
            return x if x - x == 0.0 else None  # inf - inf and nan - nan are nan
    elif kind == BOOLEAN:
        if kind_of is bool:
            return value
    elif kind == STRING:
        if kind_of is str:
            return value
    else:
        return encode_json(value).decode()
    raise ValueError(f"feature {name}: value {value!r} is not a {KINDS[kind]}")


def replay_rows(object batch, dict routes, dict checkers, tuple names, object decode_json,
                list tables, object encode_json, list rows, list columns):
    """Apply the rows of ``batch`` in order: a struct of four columns, ``code`` (int32: the
    event's index in ``names``, or READ / NO_READ), ``time`` (int64, epoch ms), ``body``
    (text: the event's JSON body) and ``key`` (text: a read's canonical key).
    ``routes`` and ``checkers`` are the store's. ``tables``: ``(TableState, ((feature,
    kind index in KINDS), ...))`` per table read, whose features are ``columns`` in that
    order: each read appends its row index to ``rows`` and the value of each feature at
    the row's time to its column (None where the key has no row, for NO_READ and for a
    null key). Returns None, or ``(row index, event, time, error code)`` of the first
    event the server would refuse (nothing after it is applied); an event with a null
    time (None) is refused as ``null_time``."""
    schema_capsule, array_capsule = batch.__arrow_c_array__()
    cdef ArrowSchema* schema = <ArrowSchema*>PyCapsule_GetPointer(schema_capsule,
                                                                   b"arrow_schema")
    cdef ArrowArray* array = <ArrowArray*>PyCapsule_GetPointer(array_capsule, b"arrow_array")
    if schema.n_children != 4 or array.n_children != 4:
        raise TypeError("a replay batch has four columns: code, time, body, key")
    expect(schema, 0, b"i", "code")
    expect(schema, 1, b"l", "time")
    cdef ArrowArray* codes_array = array.children[0]
    cdef ArrowArray* times_array = array.children[1]
    if codes_array.null_count != 0:
        raise ValueError("column code holds a null")
    cdef const int32_t* codes = <const int32_t*>codes_array.buffers[1] + codes_array.offset
    cdef const int64_t* times = <const int64_t*>times_array.buffers[1] + times_array.offset
    cdef const unsigned char* time_valid = (
        <const unsigned char*>times_array.buffers[0] if times_array.null_count != 0 else NULL)
    cdef int64_t time_at = times_array.offset
    cdef Text body, key
    text_of(schema.children[2], array.children[2], &body, "body")
    text_of(schema.children[3], array.children[3], &key, "key")
    cdef Py_ssize_t i, n = array.length, count = len(names)
    cdef int32_t code, last = -1
    cdef int64_t now
    cdef const char* p
    cdef Py_ssize_t size
    cdef PyObject* found
    cdef EventChecker checker = None
    cdef tuple route = None
    cdef Py_ssize_t at, column
    for i in range(n):
        code = codes[i]
        if code < 0:
            rows.append(i)
            stored = None
            if code == READ and text_at(&key, i, &p, &size):
                stored = PyUnicode_DecodeUTF8(p, size, NULL)
            column = 0
            for table, features in tables:
                got = None if stored is None else table.row_json(stored, times[i])
                for feature, kind in features:
                    (<list>columns[column]).append(
                        None if got is None else
                        as_kind(kind, (<dict>got).get(feature), feature, encode_json))
                    column += 1
            continue
        if code >= count:
            raise ValueError(f"row {i}: event code {code} names no event")
        if time_valid != NULL:
            at = time_at + i
            if not (time_valid[at >> 3] >> (at & 7)) & 1:
                return i, names[code], None, "null_time"
        now = times[i]
        if code != last:
            last = code
            event = names[code]
            found = dict_get(checkers, event)
            checker = (<CheckerEntry?><object>found).checker if found is not NULL else None
            found = dict_get(routes, event)
            route = <tuple>found if found is not NULL else None
        if checker is None:
            return i, event, now, "event_not_found"
        if not text_at(&body, i, &p, &size):
            return i, event, now, "invalid_event"
        row = decode_json(PyBytes_FromStringAndSize(p, size))
        if type(row) is not dict:
            return i, event, now, "invalid_event"
        error = checker.check(<dict>row)
        if error is not None:
            return i, event, now, error
        if route is not None:
            feed(route, row, now)
    return None
