# cython: language_level=3
"""Family B state columns: n_unique, quantile, top_k, bloom_member, entropy.

spec/operators.md §11 (semantics), §5 (windows) and §18 (sketches and accuracy).

Memory layout. Every slot owns one pointer. A lifetime feature points at one state block;
a windowed feature points at its newest bucket, and buckets link to the next older one
(descending epoch, at most 64, created only for epochs that receive an event). A block
starts with a ``Node`` (epoch, next) and a mode byte:

- ``KeyMap`` (exact n_unique / top_k / entropy): one malloc'd "slotted page". Sorted u32
  entry offsets grow from the front, entry bytes from the back; an entry is
  ``[u64 count (counted ops only)][tag][varint length (text only)][key bytes]``. Keys are
  encoded so that ``memcmp`` order is the spec's item order (text < int < float < bool,
  natural order within a type), which gives binary search, ordered reads and linear merges.
- ``ObjBlock``: a DataSketches object (HLL for n_unique, frequent items for top_k).
- ``QList`` / ``QSketch`` (quantile): a list of at most 256 doubles, then UDDSketch. A push
  appends its value; the list is put in ascending order (each value after the values equal
  to it that came before it, as if it had been inserted in order on arrival) when it is
  read, dumped or turned into a sketch (``ql_sort``), so a push costs no search or move.

An entity that saw two events therefore holds a few dozen bytes per feature; sketches
exist only for states that crossed the exact-mode thresholds.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_FromLongLong
from cpython.ref cimport Py_DECREF, Py_INCREF, PyObject
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DecodeUTF8
from libc.math cimport ceil, floor, isfinite, isnan, log2, round
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdio cimport snprintf
from libc.stdlib cimport free, malloc, qsort, realloc
from libc.string cimport memcmp, memcpy, memmove, memset

import heapq
import math



class _LazyDatasketches:
    """Stands for the datasketches module until a sketch is first needed: importing it
    pulls in numpy (~50 ms), which must stay off the server's start-up path."""

    def __getattr__(self, name):
        import datasketches

        globals()["_ds"] = datasketches
        return getattr(datasketches, name)


_ds = _LazyDatasketches()

from beava._fast.block_column cimport BlockColumn
from beava._fast.column cimport Column
from beava._fast.number_text cimport repr_double
from beava._fast.slot_buffers cimport dict_get, number_value
from beava._fast.snapshot_state cimport state_bytes
from beava._fast.uddsketch cimport (
    UddSketch,
    udd_copy,
    udd_decode,
    udd_encode,
    udd_encoded_size,
    udd_heap_bytes,
    udd_init,
    udd_insert,
    udd_merge,
    udd_quantile,
    udd_release,
)
from beava._fast.window cimport MAX_BUCKETS, bucket_active, bucket_epoch, bucket_width

# Exact-mode limits (spec/operators.md §11, §18).
cdef uint32_t NUNIQUE_EXACT_MAX = 1024
cdef uint32_t QUANTILE_EXACT_MAX = 256
cdef uint32_t TOPK_EXACT_MAX = 1024
cdef uint32_t ENTROPY_MAX_CATEGORIES = 1024
cdef int HLL_LG_K = 12
cdef int FREQ_LG_MAX = 11

cdef enum:
    # block modes
    MODE_KEYS = 0       # KeyMap
    MODE_OBJ = 1        # ObjBlock
    MODE_VALUES = 2     # QList
    MODE_UDD = 3        # QSketch
    # key tags, in the spec's item order (operators.md §11.3)
    TAG_STR = 0
    TAG_INT = 1
    TAG_FLOAT = 2
    TAG_BOOL = 3
    # how a float becomes a typed key
    FLOAT_BY_BITS = 0   # n_unique: IEEE bits, all NaNs one value, 0.0 != -0.0
    FLOAT_BY_VALUE = 1  # top_k: also -0.0 == 0.0
    SNAPSHOT_FORMAT = 1

# Snapshot kind codes, one per op.
cdef enum:
    KIND_N_UNIQUE = 1
    KIND_QUANTILE = 2
    KIND_TOP_K = 3
    KIND_ENTROPY = 4
    KIND_BLOOM = 5

cdef uint64_t CANONICAL_NAN_BITS = 0x7FF8000000000000ULL
cdef uint64_t SIGN_BIT = 0x8000000000000000ULL

# Process-wide counters the server exports as Prometheus metrics (spec/server.md §8).
cdef uint64_t _entropy_capped = 0
cdef uint64_t _bucket_reclaims = 0


def counters() -> dict:
    """Current values of this module's metric counters, by Prometheus metric name.

    Every dropped entropy category counts for both the entropy metric and the lifetime
    cap-hit metric; evictions by the 64-bucket cap count as bucket reclaims.
    """
    return {
        "beava_entropy_categories_capped_total": _entropy_capped,
        "beava_lifetime_op_cap_hit_total": _entropy_capped,
        "beava_bucket_reclaim_total": _bucket_reclaims,
    }


# ---------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------

cdef inline size_t fit(size_t request) noexcept nogil:
    # Largest size served by the same glibc chunk as ``request`` (chunks are 16k + 8 usable).
    return ((request + 8 + 15) & ~(<size_t>15)) - 8


cdef inline int varint_size(uint64_t v) noexcept nogil:
    cdef int n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


cdef inline int varint_put(uint8_t* p, uint64_t v) noexcept nogil:
    cdef int n = 0
    while v >= 0x80:
        p[n] = <uint8_t>(v | 0x80)
        v >>= 7
        n += 1
    p[n] = <uint8_t>v
    return n + 1


cdef inline int varint_get(const uint8_t* p, uint64_t* v) noexcept nogil:
    cdef uint64_t out = 0
    cdef int shift = 0, n = 0
    while p[n] & 0x80:
        out |= (<uint64_t>(p[n] & 0x7F)) << shift
        shift += 7
        n += 1
    out |= (<uint64_t>p[n]) << shift
    v[0] = out
    return n + 1


cdef inline void put_be64(uint8_t* p, uint64_t v) noexcept nogil:
    cdef int i
    for i in range(8):
        p[i] = <uint8_t>(v >> (56 - 8 * i))


cdef inline uint64_t get_be64(const uint8_t* p) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(8):
        v = (v << 8) | p[i]
    return v


cdef inline uint64_t get_le64(const uint8_t* p) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(7, -1, -1):
        v = (v << 8) | p[i]
    return v


cdef inline uint64_t double_bits(double x) noexcept nogil:
    cdef uint64_t b
    memcpy(&b, &x, 8)
    return b


cdef inline double bits_double(uint64_t b) noexcept nogil:
    cdef double x
    memcpy(&x, &b, 8)
    return x


# ---------------------------------------------------------------------------------------
# MurmurHash3_x64_128 (bloom_member, operators.md §11.4)
# ---------------------------------------------------------------------------------------

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
# Typed keys
# ---------------------------------------------------------------------------------------

cdef struct KeyView:
    # A key to look up: ``data``/``len`` point into a str's UTF-8 buffer or into ``buf``.
    const uint8_t* data
    Py_ssize_t len
    uint8_t tag
    uint8_t buf[32]


cdef inline void key_fixed(KeyView* k, uint8_t tag, uint64_t bits) noexcept nogil:
    k.tag = tag
    put_be64(k.buf, bits)
    k.data = k.buf
    k.len = 8


cdef inline uint64_t float_key_bits(double x, int mode) noexcept nogil:
    # Order-preserving encoding: memcmp order of the big-endian bytes = numeric order,
    # canonical NaN above +inf.
    cdef uint64_t b
    if isnan(x):
        b = CANONICAL_NAN_BITS
    else:
        if mode == FLOAT_BY_VALUE and x == 0.0:
            x = 0.0
        b = double_bits(x)
    return ~b if b & SIGN_BIT else b ^ SIGN_BIT


