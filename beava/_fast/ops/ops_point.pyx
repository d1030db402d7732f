# cython: language_level=3
"""Family C of spec/operators.md §12: first, last, first_n, last_n, lag.

Lifetime-only columns whose values keep the row's type (an int stays an int, a float a float,
a str a str, a bool a bool). first/last hold one tagged value per slot (9 bytes, no boxed
object for numbers); the list ops hold a value ring per slot, allocated on the slot's first
qualifying value and grown geometrically up to the op's bound.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free
from cpython.ref cimport Py_INCREF, PyObject
from libc.stdint cimport int32_t, int64_t, uint8_t

from beava._fast.ops.column cimport VALUE_NULL, VALUE_OBJECT, Number, prefetch_line, put_number
from beava._fast.ops.row cimport Row, RowField, row_field
from beava._fast.wire.msgpack_out cimport Writer, put_array_header
from beava._fast.ops.op_params cimport bounded_n, lifetime_only
from beava._fast.ops.snapshot_state cimport state_buffer, state_list
from beava._fast.ops.slot_buffers cimport (
    TAG_EMPTY,
    TAG_OBJ,
    Payload,
    ValueRing,
    buffer_bytes,
    check_dump_slots,
    event_encode,
    grow_zeroed,
    grown_capacity,
    load_bytes,
    payload_number,
    release_blocks,
    ring_append_value,
    ring_free,
    ring_oldest_to_newest,
    ring_push_latest,
    ring_tags,
    ring_values,
    rings_dump,
    rings_load,
    row_value,
    value_release,
)


cdef inline void prefetch_object(PyObject* o) noexcept:
    # a value held as an object (a str): its header, and its text that follows
    prefetch_line(o)
    prefetch_line((<char*>o) + 64)


cdef class ValueColumn(Column):
    """One tagged value per slot (the base of first and last)."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        lifetime_only(type(self).__name__, window_ms)
        Column.__init__(self, name, field, where, params, window_ms)
        self.takes_row = True

    def __dealloc__(self):
        cdef Py_ssize_t i
        for i in range(self.capacity):
            value_release(self.tags[i], self.values[i])
        PyMem_Free(self.tags)
        PyMem_Free(self.values)

    cdef void prefetch(self, Py_ssize_t slot, int stage) noexcept:
        if stage == 0:
            prefetch_line(&self.tags[slot])
            prefetch_line(&self.values[slot])
        elif stage == 1 and self.tags[slot] == TAG_OBJ:
            prefetch_object(self.values[slot].o)

    cdef int ensure(self, Py_ssize_t capacity) except -1:
        cdef Py_ssize_t new
        if capacity <= self.capacity:
            return 0
        new = grown_capacity(self.capacity, capacity)
        self.tags = <uint8_t*>grow_zeroed(self.tags, self.capacity, new, sizeof(uint8_t))
        self.values = <Payload*>grow_zeroed(self.values, self.capacity, new, sizeof(Payload))
        self.capacity = new
        return 0

    cdef int clear(self, Py_ssize_t slot) except -1:
        value_release(self.tags[slot], self.values[slot])
        self.tags[slot] = TAG_EMPTY
        self.values[slot].i = 0
        return 0

    cdef int update(self, Py_ssize_t slot, dict row, bint matched, int64_t now) except -1:
        return self.offer(slot, row_value(row, self.field), NULL) if matched else 0

    cdef int update_row(self, Py_ssize_t slot, const Row* row, bint matched,
                        int64_t now) except -1:
        return self.offer(slot, NULL, row_field(row, self.field, &self.guess)) if matched else 0

    cdef int offer(self, Py_ssize_t slot, PyObject* v, const RowField* f) except -1:
        raise NotImplementedError(type(self).__name__)

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        return payload_number(self.tags[slot], self.values[slot], out)

    cdef int take_slots(self, Column other, Py_ssize_t offset, Py_ssize_t n) except -1:
        # an object payload's reference moves with it: the source slot is left empty
        cdef ValueColumn src = <ValueColumn>other
        cdef Py_ssize_t i
        self.ensure(offset + n)
        for i in range(n):
            self.tags[offset + i] = src.tags[i]
            self.values[offset + i] = src.values[i]
            src.tags[i] = TAG_EMPTY
        return 0

    cpdef object dump(self, Py_ssize_t nslots):
        # [tags, payloads, objects]: the payload of a TAG_OBJ slot is zero and its value is
        # the next item of `objects` (slot order).
        cdef bytes payloads
        cdef Payload* out
        cdef list objects = []
        cdef Py_ssize_t i
        check_dump_slots(nslots, self.capacity)
        payloads = PyBytes_FromStringAndSize(NULL, nslots * sizeof(Payload))
        out = <Payload*>PyBytes_AS_STRING(payloads)
        for i in range(nslots):
            out[i] = self.values[i]
            if self.tags[i] == TAG_OBJ:
                out[i].i = 0
                objects.append(<object>self.values[i].o)
        return [buffer_bytes(self.tags, nslots), payloads, objects]

    cpdef load(self, object state, Py_ssize_t nslots):
        cdef list parts = state_list(state, 3, "first/last state")
        cdef bytes tags = state_buffer(parts[0], nslots, "first/last tags")
        cdef bytes payloads = state_buffer(parts[1], nslots * sizeof(Payload),
                                           "first/last payloads")
        cdef list objects = state_list(parts[2], -1, "first/last objects")
        cdef const uint8_t* t = <const uint8_t*><const char*>tags
        cdef Py_ssize_t i, used = 0
        for i in range(nslots):
            if t[i] == TAG_OBJ:
                if used >= len(objects) or objects[used] is None:
                    raise ValueError(f"snapshot first/last: no value for slot {i}")
                used += 1
            elif t[i] > TAG_OBJ:
                raise ValueError(f"snapshot first/last: tag {t[i]} in slot {i}")
        if used != len(objects):
            raise ValueError("snapshot first/last: more values than object-tagged slots")
        self.ensure(nslots)
        for i in range(nslots):
            self.clear(i)
        load_bytes(self.tags, tags, nslots)
        load_bytes(self.values, payloads, nslots * sizeof(Payload))
        used = 0
        for i in range(nslots):
            if t[i] == TAG_OBJ:
                obj = objects[used]
                used += 1
                Py_INCREF(obj)
                self.values[i].o = <PyObject*>obj


