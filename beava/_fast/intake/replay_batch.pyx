# cython: language_level=3, boundscheck=False, wraparound=False
"""A batch of history replayed in one C loop: the offline path's entry into the kernels.

The rows of one Arrow batch (read through the Arrow C data interface: any object with
``__arrow_c_array__``, no Arrow library needed here) are applied in their order. A row is
either an event (its code >= 0 names it): its fields read from typed value columns,
checked by its event's compiled checker exactly as a live push is, then fed to its route's
tables with the clock at the row's own time (what recovery does with a record's time,
``apply_records``); or a
read (code ``READ``): the row of its key in each table asked, as a GET at the row's time
answers it (nothing applied after the row's time exists yet, so the query time is the
row's time), each feature's value converted in C to its kind (one column per feature). A
read with code ``NO_READ`` (a null key or time) or a null key finds no row.

An event's fields are read straight from the Arrow buffers (the columns' types checked
once per batch). A row the checks would accept unchanged (every required field present
with a value of its type, no default to fill, text printable ASCII) becomes a C row
(beava._fast.ops.row) fed to a route whose tables all take one (``feed_row``), or a dict
row built from the same values otherwise; any other row is built as a dict and goes
through ``EventChecker.check``, which fills defaults or names the error, as a push's body
decoded from JSON would.

No LSN, count or WAL record is made: the batch builds state that no server serves. Dedupe
is not applied here either: the caller removes replays first, over the whole history.
"""

from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport PyObject
from cpython.pycapsule cimport PyCapsule_GetPointer
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.math cimport isfinite
from libc.stdint cimport int32_t, int64_t
from libc.string cimport strcmp

from beava._fast.intake.intake cimport CheckerEntry, feed, feed_row, takes_rows
from beava._fast.intake.push_check cimport (CONTROL, REQUIRED, T_ANY, T_BOOL, T_NUM, T_STR,
                                            TYPE_BITS, EventChecker)
from beava._fast.ops.row cimport (ROW_BOOL, ROW_FIELDS, ROW_FLOAT, ROW_INT, ROW_TEXT, Row,
                                  RowField, field_object)
from beava._fast.ops.slot_buffers cimport dict_get

from sys import intern

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


cdef inline bint is_set(const unsigned char* bits, int64_t at) noexcept:
    return (bits[at >> 3] >> (at & 7)) & 1


# what a value column holds (its Arrow format)
cdef enum:
    V_NULL = 0      # n: every value null
    V_INT = 1       # l: int64
    V_FLOAT = 2     # g: float64
    V_BOOL = 3      # b: bits
    V_TEXT = 4      # u, U: utf8


cdef struct Values:
    int kind
    const unsigned char* valid  # NULL: no null
    int64_t offset
    const void* data            # the values (ints, doubles, bits)
    Text text


cdef void values_of(ArrowSchema* schema, ArrowArray* array, Values* out,
                    Py_ssize_t index) except *:
    cdef const char* fmt = schema.format
    out.valid = <const unsigned char*>array.buffers[0] if array.null_count != 0 else NULL
    out.offset = array.offset
    if strcmp(fmt, b"n") == 0:
        out.kind = V_NULL
    elif strcmp(fmt, b"l") == 0:
        out.kind = V_INT
    elif strcmp(fmt, b"g") == 0:
        out.kind = V_FLOAT
    elif strcmp(fmt, b"b") == 0:
        out.kind = V_BOOL
    else:
        out.kind = V_TEXT
        text_of(schema, array, &out.text, f"{index} (a value column: int64, float64, "
                                          f"bool, text or null)")
        return
    if out.kind != V_NULL:
        out.data = array.buffers[1]


cdef struct Spec:
    Py_ssize_t column       # its value column (index into the batch's Values)
    PyObject* name          # the declared name, interned (borrowed from Plan.names)
    int code                # its type code and flags (EventChecker.declared)
    bint defaulted          # the server fills it in when absent


