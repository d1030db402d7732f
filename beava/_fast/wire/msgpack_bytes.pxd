# MessagePack items written at a pointer with room for them: msgpack_out.pyx's Writer
# reserves room through these, and a column writing many small items (a histogram's
# counts) fills a stack buffer with them and appends it once.
from libc.stdint cimport int64_t, uint8_t, uint64_t

cdef enum:
    INT_MAX_BYTES = 9  # the longest integer: a tag and 8 bytes


cdef inline void big_endian(uint8_t* p, uint64_t v, int nbytes) noexcept nogil:
    cdef int i
    for i in range(nbytes):
        p[i] = <uint8_t>(v >> (8 * (nbytes - 1 - i)))


cdef inline int int_at(uint8_t* p, int64_t v) noexcept nogil:
    # ``v`` in its smallest form (as the reply encoder writes it) at ``p``: the bytes written
    cdef int k  # the width of a tagged integer: 1 << k bytes
    if -32 <= v < 0x80:  # positive and negative fixint
        p[0] = <uint8_t>v
        return 1
    if v >= 0:  # uint 8 / 16 / 32 / 64
        k = 0 if v <= 0xff else (1 if v <= 0xffff else (2 if v <= <int64_t>0xffffffff else 3))
        p[0] = <uint8_t>(0xcc + k)
    else:  # int 8 / 16 / 32 / 64
        k = 0 if v >= -0x80 else (1 if v >= -0x8000 else (2 if v >= -<int64_t>0x80000000 else 3))
        p[0] = <uint8_t>(0xd0 + k)
    big_endian(p + 1, <uint64_t>v, 1 << k)
    return 1 + (1 << k)
