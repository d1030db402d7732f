# Lifetime state columns whose per-slot state is one fixed-size C struct (ops_decay,
# ops_velocity, ops_geo), optionally with one owned, lazily allocated side block per slot.
from libc.stdint cimport int64_t, uint8_t

from beava._fast.ops.column cimport Column

cdef extern from *:
    """
    /* Time stamp of a slot that holds no event yet: event times are wall-clock epoch ms,
       so INT64_MIN never occurs as one. */
    #define BEAVA_NO_TIME INT64_MIN
    """
    const int64_t NO_TIME "BEAVA_NO_TIME"


cdef inline Py_ssize_t block_entries(Py_ssize_t used, Py_ssize_t limit) noexcept nogil:
    # Capacity (in entries) of a side block holding `used` entries: the next power of two,
    # capped at `limit`; 0 when empty. Blocks grow through these sizes as entries arrive.
    cdef Py_ssize_t cap = 1
    if used <= 0:
        return 0
    while cap < used:
        cap <<= 1
    return cap if cap < limit else limit


cdef class StructColumn(Column):
    cdef char* buf              # capacity * itemsize bytes
    cdef Py_ssize_t itemsize
    cdef bytes empty            # the struct of a slot in the empty state
    cdef void** blocks          # per-slot owned block (PyMem), or NULL when the op has none

    # Called once by the subclass constructor, before any ensure().
    cdef int set_layout(self, const void* empty, Py_ssize_t itemsize, bint with_blocks) except -1
    # Bytes of blocks[slot] that hold state (0 when it has no block).
    cdef Py_ssize_t block_size(self, Py_ssize_t slot) except -1
    # Bytes to allocate when a snapshot restores `used` bytes into blocks[slot] (after the
    # slot's struct is restored); raises ValueError when `used` cannot belong to that state.
    cdef Py_ssize_t block_capacity(self, Py_ssize_t slot, Py_ssize_t used) except -1
    # Check the restored state of slots [0, nslots) beyond struct and block sizes (an op
    # whose updates index by stored values); raises ValueError. The default accepts it.
    cdef int check_state(self, Py_ssize_t nslots) except -1
    cdef int _load_blocks(self, bytes records, Py_ssize_t nslots) except -1


cdef class NumberColumn(StructColumn):
    # A struct column fed the number a matched event holds under ``field`` (an int or a
    # float; a bool is not a number), read alike from a dict row and a C row, so it takes C
    # rows: ``add`` changes the slot's state, the one routine both kinds of rows reach.
    cdef uint8_t guess          # where the last C row had ``field`` (row_field)
    cdef int add(self, Py_ssize_t slot, double x, int64_t now) except -1
