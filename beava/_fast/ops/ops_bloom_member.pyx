# cython: language_level=3
"""bloom_member (spec/operators.md §11.4): whether the latest matching value had (probably)
been seen before, a Bloom filter per slot over MurmurHash3_x64_128 of its keystr. Keys and
snapshot streams: sketch_base."""

from cpython.ref cimport PyObject
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memmove, memset

import math

from beava._fast.ops.block_column cimport BlockColumn
from beava._fast.ops.column cimport VALUE_BOOL, Column, Number
from beava._fast.ops.row cimport Row, RowField, row_field
from beava._fast.ops.sketch_base cimport (
    KIND_BLOOM,
    SNAPSHOT_FORMAT,
    KeyHolder,
    KeyView,
    SnapshotReader,
    SnapshotWriter,
    field_keystr_key,
    fit,
    keystr_key,
)
from beava._fast.ops.slot_buffers cimport dict_get
from beava._fast.ops.snapshot_state cimport state_bytes


# ---------------------------------------------------------------------------------------
# MurmurHash3_x64_128
# ---------------------------------------------------------------------------------------

cdef inline uint64_t get_le64(const uint8_t* p) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(7, -1, -1):
        v = (v << 8) | p[i]
    return v


cdef inline uint64_t rotl64(uint64_t x, int r) noexcept nogil:
    return (x << r) | (x >> (64 - r))


cdef inline uint64_t fmix64(uint64_t k) noexcept nogil:
    k ^= k >> 33
    k *= 0xFF51AFD7ED558CCDULL
    k ^= k >> 33
    k *= 0xC4CEB9FE1A85EC53ULL
    k ^= k >> 33
    return k


cdef void murmur3_x64_128(const uint8_t* data, Py_ssize_t size, uint64_t seed,
                          uint64_t* out1, uint64_t* out2) noexcept nogil:
    cdef uint64_t c1 = 0x87C37B91114253D5ULL, c2 = 0x4CF5AD432745937FULL
    cdef uint64_t h1 = seed, h2 = seed, k1, k2
    cdef Py_ssize_t nblocks = size // 16, i
    cdef const uint8_t* tail
    cdef int rem
    for i in range(nblocks):
        k1 = get_le64(data + 16 * i)
        k2 = get_le64(data + 16 * i + 8)
        k1 *= c1
        k1 = rotl64(k1, 31)
        k1 *= c2
        h1 ^= k1
        h1 = rotl64(h1, 27)
        h1 += h2
        h1 = h1 * 5 + 0x52DCE729
        k2 *= c2
        k2 = rotl64(k2, 33)
        k2 *= c1
        h2 ^= k2
        h2 = rotl64(h2, 31)
        h2 += h1
        h2 = h2 * 5 + 0x38495AB5
    tail = data + nblocks * 16
    rem = <int>(size & 15)
    k1 = 0
    k2 = 0
    if rem > 8:
        for i in range(rem - 1, 7, -1):
            k2 ^= (<uint64_t>tail[i]) << (8 * (i - 8))
        k2 *= c2
        k2 = rotl64(k2, 33)
        k2 *= c1
        h2 ^= k2
    if rem > 0:
        for i in range((rem if rem < 8 else 8) - 1, -1, -1):
            k1 ^= (<uint64_t>tail[i]) << (8 * i)
        k1 *= c1
        k1 = rotl64(k1, 31)
        k1 *= c2
        h1 ^= k1
    h1 ^= <uint64_t>size
    h2 ^= <uint64_t>size
    h1 += h2
    h2 += h1
    h1 = fmix64(h1)
    h2 = fmix64(h2)
    h1 += h2
    h2 += h1
    out1[0] = h1
    out2[0] = h2


def murmur3_128(data: bytes, seed: int = 0) -> tuple:
    """``(h1, h2)``: the low and high 64 bits of MurmurHash3_x64_128 (for tests/tools)."""
    cdef uint64_t h1, h2
    cdef const uint8_t* p = <const uint8_t*><char*>data
    murmur3_x64_128(p, len(data), seed, &h1, &h2)
    return h1, h2


