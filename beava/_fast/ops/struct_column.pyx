# cython: language_level=3
"""Base of the lifetime columns whose per-slot state is one fixed-size C struct.

The state is always lifetime: a window is ignored (ops that reject one check it first).
The structs of all slots live in one growable buffer; new and cleared slots get a copy of
the op's empty struct. Ops whose state can grow (a ring, a spilled list, a long string)
also own one side block per slot, allocated on first need; the struct never holds the
pointer, so the struct buffer snapshots as plain bytes. NumberColumn is the base of the ops
fed one number per event: it reads the number from a dict row or a C row alike.

Snapshot format: ``dump`` returns the struct bytes, or, for ops with side blocks,
``[struct_bytes, records]`` where ``records`` holds one block record (snapshot_state.pxd)
per slot holding a block.
"""

from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.stdint cimport int64_t
from libc.string cimport memcpy

from beava._fast.ops.column cimport prefetch_line
from beava._fast.ops.row cimport Row, field_number, row_field
from beava._fast.ops.slot_buffers cimport (
    buffer_bytes,
    check_dump_slots,
    grow_zeroed,
    grown_capacity,
    load_bytes,
    release_blocks,
    row_number,
)
from beava._fast.ops.snapshot_state cimport (
    RECORD_HEADER,
    new_bytes,
    record_next,
    record_put,
    state_buffer,
    state_bytes,
    state_list,
)


