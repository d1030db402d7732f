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
row's time), its entity's slot found from the key's bytes and each feature's value
written in C, as its kind, into the buffers of the feature's Arrow array (no Python object
for a null, bool or number: Column.number; other values as the column's JSON value). A
read with code ``NO_READ`` (a null key or time) or a null key finds no row.

An event's fields are read straight from the Arrow buffers (the columns' types checked
once per batch). A row the checks would accept unchanged (every required field present
with a value of its type, no default to fill, text printable ASCII) becomes a C row
(beava._fast.ops.row) fed to a route whose tables all take one (``feed_row``), or a dict
row built from the same values otherwise; any other row is built as a dict and goes
through ``EventChecker.check``, which fills defaults or names the error, as a push's body
decoded from JSON would.

Several stores may share one batch: given a mask column and a bit, a store applies and
reads only the rows whose mask has its bit (the others are skipped in the loop; no batch
is filtered or copied).

No LSN, count or WAL record is made: the batch builds state that no server serves. Dedupe
is not applied here either: the caller removes replays first, over the whole history.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.long cimport PyLong_AsLongLong
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport PyObject
from cpython.pycapsule cimport PyCapsule_GetPointer
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DecodeUTF8
from libc.math cimport isfinite
from libc.stdint cimport INT32_MAX, int32_t, int64_t, uint64_t
from libc.string cimport memset, strcmp

from beava._fast.intake.intake cimport CheckerEntry, feed, feed_row, takes_rows
from beava._fast.intake.push_check cimport (CONTROL, REQUIRED, T_ANY, T_BOOL, T_NUM, T_STR,
                                            TYPE_BITS, EventChecker)
from beava._fast.ops.column cimport (VALUE_BOOL, VALUE_FLOAT, VALUE_INT, VALUE_NULL,
                                     VALUE_OTHER, VALUE_UINT, Column, Number,
                                     number_object)
from beava._fast.ops.key_map cimport KeyMap, text_key_hash
from beava._fast.ops.row cimport (ROW_BOOL, ROW_FIELDS, ROW_FLOAT, ROW_INT, ROW_TEXT, Row,
                                  RowField, field_object)
from beava._fast.ops.slot_buffers cimport dict_get
from beava._fast.wire.msgpack_out cimport Writer, as_bytes, put_raw, release

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


cdef const int64_t* mask_of(ArrowSchema* schema, ArrowArray* array,
                            int64_t length) except NULL:
    """The values of a mask column (int64, no null, ``length`` rows)."""
    if strcmp(schema.format, b"l") != 0:
        raise TypeError(f"the mask must have Arrow format 'l', not "
                        f"{schema.format.decode()!r}")
    if array.length != length or array.null_count != 0:
        raise ValueError(f"the mask must hold {length} values and no null (it holds "
                         f"{array.length}, {array.null_count} null)")
    return <const int64_t*>array.buffers[1] + array.offset


# -- reads: each feature's values in the buffers of its Arrow array ----------------------


cdef struct Out:
    PyObject* column    # the feature's Column (borrowed: the caller's tables hold it)
    PyObject* name      # its name (borrowed), for errors
    int kind            # LONG ... JSON
    Writer valid        # Arrow validity bitmap
    Writer values       # int64 / float64 per row, bits (BOOLEAN), UTF-8 text (STRING, JSON)
    Writer offsets      # int32 per row and one more (STRING, JSON)
    Py_ssize_t nulls


cdef struct ReadTable:
    PyObject* keys      # the table's KeyMap (borrowed)
    Py_ssize_t first    # its features are outs[first:stop]
    Py_ssize_t stop


cdef int open_row(Out* out, Py_ssize_t row) except -1:
    """Start row ``row`` (rows come in order): each 8th takes a new byte of the bitmaps."""
    cdef char zero = 0
    if row & 7 == 0:
        put_raw(&out.valid, &zero, 1)
        if out.kind == BOOLEAN:
            put_raw(&out.values, &zero, 1)
    return 0


cdef inline void set_bit(Writer* bits, Py_ssize_t row) noexcept:
    bits.data[row >> 3] |= <char>(1 << (row & 7))


cdef int put_end(Out* out) except -1:
    """Close a text row: its end offset."""
    cdef int32_t end
    if out.values.size > INT32_MAX:
        raise ValueError(f"feature {<object>out.name}: over 2 GiB of text in one batch")
    end = <int32_t>out.values.size
    put_raw(&out.offsets, <const char*>&end, 4)
    return 0