# ---------------------------------------------------------------------------------------
# The filter
# ---------------------------------------------------------------------------------------

cdef struct Bloom:
    uint8_t last_probe
    uint8_t dense
    uint16_t _pad
    uint32_t n           # sparse: set bit positions held (ascending, ``width`` bytes each)
    uint32_t cap         # sparse: capacity in positions
    # sparse positions or the dense bitmap (m / 8 bytes) follow


cdef inline uint8_t* bloom_data(Bloom* b) noexcept nogil:
    return <uint8_t*>b + sizeof(Bloom)


ctypedef fused bit_pos:
    uint16_t
    uint32_t
    uint64_t


cdef inline uint32_t lower_bound_pos(const bit_pos* v, uint32_t n, uint64_t bit) noexcept nogil:
    # first index whose position is >= bit; branchless (the probes are unpredictable)
    cdef uint32_t base = 0, half
    cdef bit_pos x
    if n == 0:
        return 0
    while n > 1:
        half = n >> 1
        memcpy(&x, &v[base + half], sizeof(x))
        base = base + half if x < bit else base
        n -= half
    memcpy(&x, &v[base], sizeof(x))
    return base + (x < bit)


def bloom_geometry(expected_n: int, target_fpr: float) -> tuple:
    """``(m, k)``: bits (a multiple of 64) and hash count for the given sizing."""
    n = float(max(expected_n, 1))
    m_f = -n * math.log(target_fpr) / (math.log(2) ** 2)
    m = math.ceil(m_f)
    m = (m + 63) // 64 * 64
    k = max(1, math.ceil(m_f / n * math.log(2)))
    # beyond 2**63 bits the filter could never leave sparse mode anyway
    return min(m, 1 << 63), k


