# Columns that keep one owned heap block per slot (histograms, rings, sketches, ...).
from beava._fast.ops.column cimport Column
from beava._fast.ops.slot_buffers cimport BlockRelease


cdef class BlockColumn(Column):
    cdef void** blocks          # per slot: the block, or NULL until the slot needs one
    cdef BlockRelease release   # frees one block; PyMem_Free unless a subclass sets another

    # Raw snapshots (blocks that are plain bytes): the bytes of one block, and the check of
    # one snapshot block of n bytes before it is restored (raises ValueError when it cannot
    # be one).
    cdef Py_ssize_t block_nbytes(self, const void* block) except -1
    cdef int check_block(self, const char* raw, Py_ssize_t n) except -1