cdef int put_null(Out* out, Py_ssize_t row) except -1:
    cdef int64_t zero = 0
    open_row(out, row)
    out.nulls += 1
    if out.kind == LONG or out.kind == DOUBLE:
        put_raw(&out.values, <const char*>&zero, 8)
    elif out.kind >= STRING:
        put_end(out)
    return 0


cdef int put_long(Out* out, Py_ssize_t row, int64_t v) except -1:
    open_row(out, row)
    set_bit(&out.valid, row)
    put_raw(&out.values, <const char*>&v, 8)
    return 0


cdef int put_double(Out* out, Py_ssize_t row, double x) except -1:
    """A double; a non-finite one is null, as GET's JSON has it."""
    if not isfinite(x):
        return put_null(out, row)
    open_row(out, row)
    set_bit(&out.valid, row)
    put_raw(&out.values, <const char*>&x, 8)
    return 0


cdef int put_bool(Out* out, Py_ssize_t row, bint b) except -1:
    open_row(out, row)
    set_bit(&out.valid, row)
    if b:
        set_bit(&out.values, row)
    return 0


cdef int put_text(Out* out, Py_ssize_t row, const char* p, Py_ssize_t n) except -1:
    open_row(out, row)
    set_bit(&out.valid, row)
    put_raw(&out.values, p, n)
    return put_end(out)


cdef int put_object(Out* out, Py_ssize_t row, object value, object encode_json) except -1:
    """A GET row's value as the feature's kind: a long (an integral float is one), a
    double (an integer widened), a boolean, a string, or a list / map / other value as
    GET's JSON text; ValueError for a value of another kind."""
    if value is None:
        return put_null(out, row)
    cdef type kind_of = type(value)
    cdef const char* p
    cdef Py_ssize_t n
    cdef int kind = out.kind
    if kind == LONG:
        if kind_of is int:
            return put_long(out, row, PyLong_AsLongLong(value))
        if kind_of is float and value.is_integer():
            return put_long(out, row, PyLong_AsLongLong(int(value)))
    elif kind == DOUBLE:
        if kind_of is float or kind_of is int or kind_of is bool:
            return put_double(out, row, <double>value)
    elif kind == BOOLEAN:
        if kind_of is bool:
            return put_bool(out, row, value is True)
    elif kind == STRING:
        if kind_of is str:
            p = PyUnicode_AsUTF8AndSize(value, &n)
            return put_text(out, row, p, n)
    else:
        text = encode_json(value)
        return put_text(out, row, PyBytes_AS_STRING(text), PyBytes_GET_SIZE(text))
    raise ValueError(f"feature {<object>out.name}: value {value!r} is not a {KINDS[kind]}")


cdef int put_feature(Out* out, Py_ssize_t row, Py_ssize_t slot, int64_t T,
                     object encode_json) except -1:
    """The feature's value at ``T`` in entity ``slot``, as a GET at ``T`` gives it: a
    null, bool or number from Column.number straight into the buffers when the kind takes
    it as it is; any other value through put_object (the same rules on the value)."""
    cdef Column column = <Column>out.column
    cdef Number n
    cdef int got = column.number(slot, T, &n)
    cdef int kind = out.kind
    if got == VALUE_NULL:
        return put_null(out, row)
    if got == VALUE_INT:
        if kind == LONG:
            return put_long(out, row, n.i)
        if kind == DOUBLE:
            return put_double(out, row, <double>n.i)
    elif got == VALUE_FLOAT:
        if kind == DOUBLE:
            return put_double(out, row, n.f)
    elif got == VALUE_BOOL:
        if kind == BOOLEAN:
            return put_bool(out, row, n.i != 0)
    elif got == VALUE_UINT:
        if kind == DOUBLE:
            return put_double(out, row, <double><uint64_t>n.i)
    if got == VALUE_OTHER:
        return put_object(out, row, column.json_value(slot, T), encode_json)
    return put_object(out, row, number_object(got, &n), encode_json)


cdef Py_ssize_t slot_of(KeyMap keys, const char* p, Py_ssize_t size) except -2:
    """The slot of the stored key given by its UTF-8 bytes; -1 when it has no row."""
    cdef Py_ssize_t k
    for k in range(size):
        if <unsigned char>p[k] >= 0x80:  # the map finds a non-ASCII key by its str
            return keys.lookup(PyUnicode_DecodeUTF8(p, size, NULL))
    return keys.lookup_text(p, size, text_key_hash(p, size))


