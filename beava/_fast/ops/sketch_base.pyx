# cython: language_level=3
"""What the sketch operators share (declared in sketch_base.pxd): state blocks, typed keys,
exact key maps, snapshot streams and the windowed bucket lists of ``SketchColumn``. The
operators are one module each: ops_n_unique, ops_quantile, ops_top_k, ops_entropy,
ops_bloom_member.

spec/operators.md §11 (semantics), §5 (windows) and §18 (sketches and accuracy).

Memory layout. Every slot owns one pointer. A lifetime feature points at one state block;
a windowed feature points at its newest bucket (at most 64 buckets, created only for epochs
that receive an event), and the newest bucket holds the pointers of the older ones in an
``Older`` array, ascending epoch. An event in the newest bucket's epoch touches that bucket
alone; one that creates a bucket reads the oldest's epoch to drop what has expired, where
walking a list of buckets would touch each (a cache miss apiece, for state an entity left
hours ago). A block starts with a ``Node`` (epoch, older) and a mode byte:

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
exist only for states that crossed the exact-mode thresholds. (bloom_member keeps its own
bit blocks, ops_bloom_member.pyx.)
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_FromLongLong
from cpython.ref cimport Py_DECREF, Py_INCREF
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DecodeUTF8
from libc.math cimport isfinite, isnan
from libc.stdio cimport snprintf
from libc.stdlib cimport free, malloc, qsort, realloc
from libc.string cimport memcpy, memmove, memset

from beava._fast.ops.column cimport Column
from beava._fast.ops.row cimport ROW_BOOL, ROW_FLOAT, ROW_INT, ROW_TEXT, Row, RowField, row_field
from beava._fast.wire.msgpack_out cimport Writer, put_bool, put_double, put_int, put_str
from beava._fast.wire.number_text cimport repr_double
from beava._fast.ops.slot_buffers cimport dict_get
from beava._fast.ops.snapshot_state cimport state_bytes
from beava._fast.ops.uddsketch cimport (
    udd_decode,
    udd_encode,
    udd_encoded_size,
    udd_heap_bytes,
    udd_release,
)
from beava._fast.ops.window cimport (
    MAX_BUCKETS,
    bucket_active,
    bucket_epoch,
    bucket_expired,
    bucket_width,
)

cdef uint64_t CANONICAL_NAN_BITS = 0x7FF8000000000000ULL
cdef uint64_t SIGN_BIT = 0x8000000000000000ULL

# Process-wide counter the server exports as a Prometheus metric (spec/server.md §8).
cdef uint64_t _bucket_reclaims = 0


def counters() -> dict:
    """Current values of this module's metric counters, by Prometheus metric name:
    evictions by the 64-bucket cap count as bucket reclaims."""
    return {"beava_bucket_reclaim_total": _bucket_reclaims}


cdef object _datasketches = None


cdef object datasketches():
    global _datasketches
    if _datasketches is None:
        import datasketches as module

        _datasketches = module
    return _datasketches


# ---------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------

cdef inline int varint_put(uint8_t* p, uint64_t v) noexcept nogil:
    cdef int n = 0
    while v >= 0x80:
        p[n] = <uint8_t>(v | 0x80)
        v >>= 7
        n += 1
    p[n] = <uint8_t>v
    return n + 1


cdef inline void put_be64(uint8_t* p, uint64_t v) noexcept nogil:
    cdef int i
    for i in range(8):
        p[i] = <uint8_t>(v >> (56 - 8 * i))


cdef inline uint64_t double_bits(double x) noexcept nogil:
    cdef uint64_t b
    memcpy(&b, &x, 8)
    return b


cdef inline double bits_double(uint64_t b) noexcept nogil:
    cdef double x
    memcpy(&x, &b, 8)
    return x


# ---------------------------------------------------------------------------------------
# Typed keys
# ---------------------------------------------------------------------------------------

cdef class KeyHolder:
    """Keeps the encoded bytes of a key alive while a KeyView points into them."""


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


cdef bint text_key(object s, KeyView* k, KeyHolder hold) except -1:
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


cdef bint typed_key(object v, KeyView* k, int float_mode, KeyHolder hold) except -1:
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


cdef bint keystr_key(object v, KeyView* k, KeyHolder hold) except -1:
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


cdef void field_typed_key(const RowField* f, KeyView* k, int float_mode) noexcept:
    """typed_key of a C row's field (its text a view of the body's bytes: ASCII, so its
    UTF-8)."""
    if f.tag == ROW_TEXT:
        k.tag = TAG_STR
        k.data = <const uint8_t*>f.text
        k.len = f.size
    elif f.tag == ROW_INT:
        key_fixed(k, TAG_INT, (<uint64_t>f.i) ^ SIGN_BIT)
    elif f.tag == ROW_FLOAT:
        key_fixed(k, TAG_FLOAT, float_key_bits(f.f, float_mode))
    else:
        k.tag = TAG_BOOL
        k.buf[0] = 1 if f.i else 0
        k.data = k.buf
        k.len = 1


cdef void field_keystr_key(const RowField* f, KeyView* k) noexcept:
    """keystr_key of a C row's field."""
    k.tag = TAG_STR
    if f.tag == ROW_TEXT:
        k.data = <const uint8_t*>f.text
        k.len = f.size
        return
    k.data = k.buf
    if f.tag == ROW_INT:
        k.len = snprintf(<char*>k.buf, 32, "%lld", <long long>f.i)
    elif f.tag == ROW_BOOL:
        memcpy(k.buf, b"true" if f.i else b"false", 4 if f.i else 5)
        k.len = 4 if f.i else 5
    else:
        k.len = repr_double(f.f, True, <char*>k.buf)


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


