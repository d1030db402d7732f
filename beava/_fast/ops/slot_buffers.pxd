# Typed per-slot storage shared by the state columns: growable C arrays, row values kept as
# (tag, 8-byte payload) instead of boxed objects, and lazily allocated value rings. Memory
# comes from PyMem_* (pymalloc packs small blocks without a per-block header).
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_CheckExact
from cpython.long cimport PyLong_AsDouble, PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.string cimport memcpy, memset

from beava._fast.ops.column cimport (
    VALUE_BOOL,
    VALUE_FLOAT,
    VALUE_INT,
    VALUE_NULL,
    VALUE_OBJECT,
    Number,
    number_object,
)
from beava._fast.ops.row cimport ROW_BOOL, ROW_FLOAT, ROW_INT, RowField, field_object
from beava._fast.ops.snapshot_state cimport (
    RECORD_HEADER,
    new_bytes,
    record_head,
    record_next,
    state_buffer,
    state_bytes,
    state_list,
)

# Tag of a stored row value ("inherits": ints stay ints, floats floats, bools bools).
cdef enum:
    TAG_EMPTY = 0
    TAG_INT = 1     # payload.i
    TAG_FLOAT = 2   # payload.f
    TAG_BOOL = 3    # payload.i is 0 or 1
    TAG_OBJ = 4     # payload.o holds one owned reference (str, or an int beyond 64 bits)

ctypedef union Payload:
    int64_t i
    double f
    PyObject* o

# Frees one per-slot block (NULL allowed): PyMem_Free, or an op's own release.
ctypedef void (*BlockRelease)(void* block) noexcept


cdef inline Py_ssize_t grown_capacity(Py_ssize_t current, Py_ssize_t requested) noexcept nogil:
    # Geometric growth (x1.5) so a table growing one slot at a time reallocates O(log n) times.
    cdef Py_ssize_t target = current + (current >> 1)
    if target < 8:
        target = 8
    return requested if requested > target else target


cdef inline void* grow_zeroed(void* buf, Py_ssize_t old_n, Py_ssize_t new_n,
                              size_t item) except NULL:
    # Reallocate a per-slot array to new_n items; the new tail is zero bytes.
    cdef void* p = PyMem_Realloc(buf, <size_t>new_n * item)
    if p == NULL:
        raise MemoryError()
    memset(<char*>p + <size_t>old_n * item, 0, <size_t>(new_n - old_n) * item)
    return p


cdef inline int64_t* grow_i64(int64_t* buf, Py_ssize_t old_n, Py_ssize_t new_n,
                              int64_t fill) except NULL:
    cdef int64_t* p = <int64_t*>PyMem_Realloc(buf, <size_t>new_n * sizeof(int64_t))
    cdef Py_ssize_t i
    if p == NULL:
        raise MemoryError()
    for i in range(old_n, new_n):
        p[i] = fill
    return p


cdef inline void release_blocks(void** blocks, Py_ssize_t n, BlockRelease release) noexcept:
    # Free the blocks of slots [0, n) and leave NULL in their place.
    cdef Py_ssize_t i
    for i in range(n):
        release(blocks[i])
        blocks[i] = NULL


cdef inline int check_dump_slots(Py_ssize_t nslots, Py_ssize_t capacity) except -1:
    # A snapshot can only cover slots that have storage.
    if nslots < 0 or nslots > capacity:
        raise ValueError(f"cannot dump {nslots} slots of a column with {capacity}")
    return 0


cdef inline bytes buffer_bytes(const void* buf, Py_ssize_t nbytes):
    if nbytes == 0:
        return b""
    return (<const char*>buf)[:nbytes]


cdef inline int load_bytes(void* buf, object data, Py_ssize_t nbytes) except -1:
    # Inverse of buffer_bytes: `data` must be bytes of exactly nbytes.
    cdef bytes raw = state_buffer(data, nbytes, "buffer")
    if nbytes:
        memcpy(buf, <const char*>raw, nbytes)
    return 0


# ---- row values ----------------------------------------------------------------------

cdef extern from "Python.h":
    # A borrowed value, NULL when absent: PyDict_GetItemWithError without Cython's error
    # check, for the dicts of the push path (rows, routes, checkers), whose keys are str and
    # whose lookups by str cannot fail. PyDict_GetItem would save and restore the exception
    # state around every lookup.
    PyObject* dict_get "PyDict_GetItemWithError"(object d, object key)


