# cython: language_level=3
"""Family D of spec/operators.md §13: recency and streaks.

All fieldless and lifetime. State is a few int64 words per slot in one typed buffer (has_seen:
one byte); time_since_last_n keeps a ring of event times per slot, allocated on the slot's
first matched event. Times are the events' ``now`` in arrival order (a clock step back is
not reordered); elapsed-time reads clamp at 0. No op reads a field of the row: a C row's
event (update_row) is update()'s without a row.
"""

from cpython.mem cimport PyMem_Free, PyMem_Realloc
from libc.stdint cimport INT64_MIN, int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memcpy, memset

from beava._fast.ops.block_column cimport BlockColumn
from beava._fast.ops.column cimport (
    VALUE_BOOL,
    VALUE_INT,
    VALUE_NULL,
    VALUE_UINT,
    Column,
    Number,
    prefetch_line,
)
from beava._fast.ops.op_params cimport bounded_n, lifetime_only
from beava._fast.ops.row cimport Row
from beava._fast.ops.slot_buffers cimport (
    RingHead,
    buffer_bytes,
    check_dump_slots,
    grow_i64,
    grow_zeroed,
    grown_capacity,
    load_bytes,
    ring_cap_for,
    ring_head_alloc,
    ring_next_cap,
)

# "No matched event yet" marker of the time columns; a wall clock never yields it.
cdef int64_t NO_TIME = INT64_MIN


cdef inline int elapsed(int64_t T, int64_t t, Number* out) noexcept:
    # max(0, T - t) without int64 overflow, as Column.number() gives it.
    out.i = <int64_t>(<uint64_t>T - <uint64_t>t) if T > t else 0
    return VALUE_UINT


cdef inline int elapsed_or_null(int64_t T, int64_t t, Number* out) noexcept:
    # elapsed(T, t), null while the slot holds no time.
    return VALUE_NULL if t == NO_TIME else elapsed(T, t, out)


cdef class WordsColumn(Column):
    """``width`` int64 words per slot in one buffer; new and cleared slots hold ``fill``."""

    cdef int64_t* words
    cdef Py_ssize_t width
    cdef int64_t fill

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        lifetime_only(type(self).__name__, window_ms)
        Column.__init__(self, name, field, where, params, window_ms)
        self.width = 1
        self.takes_row = True

    def __dealloc__(self):
        PyMem_Free(self.words)

    cdef int ensure(self, Py_ssize_t capacity) except -1:
        cdef Py_ssize_t new
        if capacity <= self.capacity:
            return 0
        new = grown_capacity(self.capacity, capacity)
        self.words = grow_i64(self.words, self.capacity * self.width, new * self.width,
                              self.fill)
        self.capacity = new
        return 0

    cdef int update_row(self, Py_ssize_t slot, const Row* row, bint matched,
                        int64_t now) except -1:
        return self.update(slot, None, matched, now)

    cdef void prefetch(self, Py_ssize_t slot, int stage) noexcept:
        if stage == 0:
            prefetch_line(&self.words[slot * self.width])

    cdef int clear(self, Py_ssize_t slot) except -1:
        cdef Py_ssize_t i
        for i in range(slot * self.width, (slot + 1) * self.width):
            self.words[i] = self.fill
        return 0

    cpdef object dump(self, Py_ssize_t nslots):
        check_dump_slots(nslots, self.capacity)
        return buffer_bytes(self.words, nslots * self.width * sizeof(int64_t))

    cpdef load(self, object state, Py_ssize_t nslots):
        self.ensure(nslots)
        load_bytes(self.words, state, nslots * self.width * sizeof(int64_t))

    cdef int take_slots(self, Column other, Py_ssize_t offset, Py_ssize_t n) except -1:
        self.ensure(offset + n)
        if n:
            memcpy(self.words + offset * self.width, (<WordsColumn>other).words,
                   n * self.width * sizeof(int64_t))
        return 0