cdef int put_key(Writer* out, const KeyView* k) except -1:
    if k.tag == TAG_STR:
        return put_str(out, key_value(k))
    if k.tag == TAG_INT:
        return put_int(out, int_from_key(k.data))
    if k.tag == TAG_FLOAT:
        return put_double(out, float_from_key(k.data))
    return put_bool(out, k.data[0] == 1)


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

cdef inline void km_set_n(KeyMap* m, uint32_t n) noexcept nogil:
    m.n_high = <uint8_t>(n >> 16)
    m.n_low = <uint16_t>(n & 0xFFFF)


cdef KeyMap* km_new(size_t room) except NULL:
    cdef size_t cap = fit(KM_HEADER + room)
    cdef KeyMap* m = <KeyMap*>malloc(cap)
    if m == NULL:
        raise MemoryError()
    memset(m, 0, KM_HEADER)
    m.mode = MODE_KEYS
    m.cap = <uint32_t>cap
    return m


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
    b.node.older = like.older if like != NULL else NULL
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
    if isinstance(obj, datasketches().hll_sketch):
        return fit(sizeof(ObjBlock)) + 8 + obj.get_updatable_serialization_bytes()
    return fit(sizeof(ObjBlock)) + 8 + obj.get_serialized_size_bytes()


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


# ---------------------------------------------------------------------------------------
# Snapshot streams
# ---------------------------------------------------------------------------------------

cdef class SnapshotWriter:
    """A snapshot stream being written (little-endian fixed-width fields) into one C
    buffer: a column of many slots writes a few fields per slot, each copied in place."""

    def __dealloc__(self):
        free(self.data)

    cdef uint8_t* reserve(self, Py_ssize_t n) except NULL:
        cdef Py_ssize_t cap = self.cap
        cdef uint8_t* grown
        if self.size + n > cap:
            cap = max(2 * cap, self.size + n, 4096)
            grown = <uint8_t*>realloc(self.data, cap)
            if grown == NULL:
                raise MemoryError()
            self.data, self.cap = grown, cap
        grown = self.data + self.size
        self.size += n
        return grown

    cdef int raw(self, const void* p, Py_ssize_t n) except -1:
        memcpy(self.reserve(n), p, n)
        return 0

    cdef int u8(self, uint8_t v) except -1:
        self.reserve(1)[0] = v
        return 0

    cdef int u32(self, uint32_t v) except -1:
        memcpy(self.reserve(4), &v, 4)
        return 0

    cdef int i64(self, int64_t v) except -1:
        memcpy(self.reserve(8), &v, 8)
        return 0

    cdef bytes value(self):
        return PyBytes_FromStringAndSize(<const char*>self.data, self.size)


cdef class SnapshotReader:
    """A snapshot stream being read: every read checked against its end."""

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