cdef inline PyObject* row_value(dict row, object field) noexcept:
    # The op's value in the post-chain row (borrowed); NULL when absent or null.
    cdef PyObject* p = dict_get(row, field)
    if p == <PyObject*>None:
        return NULL
    return p


cdef inline bint number_value(PyObject* v, double* x) except -1:
    # True and the value as a double when v is an I64 or F64 (a bool is not numeric);
    # False for NULL (absent), null and every other type.
    if v == NULL:
        return False
    if PyFloat_CheckExact(<object>v):
        x[0] = PyFloat_AS_DOUBLE(<object>v)
        return True
    if PyLong_CheckExact(<object>v):
        x[0] = PyLong_AsDouble(<object>v)
        return True
    return False


cdef inline bint row_number(dict row, object field, double* x) except -1:
    # number_value of the row's value under `field`.
    return number_value(dict_get(row, field), x)


# ---- tagged values -------------------------------------------------------------------


cdef inline uint8_t value_encode(object v, Payload* out) except 255:
    # v must not be None. Exact type checks: a bool is never an int here.
    cdef type t = type(v)
    cdef int overflow = 0
    if t is float:
        out.f = PyFloat_AS_DOUBLE(v)
        return TAG_FLOAT
    if t is int:
        out.i = PyLong_AsLongLongAndOverflow(v, &overflow)
        if overflow == 0:
            return TAG_INT
    elif t is bool:
        out.i = 1 if v is True else 0
        return TAG_BOOL
    Py_INCREF(v)
    out.o = <PyObject*>v
    return TAG_OBJ


cdef inline uint8_t event_encode(PyObject* v, const RowField* f, Payload* out) except 255:
    # The op's value in one event as a tagged value (one reference owned when TAG_OBJ):
    # from a dict row, v, its value (row_value: NULL when absent or null) and f NULL; from
    # a C row (row.pxd), f, its field (NULL when absent) and v NULL. TAG_EMPTY when none.
    # The C row's value is the dict row's: a number or a boolean in place, a text as the
    # str the dict row holds (printable ASCII; no int beyond 64 bits reaches a C row).
    if f == NULL:
        return TAG_EMPTY if v == NULL else value_encode(<object>v, out)
    if f.tag == ROW_INT:
        out.i = f.i
        return TAG_INT
    if f.tag == ROW_FLOAT:
        out.f = f.f
        return TAG_FLOAT
    if f.tag == ROW_BOOL:
        out.i = f.i
        return TAG_BOOL
    text = field_object(f)
    Py_INCREF(text)
    out.o = <PyObject*>text
    return TAG_OBJ


cdef inline int payload_number(uint8_t tag, Payload p, Number* out) noexcept:
    # value_decode's value as Column.number() gives it (a TAG_OBJ value borrowed)
    if tag == TAG_INT:
        out.i = p.i
        return VALUE_INT
    if tag == TAG_FLOAT:
        out.f = p.f
        return VALUE_FLOAT
    if tag == TAG_BOOL:
        out.i = p.i != 0
        return VALUE_BOOL
    if tag == TAG_OBJ:
        out.o = p.o
        return VALUE_OBJECT
    return VALUE_NULL


cdef inline object value_decode(uint8_t tag, Payload p):
    cdef Number n
    return number_object(payload_number(tag, p, &n), &n)


cdef inline void value_release(uint8_t tag, Payload p) noexcept:
    if tag == TAG_OBJ:
        Py_XDECREF(p.o)


# ---- rings ---------------------------------------------------------------------------
# A ring is one malloc'd block per slot holding at most `limit` entries: a RingHead, then
# the entries. It is created on the slot's first qualifying value and grown geometrically
# (2, 4, ...) up to `limit`; a full ring of the latest values overwrites entry
# seen % limit, the oldest.

ctypedef struct RingHead:
    int32_t cap     # entries allocated
    int32_t held    # entries in use: [0, held)
    int64_t seen    # values offered so far (ring write position, reservoir count)