cdef class Plan:
    """How the rows of one event are read: its fields' columns and checks, its route."""
    cdef Spec* specs
    cdef Py_ssize_t n
    cdef tuple names        # keeps the names the specs point at
    cdef str event
    cdef EventChecker checker
    cdef tuple route        # None: the event feeds no table here
    cdef bint rows          # the route takes C rows
    cdef bint plain         # a row may be accepted unchanged (else: always check())

    def __dealloc__(self):
        PyMem_Free(self.specs)


cdef Plan plan_of(str event, tuple fields, dict checkers, dict routes, Py_ssize_t n_values):
    """The plan of ``event`` whose rows carry ``fields`` (``((value column, name), ...)``);
    None when the store does not declare the event."""
    cdef PyObject* found = dict_get(checkers, event)
    if found is NULL:
        return None
    cdef Plan plan = Plan()
    plan.event = event
    plan.checker = (<CheckerEntry?><object>found).checker
    found = dict_get(routes, event)
    plan.route = <tuple>found if found is not NULL else None
    plan.rows = plan.route is not None and takes_rows(plan.route)
    plan.names = tuple(intern(name) for _, name in fields)
    plan.n = len(fields)
    plan.specs = <Spec*>PyMem_Malloc(max(plan.n, 1) * sizeof(Spec))
    if plan.specs is NULL:
        raise MemoryError()
    cdef dict declared = plan.checker.declared
    defaulted = {name for name, _ in plan.checker.defaults}
    # a required or defaulted field without a column, an undeclared one or too many:
    # every row goes through check(), which refuses it or fills the default in
    plan.plain = (plan.n <= ROW_FIELDS and all(name in plan.names for name, _ in
                                               plan.checker.required)
                  and all(name in plan.names for name in defaulted))
    cdef Py_ssize_t s
    for s in range(plan.n):
        column = fields[s][0]
        if not 0 <= column < n_values:
            raise ValueError(f"event {event}: field {fields[s][1]!r} names value column "
                             f"{column}, which the batch does not have")
        name = plan.names[s]
        plan.specs[s].column = column
        plan.specs[s].name = <PyObject*>name
        plan.specs[s].code = declared.get(name, 0)
        plan.specs[s].defaulted = name in defaulted
        plan.plain = plan.plain and name in declared
    return plan


cdef inline bint takes(int code, int type_code) noexcept:
    """Whether a field of ``code`` takes a value of ``type_code`` as check() does (only a
    required field's type is checked)."""
    cdef int wanted = code & TYPE_BITS
    return not code & REQUIRED or wanted == type_code or wanted == T_ANY


cdef inline bint present(const Values* v, int64_t at) noexcept:
    return v.kind != V_NULL and (v.valid == NULL or is_set(v.valid, at))


cdef bint fill_row(Plan plan, const Values* values, Py_ssize_t i, Row* row) noexcept:
    """Row ``i`` of ``plan``'s event in ``row`` when check() would accept it unchanged;
    False otherwise (``row`` then holds nothing of use)."""
    cdef const Spec* spec
    cdef const Values* v
    cdef RowField* f
    cdef int64_t at
    cdef double x
    cdef const char* p = NULL
    cdef Py_ssize_t s, size = 0, k
    row.n = 0
    for s in range(plan.n):
        spec = &plan.specs[s]
        v = &values[spec.column]
        at = v.offset + i
        if not present(v, at):
            if spec.code & REQUIRED or spec.defaulted:
                return False
            continue
        if spec.code & CONTROL:
            return False
        f = &row.fields[row.n]
        if v.kind == V_INT:
            if not takes(spec.code, T_NUM):
                return False
            f.tag = ROW_INT
            f.i = (<const int64_t*>v.data)[at]
        elif v.kind == V_FLOAT:
            x = (<const double*>v.data)[at]
            if not isfinite(x) or not takes(spec.code, T_NUM):
                return False
            f.tag = ROW_FLOAT
            f.f = x
        elif v.kind == V_BOOL:
            if not takes(spec.code, T_BOOL):
                return False
            f.tag = ROW_BOOL
            f.i = is_set(<const unsigned char*>v.data, at)
        else:
            if not takes(spec.code, T_STR):
                return False
            text_at(&v.text, i, &p, &size)
            for k in range(size):  # printable ASCII (anything else: check() decides)
                if <unsigned char>p[k] < 0x20 or <unsigned char>p[k] >= 0x7f:
                    return False
            f.tag = ROW_TEXT
            f.text = p
            f.size = size
        f.name = spec.name
        f.hash = -1
        row.n += 1
    return True