cdef class FirstColumn(ValueColumn):
    """first (§12.1): the first matched non-null value."""

    cdef int offer(self, Py_ssize_t slot, PyObject* v, const RowField* f) except -1:
        if self.tags[slot] == TAG_EMPTY:
            self.tags[slot] = event_encode(v, f, self.values + slot)
        return 0


cdef class LastColumn(ValueColumn):
    """last (§12.2): the latest matched non-null value."""

    cdef int offer(self, Py_ssize_t slot, PyObject* v, const RowField* f) except -1:
        cdef Payload value
        cdef uint8_t tag = event_encode(v, f, &value)
        if tag != TAG_EMPTY:
            value_release(self.tags[slot], self.values[slot])
            self.tags[slot] = tag
            self.values[slot] = value
        return 0


cdef class RingColumn(BlockColumn):
    """A value ring per slot (lazily allocated) holding at most ``limit`` values."""

    def __cinit__(self, *args, **kwargs):
        self.release = ring_free

    cdef void prefetch(self, Py_ssize_t slot, int stage) noexcept:
        cdef ValueRing* r
        cdef int32_t i
        if stage < 2:
            BlockColumn.prefetch(self, slot, stage)
            return
        r = <ValueRing*>self.blocks[slot]
        if r != NULL and self.objects_read:
            for i in range(r.held):
                if ring_tags(r)[i] == TAG_OBJ:
                    prefetch_object(ring_values(r)[i].o)

    cdef int update(self, Py_ssize_t slot, dict row, bint matched, int64_t now) except -1:
        return self.offer(slot, row_value(row, self.field), NULL) if matched else 0

    cdef int update_row(self, Py_ssize_t slot, const Row* row, bint matched,
                        int64_t now) except -1:
        return self.offer(slot, NULL, row_field(row, self.field, &self.guess)) if matched else 0

    cdef int offer(self, Py_ssize_t slot, PyObject* v, const RowField* f) except -1:
        raise NotImplementedError(type(self).__name__)

    cdef int put_entries(self, Writer* out, ValueRing* r, int32_t first,
                         int32_t count) except -1:
        cdef int32_t k, i
        cdef int kind
        cdef Number n
        if r == NULL:
            return put_array_header(out, 0)
        put_array_header(out, count)
        for k in range(count):
            i = (first + k) % self.limit
            kind = payload_number(ring_tags(r)[i], ring_values(r)[i], &n)
            if kind == VALUE_OBJECT:
                self.objects_read = True
            put_number(out, kind, &n)
        return 0

    cdef int put_oldest_to_newest(self, Writer* out, Py_ssize_t slot) except -1:
        cdef ValueRing* r = <ValueRing*>self.blocks[slot]
        if r == NULL or r.held < self.limit:
            return self.put_entries(out, r, 0, 0 if r == NULL else r.held)
        return self.put_entries(out, r, <int32_t>(r.seen % self.limit), self.limit)

    cpdef object dump(self, Py_ssize_t nslots):
        check_dump_slots(nslots, self.capacity)
        return rings_dump(<ValueRing**>self.blocks, nslots)

    cpdef load(self, object state, Py_ssize_t nslots):
        self.ensure(nslots)
        release_blocks(self.blocks, nslots, self.release)
        try:
            rings_load(<ValueRing**>self.blocks, nslots, state, self.limit)
        except BaseException:
            release_blocks(self.blocks, nslots, self.release)
            raise