cdef inline RingHead* ring_head_alloc(int32_t cap, size_t entry_bytes) except NULL:
    # An empty ring with room for `cap` entries of `entry_bytes` each.
    cdef RingHead* r = <RingHead*>PyMem_Malloc(sizeof(RingHead) + <size_t>cap * entry_bytes)
    if r == NULL:
        raise MemoryError()
    r.cap = cap
    r.held = 0
    r.seen = 0
    return r


cdef inline int32_t ring_next_cap(const RingHead* r, int32_t limit) noexcept nogil:
    # Capacity of a slot's first ring (r NULL) or of the next block of a full ring.
    cdef int32_t cap
    if r == NULL:
        return 2 if limit > 2 else limit
    cap = r.cap * 2
    return cap if cap < limit else limit


# ---- value rings ---------------------------------------------------------------------
# Entries are tagged row values: RingHead, then Payload[cap], then uint8 tags[cap].

ctypedef RingHead ValueRing


cdef inline Payload* ring_values(ValueRing* r) noexcept nogil:
    return <Payload*>(r + 1)


cdef inline uint8_t* ring_tags(ValueRing* r) noexcept nogil:
    return <uint8_t*>(ring_values(r) + r.cap)


cdef inline ValueRing* ring_alloc(int32_t cap) except NULL:
    return ring_head_alloc(cap, sizeof(Payload) + sizeof(uint8_t))


cdef inline ValueRing* ring_resize(ValueRing* r, int32_t cap) except NULL:
    # New block of `cap` entries (cap >= held) holding the same entries; frees the old one.
    cdef ValueRing* n = ring_alloc(cap)
    n.held = r.held
    n.seen = r.seen
    memcpy(ring_values(n), ring_values(r), <size_t>r.held * sizeof(Payload))
    memcpy(ring_tags(n), ring_tags(r), <size_t>r.held)
    PyMem_Free(r)
    return n


cdef inline ValueRing* ring_append_value(ValueRing* r, uint8_t tag, Payload v,
                                         int32_t limit) except NULL:
    # Append the tagged value (tag, v), taking its reference, at index held; r may be NULL.
    # Caller guarantees held < limit.
    if r == NULL or r.held == r.cap:
        try:
            r = (ring_alloc(ring_next_cap(NULL, limit)) if r == NULL
                 else ring_resize(r, ring_next_cap(r, limit)))
        except MemoryError:
            value_release(tag, v)  # not kept
            raise
    ring_tags(r)[r.held] = tag
    ring_values(r)[r.held] = v
    r.held += 1
    return r


cdef inline void ring_replace_value(ValueRing* r, int32_t i, uint8_t tag,
                                    Payload v) noexcept:
    # Overwrite entry i < held with the tagged value (tag, v), taking its reference.
    cdef uint8_t old_tag = ring_tags(r)[i]
    cdef Payload old = ring_values(r)[i]
    ring_tags(r)[i] = tag
    ring_values(r)[i] = v
    value_release(old_tag, old)


cdef inline object ring_get(ValueRing* r, int32_t i):
    return value_decode(ring_tags(r)[i], ring_values(r)[i])


cdef inline ValueRing* ring_push_latest(ValueRing* r, uint8_t tag, Payload v,
                                        int32_t limit) except NULL:
    # Keep the last `limit` (>= 1) values: append the tagged value (tag, v), taking its
    # reference, until full, then overwrite the oldest, which sits at seen % limit. r may be
    # NULL; returns the (possibly new) ring.
    if r == NULL or r.held < limit:
        r = ring_append_value(r, tag, v, limit)
    else:
        ring_replace_value(r, <int32_t>(r.seen % limit), tag, v)
    r.seen += 1
    return r


cdef inline list ring_oldest_to_newest(ValueRing* r, int32_t limit):
    # Entries of a ring filled by ring_push_latest, oldest first; [] for NULL.
    cdef int32_t start, k
    if r == NULL:
        return []
    if r.held < limit:
        return [ring_get(r, k) for k in range(r.held)]
    start = <int32_t>(r.seen % limit)
    return [ring_get(r, (start + k) % limit) for k in range(limit)]


cdef inline void ring_free(void* block) noexcept:
    # The BlockRelease of value rings: drops the held references, then the block.
    cdef ValueRing* r = <ValueRing*>block
    cdef int32_t i
    if r == NULL:
        return
    for i in range(r.held):
        value_release(ring_tags(r)[i], ring_values(r)[i])
    PyMem_Free(r)