cdef class BloomMemberColumn(BlockColumn):
    """Whether the latest matching value had (probably) been seen before it was inserted.

    Bits live in a sorted sparse list (2, 4 or 8 bytes per set bit, by filter size) until
    that list would be as large as the bitmap of ``m`` bits, then in the bitmap.
    """

    cdef readonly uint64_t m
    cdef readonly int k
    cdef int width
    cdef KeyHolder hold
    cdef uint8_t guess  # where the last C row had ``field`` (row.pxd's row_field)

    def __cinit__(self, *args, **kwargs):
        self.release = free

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        Column.__init__(self, name, field, where, params, window_ms)
        expected_n = params.get("expected_n")
        target_fpr = params.get("target_fpr")
        m, k = bloom_geometry(1024 if expected_n is None else expected_n,
                              0.01 if target_fpr is None else target_fpr)
        self.m = m
        self.k = k
        self.width = 2 if self.m <= 0x10000 else (4 if self.m <= 0x100000000 else 8)
        self.hold = KeyHolder()
        self.takes_row = True

    cdef inline uint64_t sparse_at(self, Bloom* b, uint32_t i) noexcept nogil:
        cdef const uint8_t* p = bloom_data(b) + i * self.width
        cdef uint16_t v16
        cdef uint32_t v32
        cdef uint64_t v64
        if self.width == 2:
            memcpy(&v16, p, 2)
            return v16
        if self.width == 4:
            memcpy(&v32, p, 4)
            return v32
        memcpy(&v64, p, 8)
        return v64

    cdef uint32_t sparse_find(self, Bloom* b, uint64_t bit, bint* found) noexcept nogil:
        cdef uint32_t i
        if self.width == 2:
            i = lower_bound_pos(<const uint16_t*>bloom_data(b), b.n, bit)
        elif self.width == 4:
            i = lower_bound_pos(<const uint32_t*>bloom_data(b), b.n, bit)
        else:
            i = lower_bound_pos(<const uint64_t*>bloom_data(b), b.n, bit)
        found[0] = i < b.n and self.sparse_at(b, i) == bit
        return i

    cdef Bloom* sparse_add(self, Bloom* b, uint64_t bit) except NULL:
        cdef bint found
        cdef uint32_t i = self.sparse_find(b, bit, &found)
        cdef uint32_t cap
        cdef size_t size
        cdef Bloom* grown
        cdef uint8_t* p
        cdef uint16_t v16
        cdef uint32_t v32
        if found:
            return b
        if b.n == b.cap:
            cap = b.cap + b.cap // 2 if b.cap >= 8 else 8
            size = fit(sizeof(Bloom) + <size_t>cap * self.width)
            grown = <Bloom*>realloc(b, size)
            if grown == NULL:
                raise MemoryError()
            b = grown
            b.cap = <uint32_t>((size - sizeof(Bloom)) // self.width)
        p = bloom_data(b) + i * self.width
        memmove(p + self.width, p, (b.n - i) * self.width)
        if self.width == 2:
            v16 = <uint16_t>bit
            memcpy(p, &v16, 2)
        elif self.width == 4:
            v32 = <uint32_t>bit
            memcpy(p, &v32, 4)
        else:
            memcpy(p, &bit, 8)
        b.n += 1
        return b

    cdef Bloom* densify(self, Bloom* b) except NULL:
        cdef size_t size = sizeof(Bloom) + self.m // 8
        cdef Bloom* d = <Bloom*>malloc(size)
        cdef uint32_t i
        cdef uint64_t bit
        if d == NULL:
            raise MemoryError()
        memset(d, 0, size)
        d.last_probe = b.last_probe
        d.dense = 1
        for i in range(b.n):
            bit = self.sparse_at(b, i)
            bloom_data(d)[bit >> 3] |= <uint8_t>(1 << (bit & 7))
        free(b)
        return d

    cdef int update(self, Py_ssize_t slot, dict row, bint matched, int64_t now) except -1:
        cdef PyObject* value
        cdef KeyView key
        if not matched or self.field is None:
            return 0
        value = dict_get(row, self.field)
        if value == NULL or not keystr_key(<object>value, &key, self.hold):
            return 0
        return self.insert_key(slot, &key)

    cdef int update_row(self, Py_ssize_t slot, const Row* row, bint matched,
                        int64_t now) except -1:
        cdef KeyView key
        cdef const RowField* f
        if not matched or self.field is None:
            return 0
        f = row_field(row, self.field, &self.guess)
        if f == NULL:
            return 0
        field_keystr_key(f, &key)
        return self.insert_key(slot, &key)

    cdef int insert_key(self, Py_ssize_t slot, const KeyView* k) except -1:
        """Probe and set the bits of a value's keystr key (``update``'s work)."""
        cdef KeyView key = k[0]
        cdef uint64_t h1, h2, bit
        cdef Bloom* b
        cdef bint probe = True, found
        cdef int i
        cdef size_t size
        murmur3_x64_128(key.data, key.len, 0, &h1, &h2)
        b = <Bloom*>self.blocks[slot]
        if b == NULL:
            size = fit(sizeof(Bloom) + <size_t>self.k * self.width)
            b = <Bloom*>malloc(size)
            if b == NULL:
                raise MemoryError()
            memset(b, 0, sizeof(Bloom))
            b.cap = <uint32_t>((size - sizeof(Bloom)) // self.width)
            self.blocks[slot] = b
        for i in range(self.k):
            bit = (h1 + <uint64_t>i * h2) % self.m
            if b.dense:
                found = (bloom_data(b)[bit >> 3] >> (bit & 7)) & 1
            else:
                self.sparse_find(b, bit, &found)
            if not found:
                probe = False
                if b.dense:
                    bloom_data(b)[bit >> 3] |= <uint8_t>(1 << (bit & 7))
                else:
                    b = self.sparse_add(b, bit)
                    self.blocks[slot] = b
        b.last_probe = probe
        if not b.dense and <uint64_t>b.n * self.width >= self.m // 8:
            self.blocks[slot] = self.densify(b)
        return 0

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        cdef Bloom* b = <Bloom*>self.blocks[slot]
        out.i = b != NULL and b.last_probe == 1
        return VALUE_BOOL

    cpdef Py_ssize_t slot_bytes(self, Py_ssize_t slot):
        """Approximate heap bytes held for ``slot`` (its pointer included)."""
        cdef Bloom* b = <Bloom*>self.blocks[slot]
        if b == NULL:
            return sizeof(Bloom*)
        if b.dense:
            return sizeof(Bloom*) + fit(sizeof(Bloom) + self.m // 8) + 8
        return sizeof(Bloom*) + fit(sizeof(Bloom) + <size_t>b.cap * self.width) + 8

    cpdef object dump(self, Py_ssize_t nslots):
        cdef SnapshotWriter w = SnapshotWriter()
        cdef Py_ssize_t slot
        cdef Bloom* b
        w.u8(SNAPSHOT_FORMAT)
        w.u8(KIND_BLOOM)
        w.u32(<uint32_t>nslots)
        for slot in range(nslots):
            b = <Bloom*>self.blocks[slot] if slot < self.capacity else NULL
            if b == NULL:
                w.u8(0)
                continue
            w.u8(1)
            w.u8(b.last_probe)
            w.u8(b.dense)
            w.u32(b.n)
            w.raw(bloom_data(b), self.m // 8 if b.dense else <Py_ssize_t>b.n * self.width)
        return w.value()

    cpdef load(self, object state, Py_ssize_t nslots):
        cdef SnapshotReader r = SnapshotReader(state_bytes(state, "bloom_member column"))
        cdef Py_ssize_t slot, size
        cdef Bloom* b
        cdef uint8_t probe, dense
        cdef uint32_t n, i
        cdef const uint8_t* p
        cdef uint64_t bit, last = 0
        cdef uint16_t bit16
        cdef uint32_t bit32
        if r.u8() != SNAPSHOT_FORMAT or r.u8() != KIND_BLOOM:
            raise ValueError("sketch column snapshot of another format or op")
        if r.u32() != nslots:
            raise ValueError(f"bloom_member snapshot does not hold {nslots} slots")
        self.ensure(nslots)
        for slot in range(self.capacity):
            self.clear(slot)
        try:
            for slot in range(nslots):
                if not r.u8():
                    continue
                probe = r.u8()
                dense = r.u8()
                n = r.u32()
                if probe > 1 or dense > 1:
                    raise ValueError(f"snapshot bloom_member flags of slot {slot}")
                size = self.m // 8 if dense else <Py_ssize_t>n * self.width
                p = r.take(size)
                if not dense:
                    # ascending set bits of the filter, fewer than its dense bitmap holds
                    if <uint64_t>n * self.width >= self.m // 8:
                        raise ValueError(f"snapshot bloom_member slot {slot} not densified")
                    for i in range(n):
                        if self.width == 2:
                            memcpy(&bit16, p + 2 * i, 2)
                            bit = bit16
                        elif self.width == 4:
                            memcpy(&bit32, p + 4 * i, 4)
                            bit = bit32
                        else:
                            memcpy(&bit, p + 8 * i, 8)
                        if bit >= self.m or (i and bit <= last):
                            raise ValueError(f"snapshot bloom_member bits of slot {slot}")
                        last = bit
                b = <Bloom*>malloc(fit(sizeof(Bloom) + size))
                if b == NULL:
                    raise MemoryError()
                b.last_probe = probe
                b.dense = dense
                b.n = n
                b.cap = n if dense else <uint32_t>((fit(sizeof(Bloom) + size) - sizeof(Bloom))
                                                   // self.width)
                memcpy(bloom_data(b), p, size)
                self.blocks[slot] = b
            if r.at != r.data.shape[0]:
                raise ValueError("trailing bytes in sketch column snapshot")
        except BaseException:
            for slot in range(nslots):
                self.clear(slot)
            raise


COLUMNS = {"bloom_member": BloomMemberColumn}
