# Declarations of sketch_base.pyx: the state blocks, typed keys, exact key maps, snapshot
# streams and windowed bucket lists the sketch operators share (ops_n_unique, ops_quantile,
# ops_top_k, ops_entropy, ops_bloom_member). The helpers a push runs through are inline here,
# so each operator module compiles them into its own code (no call across modules).
from cpython.ref cimport PyObject
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcmp

from beava._fast.ops.block_column cimport BlockColumn
from beava._fast.ops.row cimport RowField
from beava._fast.ops.uddsketch cimport UddSketch
from beava._fast.wire.msgpack_out cimport Writer

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
    KEY_STR = 2         # entropy: a value's keystr, not its typed identity
    SNAPSHOT_FORMAT = 1
    # the exact list of quantile (spec/operators.md §11.2, §18.2): at most this many values
    QUANTILE_EXACT_MAX = 256

# Snapshot kind codes, one per op.
cdef enum:
    KIND_N_UNIQUE = 1
    KIND_QUANTILE = 2
    KIND_TOP_K = 3
    KIND_ENTROPY = 4
    KIND_BLOOM = 5

cdef enum:
    KM_HEADER = 28       # bytes of KeyMap up to ``cap`` (offsets start there, not at sizeof)
    KM_TIGHT = 256       # below this many bytes a KeyMap grows to exactly what it needs
    # km_offer outcomes
    KM_FOUND = 0
    KM_INSERTED = 1
    KM_FULL = 2


# -- state blocks (layout: sketch_base.pyx) -------------------------------------------------

cdef struct Older


cdef struct Node:
    int64_t epoch        # bucket epoch (windowed), 0 (lifetime)
    Older* older         # on a windowed slot's newest bucket, the slot's older buckets; NULL
                         # on every other block


cdef struct Older:
    # A windowed slot's buckets older than its newest, ascending epoch: ``n`` bucket
    # pointers follow this header (room for ``cap``). The newest bucket stays the slot's
    # cell, so an event in its bucket touches what the cell points to, as in lifetime mode;
    # the oldest bucket, the one a new bucket may drop, is the first pointer, and its epoch
    # is kept here too: a new bucket's test for expired buckets reads no bucket while none
    # has expired.
    uint32_t n
    uint32_t cap
    int64_t oldest


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


cdef struct KeyView:
    # A key to look up: ``data``/``len`` point into a str's UTF-8 buffer or into ``buf``.
    const uint8_t* data
    Py_ssize_t len
    uint8_t tag
    uint8_t buf[32]


cdef class KeyHolder:
    # Keeps the encoded bytes of a key alive while a KeyView points into them.
    cdef object value


# The datasketches module, imported when a sketch is first needed: importing it pulls in
# numpy (~50 ms), which must stay off the server's start-up path.
cdef object datasketches()


# -- typed keys ---------------------------------------------------------------------------

# The typed identity of a value (n_unique, top_k); False for null and non-scalars.
cdef bint typed_key(object v, KeyView* k, int float_mode, KeyHolder hold) except -1
# ``keystr(v)`` (operators.md §1) as a text key (entropy, bloom_member).
cdef bint keystr_key(object v, KeyView* k, KeyHolder hold) except -1
# typed_key and keystr_key of a C row's field (row.pxd; text is a view of its bytes).
cdef void field_typed_key(const RowField* f, KeyView* k, int float_mode) noexcept
cdef void field_keystr_key(const RowField* f, KeyView* k) noexcept
# The Python value of a stored typed key.
cdef object key_value(const KeyView* k)
# The same value appended to ``out`` as the reply encoder writes it (a number without a
# Python object).
cdef int put_key(Writer* out, const KeyView* k) except -1
# A typed key as a type-prefixed sketch item (operators.md §18.1, §18.3), and back (top_k
# items: (sort key, value)).
cdef str feed_string(const KeyView* k, bint debug_floats)
cdef tuple parse_feed_string(str item)


# -- exact key maps and other blocks ------------------------------------------------------

cdef KeyMap* km_new(size_t room) except NULL
# Insert key ``k`` at index ``idx`` (with ``count`` when ``counted``).
cdef int km_insert(KeyMap** mp, uint32_t idx, const KeyView* k, bint counted,
                   uint64_t count) except -1