cdef tuple arrow_buffers(Out* out):
    """``(validity bitmap, values, offsets or None, null count)`` of a feature's array."""
    return (as_bytes(&out.valid), as_bytes(&out.values),
            as_bytes(&out.offsets) if out.kind >= STRING else None, out.nulls)


def replay_rows(object batch, dict routes, dict checkers, tuple names, tuple fields,
                list tables, object encode_json, list rows, list columns,
                object mask=None, int bit=0):
    """Apply the rows of ``batch`` in order: a struct of ``code`` (int32: the event's index
    in ``names``, or READ / NO_READ), ``time`` (int64, epoch ms), ``key`` (text: a read's
    canonical key), then value columns (int64, float64, bool, text, or null): ``fields``,
    by event code, gives the ``(value column, field name)`` pairs of the event's fields, a
    null value being an absent field (value column 0 is the batch's fourth column).
    ``routes`` and ``checkers`` are the store's. ``tables``: ``(KeyMap, ((feature name,
    Column, kind index in KINDS), ...))`` per table read: each read appends its row index
    to ``rows`` and the value of each feature at the row's time to the feature's Arrow
    buffers (null where the key has no row, for NO_READ and for a null key). Returns None,
    having appended to ``columns``, per feature (tables in order), ``(validity bitmap,
    values, offsets or None, null count)`` of its Arrow array (int64, float64, bool, or
    utf8 for string and json), or ``(row index, event, time, error code)`` of the first
    event the server would refuse (nothing after it is applied); an event with a null
    time (None) is refused as ``null_time``. ``mask`` (an int64 Arrow array as long as
    the batch, no null) with ``bit``: only the rows whose mask has that bit set are this
    store's; the others are skipped (several stores share a batch)."""
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
    cdef const int64_t* selected = NULL
    cdef int64_t wanted = 0
    if mask is not None:
        if not 0 <= bit < 64:
            raise ValueError(f"bit {bit} is not a bit of a 64-bit mask")
        mask_schema, mask_array = mask.__arrow_c_array__()
        selected = mask_of(<ArrowSchema*>PyCapsule_GetPointer(mask_schema, b"arrow_schema"),
                           <ArrowArray*>PyCapsule_GetPointer(mask_array, b"arrow_array"), n)
        wanted = (<int64_t>1) << bit
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
    cdef Py_ssize_t n_tables = len(tables), n_outs = 0, n_read = 0, t, o, slot
    cdef bint found
    cdef int32_t zero = 0
    cdef ReadTable* reads = <ReadTable*>PyMem_Malloc(max(n_tables, 1) * sizeof(ReadTable))
    for _, features in tables:
        n_outs += len(features)
    cdef Out* outs = <Out*>PyMem_Malloc(max(n_outs, 1) * sizeof(Out))
    if reads is NULL or outs is NULL:
        PyMem_Free(values)
        PyMem_Free(reads)
        PyMem_Free(outs)
        raise MemoryError()
    memset(outs, 0, max(n_outs, 1) * sizeof(Out))
    try:
        for v in range(n_values):
            values_of(schema.children[3 + v], array.children[3 + v], &values[v], v)
        o = 0
        for t in range(n_tables):
            keys, features = tables[t]
            reads[t].keys = <PyObject*><KeyMap?>keys
            reads[t].first = o
            for name, column, kind in features:
                if not 0 <= kind < len(KINDS):
                    raise ValueError(f"feature {name}: kind {kind} is not in KINDS")
                outs[o].column = <PyObject*><Column?>column
                outs[o].name = <PyObject*>name
                outs[o].kind = kind
                if kind >= STRING:
                    put_raw(&outs[o].offsets, <const char*>&zero, 4)
                o += 1
            reads[t].stop = o
        for i in range(n):
            if selected != NULL and not selected[i] & wanted:
                continue
            code = codes[i]
            if code < 0:
                rows.append(i)
                found = code == READ and text_at(&key, i, &p, &size)
                for t in range(n_tables):
                    slot = slot_of(<KeyMap>reads[t].keys, p, size) if found else -1
                    for o in range(reads[t].first, reads[t].stop):
                        if slot < 0:
                            put_null(&outs[o], n_read)
                        else:
                            put_feature(&outs[o], n_read, slot, times[i], encode_json)
                n_read += 1
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
        for o in range(n_outs):
            columns.append(arrow_buffers(&outs[o]))
    finally:
        PyMem_Free(values)
        for o in range(n_outs):
            release(&outs[o].valid)
            release(&outs[o].values)
            release(&outs[o].offsets)
        PyMem_Free(reads)
        PyMem_Free(outs)
    return None