cdef class TimeColumn(WordsColumn):
    """One event time per slot (``NO_TIME`` until set); reads it, or null."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        WordsColumn.__init__(self, name, field, where, params, window_ms)
        self.fill = NO_TIME

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        out.i = self.words[slot]
        return VALUE_NULL if out.i == NO_TIME else VALUE_INT


cdef class FirstSeenColumn(TimeColumn):
    """first_seen: ``now`` of the first matched event (epoch ms) or null."""

    cdef int update(self, Py_ssize_t slot, dict row, bint matched, int64_t now) except -1:
        if matched and self.words[slot] == NO_TIME:
            self.words[slot] = now
        return 0


cdef class AgeColumn(FirstSeenColumn):
    """age: max(0, T - first_seen) in ms, or null."""

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        return elapsed_or_null(T, self.words[slot], out)


cdef class LastSeenColumn(TimeColumn):
    """last_seen: ``now`` of the latest matched event (epoch ms) or null."""

    cdef int update(self, Py_ssize_t slot, dict row, bint matched, int64_t now) except -1:
        if matched:
            self.words[slot] = now
        return 0


cdef class TimeSinceColumn(LastSeenColumn):
    """time_since: max(0, T - last_seen) in ms, or null."""

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        return elapsed_or_null(T, self.words[slot], out)


cdef class FirstSeenInWindowColumn(LastSeenColumn):
    """first_seen_in_window: whether the LATEST match satisfies 0 <= T - last_ms < W."""

    cdef uint64_t window

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        LastSeenColumn.__init__(self, name, field, where, params, window_ms)
        w = params.get("window")
        if type(w) is not int or w < 0:
            raise ValueError(f"first_seen_in_window: window must be ms >= 0, got {w!r}")
        self.window = w

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        cdef int64_t t = self.words[slot]
        out.i = t != NO_TIME and T >= t and <uint64_t>T - <uint64_t>t < self.window
        return VALUE_BOOL


cdef class StreakColumn(WordsColumn):
    """streak: consecutive matched events up to now (an unmatched event resets it)."""

    cdef int update(self, Py_ssize_t slot, dict row, bint matched, int64_t now) except -1:
        if matched:
            self.words[slot] += 1
        else:
            self.words[slot] = 0
        return 0

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        out.i = self.words[slot]
        return VALUE_INT


cdef class MaxStreakColumn(WordsColumn):
    """max_streak: the longest run of matched events; words = (current run, best run)."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        WordsColumn.__init__(self, name, field, where, params, window_ms)
        self.width = 2

    cdef int update(self, Py_ssize_t slot, dict row, bint matched, int64_t now) except -1:
        cdef int64_t* w = self.words + 2 * slot
        if matched:
            w[0] += 1
            if w[0] > w[1]:
                w[1] = w[0]
        else:
            w[0] = 0
        return 0

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        out.i = self.words[2 * slot + 1]
        return VALUE_INT


cdef class NegativeStreakColumn(WordsColumn):
    """negative_streak: consecutive unmatched events up to now."""

    cdef int update(self, Py_ssize_t slot, dict row, bint matched, int64_t now) except -1:
        if matched:
            self.words[slot] = 0
        else:
            self.words[slot] += 1
        return 0

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        out.i = self.words[slot]
        return VALUE_INT


cdef class HasSeenColumn(Column):
    """has_seen: one byte per slot, set by the first matched event."""

    cdef uint8_t* flags

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        lifetime_only("has_seen", window_ms)
        Column.__init__(self, name, field, where, params, window_ms)
        self.takes_row = True

    def __dealloc__(self):
        PyMem_Free(self.flags)

    cdef int ensure(self, Py_ssize_t capacity) except -1:
        cdef Py_ssize_t new
        if capacity <= self.capacity:
            return 0
        new = grown_capacity(self.capacity, capacity)
        self.flags = <uint8_t*>grow_zeroed(self.flags, self.capacity, new, sizeof(uint8_t))
        self.capacity = new
        return 0

    cdef int clear(self, Py_ssize_t slot) except -1:
        self.flags[slot] = 0
        return 0

    cdef int update(self, Py_ssize_t slot, dict row, bint matched, int64_t now) except -1:
        if matched:
            self.flags[slot] = 1
        return 0

    cdef int update_row(self, Py_ssize_t slot, const Row* row, bint matched,
                        int64_t now) except -1:
        return self.update(slot, None, matched, now)

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        out.i = self.flags[slot] != 0
        return VALUE_BOOL

    cpdef object dump(self, Py_ssize_t nslots):
        check_dump_slots(nslots, self.capacity)
        return buffer_bytes(self.flags, nslots)

    cpdef load(self, object state, Py_ssize_t nslots):
        self.ensure(nslots)
        load_bytes(self.flags, state, nslots)

    cdef int take_slots(self, Column other, Py_ssize_t offset, Py_ssize_t n) except -1:
        self.ensure(offset + n)
        if n:
            memcpy(self.flags + offset, (<HasSeenColumn>other).flags, n)
        return 0


