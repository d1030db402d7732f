# cython: language_level=3
"""Base of the columns that keep one heap block per slot, allocated on the slot's first need.

The column owns the blocks: ``clear`` and deallocation free them with ``release``
(PyMem_Free, or the op's own function for blocks that hold references or chains; a
subclass sets it in ``__cinit__``). The slot array takes exactly the capacity asked for:
the table already grows its capacity geometrically, and spare slots would cost a pointer
each in every such feature.

Snapshot format of blocks that are plain bytes: ``[(slot, block bytes)]`` for the slots
holding a block, in slot order. Subclasses whose blocks hold pointers or references
override ``dump`` and ``load``.
"""

from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.string cimport memcpy

from beava._fast.slot_buffers cimport (
    buffer_bytes,
    check_dump_slots,
    grow_zeroed,
    release_blocks,
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

    cdef Py_ssize_t block_nbytes(self, const void* block) except -1:
        raise NotImplementedError(type(self).__name__)

    cdef int check_block(self, Py_ssize_t slot, Py_ssize_t nslots, bytes raw) except -1:
        raise NotImplementedError(type(self).__name__)

    cpdef object dump(self, Py_ssize_t nslots):
        cdef Py_ssize_t slot
        cdef list out = []
        check_dump_slots(nslots, self.capacity)
        for slot in range(nslots):
            if self.blocks[slot] != NULL:
                out.append((slot, buffer_bytes(self.blocks[slot],
                                               self.block_nbytes(self.blocks[slot]))))
        return out

    cpdef load(self, object state, Py_ssize_t nslots):
        cdef Py_ssize_t slot
        cdef bytes raw
        cdef void* block
        self.ensure(nslots)
        release_blocks(self.blocks, nslots, self.release)
        for slot, raw in state:
            self.check_block(slot, nslots, raw)
            block = PyMem_Malloc(len(raw))
            if block == NULL:
                raise MemoryError()
            memcpy(block, <const char*>raw, len(raw))
            release_blocks(self.blocks + slot, 1, self.release)  # a repeated slot: the last wins
            self.blocks[slot] = block