cdef inline double float_from_key(const uint8_t* p) noexcept nogil:
    cdef uint64_t b = get_be64(p)
    return bits_double(b ^ SIGN_BIT if b & SIGN_BIT else ~b)


cdef inline int64_t int_from_key(const uint8_t* p) noexcept nogil:
    return <int64_t>(get_be64(p) ^ SIGN_BIT)


cdef class _Holder:
    # Keeps the encoded bytes of a key alive while a KeyView points into them.
    cdef object value


cdef bint text_key(object s, KeyView* k, _Holder hold) except -1:
    cdef Py_ssize_t size
    cdef const char* utf8
    try:
        utf8 = PyUnicode_AsUTF8AndSize(s, &size)
    except UnicodeEncodeError:
        # lone surrogates: keep them distinct, byte-exactly
        hold.value = (<str>s).encode("utf-8", "surrogatepass")
        utf8 = <bytes>hold.value
        size = len(<bytes>hold.value)
    k.tag = TAG_STR
    k.data = <const uint8_t*>utf8
    k.len = size
    return True


cdef bint typed_key(object v, KeyView* k, int float_mode, _Holder hold) except -1:
    """The typed identity of a value (n_unique, top_k); False for null and non-scalars."""
    cdef int overflow = 0
    cdef long long i
    if type(v) is str:
        return text_key(v, k, hold)
    if type(v) is int:
        i = PyLong_AsLongLongAndOverflow(v, &overflow)
        if overflow == 0:
            key_fixed(k, TAG_INT, (<uint64_t>i) ^ SIGN_BIT)
            return True
        key_fixed(k, TAG_FLOAT, float_key_bits(float(v), float_mode))
        return True
    if type(v) is float:
        key_fixed(k, TAG_FLOAT, float_key_bits(<double>v, float_mode))
        return True
    if v is True or v is False:
        k.tag = TAG_BOOL
        k.buf[0] = 1 if v is True else 0
        k.data = k.buf
        k.len = 1
        return True
    return False


cdef bint keystr_key(object v, KeyView* k, _Holder hold) except -1:
    """``keystr(v)`` (operators.md §1) as a text key (entropy, bloom_member)."""
    cdef int overflow = 0
    cdef long long i
    cdef double x
    if type(v) is str:
        return text_key(v, k, hold)
    k.tag = TAG_STR
    k.data = k.buf
    if type(v) is int:
        i = PyLong_AsLongLongAndOverflow(v, &overflow)
        if overflow == 0:
            k.len = snprintf(<char*>k.buf, 32, "%lld", i)
            return True
        x = float(v)
    elif type(v) is float:
        x = <double>v
    elif v is True:
        memcpy(k.buf, b"true", 4)
        k.len = 4
        return True
    elif v is False:
        memcpy(k.buf, b"false", 5)
        k.len = 5
        return True
    else:
        return False
    k.len = repr_double(x, True, <char*>k.buf)
    return True


cdef inline const uint8_t* key_parse(const uint8_t* e, KeyView* k) noexcept nogil:
    # ``e`` points at a stored key's tag; fills ``k`` (pointing into the entry).
    cdef uint64_t n
    k.tag = e[0]
    if k.tag == TAG_STR:
        e += 1 + varint_get(e + 1, &n)
        k.len = <Py_ssize_t>n
    else:
        e += 1
        k.len = 1 if k.tag == TAG_BOOL else 8
    k.data = e
    return e + k.len


cdef inline int key_cmp(const KeyView* a, const KeyView* b) noexcept nogil:
    cdef Py_ssize_t n
    cdef uint64_t x, y
    cdef int c
    if a.tag != b.tag:
        return -1 if a.tag < b.tag else 1
    n = a.len if a.len < b.len else b.len
    if n >= 8:
        # most keys differ in their first 8 bytes: one integer compare, no memcmp call
        x = get_be64(a.data)
        y = get_be64(b.data)
        if x != y:
            return -1 if x < y else 1
        c = memcmp(a.data + 8, b.data + 8, n - 8) if n > 8 else 0
    else:
        c = memcmp(a.data, b.data, n) if n else 0
    if c:
        return c
    return (a.len > b.len) - (a.len < b.len)


cdef inline Py_ssize_t key_size(const KeyView* k) noexcept nogil:
    return 1 + (varint_size(k.len) if k.tag == TAG_STR else 0) + k.len


cdef inline Py_ssize_t key_write(uint8_t* p, const KeyView* k) noexcept nogil:
    cdef Py_ssize_t n = 1
    p[0] = k.tag
    if k.tag == TAG_STR:
        n += varint_put(p + 1, k.len)
    memcpy(p + n, k.data, k.len)
    return n + k.len


cdef object key_value(const KeyView* k):
    """The Python value of a stored typed key."""
    if k.tag == TAG_STR:
        return PyUnicode_DecodeUTF8(<const char*>k.data, k.len, "surrogatepass")
    if k.tag == TAG_INT:
        return PyLong_FromLongLong(int_from_key(k.data))
    if k.tag == TAG_FLOAT:
        return float_from_key(k.data)
    return k.data[0] == 1


cdef str feed_string(const KeyView* k, bint debug_floats):
    """A typed key as a type-prefixed sketch item (operators.md §18.1, §18.3)."""
    cdef char buf[32]
    cdef Py_ssize_t n
    if k.tag == TAG_STR:
        return "s:" + PyUnicode_DecodeUTF8(<const char*>k.data, k.len, "replace")
    if k.tag == TAG_INT:
        return "i:" + str(int_from_key(k.data))
    if k.tag == TAG_FLOAT:
        n = repr_double(float_from_key(k.data), debug_floats, buf)
        return "f:" + PyUnicode_DecodeUTF8(buf, n, NULL)
    return "b:true" if k.data[0] == 1 else "b:false"


cdef tuple parse_feed_string(str item):
    """Inverse of feed_string for top_k items: (sort key, value)."""
    cdef str tag = item[:2]
    cdef str rest = item[2:]
    if tag == "s:":
        return (0, rest), rest
    if tag == "i:":
        return (1, int(rest)), int(rest)
    if tag == "f:":
        x = float(rest)
        return (2, (1, 0.0) if x != x else (0, x)), x
    return (3, rest == "true"), rest == "true"


# ---------------------------------------------------------------------------------------
# State blocks
# ---------------------------------------------------------------------------------------

cdef struct Node:
    int64_t epoch        # bucket epoch (windowed), 0 (lifetime)
    Node* next           # next older bucket


cdef struct Head:
    Node node
    uint8_t mode


cdef struct KeyMap:
    Node node
    uint8_t mode
    uint8_t n_high       # entries = n_high << 16 | n_low (merged temporaries exceed 65535)
    uint16_t n_low
    uint32_t used        # entry bytes, at the end of the block
    uint32_t cap         # block bytes
    # u32 entry offsets (KM_HEADER onwards) ... free space ... entries (the last ``used`` bytes)


cdef struct ObjBlock:
    Node node
    uint8_t mode
    PyObject* obj        # owned reference


cdef struct QList:
    Node node
    uint8_t mode
    uint8_t _pad0
    uint16_t n
    uint16_t cap
    uint16_t sorted_n   # the first sorted_n values are in order; the rest in arrival order
    # ``cap`` doubles follow


cdef struct QSketch:
    Node node
    uint8_t mode
    UddSketch sk