cdef void dump_block(SnapshotWriter w, Node* b):
    cdef uint8_t mode = (<Head*>b).mode
    cdef KeyMap* m
    cdef QList* q
    cdef bytes blob
    cdef Py_ssize_t size
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
        size = udd_encoded_size(&(<QSketch*>b).sk)
        w.u32(<uint32_t>size)
        udd_encode(&(<QSketch*>b).sk, w.reserve(size))
    else:
        obj = <object>(<ObjBlock*>b).obj
        blob = (obj.serialize_updatable() if isinstance(obj, datasketches().hll_sketch)
                else obj.serialize())
        w.u32(<uint32_t>len(blob))
        w.raw(<const char*>blob, len(blob))


cdef Node* load_block(SnapshotReader r, uint8_t kind) except NULL:
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
            obj = datasketches().hll_sketch.deserialize(blob)
        else:
            obj = datasketches().frequent_strings_sketch.deserialize(blob)
        b = obj_block(obj, NULL)
    else:
        raise ValueError(f"snapshot sketch block of mode {mode} for op kind {kind}")
    b.epoch = epoch
    b.older = NULL
    return b


# ---------------------------------------------------------------------------------------
# Windowed/lifetime state management shared by the four windowable ops
# ---------------------------------------------------------------------------------------