cdef class FirstNColumn(RingColumn):
    """first_n (§12.3): the first n matched non-null values, insertion order."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        lifetime_only("first_n", window_ms)
        Column.__init__(self, name, field, where, params, window_ms)
        self.limit = bounded_n("first_n", params)
        self.takes_row = True

    cdef int offer(self, Py_ssize_t slot, PyObject* v, const RowField* f) except -1:
        cdef ValueRing* r = <ValueRing*>self.blocks[slot]
        cdef Payload value
        cdef uint8_t tag
        if r != NULL and r.held == self.limit:
            return 0
        tag = event_encode(v, f, &value)
        if tag != TAG_EMPTY:
            r = ring_append_value(r, tag, value, self.limit)
            r.seen += 1
            self.blocks[slot] = r
        return 0

    cdef object read(self, Py_ssize_t slot, int64_t T):
        return ring_oldest_to_newest(<ValueRing*>self.blocks[slot], self.limit)

    cdef int put_msgpack(self, Writer* out, Py_ssize_t slot, int64_t T) except -1:
        return self.put_oldest_to_newest(out, slot)


cdef class LatestRingColumn(RingColumn):
    """The last ``limit`` matched non-null values, oldest -> newest (none when limit is 0)."""

    cdef int offer(self, Py_ssize_t slot, PyObject* v, const RowField* f) except -1:
        cdef Payload value
        cdef uint8_t tag
        if self.limit == 0:
            return 0
        tag = event_encode(v, f, &value)
        if tag != TAG_EMPTY:
            self.blocks[slot] = ring_push_latest(<ValueRing*>self.blocks[slot], tag, value,
                                                 self.limit)
        return 0


cdef class LastNColumn(LatestRingColumn):
    """last_n (§12.4): the last n matched non-null values, oldest -> newest."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        lifetime_only("last_n", window_ms)
        Column.__init__(self, name, field, where, params, window_ms)
        self.limit = bounded_n("last_n", params)
        self.takes_row = True

    # read and put_msgpack on the leaf classes, not LatestRingColumn: lag reads its ring
    # otherwise
    cdef object read(self, Py_ssize_t slot, int64_t T):
        return ring_oldest_to_newest(<ValueRing*>self.blocks[slot], self.limit)

    cdef int put_msgpack(self, Writer* out, Py_ssize_t slot, int64_t T) except -1:
        return self.put_oldest_to_newest(out, slot)


cdef class LagColumn(LatestRingColumn):
    """lag (§12.5): the value n qualifying events before the latest (ring of n + 1)."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        lifetime_only("lag", window_ms)
        Column.__init__(self, name, field, where, params, window_ms)
        self.limit = bounded_n("lag", params) + 1
        self.takes_row = True

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        cdef ValueRing* r = <ValueRing*>self.blocks[slot]
        cdef int32_t i
        if r == NULL or r.held < self.limit:
            return VALUE_NULL
        i = <int32_t>(r.seen % self.limit)
        return payload_number(ring_tags(r)[i], ring_values(r)[i], out)


COLUMNS = {
    "first": FirstColumn,
    "last": LastColumn,
    "first_n": FirstNColumn,
    "last_n": LastNColumn,
    "lag": LagColumn,
}