cdef enum:
    KM_HEADER = 28       # bytes of KeyMap up to ``cap`` (offsets start there, not at sizeof)
    KM_TIGHT = 256       # below this many bytes a KeyMap grows to exactly what it needs


cdef inline uint32_t km_n(const KeyMap* m) noexcept nogil:
    return (<uint32_t>m.n_high << 16) | m.n_low


cdef inline void km_set_n(KeyMap* m, uint32_t n) noexcept nogil:
    m.n_high = <uint8_t>(n >> 16)
    m.n_low = <uint16_t>(n & 0xFFFF)


cdef inline uint32_t* km_offs(KeyMap* m) noexcept nogil:
    return <uint32_t*>(<uint8_t*>m + KM_HEADER)


cdef inline uint8_t* km_entry(KeyMap* m, uint32_t off) noexcept nogil:
    # entries are addressed by their distance from the end of the block
    return <uint8_t*>m + m.cap - off


cdef inline double* ql_values(QList* q) noexcept nogil:
    return <double*>(<uint8_t*>q + sizeof(QList))


cdef KeyMap* km_new(size_t room) except NULL:
    cdef size_t cap = fit(KM_HEADER + room)
    cdef KeyMap* m = <KeyMap*>malloc(cap)
    if m == NULL:
        raise MemoryError()
    memset(m, 0, KM_HEADER)
    m.mode = MODE_KEYS
    m.cap = <uint32_t>cap
    return m


cdef inline size_t km_room(object value, bint counted):
    # bytes for one entry holding ``value`` (text length estimated from characters)
    if value is None:
        return 0
    return 4 + counted + 3 + (len(<str>value) if type(value) is str else 8)


cdef inline const uint8_t* km_key_at(KeyMap* m, uint32_t off, bint counted,
                                     KeyView* k) noexcept nogil:
    # parse the entry at ``off`` into ``k``; returns the entry start
    cdef const uint8_t* e = km_entry(m, off)
    cdef uint64_t count
    key_parse(e + varint_get(e, &count) if counted else e, k)
    return e


cdef inline void km_key(KeyMap* m, uint32_t idx, bint counted, KeyView* k) noexcept nogil:
    km_key_at(m, km_offs(m)[idx], counted, k)


cdef inline uint64_t km_count(KeyMap* m, uint32_t idx) noexcept nogil:
    cdef uint64_t c
    varint_get(km_entry(m, km_offs(m)[idx]), &c)
    return c


cdef uint32_t km_search(KeyMap* m, const KeyView* k, bint counted, bint* found) noexcept nogil:
    cdef uint32_t lo = 0, hi = km_n(m), mid
    cdef KeyView e
    cdef int c
    while lo < hi:
        mid = (lo + hi) >> 1
        km_key(m, mid, counted, &e)
        c = key_cmp(k, &e)
        if c == 0:
            found[0] = True
            return mid
        if c < 0:
            hi = mid
        else:
            lo = mid + 1
    found[0] = False
    return lo


cdef int km_reserve(KeyMap** mp, size_t extra) except -1:
    # Make room for one more offset and ``extra`` more entry bytes.
    cdef KeyMap* m = mp[0]
    cdef size_t need = KM_HEADER + 4 * (<size_t>km_n(m) + 1) + m.used + extra
    cdef size_t cap
    cdef KeyMap* grown
    if need <= m.cap:
        return 0
    if need > 0xFFFFFFFF:
        raise MemoryError("sketch state over 4 GiB")
    if need < KM_TIGHT:
        cap = fit(need)
    else:
        cap = m.cap + m.cap // 2
        cap = fit(need if need > cap else cap)
    if cap > 0xFFFFFFFF:
        cap = 0xFFFFFFFF
    grown = <KeyMap*>realloc(m, cap)
    if grown == NULL:
        raise MemoryError()
    # entry bytes live at the end: move them to the new end
    memmove(<uint8_t*>grown + cap - grown.used, <uint8_t*>grown + grown.cap - grown.used,
            grown.used)
    grown.cap = <uint32_t>cap
    mp[0] = grown
    return 0


cdef int km_insert(KeyMap** mp, uint32_t idx, const KeyView* k, bint counted,
                   uint64_t count) except -1:
    cdef Py_ssize_t size = (varint_size(count) if counted else 0) + key_size(k)
    cdef KeyMap* m
    cdef uint8_t* p
    cdef uint32_t* offs
    cdef uint32_t n
    km_reserve(mp, size)
    m = mp[0]
    n = km_n(m)
    m.used += <uint32_t>size
    p = km_entry(m, m.used)
    if counted:
        p += varint_put(p, count)
    key_write(p, k)
    offs = km_offs(m)
    memmove(&offs[idx + 1], &offs[idx], (n - idx) * 4)
    offs[idx] = m.used
    km_set_n(m, n + 1)
    return 0


cdef int km_add(KeyMap** mp, uint32_t idx, uint64_t delta) except -1:
    """Add ``delta`` to the count of entry ``idx`` (its varint may grow by a byte)."""
    cdef KeyMap* m = mp[0]
    cdef uint32_t off = km_offs(m)[idx], i, n
    cdef uint8_t* p = km_entry(m, off)
    cdef uint8_t* low
    cdef uint64_t count
    cdef int old = varint_get(p, &count), grow
    count += delta
    grow = varint_size(count) - old
    if grow == 0:
        varint_put(p, count)
        return 0
    # shift the entries written after this one (lower addresses) and this count down
    km_reserve(mp, grow)
    m = mp[0]
    p = km_entry(m, off)
    low = km_entry(m, m.used)
    memmove(low - grow, low, p + old - low)
    m.used += grow
    varint_put(p - grow, count)
    n = km_n(m)
    for i in range(n):
        if km_offs(m)[i] >= off:
            km_offs(m)[i] += grow
    return 0


cdef KeyMap* km_union(KeyMap* a, KeyMap* b, bint counted, uint32_t limit) except? NULL:
    """Keys of both maps, counts added; NULL when the union has more than ``limit`` keys
    (``limit`` 0 = no limit)."""
    cdef uint32_t na = km_n(a), nb = km_n(b), i = 0, j = 0, n = 0
    cdef KeyMap* out = km_new(4 * (<size_t>na + nb) + a.used + b.used)
    cdef uint32_t* offs = km_offs(out)
    cdef KeyView ka, kb
    cdef const uint8_t* src
    cdef const uint8_t* key_start
    cdef Py_ssize_t size
    cdef uint8_t* dst
    cdef int c
    memset(&ka, 0, sizeof(KeyView))
    memset(&kb, 0, sizeof(KeyView))
    while i < na or j < nb:
        if i < na:
            km_key(a, i, counted, &ka)
        if j < nb:
            km_key(b, j, counted, &kb)
        if j == nb:
            c = -1
        elif i == na:
            c = 1
        else:
            c = key_cmp(&ka, &kb)
        if c == 0 and counted:
            # a merged entry: the summed count, then the key bytes
            key_start = ka.data - (key_size(&ka) - ka.len)
            size = varint_size(km_count(a, i) + km_count(b, j)) + key_size(&ka)
            out.used += <uint32_t>size
            dst = km_entry(out, out.used)
            dst += varint_put(dst, km_count(a, i) + km_count(b, j))
            memcpy(dst, key_start, key_size(&ka))
        else:
            if c <= 0:
                src = km_entry(a, km_offs(a)[i])
                size = ka.data + ka.len - src
            else:
                src = km_entry(b, km_offs(b)[j])
                size = kb.data + kb.len - src
            out.used += <uint32_t>size
            memcpy(km_entry(out, out.used), src, size)
        offs[n] = out.used
        n += 1
        if c <= 0:
            i += 1
        if c >= 0:
            j += 1
        if limit and n > limit:
            free(out)
            return NULL
    km_set_n(out, n)
    return out