cdef inline int32_t ring_cap_for(int64_t held, int32_t limit) noexcept nogil:
    # Capacity of a ring grown by ring_next_cap after `held` (1 <= held <= limit) appends.
    cdef int64_t cap = 2 if limit > 2 else limit
    while cap < held and cap < limit:
        cap = cap * 2 if cap * 2 < limit else limit
    return <int32_t>cap


# Snapshot of the value rings of slots [0, n): [records, objects]. The data of a slot's
# block record is [int64 seen][held payloads of 8 bytes][held tags]; a TAG_OBJ payload is
# zero and its value is the next item of `objects` (slot order, then entry order).

cdef inline list rings_dump(ValueRing** rings, Py_ssize_t n):
    cdef Py_ssize_t i, total = 0
    cdef int32_t k
    cdef ValueRing* r
    cdef Payload value
    cdef char* out
    cdef char* p
    cdef list objects = []
    for i in range(n):
        if rings[i] != NULL:
            total += RECORD_HEADER + sizeof(int64_t) + rings[i].held * (sizeof(Payload) + 1)
    records = new_bytes(total, &out)
    for i in range(n):
        r = rings[i]
        if r == NULL:
            continue
        p = record_head(out, i, sizeof(int64_t) + r.held * (sizeof(Payload) + 1))
        memcpy(p, &r.seen, sizeof(int64_t))
        p += sizeof(int64_t)
        for k in range(r.held):
            value = ring_values(r)[k]
            if ring_tags(r)[k] == TAG_OBJ:
                objects.append(<object>value.o)
                value.i = 0
            memcpy(p, &value, sizeof(Payload))
            p += sizeof(Payload)
        memcpy(p, ring_tags(r), r.held)
        out = p + r.held
    return [records, objects]


cdef inline int rings_load(ValueRing** rings, Py_ssize_t nslots, object state,
                           int32_t limit) except -1:
    # Inverse of rings_dump into slots [0, nslots), which must hold no ring. Every ring
    # holds 1 to `limit` values and has seen at least as many; on error the rings restored
    # so far stay in place, complete (the caller releases them).
    cdef list parts = state_list(state, 2, "value rings")
    cdef bytes records = state_bytes(parts[0], "value ring records")
    cdef list objects = state_list(parts[1], -1, "value ring objects")
    cdef const char* p = records
    cdef Py_ssize_t total = len(records), off = 0, n, held, k, used = 0
    cdef int64_t slot = -1, seen
    cdef const char* payloads
    cdef const uint8_t* tags
    cdef Payload value
    cdef ValueRing* r
    while off < total:
        off = record_next(p, total, off, slot, nslots, &slot, &n, "value rings")
        held = (n - <Py_ssize_t>sizeof(int64_t)) // <Py_ssize_t>(sizeof(Payload) + 1)
        if n != <Py_ssize_t>sizeof(int64_t) + held * <Py_ssize_t>(sizeof(Payload) + 1):
            raise ValueError(f"snapshot value ring of slot {slot}: {n} bytes")
        memcpy(&seen, p + off, sizeof(int64_t))
        if held < 1 or held > limit or seen < held:
            raise ValueError(f"snapshot value ring of slot {slot}: {held} values of at most "
                             f"{limit}, {seen} seen")
        payloads = p + off + sizeof(int64_t)
        tags = <const uint8_t*>(payloads + held * sizeof(Payload))
        r = ring_alloc(ring_cap_for(held, limit))
        r.seen = seen
        rings[slot] = r
        for k in range(held):
            memcpy(&value, payloads + k * sizeof(Payload), sizeof(Payload))
            if tags[k] == TAG_OBJ:
                if used >= len(objects) or objects[used] is None:
                    raise ValueError(f"snapshot value ring of slot {slot}: missing value")
                value.o = <PyObject*>objects[used]
                Py_INCREF(<object>value.o)
                used += 1
            elif tags[k] != TAG_INT and tags[k] != TAG_FLOAT and tags[k] != TAG_BOOL:
                raise ValueError(f"snapshot value ring of slot {slot}: tag {tags[k]}")
            ring_values(r)[k] = value
            ring_tags(r)[k] = tags[k]
            r.held = <int32_t>(k + 1)
        off += n
    if used != len(objects):
        raise ValueError("snapshot value rings: more values than object-tagged entries")
    return 0