# Add ``delta`` to the count of entry ``idx`` (its varint may grow by a byte).
cdef int km_add(KeyMap** mp, uint32_t idx, uint64_t delta) except -1
# Keys of both maps, counts added; NULL when the union has more than ``limit`` keys
# (``limit`` 0 = no limit).
cdef KeyMap* km_union(KeyMap* a, KeyMap* b, bint counted, uint32_t limit) except? NULL
# The union of the KeyMaps ``maps[0..n)`` (n >= 1, counts added): ``maps[0]`` itself when
# n == 1, else a new map the caller frees; NULL when it has more than ``limit`` keys.
cdef KeyMap* km_union_of(Node** maps, int n, bint counted, uint32_t limit) except? NULL
# ``target.update`` with the HLL item of every key of an n_unique map, in insertion order.
cdef int km_feed_hll(KeyMap* m, object target) except -1
# A block holding ``obj`` (a DataSketches object) in the place of ``like`` (its epoch and
# next), or a lifetime block when ``like`` is NULL.
cdef Node* obj_block(object obj, Node* like) except NULL
cdef QList* ql_new(uint32_t cap) except NULL
# Put the values appended since the list was last in order into it (see sketch_base.pyx).
cdef void ql_sort(QList* q) noexcept nogil


cdef class SnapshotWriter:
    # one C buffer grown by doubling: a field is copied in place, no object per field
    cdef uint8_t* data
    cdef Py_ssize_t size, cap
    # the next ``n`` bytes of the stream, to be filled by the caller (MemoryError)
    cdef uint8_t* reserve(self, Py_ssize_t n) except NULL
    cdef int raw(self, const void* p, Py_ssize_t n) except -1
    cdef int u8(self, uint8_t v) except -1
    cdef int u32(self, uint32_t v) except -1
    cdef int i64(self, int64_t v) except -1
    # the stream written so far
    cdef bytes value(self)


cdef class SnapshotReader:
    cdef const uint8_t[::1] data
    cdef Py_ssize_t at
    # the next ``n`` bytes (ValueError when the stream ends before them)
    cdef const uint8_t* take(self, Py_ssize_t n) except NULL
    cdef uint8_t u8(self) except? 0xFF
    cdef uint32_t u32(self) except? 0xFFFFFFFF
    cdef int64_t i64(self) except? -1


cdef class SketchColumn(BlockColumn):
    # Per-slot block, or (windowed) the newest bucket with the older ones hanging from it
    # (``Older``); subclasses define blocks and reads.
    cdef bint windowed
    cdef int64_t window
    cdef int64_t width
    cdef uint8_t kind
    cdef KeyHolder hold
    cdef uint8_t guess      # where the last C row had ``field`` (row.pxd's row_field)
    cdef int key_mode       # how insert keys a value: FLOAT_BY_BITS, FLOAT_BY_VALUE, KEY_STR
    # An empty state block, sized to take ``value`` (None: an unmatched event).
    cdef Node* new_block(self, object value) except NULL
    # Apply one value; ``link[0]`` may be NULL (lifetime) and may be replaced.
    cdef int insert(self, Node** link, object value) except -1
    # The same for a C row's field (row.pxd)
    cdef int insert_field(self, Node** link, const RowField* f) except -1
    # What insert and insert_field do once the value is a key (key_mode says how it is made)
    cdef int insert_key(self, Node** link, KeyView* k) except -1
    cdef Node** bucket_link(self, Py_ssize_t slot, int64_t now, object value) except? NULL
    # Active buckets at ``T`` into ``out`` in ascending epoch order; their number.
    cdef int active(self, Py_ssize_t slot, int64_t T, Node** out) noexcept
    # Approximate heap bytes held for ``slot`` (its pointer included).
    cpdef Py_ssize_t slot_bytes(self, Py_ssize_t slot)


# -- inline helpers -----------------------------------------------------------------------

cdef inline size_t fit(size_t request) noexcept nogil:
    # Largest size served by the same glibc chunk as ``request`` (chunks are 16k + 8 usable).
    return ((request + 8 + 15) & ~(<size_t>15)) - 8


cdef inline int varint_size(uint64_t v) noexcept nogil:
    cdef int n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


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


cdef inline uint64_t get_be64(const uint8_t* p) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(8):
        v = (v << 8) | p[i]
    return v


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


cdef inline uint32_t km_n(const KeyMap* m) noexcept nogil:
    return (<uint32_t>m.n_high << 16) | m.n_low


cdef inline uint32_t* km_offs(KeyMap* m) noexcept nogil:
    return <uint32_t*>(<uint8_t*>m + KM_HEADER)


cdef inline uint8_t* km_entry(KeyMap* m, uint32_t off) noexcept nogil:
    # entries are addressed by their distance from the end of the block
    return <uint8_t*>m + m.cap - off


cdef inline double* ql_values(QList* q) noexcept nogil:
    return <double*>(<uint8_t*>q + sizeof(QList))


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


cdef inline uint32_t km_search(KeyMap* m, const KeyView* k, bint counted,
                               bint* found) noexcept nogil:
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