cdef enum:
    # km_offer outcomes
    KM_FOUND = 0
    KM_INSERTED = 1
    KM_FULL = 2


cdef inline int km_offer(Node** link, const KeyView* k, bint counted, uint32_t cap) except -1:
    """Add key ``k`` to the exact map at ``link[0]`` (created when NULL; may be replaced):
    KM_FOUND (its count + 1 when ``counted``), KM_INSERTED, or KM_FULL when ``k`` is new and
    the map already holds ``cap`` keys (``cap`` 0 = no cap), leaving the map unchanged."""
    cdef bint found
    cdef uint32_t idx
    cdef KeyMap* m
    if link[0] == NULL:
        link[0] = <Node*>km_new(4 + counted + key_size(k))
    m = <KeyMap*>link[0]
    idx = km_search(m, k, counted, &found)
    if found:
        if counted:
            km_add(<KeyMap**>link, idx, 1)
        return KM_FOUND
    if cap and km_n(m) >= cap:
        return KM_FULL
    km_insert(<KeyMap**>link, idx, k, counted, 1 if counted else 0)
    return KM_INSERTED


cdef KeyMap* km_union_of(Node** maps, int n, bint counted, uint32_t limit) except? NULL:
    """The union of the KeyMaps ``maps[0..n)`` (n >= 1, counts added): ``maps[0]`` itself
    when n == 1, else a new map the caller frees; NULL when it has more than ``limit`` keys
    (``limit`` 0 = no limit)."""
    cdef KeyMap* acc = <KeyMap*>maps[0]
    cdef KeyMap* merged
    cdef int i
    for i in range(1, n):
        merged = km_union(acc, <KeyMap*>maps[i], counted, limit)
        if acc != <KeyMap*>maps[0]:
            free(acc)
        acc = merged
        if acc == NULL:
            break
    return acc


cdef int _cmp_u32(const void* a, const void* b) noexcept nogil:
    cdef uint32_t x = (<const uint32_t*>a)[0], y = (<const uint32_t*>b)[0]
    return (x > y) - (x < y)


cdef int km_feed_hll(KeyMap* m, object target) except -1:
    """``target.update`` with the HLL item of every key of an n_unique map, in the order
    the keys were inserted."""
    # an entry's offset is the heap size right after it was written: insertion order
    cdef uint32_t n = km_n(m), i
    cdef uint32_t* order = <uint32_t*>malloc(4 * (<size_t>n + 1))
    cdef KeyView k
    if order == NULL:
        raise MemoryError()
    memcpy(order, km_offs(m), 4 * <size_t>n)
    qsort(order, n, 4, _cmp_u32)
    try:
        update = target.update
        for i in range(n):
            km_key_at(m, order[i], False, &k)
            update(feed_string(&k, False))
    finally:
        free(order)
    return 0


cdef inline int varint_within(const uint8_t* p, Py_ssize_t avail, uint64_t* v) noexcept nogil:
    # varint_get reading at most ``avail`` bytes; 0 when the varint does not end in them.
    cdef uint64_t out = 0
    cdef int n = 0
    while n < avail and n < 10:
        out |= (<uint64_t>(p[n] & 0x7F)) << (7 * n)
        if not p[n] & 0x80:
            v[0] = out
            return n + 1
        n += 1
    return 0


cdef int km_check(KeyMap* m, bint counted) except -1:
    """Check a KeyMap read from a snapshot as km_insert / km_add leave it: its entries tile
    the last ``used`` bytes exactly (each ends where the one written before it starts),
    each is one well-formed ``[count][tag][length][key]``, and the keys ascend strictly in
    offset order. Raises ValueError otherwise."""
    cdef uint32_t n = km_n(m), i, prev = 0, off
    cdef uint32_t* order = <uint32_t*>malloc(4 * (<size_t>n + 1))
    cdef const uint8_t* e
    cdef Py_ssize_t avail, at, w
    cdef uint64_t v
    cdef KeyView before, key
    if order == NULL:
        raise MemoryError()
    try:
        memcpy(order, km_offs(m), 4 * <size_t>n)
        qsort(order, n, 4, _cmp_u32)
        for i in range(n):
            off = order[i]
            if off <= prev or off > m.used:
                raise ValueError("snapshot sketch entries overlap or leave the block")
            e = km_entry(m, off)
            avail = off - prev
            at = 0
            if counted:
                w = varint_within(e, avail, &v)
                if w == 0:
                    raise ValueError("snapshot sketch count is not a varint")
                at += w
            if at >= avail:
                raise ValueError("snapshot sketch entry has no key")
            if e[at] == TAG_STR:
                w = varint_within(e + at + 1, avail - at - 1, &v)
                if w == 0 or v != <uint64_t>(avail - at - 1 - w):
                    raise ValueError("snapshot sketch text key does not fill its entry")
            elif e[at] == TAG_INT or e[at] == TAG_FLOAT:
                if avail - at - 1 != 8:
                    raise ValueError("snapshot sketch number key is not 8 bytes")
            elif e[at] == TAG_BOOL:
                if avail - at - 1 != 1 or e[at + 1] > 1:
                    raise ValueError("snapshot sketch bool key is not one 0/1 byte")
            else:
                raise ValueError(f"snapshot sketch key tag {e[at]}")
            prev = off
        if prev != m.used:
            raise ValueError("snapshot sketch entries do not fill the block")
        for i in range(n):
            km_key(m, i, counted, &key)
            if i and key_cmp(&before, &key) >= 0:
                raise ValueError("snapshot sketch keys are not in ascending order")
            before = key
    finally:
        free(order)
    return 0


cdef Node* obj_block(object obj, Node* like) except NULL:
    cdef ObjBlock* b = <ObjBlock*>malloc(sizeof(ObjBlock))
    if b == NULL:
        raise MemoryError()
    b.node.epoch = like.epoch if like != NULL else 0
    b.node.next = like.next if like != NULL else NULL
    b.mode = MODE_OBJ
    Py_INCREF(obj)
    b.obj = <PyObject*>obj
    return <Node*>b


cdef void free_block(Node* b) noexcept:
    cdef uint8_t mode = (<Head*>b).mode
    if mode == MODE_OBJ:
        Py_DECREF(<object>(<ObjBlock*>b).obj)
    elif mode == MODE_UDD:
        udd_release(&(<QSketch*>b).sk)
    free(b)


cdef Py_ssize_t block_bytes(Node* b):
    """Heap bytes of a block: malloc'd sizes (+8 per chunk), serialized size of objects."""
    cdef uint8_t mode = (<Head*>b).mode
    if mode == MODE_KEYS:
        return (<KeyMap*>b).cap + 8
    if mode == MODE_VALUES:
        return fit(sizeof(QList) + 8 * (<QList*>b).cap) + 8
    if mode == MODE_UDD:
        return fit(sizeof(QSketch)) + 8 + udd_heap_bytes(&(<QSketch*>b).sk)
    obj = <object>(<ObjBlock*>b).obj
    if isinstance(obj, _ds.hll_sketch):
        return fit(sizeof(ObjBlock)) + 8 + obj.get_updatable_serialization_bytes()
    return fit(sizeof(ObjBlock)) + 8 + obj.get_serialized_size_bytes()


# ---------------------------------------------------------------------------------------
# Snapshot buffers
# ---------------------------------------------------------------------------------------

