# cython: language_level=3
"""Base of the columns that keep one heap block per slot, allocated on the slot's first need.

The column owns the blocks: ``clear`` and deallocation free them with ``release``
(PyMem_Free, or the op's own function for blocks that hold references or chains; a
subclass sets it in ``__cinit__``). The slot array takes exactly the capacity asked for:
the table already grows its capacity geometrically, and spare slots would cost a pointer
each in every such feature.

Snapshot format of blocks that are plain bytes: one bytes object of block records (see
snapshot_state.pxd), one per slot holding a block. Subclasses whose blocks hold pointers or
references override ``dump`` and ``load``.
"""

from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int64_t
from libc.string cimport memcpy

from beava._fast.ops.column cimport prefetch_line
from beava._fast.ops.slot_buffers cimport check_dump_slots, grow_zeroed, release_blocks
from beava._fast.ops.snapshot_state cimport (
    RECORD_HEADER,
    new_bytes,
    record_next,
    record_put,
    state_bytes,
)


cdef class BlockColumn(Column):
    """One owned block per slot; see the module docstring."""

    def __cinit__(self, *args, **kwargs):
        self.release = PyMem_Free

    def __dealloc__(self):
        release_blocks(self.blocks, self.capacity, self.release)
        PyMem_Free(self.blocks)

    cdef int ensure(self, Py_ssize_t capacity) except -1:
        if capacity <= self.capacity:
            return 0
        self.blocks = <void**>grow_zeroed(self.blocks, self.capacity, capacity, sizeof(void*))
        self.capacity = capacity
        return 0

    cdef int clear(self, Py_ssize_t slot) except -1:
        release_blocks(self.blocks + slot, 1, self.release)
        return 0

    cdef void prefetch(self, Py_ssize_t slot, int stage) noexcept:
        if stage == 0:
            prefetch_line(&self.blocks[slot])
        elif stage == 1 and self.blocks[slot] != NULL:
            prefetch_line(self.blocks[slot])

    cdef Py_ssize_t block_nbytes(self, const void* block) except -1:
        raise NotImplementedError(type(self).__name__)

    cdef int check_block(self, const char* raw, Py_ssize_t n) except -1:
        raise NotImplementedError(type(self).__name__)

    cpdef object dump(self, Py_ssize_t nslots):
        cdef Py_ssize_t slot, total = 0
        cdef char* out
        check_dump_slots(nslots, self.capacity)
        for slot in range(nslots):
            if self.blocks[slot] != NULL:
                total += RECORD_HEADER + self.block_nbytes(self.blocks[slot])
        records = new_bytes(total, &out)
        for slot in range(nslots):
            if self.blocks[slot] != NULL:
                out = record_put(out, slot, self.blocks[slot],
                                 self.block_nbytes(self.blocks[slot]))
        return records

    cdef int take_slots(self, Column other, Py_ssize_t offset, Py_ssize_t n) except -1:
        # a block holds all of its slot's state: its pointer moves
        cdef BlockColumn src = <BlockColumn>other
        cdef Py_ssize_t i
        self.ensure(offset + n)
        for i in range(n):
            self.blocks[offset + i] = src.blocks[i]
            src.blocks[i] = NULL
        return 0

    cpdef load(self, object state, Py_ssize_t nslots):
        cdef bytes records = state_bytes(state, f"{type(self).__name__} blocks")
        cdef const char* p = records
        cdef Py_ssize_t total = len(records), off = 0, n
        cdef int64_t slot = -1
        cdef void* block
        self.ensure(nslots)
        release_blocks(self.blocks, nslots, self.release)
        try:
            while off < total:
                off = record_next(p, total, off, slot, nslots, &slot, &n, type(self).__name__)
                self.check_block(p + off, n)
                block = PyMem_Malloc(n)
                if block == NULL:
                    raise MemoryError()
                memcpy(block, p + off, n)
                self.blocks[slot] = block
                off += n
        except BaseException:
            release_blocks(self.blocks, nslots, self.release)
            raise