cdef class SketchColumn(BlockColumn):
    """Per-slot block, or (windowed) the newest bucket with the older ones hanging from
    it (``Older``); subclasses define blocks and reads."""

    def __cinit__(self, *args, **kwargs):
        self.release = free_chain

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        Column.__init__(self, name, field, where, params, window_ms)
        self.windowed = window_ms is not None
        if self.windowed:
            self.window = window_ms
            self.width = bucket_width(self.window)
        self.hold = KeyHolder()
        self.takes_row = True

    cdef Node* new_block(self, object value) except NULL:
        # An empty state block, sized to take ``value`` (None: an unmatched event).
        raise NotImplementedError

    cdef int insert(self, Node** link, object value) except -1:
        # Apply one value; ``link[0]`` may be NULL (lifetime) and may be replaced.
        cdef KeyView k
        if self.key_mode == KEY_STR:
            if not keystr_key(value, &k, self.hold):
                return 0
        elif not typed_key(value, &k, self.key_mode, self.hold):
            return 0
        return self.insert_key(link, &k)

    cdef int insert_field(self, Node** link, const RowField* f) except -1:
        # ``insert`` of a C row's field.
        cdef KeyView k
        if self.key_mode == KEY_STR:
            field_keystr_key(f, &k)
        else:
            field_typed_key(f, &k, self.key_mode)
        return self.insert_key(link, &k)

    cdef int insert_key(self, Node** link, KeyView* k) except -1:
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

    cdef int update_row(self, Py_ssize_t slot, const Row* row, bint matched,
                        int64_t now) except -1:
        """``update`` of a C row. A bucket it creates starts empty, sized by its first
        insert (no object is built to size it)."""
        cdef Node** link
        cdef const RowField* f = NULL
        if matched and self.field is not None:
            f = row_field(row, self.field, &self.guess)
        if self.windowed:
            link = self.bucket_link(slot, now, None)
            if link == NULL:
                return 0
        else:
            link = <Node**>&self.blocks[slot]
        if f == NULL:
            return 0
        return self.insert_field(link, f)

    cdef Node** bucket_link(self, Py_ssize_t slot, int64_t now, object value) except? NULL:
        """The link to the bucket of ``now``, created if missing (operators.md §5) even
        for an unmatched event; NULL when that bucket is at once evicted as the smallest
        of 65. Creating one drops the buckets that can never be active again
        (e <= now - W), then the oldest while more than 64 are held."""
        cdef int64_t epoch = bucket_epoch(now, self.width)
        cdef Node** cell = <Node**>&self.blocks[slot]
        cdef Node* newest = cell[0]
        cdef Node* created
        cdef Older* older
        cdef Node** held
        cdef uint32_t at, dropped
        if newest != NULL and newest.epoch == epoch:
            return cell
        if newest == NULL or newest.epoch < epoch:
            # in time order: a new newest bucket, the previous one joins the older ones
            created = self.new_block(value)
            created.epoch = epoch
            created.older = NULL
            if newest != NULL and bucket_expired(newest.epoch, now, self.window):
                # the previous newest can never be active again, nor the older ones: all
                # go at once, as drop_buckets would drop them (none of them a reclaim)
                free_chain(newest)
            elif newest != NULL:
                try:
                    created.older = older_put(newest.older, newest.older.n
                                              if newest.older != NULL else 0, newest)
                except BaseException:
                    free_block(created)
                    raise
                newest.older = NULL
                drop_buckets(created, now, self.window)
            cell[0] = created
            return cell
        # out of time order: a bucket among the older ones
        older = newest.older
        at = older.n if older != NULL else 0
        held = older_at(older) if older != NULL else NULL
        while at > 0 and held[at - 1].epoch > epoch:
            at -= 1
        if at > 0 and held[at - 1].epoch == epoch:
            return &held[at - 1]
        created = self.new_block(value)
        created.epoch = epoch
        created.older = NULL
        try:
            newest.older = older_put(older, at, created)
        except BaseException:
            free_block(created)
            raise
        dropped = drop_buckets(newest, now, self.window)
        if at < dropped:
            return NULL
        return &older_at(newest.older)[at - dropped]

    cdef int active(self, Py_ssize_t slot, int64_t T, Node** out) noexcept:
        """Active buckets at ``T`` into ``out`` in ascending epoch order; their number.
        Newest first, up to the first bucket expired at ``T`` (those older are expired
        too): an entity idle for longer than the window costs a look at its newest."""
        cdef Node* newest = <Node*>self.blocks[slot]
        cdef Older* older
        cdef Node** held
        cdef Node* node
        cdef Node* tmp
        cdef int n = 0, i
        cdef uint32_t left
        if newest == NULL:
            return 0
        if bucket_active(newest.epoch, T, self.window):
            out[0] = newest
            n = 1
        elif newest.epoch <= T:
            return 0  # expired at T: the older list is not touched
        older = newest.older
        if older != NULL:
            held = older_at(older)
            left = older.n
            while left > 0:
                left -= 1
                node = held[left]
                if bucket_active(node.epoch, T, self.window):
                    out[n] = node
                    n += 1
                elif node.epoch <= T:
                    break  # expired at T, and every older one too
        for i in range(n // 2):
            tmp = out[i]
            out[i] = out[n - 1 - i]
            out[n - 1 - i] = tmp
        return n

    cpdef Py_ssize_t slot_bytes(self, Py_ssize_t slot):
        """Approximate heap bytes held for ``slot`` (its pointer included)."""
        cdef Py_ssize_t total = sizeof(Node*)
        cdef Node* newest = <Node*>self.blocks[slot]
        cdef Older* older
        cdef uint32_t i
        if newest == NULL:
            return total
        total += block_bytes(newest)
        older = newest.older
        if older != NULL:
            total += older_size(older.cap) + 8
            for i in range(older.n):
                total += block_bytes(older_at(older)[i])
        return total

    def bucket_epochs(self, Py_ssize_t slot) -> list:
        """Epochs of the buckets held for ``slot``, newest first (tests, diagnostics)."""
        cdef Node* newest = <Node*>self.blocks[slot] if self.windowed else NULL
        cdef Older* older
        cdef uint32_t i
        if newest == NULL:
            return []
        out = [newest.epoch]
        older = newest.older
        if older != NULL:
            for i in range(older.n):
                out.append(older_at(older)[older.n - 1 - i].epoch)
        return out

    cpdef object dump(self, Py_ssize_t nslots):
        cdef SnapshotWriter w = SnapshotWriter()
        cdef Py_ssize_t slot
        cdef Node* newest
        cdef Older* older
        cdef uint32_t i
        w.u8(SNAPSHOT_FORMAT)
        w.u8(self.kind)
        w.u8(self.windowed)
        w.u32(<uint32_t>nslots)
        for slot in range(nslots):
            # the slot's buckets newest first
            newest = <Node*>self.blocks[slot] if slot < self.capacity else NULL
            if newest == NULL:
                w.u8(0)
                continue
            older = newest.older
            w.u8(1 + (older.n if older != NULL else 0))
            dump_block(w, newest)
            if older != NULL:
                for i in range(older.n):
                    dump_block(w, older_at(older)[older.n - 1 - i])
        return w.value()

    cpdef load(self, object state, Py_ssize_t nslots):
        cdef SnapshotReader r = SnapshotReader(state_bytes(state, "sketch column"))
        cdef Py_ssize_t slot
        cdef int count, i
        cdef Node* newest
        cdef Node* block
        cdef int64_t newer = 0
        newest = NULL
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
                for i in range(count):
                    # newest first: each block is held (and so freed on an error) before
                    # it is checked; an older one goes in front of the older list
                    block = load_block(r, self.kind)
                    if i == 0:
                        newest = block
                        self.blocks[slot] = block
                    else:
                        try:
                            newest.older = older_put(newest.older, 0, block)
                        except BaseException:
                            free_block(block)
                            raise
                    if i and block.epoch >= newer:
                        raise ValueError(f"snapshot sketch buckets of slot {slot} out of order")
                    newer = block.epoch
            if r.at != r.data.shape[0]:
                raise ValueError("trailing bytes in sketch column snapshot")
        except BaseException:
            for slot in range(nslots):
                self.clear(slot)
            raise


cdef void free_chain(void* head) noexcept:
    # The BlockRelease of sketch columns: a slot's block, or its newest bucket and the
    # older ones.
    cdef Node* newest = <Node*>head
    cdef Older* older
    cdef uint32_t i
    if newest == NULL:
        return
    older = newest.older
    if older != NULL:
        for i in range(older.n):
            free_block(older_at(older)[i])
        free(older)
    free_block(newest)


cdef inline Node** older_at(Older* older) noexcept nogil:
    # the bucket pointers after the header
    return <Node**>(<char*>older + sizeof(Older))


cdef inline size_t older_size(uint32_t cap) noexcept nogil:
    return sizeof(Older) + cap * sizeof(Node*)


cdef Older* older_put(Older* older, uint32_t at, Node* bucket) except NULL:
    """``older`` (NULL: none yet) with ``bucket`` at position ``at``, grown when full (to
    what its glibc chunk holds; 64 at most: one more than the 63 a slot keeps beside its
    newest, held until the new bucket's drops); a bucket put first gives its epoch to
    ``oldest``."""
    cdef uint32_t n = older.n if older != NULL else 0
    cdef uint32_t cap
    cdef Older* grown
    cdef Node** held
    if older == NULL or n == older.cap:
        cap = <uint32_t>((fit(older_size(4 if older == NULL else 2 * older.cap))
                          - sizeof(Older)) // sizeof(Node*))
        if cap > MAX_BUCKETS:
            cap = MAX_BUCKETS
        grown = <Older*>realloc(older, older_size(cap))
        if grown == NULL:
            raise MemoryError()
        grown.n = n
        grown.cap = cap
        older = grown
    held = older_at(older)
    memmove(held + at + 1, held + at, (n - at) * sizeof(Node*))
    held[at] = bucket
    older.n = n + 1
    if at == 0:
        older.oldest = bucket.epoch
    return older


cdef uint32_t drop_buckets(Node* newest, int64_t now, int64_t window) noexcept:
    """Drop the older buckets of ``newest`` that can never be active again
    (e <= now - W), then the oldest while more than 64 are held (each a bucket reclaim);
    how many went. While the oldest has not expired (its epoch in the header), no bucket
    is read."""
    global _bucket_reclaims
    cdef Older* older = newest.older
    cdef Node** held
    cdef uint32_t stale = 0, dropped, i
    if older == NULL:
        return 0
    held = older_at(older)
    if bucket_expired(older.oldest, now, window):
        while stale < older.n and bucket_expired(held[stale].epoch, now, window):
            stale += 1
    dropped = stale
    if 1 + older.n - dropped > MAX_BUCKETS:
        dropped = 1 + older.n - MAX_BUCKETS
    if dropped == 0:
        return 0
    for i in range(dropped):
        if i >= stale:
            _bucket_reclaims += 1
        free_block(held[i])
    older.n -= dropped
    if older.n == 0:
        free(older)
        newest.older = NULL
    else:
        memmove(held, held + dropped, older.n * sizeof(Node*))
        older.oldest = held[0].epoch
    return dropped
