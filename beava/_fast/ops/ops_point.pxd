# Declarations of ops_point's column bases that other op families build on
# (ops_buffer: most_recent_n and reservoir_sample are value-ring columns too).
from libc.stdint cimport int32_t, uint8_t

from beava._fast.ops.block_column cimport BlockColumn
from beava._fast.ops.column cimport Column
from beava._fast.ops.slot_buffers cimport Payload


cdef class ValueColumn(Column):
    cdef uint8_t* tags
    cdef Payload* values


cdef class RingColumn(BlockColumn):
    # The block of a slot is a ValueRing holding at most `limit` values.
    cdef int32_t limit


cdef class LatestRingColumn(RingColumn):
    # Keeps the last `limit` matched non-null values, read oldest -> newest.
    pass