cdef class _Writer:
    cdef bytearray buf

    def __cinit__(self):
        self.buf = bytearray()

    cdef void raw(self, const void* p, Py_ssize_t n):
        self.buf += PyBytes_FromStringAndSize(<const char*>p, n)

    cdef void u8(self, uint8_t v):
        self.raw(&v, 1)

    cdef void u32(self, uint32_t v):
        self.raw(&v, 4)

    cdef void i64(self, int64_t v):
        self.raw(&v, 8)


cdef class _Reader:
    cdef const uint8_t[::1] data
    cdef Py_ssize_t at

    def __cinit__(self, const uint8_t[::1] data):
        self.data = data
        self.at = 0

    cdef const uint8_t* take(self, Py_ssize_t n) except NULL:
        cdef const uint8_t* p
        if n < 0 or self.at + n > self.data.shape[0]:
            raise ValueError("truncated sketch column snapshot")
        if n == 0:
            return <const uint8_t*>b""
        p = &self.data[self.at]
        self.at += n
        return p

    cdef uint8_t u8(self) except? 0xFF:
        return self.take(1)[0]

    cdef uint32_t u32(self) except? 0xFFFFFFFF:
        cdef uint32_t v
        memcpy(&v, self.take(4), 4)
        return v

    cdef int64_t i64(self) except? -1:
        cdef int64_t v
        memcpy(&v, self.take(8), 8)
        return v


cdef void dump_block(_Writer w, Node* b):
    cdef uint8_t mode = (<Head*>b).mode
    cdef KeyMap* m
    cdef QList* q
    cdef bytes blob
    cdef bytearray enc
    w.i64(b.epoch)
    w.u8(mode)
    if mode == MODE_KEYS:
        m = <KeyMap*>b
        w.u32(km_n(m))
        w.u32(m.used)
        w.raw(km_offs(m), 4 * <Py_ssize_t>km_n(m))
        w.raw(km_entry(m, m.used), m.used)
    elif mode == MODE_VALUES:
        q = <QList*>b
        ql_sort(q)  # a snapshot holds the list ascending
        w.u32(q.n)
        w.raw(ql_values(q), 8 * <Py_ssize_t>q.n)
    elif mode == MODE_UDD:
        enc = bytearray(udd_encoded_size(&(<QSketch*>b).sk))
        udd_encode(&(<QSketch*>b).sk, <uint8_t*>(<char*>enc))
        w.u32(len(enc))
        w.buf += enc
    else:
        obj = <object>(<ObjBlock*>b).obj
        blob = obj.serialize_updatable() if isinstance(obj, _ds.hll_sketch) else obj.serialize()
        w.u32(len(blob))
        w.buf += blob


cdef Node* load_block(_Reader r, uint8_t kind) except NULL:
    """One block of a ``dump_block`` stream, checked (ValueError) before it is used: a mode
    the op keeps, sizes within the stream, well-formed contents."""
    cdef int64_t epoch = r.i64()
    cdef uint8_t mode = r.u8()
    cdef uint32_t n, used, size, i
    cdef KeyMap* m
    cdef QList* q
    cdef QSketch* s
    cdef Node* b
    cdef const uint8_t* p
    cdef const uint8_t* offsets
    cdef double x
    if mode == MODE_KEYS and kind != KIND_QUANTILE:
        n = r.u32()
        used = r.u32()
        if n >= 1 << 24:
            raise ValueError("snapshot sketch holds too many keys")
        offsets = r.take(4 * <Py_ssize_t>n)
        p = r.take(used)
        m = km_new(4 * <size_t>n + used)
        memcpy(km_offs(m), offsets, 4 * <size_t>n)
        km_set_n(m, n)
        m.used = used
        memcpy(km_entry(m, used), p, used)
        try:
            km_check(m, kind != KIND_N_UNIQUE)
        except BaseException:
            free(m)
            raise
        b = <Node*>m
    elif mode == MODE_VALUES and kind == KIND_QUANTILE:
        n = r.u32()
        if n > QUANTILE_EXACT_MAX:
            raise ValueError("snapshot quantile list longer than its exact mode")
        p = r.take(8 * <Py_ssize_t>n)
        for i in range(n):
            memcpy(&x, p + 8 * i, 8)
            if not isfinite(x) or (i and x < (<const double*>(p + 8 * (i - 1)))[0]):
                raise ValueError("snapshot quantile list is not finite and ascending")
        q = ql_new(n)
        memcpy(ql_values(q), p, 8 * <size_t>n)
        q.n = q.sorted_n = <uint16_t>n
        b = <Node*>q
    elif mode == MODE_UDD and kind == KIND_QUANTILE:
        size = r.u32()
        p = r.take(size)
        s = <QSketch*>malloc(sizeof(QSketch))
        if s == NULL:
            raise MemoryError()
        s.mode = MODE_UDD
        try:
            if udd_decode(&s.sk, p, size) != size:
                udd_release(&s.sk)
                raise ValueError("snapshot UDDSketch has trailing bytes")
        except BaseException:
            free(s)
            raise
        b = <Node*>s
    elif mode == MODE_OBJ and (kind == KIND_N_UNIQUE or kind == KIND_TOP_K):
        size = r.u32()
        blob = PyBytes_FromStringAndSize(<const char*>r.take(size), size)
        if kind == KIND_N_UNIQUE:
            obj = _ds.hll_sketch.deserialize(blob)
        else:
            obj = _ds.frequent_strings_sketch.deserialize(blob)
        b = obj_block(obj, NULL)
    else:
        raise ValueError(f"snapshot sketch block of mode {mode} for op kind {kind}")
    b.epoch = epoch
    b.next = NULL
    return b


# ---------------------------------------------------------------------------------------
# Windowed/lifetime state management shared by the four windowable ops
# ---------------------------------------------------------------------------------------