cdef dict row_dict(Plan plan, const Values* values, Py_ssize_t i):
    """Row ``i`` of ``plan``'s event as a dict: what decoding its JSON body gives."""
    cdef dict row = {}
    cdef const Spec* spec
    cdef const Values* v
    cdef int64_t at
    cdef const char* p = NULL
    cdef Py_ssize_t s, size = 0
    for s in range(plan.n):
        spec = &plan.specs[s]
        v = &values[spec.column]
        at = v.offset + i
        if not present(v, at):
            continue
        if v.kind == V_INT:
            value = (<const int64_t*>v.data)[at]
        elif v.kind == V_FLOAT:
            value = (<const double*>v.data)[at]
        elif v.kind == V_BOOL:
            value = is_set(<const unsigned char*>v.data, at) == 1
        else:
            text_at(&v.text, i, &p, &size)
            value = PyUnicode_DecodeUTF8(p, size, NULL)
        row[<object>spec.name] = value
    return row


cdef dict dict_of_row(const Row* row):
    """The dict row of a C row (a route whose tables do not all take C rows)."""
    cdef dict out = {}
    cdef Py_ssize_t s
    for s in range(row.n):
        out[<object>row.fields[s].name] = field_object(&row.fields[s])
    return out


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


def replay_rows(object batch, dict routes, dict checkers, tuple names, tuple fields,
                list tables, object encode_json, list rows, list columns):
    """Apply the rows of ``batch`` in order: a struct of ``code`` (int32: the event's index
    in ``names``, or READ / NO_READ), ``time`` (int64, epoch ms), ``key`` (text: a read's
    canonical key), then value columns (int64, float64, bool, text, or null): ``fields``,
    by event code, gives the ``(value column, field name)`` pairs of the event's fields, a
    null value being an absent field (value column 0 is the batch's fourth column).
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
    if schema.n_children < 3 or array.n_children != schema.n_children:
        raise TypeError("a replay batch has the columns code, time, key, then its values")
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
    cdef Text key
    text_of(schema.children[2], array.children[2], &key, "key")
    cdef Py_ssize_t i, n = array.length, count = len(names), v
    cdef Py_ssize_t n_values = schema.n_children - 3
    if len(fields) != count:
        raise ValueError(f"fields gives {len(fields)} events' fields, names {count}")
    cdef Values* values = <Values*>PyMem_Malloc(max(n_values, 1) * sizeof(Values))
    if values is NULL:
        raise MemoryError()
    cdef list plans = [None] * count
    cdef int32_t code, last = -1
    cdef int64_t now
    cdef const char* p = NULL
    cdef Py_ssize_t size = 0
    cdef Plan plan = None
    cdef Row row
    cdef Py_ssize_t column
    try:
        for v in range(n_values):
            values_of(schema.children[3 + v], array.children[3 + v], &values[v], v)
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
            if time_valid != NULL and not is_set(time_valid, time_at + i):
                return i, names[code], None, "null_time"
            now = times[i]
            if code != last:
                last = code
                if plans[code] is None:
                    plans[code] = plan_of(names[code], tuple(fields[code]), checkers, routes,
                                          n_values)
                plan = plans[code]
            if plan is None:
                return i, names[code], now, "event_not_found"
            if plan.plain and fill_row(plan, values, i, &row):
                if plan.rows:
                    feed_row(plan.route, &row, now)
                elif plan.route is not None:
                    feed(plan.route, dict_of_row(&row), now)
                continue
            fields_of = row_dict(plan, values, i)
            error = plan.checker.check(fields_of)
            if error is not None:
                return i, plan.event, now, error
            if plan.route is not None:
                feed(plan.route, fields_of, now)
    finally:
        PyMem_Free(values)
    return None