cdef class StructColumn(Column):
    """One C struct per slot; subclasses call ``set_layout`` in their constructor."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        Column.__init__(self, name, field, where, params, None)

    def __dealloc__(self):
        if self.blocks != NULL:
            release_blocks(self.blocks, self.capacity, PyMem_Free)
            PyMem_Free(self.blocks)
        PyMem_Free(self.buf)

    cdef int set_layout(self, const void* empty, Py_ssize_t itemsize,
                        bint with_blocks) except -1:
        self.itemsize = itemsize
        self.empty = (<const char*>empty)[:itemsize]
        if with_blocks:
            self.blocks = <void**>PyMem_Malloc(sizeof(void*))  # grown by ensure()
            if self.blocks == NULL:
                raise MemoryError()
        return 0

    cdef Py_ssize_t block_size(self, Py_ssize_t slot) except -1:
        return 0

    cdef Py_ssize_t block_capacity(self, Py_ssize_t slot, Py_ssize_t used) except -1:
        raise ValueError(f"{type(self).__name__} keeps no side blocks")

    cdef void prefetch(self, Py_ssize_t slot, int stage) noexcept:
        if stage == 0:
            prefetch_line(self.buf + slot * self.itemsize)
            if self.blocks != NULL:
                prefetch_line(&self.blocks[slot])
        elif stage == 1 and self.blocks != NULL and self.blocks[slot] != NULL:
            prefetch_line(self.blocks[slot])

    cdef int ensure(self, Py_ssize_t capacity) except -1:
        cdef Py_ssize_t old = self.capacity
        cdef Py_ssize_t new, i
        cdef char* p
        if capacity <= old:
            return 0
        new = grown_capacity(old, capacity)
        p = <char*>PyMem_Realloc(self.buf, <size_t>(new * self.itemsize))
        if p == NULL:
            raise MemoryError()
        self.buf = p
        for i in range(old, new):
            memcpy(p + i * self.itemsize, <const char*>self.empty, self.itemsize)
        if self.blocks != NULL:
            self.blocks = <void**>grow_zeroed(self.blocks, old, new, sizeof(void*))
        self.capacity = new
        return 0

    cdef int clear(self, Py_ssize_t slot) except -1:
        if self.blocks != NULL:
            PyMem_Free(self.blocks[slot])
            self.blocks[slot] = NULL
        memcpy(self.buf + slot * self.itemsize, <const char*>self.empty, self.itemsize)
        return 0

    cdef int check_state(self, Py_ssize_t nslots) except -1:
        return 0

    cpdef object dump(self, Py_ssize_t nslots):
        """State of slots [0, nslots) as plain data (see the module docstring)."""
        cdef bytes structs
        cdef Py_ssize_t slot, total = 0
        cdef char* out
        check_dump_slots(nslots, self.capacity)
        structs = buffer_bytes(self.buf, nslots * self.itemsize)
        if self.blocks == NULL:
            return structs
        for slot in range(nslots):
            if self.blocks[slot] != NULL:
                total += RECORD_HEADER + self.block_size(slot)
        records = new_bytes(total, &out)
        for slot in range(nslots):
            if self.blocks[slot] != NULL:
                out = record_put(out, slot, self.blocks[slot], self.block_size(slot))
        return [structs, records]

    cdef int take_slots(self, Column other, Py_ssize_t offset, Py_ssize_t n) except -1:
        # the structs are plain bytes; a side block's pointer moves
        cdef StructColumn src = <StructColumn>other
        cdef Py_ssize_t i
        self.ensure(offset + n)
        if n:
            memcpy(self.buf + offset * self.itemsize, src.buf, n * self.itemsize)
        if self.blocks != NULL:
            for i in range(n):
                self.blocks[offset + i] = src.blocks[i]
                src.blocks[i] = NULL
        return 0

    cpdef load(self, object state, Py_ssize_t nslots):
        """Restore slots [0, nslots) from ``dump`` output of the same op and params."""
        cdef Py_ssize_t slot
        cdef list parts
        what = type(self).__name__
        if self.blocks == NULL:
            structs = state_buffer(state, nslots * self.itemsize, what)
            records = None
        else:
            parts = state_list(state, 2, what)
            structs = state_buffer(parts[0], nslots * self.itemsize, what)
            records = state_bytes(parts[1], what)
        self.ensure(nslots)
        for slot in range(nslots):
            self.clear(slot)
        load_bytes(self.buf, structs, nslots * self.itemsize)
        try:
            if records is not None:
                self._load_blocks(records, nslots)
            self.check_state(nslots)
        except BaseException:
            for slot in range(nslots):  # never leave a half-restored, inconsistent slot
                self.clear(slot)
            raise

    cdef int _load_blocks(self, bytes records, Py_ssize_t nslots) except -1:
        cdef const char* p = records
        cdef Py_ssize_t total = len(records), off = 0, used, cap
        cdef int64_t slot = -1
        cdef void* block
        while off < total:
            off = record_next(p, total, off, slot, nslots, &slot, &used, type(self).__name__)
            cap = self.block_capacity(slot, used)
            if cap < used:
                raise ValueError(f"block record of {used} bytes too large for slot {slot}")
            block = PyMem_Malloc(<size_t>cap)
            if block == NULL:
                raise MemoryError()
            memcpy(block, p + off, used)
            self.blocks[slot] = block
            if self.block_size(slot) != used:
                raise ValueError(f"block record of slot {slot} does not match its state")
            off += used
        for slot in range(nslots):  # every struct must agree with its restored block
            used = self.block_size(slot)
            if (self.blocks[slot] == NULL) != (used == 0):
                raise ValueError(f"snapshot side block of slot {slot} does not match its state")
        return 0


cdef class NumberColumn(StructColumn):
    """A struct column fed one number per matched event; subclasses define ``add``."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        StructColumn.__init__(self, name, field, where, params, window_ms)
        self.takes_row = True

    cdef int add(self, Py_ssize_t slot, double x, int64_t now) except -1:
        raise NotImplementedError(type(self).__name__)

    cdef int update(self, Py_ssize_t slot, dict row, bint matched, int64_t now) except -1:
        cdef double x
        if matched and row_number(row, self.field, &x):
            return self.add(slot, x, now)
        return 0

    cdef int update_row(self, Py_ssize_t slot, const Row* row, bint matched,
                        int64_t now) except -1:
        cdef double x
        if matched and field_number(row_field(row, self.field, &self.guess), &x):
            return self.add(slot, x, now)
        return 0