cdef class SketchColumn(BlockColumn):
    """Per-slot block or newest-first bucket list; subclasses define blocks and reads."""

    cdef bint windowed
    cdef int64_t window
    cdef int64_t width
    cdef uint8_t kind
    cdef _Holder hold

    def __cinit__(self, *args, **kwargs):
        self.release = free_chain

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        Column.__init__(self, name, field, where, params, window_ms)
        self.windowed = window_ms is not None
        if self.windowed:
            self.window = window_ms
            self.width = bucket_width(self.window)
        self.hold = _Holder()

    cdef Node* new_block(self, object value) except NULL:
        # An empty state block, sized to take ``value`` (None: an unmatched event).
        raise NotImplementedError

    cdef int insert(self, Node** link, object value) except -1:
        # Apply one value; ``link[0]`` may be NULL (lifetime) and may be replaced.
        raise NotImplementedError

    cdef int update(self, Py_ssize_t slot, dict row, bint matched, int64_t now) except -1:
        cdef Node** link
        cdef PyObject* found
        cdef object value = None
        if matched and self.field is not None:
            found = dict_get(row, self.field)
            if found != NULL:
                value = <object>found
        if self.windowed:
            link = self.bucket_link(slot, now, value)
            if link == NULL:
                return 0
        else:
            link = <Node**>&self.blocks[slot]
        if value is None:
            return 0
        return self.insert(link, value)

    cdef Node** bucket_link(self, Py_ssize_t slot, int64_t now, object value) except? NULL:
        """The link to the bucket of ``now``, created if missing (operators.md §5) even
        for an unmatched event; NULL when that bucket is at once evicted as the smallest
        of 65."""
        cdef int64_t epoch = bucket_epoch(now, self.width)
        cdef Node** link = <Node**>&self.blocks[slot]
        cdef Node* created
        cdef Node* cut
        cdef Node* following
        cdef int position = 0, kept = 0
        global _bucket_reclaims
        if link[0] != NULL and link[0].epoch == epoch:
            return link
        while link[0] != NULL and link[0].epoch > epoch:
            link = &link[0].next
            position += 1
        if link[0] != NULL and link[0].epoch == epoch:
            return link
        created = self.new_block(value)
        created.epoch = epoch
        created.next = link[0]
        link[0] = created
        # Drop buckets that can never be active again (e <= now - W), then apply the cap.
        link = <Node**>&self.blocks[slot]
        while link[0] != NULL and link[0].epoch > now - self.window and kept < MAX_BUCKETS:
            link = &link[0].next
            kept += 1
        cut = link[0]
        link[0] = NULL
        while cut != NULL:
            following = cut.next
            if cut.epoch > now - self.window:
                _bucket_reclaims += 1
            free_block(cut)
            cut = following
        if position >= kept:
            return NULL
        link = <Node**>&self.blocks[slot]
        while position:
            link = &link[0].next
            position -= 1
        return link

    cdef int active(self, Py_ssize_t slot, int64_t T, Node** out) noexcept:
        """Active buckets at ``T`` into ``out`` in ascending epoch order; their number."""
        cdef Node* node = <Node*>self.blocks[slot]
        cdef int n = 0, i
        cdef Node* tmp
        while node != NULL:
            if bucket_active(node.epoch, T, self.window):
                out[n] = node
                n += 1
            node = node.next
        for i in range(n // 2):
            tmp = out[i]
            out[i] = out[n - 1 - i]
            out[n - 1 - i] = tmp
        return n

    cpdef Py_ssize_t slot_bytes(self, Py_ssize_t slot):
        """Approximate heap bytes held for ``slot`` (its pointer included)."""
        cdef Py_ssize_t total = sizeof(Node*)
        cdef Node* node = <Node*>self.blocks[slot]
        while node != NULL:
            total += block_bytes(node)
            node = node.next
        return total

    def bucket_epochs(self, Py_ssize_t slot) -> list:
        """Epochs of the buckets held for ``slot``, newest first (tests, diagnostics)."""
        cdef Node* node = <Node*>self.blocks[slot] if self.windowed else NULL
        out = []
        while node != NULL:
            out.append(node.epoch)
            node = node.next
        return out

    cpdef object dump(self, Py_ssize_t nslots):
        cdef _Writer w = _Writer()
        cdef Py_ssize_t slot
        cdef Node* node
        cdef int count
        w.u8(SNAPSHOT_FORMAT)
        w.u8(self.kind)
        w.u8(self.windowed)
        w.u32(<uint32_t>nslots)
        for slot in range(nslots):
            count = 0
            node = <Node*>self.blocks[slot] if slot < self.capacity else NULL
            while node != NULL:
                count += 1
                node = node.next
            w.u8(count)
            node = <Node*>self.blocks[slot] if slot < self.capacity else NULL
            while node != NULL:
                dump_block(w, node)
                node = node.next
        return bytes(w.buf)

    cpdef load(self, object state, Py_ssize_t nslots):
        cdef _Reader r = _Reader(state_bytes(state, "sketch column"))
        cdef Py_ssize_t slot
        cdef int count, i
        cdef Node** link
        cdef int64_t newer = 0
        if r.u8() != SNAPSHOT_FORMAT or r.u8() != self.kind or r.u8() != self.windowed:
            raise ValueError("sketch column snapshot of another format, op or window mode")
        if r.u32() != nslots:
            raise ValueError(f"sketch column snapshot does not hold {nslots} slots")
        self.ensure(nslots)
        for slot in range(self.capacity):
            self.clear(slot)
        try:
            for slot in range(nslots):
                count = r.u8()
                if count > MAX_BUCKETS or (count > 1 and not self.windowed):
                    raise ValueError(f"snapshot sketch slot {slot} holds {count} buckets")
                link = <Node**>&self.blocks[slot]
                for i in range(count):
                    link[0] = load_block(r, self.kind)
                    if i and link[0].epoch >= newer:
                        raise ValueError(f"snapshot sketch buckets of slot {slot} out of order")
                    newer = link[0].epoch
                    link = &link[0].next
            if r.at != r.data.shape[0]:
                raise ValueError("trailing bytes in sketch column snapshot")
        except BaseException:
            for slot in range(nslots):
                self.clear(slot)
            raise


cdef void free_chain(void* head) noexcept:
    # The BlockRelease of sketch columns: a slot's block or its whole bucket list.
    cdef Node* node = <Node*>head
    cdef Node* next
    while node != NULL:
        next = node.next
        free_block(node)
        node = next


# ---------------------------------------------------------------------------------------
# n_unique (operators.md §11.1, §18.1)
# ---------------------------------------------------------------------------------------

cdef class NUniqueColumn(SketchColumn):
    """Distinct typed values: exact set up to 1024, then DataSketches HLL (lg_k 12)."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        SketchColumn.__init__(self, name, field, where, params, window_ms)
        self.kind = KIND_N_UNIQUE

    cdef Node* new_block(self, object value) except NULL:
        return <Node*>km_new(km_room(value, False))

    cdef int insert(self, Node** link, object value) except -1:
        cdef KeyView k
        cdef KeyMap* m
        if not typed_key(value, &k, FLOAT_BY_BITS, self.hold):
            return 0
        if link[0] != NULL and (<Head*>link[0]).mode == MODE_OBJ:
            (<object>(<ObjBlock*>link[0]).obj).update(feed_string(&k, False))
            return 0
        if km_offer(link, &k, False, NUNIQUE_EXACT_MAX) != KM_FULL:
            return 0
        m = <KeyMap*>link[0]  # the 1025th distinct value: the HLL takes them all
        hll = _ds.hll_sketch(HLL_LG_K, _ds.tgt_hll_type.HLL_8)
        km_feed_hll(m, hll)
        hll.update(feed_string(&k, False))
        link[0] = obj_block(hll, link[0])
        free(m)
        return 0

    cdef object read(self, Py_ssize_t slot, int64_t T):
        cdef Node* act[MAX_BUCKETS]
        cdef int n, i
        cdef KeyMap* acc
        cdef bint exact = True
        if not self.windowed:
            return nunique_of(<Node*>self.blocks[slot])
        n = self.active(slot, T, act)
        if n == 0:
            return 0
        if n == 1:
            return nunique_of(act[0])
        for i in range(n):
            if (<Head*>act[i]).mode != MODE_KEYS:
                exact = False
        if exact:
            acc = km_union_of(act, n, False, NUNIQUE_EXACT_MAX)
            if acc != NULL:
                n = km_n(acc)
                free(acc)
                return n
        union = _ds.hll_union(HLL_LG_K)
        for i in range(n):
            if (<Head*>act[i]).mode == MODE_OBJ:
                union.update(<object>(<ObjBlock*>act[i]).obj)
            else:
                km_feed_hll(<KeyMap*>act[i], union)
        return <int64_t>round(union.get_result().get_estimate())


cdef object nunique_of(Node* b):
    if b == NULL:
        return 0
    if (<Head*>b).mode == MODE_KEYS:
        return km_n(<KeyMap*>b)
    return <int64_t>round((<object>(<ObjBlock*>b).obj).get_estimate())


# ---------------------------------------------------------------------------------------
# quantile (operators.md §11.2, §18.2)
# ---------------------------------------------------------------------------------------

cdef QList* ql_new(uint32_t cap) except NULL:
    cdef size_t size = fit(sizeof(QList) + 8 * <size_t>cap)
    cdef QList* q = <QList*>malloc(size)
    if q == NULL:
        raise MemoryError()
    memset(q, 0, sizeof(QList))
    q.mode = MODE_VALUES
    q.cap = <uint16_t>((size - sizeof(QList)) // 8)
    return q


cdef inline uint32_t upper_bound(const double* v, uint32_t n, double x) noexcept nogil:
    # first index whose value is > x (equal values keep arrival order)
    cdef uint32_t lo = 0, hi = n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if v[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef void ql_sort(QList* q) noexcept nogil:
    """Put the values appended since the list was last in order into it, in arrival order,
    each after the values not greater than it: the order inserting them on arrival gives."""
    cdef double* v = ql_values(q)
    cdef uint32_t k, i
    cdef double x
    for k in range(q.sorted_n, q.n):
        x = v[k]
        i = upper_bound(v, k, x)
        memmove(&v[i + 1], &v[i], 8 * (k - i))
        v[i] = x
    q.sorted_n = q.n


cdef double exact_quantile(const double* s, uint32_t n, double q) noexcept nogil:
    cdef double pos = q * <double>(n - 1)
    cdef double lo = floor(pos), hi = ceil(pos)
    cdef double f
    if lo == hi:
        return s[<uint32_t>lo]
    f = pos - lo
    return s[<uint32_t>lo] * (1.0 - f) + s[<uint32_t>hi] * f


cdef uint32_t merge_sorted(const double* a, uint32_t na, const double* b, uint32_t nb,
                           double* out) noexcept nogil:
    # stable: on ties the value of ``a`` (the earlier bucket) comes first
    cdef uint32_t i = 0, j = 0, n = 0
    while i < na or j < nb:
        if j == nb or (i < na and a[i] <= b[j]):
            out[n] = a[i]
            i += 1
        else:
            out[n] = b[j]
            j += 1
        n += 1
    return n


cdef class QuantileColumn(SketchColumn):
    """The q-quantile: sorted exact list up to 256 values, then UDDSketch (alpha 0.01)."""

    cdef readonly double q
    cdef double* scratch   # 2 x 512 doubles for windowed merges of exact lists

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        SketchColumn.__init__(self, name, field, where, params, window_ms)
        self.kind = KIND_QUANTILE
        q = params.get("q")
        self.q = 0.5 if q is None else float(q)

    def __dealloc__(self):
        free(self.scratch)

    cdef Node* new_block(self, object value) except NULL:
        return <Node*>ql_new(0 if value is None else 1)

    cdef int insert(self, Node** link, object value) except -1:
        cdef double x
        cdef QList* q
        cdef QList* grown
        cdef QSketch* s
        cdef uint32_t i, cap
        if not number_value(<PyObject*>value, &x) or not isfinite(x):
            return 0
        if link[0] == NULL:
            link[0] = <Node*>ql_new(1)
        if (<Head*>link[0]).mode == MODE_UDD:
            udd_insert(&(<QSketch*>link[0]).sk, x)
            return 0
        q = <QList*>link[0]
        if q.n < QUANTILE_EXACT_MAX:
            if q.n == q.cap:
                cap = q.cap * 2 if q.cap >= 2 else 2
                if cap > QUANTILE_EXACT_MAX:
                    cap = QUANTILE_EXACT_MAX
                grown = <QList*>realloc(q, fit(sizeof(QList) + 8 * <size_t>cap))
                if grown == NULL:
                    raise MemoryError()
                q = grown
                q.cap = <uint16_t>((fit(sizeof(QList) + 8 * <size_t>cap) - sizeof(QList)) // 8)
                link[0] = <Node*>q
            ql_values(q)[q.n] = x  # put in order when read (ql_sort)
            q.n += 1
            return 0
        # the 257th value: the sketch takes all of them, in ascending order
        ql_sort(q)
        s = <QSketch*>malloc(sizeof(QSketch))
        if s == NULL:
            raise MemoryError()
        s.node = q.node
        s.mode = MODE_UDD
        udd_init(&s.sk)
        try:
            for i in range(q.n):
                udd_insert(&s.sk, ql_values(q)[i])
            udd_insert(&s.sk, x)
        except BaseException:
            udd_release(&s.sk)
            free(s)
            raise
        link[0] = <Node*>s
        free(q)
        return 0

    cdef object read(self, Py_ssize_t slot, int64_t T):
        return self.read_q(slot, T, self.q)

    cpdef object read_q(self, Py_ssize_t slot, int64_t T, double q):
        """The feature value for another ``q`` over the same state (lets the table share
        one column between quantile features that differ only in ``q``)."""
        cdef Node* act[MAX_BUCKETS]
        cdef int n, i
        cdef uint32_t count = 0, j
        cdef double* acc
        cdef double* spare
        cdef double* tmp
        cdef QList* ql
        cdef UddSketch sk
        cdef bint sketch = False
        if not self.windowed:
            if self.blocks[slot] == NULL:
                return None
            act[0] = <Node*>self.blocks[slot]
            n = 1
        else:
            n = self.active(slot, T, act)
            if n == 0:
                return None
        if n == 1:
            if (<Head*>act[0]).mode == MODE_UDD:
                return udd_quantile(&(<QSketch*>act[0]).sk, q)
            ql = <QList*>act[0]
            ql_sort(ql)
            return exact_quantile(ql_values(ql), ql.n, q) if ql.n else None
        if self.scratch == NULL:
            self.scratch = <double*>malloc(2 * 2 * QUANTILE_EXACT_MAX * sizeof(double))
            if self.scratch == NULL:
                raise MemoryError()
        acc = self.scratch
        spare = self.scratch + 2 * QUANTILE_EXACT_MAX
        udd_init(&sk)
        try:
            for i in range(n):
                if (<Head*>act[i]).mode == MODE_VALUES:
                    ql = <QList*>act[i]
                    ql_sort(ql)
                    if sketch:
                        for j in range(ql.n):
                            udd_insert(&sk, ql_values(ql)[j])
                        continue
                    count = merge_sorted(acc, count, ql_values(ql), ql.n, spare)
                    tmp = acc
                    acc = spare
                    spare = tmp
                    if count > QUANTILE_EXACT_MAX:
                        for j in range(count):
                            udd_insert(&sk, acc[j])
                        sketch = True
                elif sketch:
                    udd_merge(&sk, &(<QSketch*>act[i]).sk)
                else:
                    # sketch + exact: the exact values go into a copy of the sketch
                    udd_copy(&sk, &(<QSketch*>act[i]).sk)
                    for j in range(count):
                        udd_insert(&sk, acc[j])
                    sketch = True
            if sketch:
                return udd_quantile(&sk, q)
            return exact_quantile(acc, count, q) if count else None
        finally:
            udd_release(&sk)


# ---------------------------------------------------------------------------------------
# top_k (operators.md §11.3, §18.3)
# ---------------------------------------------------------------------------------------

cdef struct Ranked:
    uint64_t count
    uint32_t index       # key order, the tie-break


cdef int _cmp_ranked(const void* a, const void* b) noexcept nogil:
    cdef const Ranked* x = <const Ranked*>a
    cdef const Ranked* y = <const Ranked*>b
    if x.count != y.count:
        return -1 if x.count > y.count else 1
    return (x.index > y.index) - (x.index < y.index)


cdef object frequent_items(KeyMap* m):
    """A frequent-items sketch fed with an exact map, in ascending item order."""
    cdef uint32_t i
    cdef KeyView k
    sketch = _ds.frequent_strings_sketch(FREQ_LG_MAX)
    for i in range(km_n(m)):
        km_key(m, i, True, &k)
        sketch.update(feed_string(&k, True), km_count(m, i))
    return sketch


cdef list top_of_map(KeyMap* m, Py_ssize_t k):
    cdef Ranked* ranked = <Ranked*>malloc(sizeof(Ranked) * (<size_t>km_n(m) + 1))
    cdef uint32_t i
    cdef KeyView key
    cdef list out = []
    if ranked == NULL:
        raise MemoryError()
    for i in range(km_n(m)):
        ranked[i].count = km_count(m, i)
        ranked[i].index = i
    qsort(ranked, km_n(m), sizeof(Ranked), _cmp_ranked)
    try:
        for i in range(km_n(m) if km_n(m) < k else k):
            km_key(m, ranked[i].index, True, &key)
            out.append({"count": ranked[i].count, "value": key_value(&key)})
    finally:
        free(ranked)
    return out


cdef list top_of_sketch(object sketch, Py_ssize_t k):
    items = sketch.get_frequent_items(_ds.frequent_items_error_type.NO_FALSE_NEGATIVES, 0)
    if len(items) > k:
        # only items tied with or above the k-th largest estimate can make the cut
        cutoff = heapq.nlargest(k, [row[1] for row in items])[k - 1]
        items = [row for row in items if row[1] >= cutoff]
    rows = []
    for item, estimate, _lower, _upper in items:
        order, value = parse_feed_string(item)
        rows.append((-estimate, order, value))
    rows.sort(key=_rank_key)
    return [{"count": -row[0], "value": row[2]} for row in rows[:k]]


def _rank_key(row):
    return row[0], row[1]


cdef class TopKColumn(SketchColumn):
    """Most frequent typed items: exact counts up to 1024 items, then frequent items."""

    cdef readonly Py_ssize_t k

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        SketchColumn.__init__(self, name, field, where, params, window_ms)
        self.kind = KIND_TOP_K
        k = params.get("k")
        self.k = 10 if k is None else k

    cdef Node* new_block(self, object value) except NULL:
        return <Node*>km_new(km_room(value, True))

    cdef int insert(self, Node** link, object value) except -1:
        cdef KeyView key
        cdef KeyMap* m
        if not typed_key(value, &key, FLOAT_BY_VALUE, self.hold):
            return 0
        if link[0] != NULL and (<Head*>link[0]).mode == MODE_OBJ:
            (<object>(<ObjBlock*>link[0]).obj).update(feed_string(&key, True))
            return 0
        if km_offer(link, &key, True, 0) != KM_INSERTED:
            return 0
        m = <KeyMap*>link[0]
        if km_n(m) > TOPK_EXACT_MAX:
            link[0] = obj_block(frequent_items(m), link[0])
            free(m)
        return 0

    cdef object read(self, Py_ssize_t slot, int64_t T):
        cdef Node* act[MAX_BUCKETS]
        cdef int n, i
        cdef KeyMap* acc = NULL
        cdef KeyMap* merged
        if not self.windowed:
            if self.blocks[slot] == NULL:
                return []
            act[0] = <Node*>self.blocks[slot]
            n = 1
        else:
            n = self.active(slot, T, act)
        if n == 0:
            return []
        sketch = None
        try:
            for i in range(n):
                if sketch is not None:
                    if (<Head*>act[i]).mode == MODE_OBJ:
                        sketch.merge(<object>(<ObjBlock*>act[i]).obj)
                    else:
                        sketch.merge(frequent_items(<KeyMap*>act[i]))
                elif (<Head*>act[i]).mode == MODE_OBJ:
                    if n == 1:
                        return top_of_sketch(<object>(<ObjBlock*>act[i]).obj, self.k)
                    sketch = _ds.frequent_strings_sketch(FREQ_LG_MAX)
                    if acc != NULL:
                        sketch.merge(frequent_items(acc))
                    sketch.merge(<object>(<ObjBlock*>act[i]).obj)
                elif acc == NULL:
                    acc = <KeyMap*>act[i]
                else:
                    merged = km_union(acc, <KeyMap*>act[i], True, 0)
                    if acc != <KeyMap*>act[0]:
                        free(acc)
                    acc = merged
                    if km_n(acc) > TOPK_EXACT_MAX:
                        sketch = frequent_items(acc)
            if sketch is not None:
                return top_of_sketch(sketch, self.k)
            return top_of_map(acc, self.k)
        finally:
            if acc != NULL and acc != <KeyMap*>act[0]:
                free(acc)


# ---------------------------------------------------------------------------------------
# entropy (operators.md §11.5)
# ---------------------------------------------------------------------------------------

cdef double entropy_of(KeyMap* m) noexcept nogil:
    cdef uint64_t total = 0
    cdef uint32_t i
    cdef double h = 0.0, p
    for i in range(km_n(m)):
        total += km_count(m, i)
    if total == 0:
        return 0.0
    for i in range(km_n(m)):
        p = <double>km_count(m, i) / <double>total
        h -= p * log2(p)
    return h


cdef class EntropyColumn(SketchColumn):
    """Shannon entropy (bits) of keystr categories; at most 1024 categories per state."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        SketchColumn.__init__(self, name, field, where, params, window_ms)
        self.kind = KIND_ENTROPY

    cdef Node* new_block(self, object value) except NULL:
        return <Node*>km_new(km_room(value, True))

    cdef int insert(self, Node** link, object value) except -1:
        cdef KeyView key
        global _entropy_capped
        if not keystr_key(value, &key, self.hold):
            return 0
        if km_offer(link, &key, True, ENTROPY_MAX_CATEGORIES) == KM_FULL:
            _entropy_capped += 1
        return 0

    cdef object read(self, Py_ssize_t slot, int64_t T):
        cdef Node* act[MAX_BUCKETS]
        cdef int n
        cdef KeyMap* acc
        cdef double h
        if not self.windowed:
            if self.blocks[slot] == NULL:
                return 0.0
            return entropy_of(<KeyMap*>self.blocks[slot])
        n = self.active(slot, T, act)
        if n == 0:
            return 0.0
        acc = km_union_of(act, n, True, 0)
        h = entropy_of(acc)
        if acc != <KeyMap*>act[0]:
            free(acc)
        return h


# ---------------------------------------------------------------------------------------
# bloom_member (operators.md §11.4)
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
    cdef _Holder hold

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
        self.hold = _Holder()

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
        cdef uint64_t h1, h2, bit
        cdef Bloom* b
        cdef bint probe = True, found
        cdef int i
        cdef size_t size
        if not matched or self.field is None:
            return 0
        value = dict_get(row, self.field)
        if value == NULL or not keystr_key(<object>value, &key, self.hold):
            return 0
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

    cdef object read(self, Py_ssize_t slot, int64_t T):
        cdef Bloom* b = <Bloom*>self.blocks[slot]
        return b != NULL and b.last_probe == 1

    cpdef Py_ssize_t slot_bytes(self, Py_ssize_t slot):
        """Approximate heap bytes held for ``slot`` (its pointer included)."""
        cdef Bloom* b = <Bloom*>self.blocks[slot]
        if b == NULL:
            return sizeof(Bloom*)
        if b.dense:
            return sizeof(Bloom*) + fit(sizeof(Bloom) + self.m // 8) + 8
        return sizeof(Bloom*) + fit(sizeof(Bloom) + <size_t>b.cap * self.width) + 8

    cpdef object dump(self, Py_ssize_t nslots):
        cdef _Writer w = _Writer()
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
        return bytes(w.buf)

    cpdef load(self, object state, Py_ssize_t nslots):
        cdef _Reader r = _Reader(state_bytes(state, "bloom_member column"))
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


COLUMNS = {
    "n_unique": NUniqueColumn,
    "quantile": QuantileColumn,
    "top_k": TopKColumn,
    "bloom_member": BloomMemberColumn,
    "entropy": EntropyColumn,
}
