# cython: language_level=3
"""Base of the lifetime columns whose per-slot state is one fixed-size C struct.

The state is always lifetime: a window is ignored (ops that reject one check it first).
The structs of all slots live in one growable buffer; new and cleared slots get a copy of
the op's empty struct. Ops whose state can grow (a ring, a spilled list, a long string)
also own one side block per slot, allocated on first need; the struct never holds the
pointer, so the struct buffer snapshots as plain bytes.

Snapshot format: ``dump`` returns the struct bytes, or, for ops with side blocks,
``(struct_bytes, records)`` where ``records`` concatenates ``[int64 slot][int64 n][n bytes]``
for every slot holding a block, in slot order.
"""

from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.stdint cimport int64_t
from libc.string cimport memcpy

from beava._fast.slot_buffers cimport (
    buffer_bytes,
    check_dump_slots,
    grow_zeroed,
    grown_capacity,
    load_bytes,
    release_blocks,
)

cdef Py_ssize_t RECORD_HEADER = 2 * sizeof(int64_t)


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

    cpdef object dump(self, Py_ssize_t nslots):
        """Picklable state of slots [0, nslots) (see the module docstring)."""
        cdef bytes structs
        cdef bytearray records
        cdef int64_t header[2]
        cdef Py_ssize_t slot
        check_dump_slots(nslots, self.capacity)
        structs = buffer_bytes(self.buf, nslots * self.itemsize)
        if self.blocks == NULL:
            return structs
        records = bytearray()
        for slot in range(nslots):
            if self.blocks[slot] == NULL:
                continue
            header[0] = slot
            header[1] = self.block_size(slot)
            records += (<char*>header)[:RECORD_HEADER]
            records += (<char*>self.blocks[slot])[:header[1]]
        return (structs, bytes(records))

    cpdef load(self, object state, Py_ssize_t nslots):
        """Restore slots [0, nslots) from ``dump`` output of the same op and params."""
        cdef Py_ssize_t slot
        self.ensure(nslots)
        for slot in range(nslots):
            self.clear(slot)
        if self.blocks == NULL:
            load_bytes(self.buf, state, nslots * self.itemsize)
            return
        structs, records = state
        load_bytes(self.buf, structs, nslots * self.itemsize)
        try:
            self._load_blocks(records, nslots)
        except BaseException:
            for slot in range(nslots):  # never leave a half-restored, inconsistent slot
                self.clear(slot)
            raise

    cdef int _load_blocks(self, bytes records, Py_ssize_t nslots) except -1:
        cdef const char* p = records
        cdef Py_ssize_t total = len(records)
        cdef Py_ssize_t off = 0, prev = -1, used, cap
        cdef int64_t header[2]
        cdef void* block
        while off < total:
            if total - off < RECORD_HEADER:
                raise ValueError("truncated block record in snapshot")
            memcpy(header, p + off, RECORD_HEADER)
            off += RECORD_HEADER
            if header[0] <= prev or header[0] >= nslots:
                raise ValueError(f"block record for slot {header[0]} out of order or range")
            if header[1] <= 0 or header[1] > total - off:
                raise ValueError(f"block record of {header[1]} bytes does not fit")
            prev = header[0]
            used = header[1]
            cap = self.block_capacity(prev, used)
            if cap < used:
                raise ValueError(f"block record of {used} bytes too large for slot {prev}")
            block = PyMem_Malloc(<size_t>cap)
            if block == NULL:
                raise MemoryError()
            memcpy(block, p + off, used)
            self.blocks[prev] = block
            if self.block_size(prev) != used:
                raise ValueError(f"block record of slot {prev} does not match its state")
            off += used
        for prev in range(nslots):  # every struct must agree with its restored block
            used = self.block_size(prev)
            if (self.blocks[prev] == NULL) != (used == 0):
                raise ValueError(f"snapshot side block of slot {prev} does not match its state")
        return 0
