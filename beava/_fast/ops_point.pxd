# Declarations of ops_point's column bases that other op families build on
# (ops_buffer: most_recent_n and reservoir_sample are value-ring columns too).
from libc.stdint cimport int32_t, uint8_t

from beava._fast.column cimport Column
from beava._fast.slot_buffers cimport Payload, ValueRing


cdef class ValueColumn(Column):
    cdef uint8_t* tags
    cdef Payload* values


cdef class RingColumn(Column):
    # One lazily allocated value ring per slot, holding at most `limit` values.
    cdef ValueRing** rings
    cdef int32_t limit