# A ring of the last n matched times of one slot: RingHead, then int64 times[cap]. It
# grows 2, 4, ... up to n, so a slot with two events holds two times.
ctypedef RingHead TimeRing


cdef inline int64_t* ring_times(TimeRing* r) noexcept nogil:
    return <int64_t*>(r + 1)


cdef inline size_t ring_size(int32_t cap) noexcept nogil:
    return sizeof(TimeRing) + <size_t>cap * sizeof(int64_t)


cdef class TimeSinceLastNColumn(BlockColumn):
    """time_since_last_n: max(0, T - oldest of the last n matched times); null until n."""

    cdef int32_t n

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        lifetime_only("time_since_last_n", window_ms)
        Column.__init__(self, name, field, where, params, window_ms)
        self.n = bounded_n("time_since_last_n", params)
        self.takes_row = True

    cdef int update_row(self, Py_ssize_t slot, const Row* row, bint matched,
                        int64_t now) except -1:
        return self.update(slot, None, matched, now)

    cdef int update(self, Py_ssize_t slot, dict row, bint matched, int64_t now) except -1:
        cdef TimeRing* r = <TimeRing*>self.blocks[slot]
        cdef TimeRing* grown
        cdef int32_t cap
        if not matched:
            return 0
        # the times not held yet are zero: a snapshot holds the whole ring, and equal
        # states dump equal bytes
        if r == NULL:
            cap = ring_next_cap(NULL, self.n)
            r = ring_head_alloc(cap, sizeof(int64_t))
            memset(ring_times(r), 0, cap * sizeof(int64_t))
            self.blocks[slot] = r
        if r.held < self.n:
            if r.held == r.cap:
                cap = ring_next_cap(r, self.n)
                grown = <TimeRing*>PyMem_Realloc(r, ring_size(cap))
                if grown == NULL:
                    raise MemoryError()
                r = grown
                memset(ring_times(r) + r.cap, 0, (cap - r.cap) * sizeof(int64_t))
                r.cap = cap
                self.blocks[slot] = r
            ring_times(r)[r.held] = now
            r.held += 1
        else:
            ring_times(r)[r.seen % self.n] = now
        r.seen += 1
        return 0

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        cdef TimeRing* r = <TimeRing*>self.blocks[slot]
        if r == NULL or r.held < self.n:
            return VALUE_NULL
        return elapsed(T, ring_times(r)[r.seen % self.n], out)

    cdef Py_ssize_t block_nbytes(self, const void* block) except -1:
        return ring_size((<const TimeRing*>block).cap)

    cdef int check_block(self, const char* raw, Py_ssize_t n) except -1:
        # A ring grown by update(): 1 to n times held, at least as many seen, the capacity
        # that growth gives for them.
        cdef TimeRing header
        if n < <Py_ssize_t>sizeof(TimeRing):
            raise ValueError(f"snapshot time_since_last_n ring of {n} bytes")
        memcpy(&header, raw, sizeof(TimeRing))
        if (header.held < 1 or header.held > self.n or header.seen < header.held
                or header.cap != ring_cap_for(header.held, self.n)
                or <size_t>n != ring_size(header.cap)):
            raise ValueError("snapshot time_since_last_n ring header does not fit the op")
        return 0


COLUMNS = {
    "first_seen": FirstSeenColumn,
    "last_seen": LastSeenColumn,
    "age": AgeColumn,
    "has_seen": HasSeenColumn,
    "time_since": TimeSinceColumn,
    "time_since_last_n": TimeSinceLastNColumn,
    "streak": StreakColumn,
    "max_streak": MaxStreakColumn,
    "negative_streak": NegativeStreakColumn,
    "first_seen_in_window": FirstSeenInWindowColumn,
}
