# Declarations of ops_point's column bases that other op families build on
# (ops_buffer: most_recent_n and reservoir_sample are value-ring columns too).
from cpython.ref cimport PyObject
from libc.stdint cimport int32_t, uint8_t

from beava._fast.ops.block_column cimport BlockColumn
from beava._fast.ops.column cimport Column
from beava._fast.ops.row cimport RowField
from beava._fast.ops.slot_buffers cimport Payload, ValueRing
from beava._fast.wire.msgpack_out cimport Writer


# update() and update_row() of the value columns read the op's value and hand a matched
# event's to offer(slot, v, f): v, the dict row's value (NULL when absent or null), or f,
# the C row's field (NULL when absent), the other NULL (slot_buffers' event_encode).


cdef class ValueColumn(Column):
    cdef uint8_t* tags
    cdef Payload* values
    cdef uint8_t guess      # where the last C row had ``field`` (row.pxd's row_field)

    cdef int offer(self, Py_ssize_t slot, PyObject* v, const RowField* f) except -1


cdef class RingColumn(BlockColumn):
    # The block of a slot is a ValueRing holding at most `limit` values.
    cdef int32_t limit
    cdef uint8_t guess      # where the last C row had ``field`` (row.pxd's row_field)
    # A value written by put_entries was an object (a text): a scan's prefetch (stage 2)
    # then asks for the objects of the rings it is about to read. Only a hint.
    cdef bint objects_read

    cdef int offer(self, Py_ssize_t slot, PyObject* v, const RowField* f) except -1
    # Entries ``first``, ``first + 1``, ... (``count`` of them, positions taken modulo
    # ``limit``) of a ring as a MessagePack array: the bytes the reply encoder gives the
    # list of those values (an empty array for NULL), without the list.
    cdef int put_entries(self, Writer* out, ValueRing* r, int32_t first,
                         int32_t count) except -1
    # What ring_oldest_to_newest reads of the slot's ring (filled by ring_push_latest or
    # ring_append_value), as put_entries writes it.
    cdef int put_oldest_to_newest(self, Writer* out, Py_ssize_t slot) except -1


cdef class LatestRingColumn(RingColumn):
    # Keeps the last `limit` matched non-null values, read oldest -> newest.
    pass
