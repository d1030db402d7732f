# cython: language_level=3
"""Family A of spec/operators.md §10: count, sum, mean, min, max, var, std, ratio.

Every op keeps a small fixed-size *cell* per slot (lifetime) or per bucket (windowed);
all-zero bytes are the empty state of every cell:

    count        n                   8 bytes
    sum, mean    total, n            16 bytes
    min, max     tag, value          16 bytes   (str/bool/other values: an ObjectTable handle)
    var, std     n, mean, m2         24 bytes
    ratio        matched, total      16 bytes

Lifetime columns hold one cell per slot in one flat buffer. Windowed columns are *views*
into a ``BucketArena``: per slot only the live buckets (epoch + one cell per member column),
kept sorted by epoch in a small block of a slab pool (DESIGN.md §3). ``share_windows`` puts
every windowed core column of a table with the same window length on one arena, so an
entity that saw two events holds one or two buckets for all of them together.
"""

cimport cython
from cpython.list cimport PyList_GET_ITEM
from cpython.mem cimport PyMem_Free
from cpython.ref cimport PyObject
from libc.math cimport sqrt
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy, memmove, memset

from beava._fast.ops.column cimport (
    VALUE_FLOAT,
    VALUE_INT,
    VALUE_NULL,
    VALUE_OBJECT,
    Column,
    Number,
    prefetch_line,
)
from beava._fast.ops.moments cimport Moments, moments_add
from beava._fast.ops.row cimport (
    ROW_BOOL,
    ROW_FLOAT,
    ROW_INT,
    Row,
    RowField,
    field_number,
    field_object,
    row_field,
)
from beava._fast.ops.slot_buffers cimport grow_zeroed, row_number
from beava._fast.ops.snapshot_state cimport state_buffer, state_bytes, state_dict, state_list
from beava._fast.ops.window cimport (
    MAX_BUCKETS,
    bucket_active,
    bucket_epoch,
    bucket_expired,
    bucket_width,
)


cdef extern from "Python.h":
    ctypedef struct PyTypeObject:
        pass
    PyTypeObject PyFloat_Type
    PyTypeObject PyLong_Type
    PyTypeObject* Py_TYPE(PyObject* o)
    double float_value "PyFloat_AS_DOUBLE"(PyObject* o)
    long long long_as_i64 "PyLong_AsLongLongAndOverflow"(PyObject* o, int* overflow) except? -1
    PyObject* dict_get "PyDict_GetItem"(object d, object key)
    PyObject* Py_True
    PyObject* Py_False


# --- cells --------------------------------------------------------------------------------

ctypedef struct CountCell:
    int64_t n

ctypedef struct SumCell:
    double total
    int64_t n

ctypedef Moments WelfordCell   # n, mean, m2

ctypedef struct RatioCell:
    int64_t matched
    int64_t total

ctypedef union Scalar:
    int64_t i
    double d
    int64_t handle      # index into an ObjectTable (TAG_OBJ)

ctypedef struct ExtremeCell:
    int64_t tag
    Scalar v

cdef enum:              # ExtremeCell.tag
    TAG_EMPTY = 0
    TAG_I64 = 1
    TAG_F64 = 2
    TAG_OBJ = 3         # str, bool or any other non-null value, held in an ObjectTable

cdef enum Kind:
    K_COUNT = 0
    K_SUM = 1
    K_MEAN = 2
    K_MIN = 3
    K_MAX = 4
    K_VAR = 5
    K_STD = 6
    K_RATIO = 7

KIND_NAMES = ("count", "sum", "mean", "min", "max", "var", "std", "ratio")

cdef Py_ssize_t cell_size(int kind) noexcept:
    if kind == K_COUNT:
        return sizeof(CountCell)
    if kind == K_SUM or kind == K_MEAN:
        return sizeof(SumCell)
    if kind == K_MIN or kind == K_MAX:
        return sizeof(ExtremeCell)
    if kind == K_VAR or kind == K_STD:
        return sizeof(WelfordCell)
    return sizeof(RatioCell)


@cython.final
cdef class ObjectTable:
    """Handles for the non-numeric values held by min/max cells (cells are plain bytes)."""

    cdef list items
    cdef list spare

    def __cinit__(self):
        self.items = []
        self.spare = []

    cdef int64_t put(self, object value) except -1:
        cdef int64_t h
        if self.spare:
            h = self.spare.pop()
            self.items[h] = value
            return h
        self.items.append(value)
        return len(self.items) - 1

    cdef inline object get(self, int64_t h):
        return self.items[h]

    cdef inline void set(self, int64_t h, object value):
        self.items[h] = value

    cdef int release(self, int64_t h) except -1:
        self.items[h] = None
        self.spare.append(h)
        return 0

    cdef list snapshot(self):
        return list(self.items)


cdef inline object extreme_value(ExtremeCell* c, ObjectTable objs):
    if c.tag == TAG_I64:
        return c.v.i
    if c.tag == TAG_F64:
        return c.v.d
    if c.tag == TAG_OBJ:
        return objs.get(c.v.handle)
    return None


cdef inline int extreme_number(ExtremeCell* c, ObjectTable objs, Number* out) except -1:
    """extreme_value's value as Column.number() gives it."""
    if c.tag == TAG_I64:
        out.i = c.v.i
        return VALUE_INT
    if c.tag == TAG_F64:
        out.f = c.v.d
        return VALUE_FLOAT
    if c.tag == TAG_OBJ:
        out.o = PyList_GET_ITEM(objs.items, c.v.handle)  # the table holds it
        return VALUE_OBJECT
    return VALUE_NULL


cdef inline int ratio(int64_t matched, int64_t total, Number* out) noexcept:
    if not total:
        return VALUE_NULL
    out.f = matched / <double>total
    return VALUE_FLOAT


cdef inline bint valid_handle(int64_t h, list objs) noexcept:
    """Whether a snapshot min/max cell's handle names a value of its ``objs`` list."""
    return 0 <= h < len(objs) and objs[h] is not None


cdef bint objects_less(object a, object b) except -1:
    """§10.4 comparison when a side is not an I64/F64 cell: str vs str by code point,
    numbers as doubles, everything else not comparable."""
    ta = type(a)
    tb = type(b)
    if ta is str and tb is str:
        return a < b
    if (ta is int or ta is float) and (tb is int or tb is float):
        return float(a) < float(b)
    return False


cdef bint extreme_less(ExtremeCell* a, ObjectTable objs_a,
                       ExtremeCell* b, ObjectTable objs_b) except -1:
    """a < b under §10.4 (any comparison with NaN is false)."""
    if a.tag == TAG_I64 and b.tag == TAG_I64:
        return a.v.i < b.v.i
    if a.tag == TAG_OBJ or b.tag == TAG_OBJ:
        return objects_less(extreme_value(a, objs_a), extreme_value(b, objs_b))
    cdef double x = <double>a.v.i if a.tag == TAG_I64 else a.v.d
    cdef double y = <double>b.v.i if b.tag == TAG_I64 else b.v.d
    return x < y


cdef int extreme_feed(ExtremeCell* c, PyObject* v, bint is_max, ObjectTable objs) except -1:
    """Offer value ``v`` (borrowed, may be NULL = absent) to a min/max cell."""
    if v == NULL or v == <PyObject*>None:
        return 0
    cdef ExtremeCell cand
    cdef PyTypeObject* t = Py_TYPE(v)
    cdef int overflow = 0
    cdef bint replace
    if t == &PyFloat_Type:
        cand.tag = TAG_F64
        cand.v.d = float_value(v)
    elif t == &PyLong_Type:
        cand.v.i = long_as_i64(v, &overflow)
        cand.tag = TAG_OBJ if overflow else TAG_I64
    else:
        cand.tag = TAG_OBJ
    if cand.tag != TAG_OBJ:
        return extreme_offer(c, &cand, is_max, objs)
    if c.tag == TAG_EMPTY:
        c.v.handle = objs.put(<object>v)
        c.tag = TAG_OBJ
        return 0
    if is_max:
        replace = objects_less(extreme_value(c, objs), <object>v)
    else:
        replace = objects_less(<object>v, extreme_value(c, objs))
    if replace:
        if c.tag == TAG_OBJ:
            objs.set(c.v.handle, <object>v)
        else:
            c.v.handle = objs.put(<object>v)
            c.tag = TAG_OBJ
    return 0


cdef int extreme_offer(ExtremeCell* c, ExtremeCell* cand, bint is_max,
                       ObjectTable objs) except -1:
    """Offer a number (an I64 or F64 candidate) to a min/max cell."""
    cdef bint replace
    if c.tag == TAG_EMPTY:
        c[0] = cand[0]
        return 0
    if is_max:
        replace = extreme_less(c, objs, cand, objs)
    else:
        replace = extreme_less(cand, objs, c, objs)
    if replace:
        if c.tag == TAG_OBJ:
            objs.release(c.v.handle)
        c[0] = cand[0]
    return 0


cdef int extreme_feed_field(ExtremeCell* c, const RowField* f, bint is_max,
                            ObjectTable objs) except -1:
    """extreme_feed of a row field (NULL: absent): a number without an object; a boolean
    or a text as the object the cell would hold."""
    cdef ExtremeCell cand
    if f == NULL:
        return 0
    if f.tag == ROW_INT:
        cand.tag = TAG_I64
        cand.v.i = f.i
        return extreme_offer(c, &cand, is_max, objs)
    if f.tag == ROW_FLOAT:
        cand.tag = TAG_F64
        cand.v.d = f.f
        return extreme_offer(c, &cand, is_max, objs)
    if f.tag == ROW_BOOL:
        return extreme_feed(c, Py_True if f.i else Py_False, is_max, objs)
    text = field_object(f)
    return extreme_feed(c, <PyObject*>text, is_max, objs)


cdef inline void chan_merge(WelfordCell* acc, WelfordCell* b) noexcept:
    """Fold bucket ``b`` (n > 0) into ``acc`` (operators.md §5)."""
    if acc.n == 0:
        acc[0] = b[0]
        return
    cdef int64_t n = acc.n + b.n
    cdef double delta = b.mean - acc.mean
    acc.mean = acc.mean + delta * b.n / n
    acc.m2 = acc.m2 + b.m2 + delta * delta * acc.n * b.n / n
    acc.n = n


# --- the bucket arena ---------------------------------------------------------------------

# Process-wide counter the server exports (spec/server.md, beava_bucket_reclaim_total):
# one per feature bucket evicted by the 64-bucket cap.
cdef uint64_t _bucket_reclaims = 0


def counters() -> dict:
    """This module's metric counters, by Prometheus metric name."""
    return {"beava_bucket_reclaim_total": _bucket_reclaims}


# Live buckets of one slot in one arena at most (window.pxd), for Python callers.
BUCKETS_PER_SLOT = MAX_BUCKETS


ctypedef struct SlotBlock:
    uint32_t off        # first record of the block, in records
    uint8_t n           # live buckets, ascending epoch
    uint8_t cls         # 0 = no block; else capacity 1 << (cls - 1) records

cdef enum:
    NUM_CLASSES = 7                 # block capacities 1, 2, 4, ..., 64 buckets
    EPOCH_SIZE = sizeof(int64_t)    # every record starts with its bucket epoch

cdef uint32_t NO_BLOCK = 0xFFFFFFFFu

ctypedef struct CellMap:        # one member's cell between a record and its dumped form
    Py_ssize_t src
    Py_ssize_t dst
    Py_ssize_t size
    bint extreme


cdef inline int64_t rec_epoch(char* rec) noexcept:
    return (<int64_t*>rec)[0]


cdef inline int class_for(int n) noexcept:
    cdef int cls = 1
    while (1 << (cls - 1)) < n:
        cls += 1
    return cls


@cython.final
cdef class BucketArena(Column):
    """The live buckets of every windowed core column of one table and one window length.

    Per slot a block of records ``[epoch | cell of member 0 | cell of member 1 | ...]``
    sorted by epoch, at most 64. Blocks come from one slab pool (capacities 1..64 records,
    free lists per capacity), addressed by record offset, so a slot costs an 8-byte header
    plus its live records. It is the *state* column of its members: the table ensures,
    clears, dumps and loads the arena; each member only updates and reads its own cells.
    """

    cdef readonly int64_t window
    cdef int64_t width
    cdef readonly Py_ssize_t rsize
    cdef readonly tuple members
    cdef SlotBlock* blocks
    cdef char* pool
    cdef uint32_t pool_used
    cdef uint32_t pool_cap
    cdef uint32_t free_head[NUM_CLASSES]
    cdef char* scratch
    cdef Py_ssize_t* extreme_offs
    cdef Py_ssize_t nextreme
    cdef ObjectTable objs
    # (slot, now) -> record of the last locate: the other members of the same event hit it
    cdef Py_ssize_t c_slot
    cdef int64_t c_now
    cdef char* c_rec
    cdef readonly int64_t bucket_reclaims

    def __init__(self, int64_t window_ms, members):
        Column.__init__(self, "", None, None, {}, window_ms)
        self.window = window_ms
        self.width = bucket_width(window_ms)
        self.objs = ObjectTable()
        self.c_slot = -1
        for k in range(NUM_CLASSES):
            self.free_head[k] = NO_BLOCK
        self.members = tuple(members)
        cdef Py_ssize_t off = EPOCH_SIZE
        cdef CoreColumn m
        offs = []
        for m in self.members:
            if m.kind == K_MIN or m.kind == K_MAX:
                offs.append(off)
            m.arena = self
            m.off = off
            off += m.csize
        self.rsize = off
        self.scratch = <char*>realloc(NULL, self.rsize)
        self.nextreme = len(offs)
        self.extreme_offs = <Py_ssize_t*>realloc(NULL, (self.nextreme + 1) * sizeof(Py_ssize_t))
        if self.scratch == NULL or self.extreme_offs == NULL:
            raise MemoryError()
        memset(self.scratch, 0, self.rsize)
        for k in range(self.nextreme):
            self.extreme_offs[k] = offs[k]

    def __dealloc__(self):
        PyMem_Free(self.blocks)
        free(self.pool)
        free(self.scratch)
        free(self.extreme_offs)

    # -- pool ------------------------------------------------------------------------------

    cdef uint32_t alloc_block(self, int cls) except? 0xFFFFFFFFu:
        cdef uint32_t off = self.free_head[cls - 1]
        cdef uint32_t size = 1u << (cls - 1)
        cdef size_t want
        cdef char* grown
        if off != NO_BLOCK:
            self.free_head[cls - 1] = (<uint32_t*>(self.pool + <size_t>off * self.rsize))[0]
            return off
        if <size_t>self.pool_used + size > self.pool_cap:
            want = max(<size_t>self.pool_used + size, <size_t>self.pool_cap * 5 // 4, <size_t>64)
            if want >= NO_BLOCK:
                raise MemoryError("bucket arena full")
            grown = <char*>realloc(self.pool, want * self.rsize)
            if grown == NULL:
                raise MemoryError()
            self.pool = grown
            self.pool_cap = <uint32_t>want
            self.c_slot = -1
        off = self.pool_used
        self.pool_used += size
        return off

    cdef inline void free_block(self, uint32_t off, int cls) noexcept:
        (<uint32_t*>(self.pool + <size_t>off * self.rsize))[0] = self.free_head[cls - 1]
        self.free_head[cls - 1] = off

    cdef inline char* block_base(self, SlotBlock* b) noexcept:
        return self.pool + <size_t>b.off * self.rsize

    cdef int move_block(self, Py_ssize_t slot, int cls) except -1:
        """Give ``slot`` a block of class ``cls`` holding its current records."""
        cdef uint32_t off = self.alloc_block(cls)
        cdef SlotBlock* b = &self.blocks[slot]
        if b.n:
            memcpy(self.pool + <size_t>off * self.rsize, self.block_base(b), b.n * self.rsize)
        if b.cls:
            self.free_block(b.off, b.cls)
        b.off = off
        b.cls = cls
        return 0

    cdef int release_objects(self, char* rec) except -1:
        cdef Py_ssize_t k
        cdef ExtremeCell* c
        for k in range(self.nextreme):
            c = <ExtremeCell*>(rec + self.extreme_offs[k])
            if c.tag == TAG_OBJ:
                self.objs.release(c.v.handle)
                c.tag = TAG_EMPTY
        return 0

    # -- buckets ---------------------------------------------------------------------------

    cdef char* insert(self, Py_ssize_t slot, int pos, int64_t epoch) except NULL:
        """A new zeroed bucket at sorted position ``pos``; at the 64-bucket cap the bucket
        with the smallest epoch goes (the new one itself when it is the smallest)."""
        cdef SlotBlock* b = &self.blocks[slot]
        cdef char* base
        cdef char* rec
        global _bucket_reclaims
        if b.n == MAX_BUCKETS:
            self.bucket_reclaims += len(self.members)
            _bucket_reclaims += len(self.members)
            if pos == 0:
                # the new bucket itself is the smallest: the event lands in a scratch record
                rec = self.scratch
                self.release_objects(rec)
            else:
                base = self.block_base(b)
                self.release_objects(base)
                memmove(base, base + self.rsize, (pos - 1) * self.rsize)
                rec = base + (pos - 1) * self.rsize
            memset(rec, 0, self.rsize)
            (<int64_t*>rec)[0] = epoch
            return rec
        if b.cls == 0 or b.n == (1 << (b.cls - 1)):
            self.move_block(slot, class_for(b.n + 1))
        base = self.block_base(b)
        rec = base + pos * self.rsize
        memmove(rec + self.rsize, rec, (b.n - pos) * self.rsize)
        memset(rec, 0, self.rsize)
        (<int64_t*>rec)[0] = epoch
        b.n += 1
        return rec

    cdef char* find_or_insert(self, Py_ssize_t slot, int64_t epoch) except NULL:
        cdef SlotBlock* b = &self.blocks[slot]
        cdef char* base = self.block_base(b)
        cdef int i = b.n - 1
        while i >= 0 and rec_epoch(base + i * self.rsize) > epoch:
            i -= 1
        if i >= 0 and rec_epoch(base + i * self.rsize) == epoch:
            return base + i * self.rsize
        return self.insert(slot, i + 1, epoch)

    cdef int drop_stale(self, Py_ssize_t slot, int64_t now) except -1:
        """Drop buckets with ``e <= now - W`` (inactive for every T >= now; §5 allows it),
        and give the slot a smaller block when it became mostly empty."""
        cdef SlotBlock* b = &self.blocks[slot]
        cdef char* base = self.block_base(b)
        cdef int k = 0
        while k < b.n and bucket_expired(rec_epoch(base + k * self.rsize), now, self.window):
            self.release_objects(base + k * self.rsize)
            k += 1
        if k == 0:
            return 0
        memmove(base, base + k * self.rsize, (b.n - k) * self.rsize)
        b.n -= k
        if (b.n + 1) * 4 <= (1 << (b.cls - 1)):
            self.move_block(slot, class_for(b.n + 1))
        return 0

    cdef char* locate(self, Py_ssize_t slot, int64_t now) except NULL:
        """The record of the bucket of ``now`` for ``slot``, created if missing (§5)."""
        if slot == self.c_slot and now == self.c_now:
            return self.c_rec
        cdef SlotBlock* b = &self.blocks[slot]
        cdef char* rec = NULL
        cdef int64_t last
        if b.n:
            # usual case: ``now`` falls in the newest bucket (no division needed)
            rec = self.block_base(b) + (b.n - 1) * self.rsize
            last = rec_epoch(rec)
            if not (last <= now and now - last < self.width):
                self.drop_stale(slot, now)
                rec = NULL
        if rec == NULL:
            rec = self.find_or_insert(slot, bucket_epoch(now, self.width))
        self.c_slot = slot
        self.c_now = now
        self.c_rec = rec
        return rec

    cdef inline int records(self, Py_ssize_t slot, char** base) noexcept:
        """Live buckets of ``slot`` (count; ``base`` = first record)."""
        cdef SlotBlock* b = &self.blocks[slot]
        base[0] = self.block_base(b)
        return b.n

    # -- Column state interface ------------------------------------------------------------

    cdef void prefetch(self, Py_ssize_t slot, int stage) noexcept:
        """Stage 1: the newest record, where an event usually lands."""
        cdef SlotBlock* b = &self.blocks[slot]
        if stage == 0:
            prefetch_line(b)
        elif stage == 1 and b.n:
            prefetch_line(self.block_base(b) + (b.n - 1) * self.rsize)

    cdef int ensure(self, Py_ssize_t capacity) except -1:
        if capacity <= self.capacity:
            return 0
        self.blocks = <SlotBlock*>grow_zeroed(self.blocks, self.capacity, capacity,
                                              sizeof(SlotBlock))
        self.capacity = capacity
        self.c_slot = -1
        return 0

    cdef int clear(self, Py_ssize_t slot) except -1:
        cdef SlotBlock* b = &self.blocks[slot]
        cdef char* base = self.block_base(b)
        cdef int k
        if self.nextreme:
            for k in range(b.n):
                self.release_objects(base + k * self.rsize)
        if b.cls:
            self.free_block(b.off, b.cls)
        b.n = 0
        b.cls = 0
        b.off = 0
        self.c_slot = -1
        return 0

    cdef int clear_member(self, CoreColumn member, Py_ssize_t slot) except -1:
        """Empty one member's cells in every bucket of ``slot`` (the buckets stay)."""
        cdef char* base
        cdef int n = self.records(slot, &base)
        cdef int k
        cdef ExtremeCell* c
        for k in range(n):
            if member.kind == K_MIN or member.kind == K_MAX:
                c = <ExtremeCell*>(base + k * self.rsize + member.off)
                if c.tag == TAG_OBJ:
                    self.objs.release(c.v.handle)
            memset(base + k * self.rsize + member.off, 0, member.csize)
        return 0

    cpdef object dump(self, Py_ssize_t nslots):
        return self.dump_members(nslots, self.members)

    cpdef load(self, object state, Py_ssize_t nslots):
        """Restore slots [0, nslots) from a ``dump`` of an arena with the same members."""
        cdef Py_ssize_t slot
        cdef CoreColumn m
        cdef dict d = state_dict(state, "bucket arena")
        dumped = []
        for item in state_list(d.get("members"), -1, "bucket arena members"):
            name, kind = state_list(item, 2, "bucket arena member")
            if type(name) is not str or type(kind) is not str:
                raise ValueError(f"snapshot bucket arena member {item!r}")
            dumped.append((name, kind))
        own = []
        for m in self.members:
            own.append((m.name, KIND_NAMES[m.kind]))
        own.sort()
        if len(set(dumped)) != len(dumped) or sorted(dumped) != own:
            raise ValueError(f"snapshot bucket arena of members {dumped}, expected {own}")
        self.ensure(nslots)
        for slot in range(self.capacity):
            self.clear(slot)
        self.merge_state(state, nslots, None, True)

    cdef int take_slots(self, Column other, Py_ssize_t offset, Py_ssize_t n) except -1:
        # an arena of the same members: each slot's records are copied into a block of
        # this pool, the values of their min/max cells into this arena's object table
        cdef BucketArena src = <BucketArena>other
        cdef SlotBlock* s
        cdef SlotBlock* b
        cdef Py_ssize_t i, e
        cdef int k
        cdef char* rec
        cdef ExtremeCell* c
        self.ensure(offset + n)
        for i in range(n):
            s = &src.blocks[i]
            if s.n == 0:
                continue
            b = &self.blocks[offset + i]
            b.off = self.alloc_block(s.cls)
            b.cls = s.cls
            b.n = s.n
            rec = self.block_base(b)
            memcpy(rec, src.block_base(s), s.n * self.rsize)
            for k in range(s.n):
                for e in range(self.nextreme):
                    c = <ExtremeCell*>(rec + k * self.rsize + self.extreme_offs[e])
                    if c.tag == TAG_OBJ:
                        c.v.handle = self.objs.put(src.objs.get(c.v.handle))
        self.c_slot = -1
        return 0

    cdef object dump_members(self, Py_ssize_t nslots, tuple members):
        """Buckets of slots [0, nslots) restricted to ``members``, as plain data: per slot a
        bucket count (one byte each in ``counts``), then in ``records`` the slot's records
        ``[epoch | cells of members]`` in ascending epoch order; object handles inside
        min/max cells index the ``objs`` list."""
        cdef CoreColumn m
        cdef Py_ssize_t nmaps = len(members), j = 0
        cdef CellMap* maps = <CellMap*>realloc(NULL, (nmaps + 1) * sizeof(CellMap))
        if maps == NULL:
            raise MemoryError()
        cdef Py_ssize_t dsize = EPOCH_SIZE
        for m in members:
            maps[j].src = m.off
            maps[j].dst = dsize
            maps[j].size = m.csize
            dsize += m.csize
            j += 1
        cdef Py_ssize_t slot, total = 0
        nslots = min(nslots, self.capacity)
        for slot in range(nslots):
            total += self.blocks[slot].n
        counts = bytearray(nslots)
        records = bytearray(total * dsize)
        cdef unsigned char* cp = counts
        cdef char* out = records
        cdef char* base
        cdef char* rec
        cdef int n, k
        try:
            for slot in range(nslots):
                n = self.records(slot, &base)
                cp[slot] = n
                for k in range(n):
                    rec = base + k * self.rsize
                    memcpy(out, rec, EPOCH_SIZE)
                    for j in range(nmaps):
                        memcpy(out + maps[j].dst, rec + maps[j].src, maps[j].size)
                    out += dsize
        finally:
            free(maps)
        return {
            "window_ms": self.window,
            "members": [[m.name, KIND_NAMES[m.kind]] for m in members],
            "counts": bytes(counts),
            "records": bytes(records),
            "objs": self.objs.snapshot(),
        }

    cdef int merge_state(self, object state, Py_ssize_t nslots, tuple targets=None,
                         bint exact=False) except -1:
        """Add the buckets of a ``dump_members`` state into this arena: buckets are matched
        by epoch; the cells of each dumped member go to ``targets[i]`` when given, else to
        the member with the same name and op (dumped members without one are ignored).

        The state is checked before anything changes (ValueError); ``exact`` also requires
        it to cover exactly ``nslots`` slots, with no byte left over."""
        cdef dict d = state_dict(state, "bucket arena")
        window = d.get("window_ms")
        if type(window) is not int or window != self.window:
            raise ValueError(f"window {window!r} ms does not match {self.window} ms")
        cdef CoreColumn m
        cdef dict by_name = None
        if targets is None:
            by_name = {m.name: m for m in self.members}
        cdef list dumped = state_list(d.get("members"), -1, "bucket arena members")
        cdef bytes counts = state_bytes(d.get("counts"), "bucket counts")
        cdef bytes records = state_bytes(d.get("records"), "bucket records")
        cdef list objs = state_list(d.get("objs"), -1, "bucket arena objects")
        if targets is not None and len(targets) != len(dumped):
            raise ValueError("one target per dumped member expected")
        if exact and len(counts) != nslots:
            raise ValueError(f"snapshot bucket counts cover {len(counts)} slots, not {nslots}")
        cdef CellMap* maps = <CellMap*>realloc(NULL, (len(dumped) + 1) * sizeof(CellMap))
        if maps == NULL:
            raise MemoryError()
        cdef Py_ssize_t nmaps = 0, dsize = EPOCH_SIZE, j, slot, total = 0
        cdef const unsigned char* cp = counts
        cdef const char* src
        cdef int k
        cdef int64_t epoch, prev
        cdef char* rec
        cdef ExtremeCell* c
        cdef ExtremeCell cell
        try:
            for i in range(len(dumped)):
                name, kind = state_list(dumped[i], 2, "bucket arena member")
                if type(name) is not str or type(kind) is not str or kind not in KIND_NAMES:
                    raise ValueError(f"snapshot bucket arena member {dumped[i]!r}")
                kind_index = KIND_NAMES.index(kind)
                target = by_name.get(name) if targets is None else targets[i]
                if target is not None and (<CoreColumn>target).kind == kind_index:
                    m = target
                    maps[nmaps].src = dsize
                    maps[nmaps].dst = m.off
                    maps[nmaps].size = m.csize
                    maps[nmaps].extreme = m.kind == K_MIN or m.kind == K_MAX
                    nmaps += 1
                dsize += cell_size(kind_index)
            nslots = min(nslots, len(counts))
            for slot in range(nslots):
                if cp[slot] > MAX_BUCKETS:
                    raise ValueError(f"snapshot slot {slot} holds {cp[slot]} buckets")
                total += cp[slot]
            if len(records) < dsize * total or (exact and len(records) != dsize * total):
                raise ValueError(f"snapshot bucket records: {len(records)} bytes for "
                                 f"{total} buckets of {dsize}")
            # every record first: epochs ascending per slot, min/max cells well formed
            src = records
            for slot in range(nslots):
                for k in range(cp[slot]):
                    memcpy(&epoch, src, EPOCH_SIZE)
                    if k and epoch <= prev:
                        raise ValueError(f"snapshot buckets of slot {slot} out of order")
                    prev = epoch
                    for j in range(nmaps):
                        if not maps[j].extreme:
                            continue
                        memcpy(&cell, src + maps[j].src, sizeof(ExtremeCell))
                        if cell.tag < TAG_EMPTY or cell.tag > TAG_OBJ or (
                                cell.tag == TAG_OBJ and not valid_handle(cell.v.handle, objs)):
                            raise ValueError(f"snapshot min/max cell of slot {slot}")
                    src += dsize
            self.ensure(nslots)
            src = records
            for slot in range(nslots):
                for k in range(cp[slot]):
                    rec = self.find_or_insert(slot, (<const int64_t*>src)[0])
                    for j in range(nmaps):
                        c = <ExtremeCell*>(rec + maps[j].dst)
                        if maps[j].extreme and c.tag == TAG_OBJ:
                            self.objs.release(c.v.handle)
                        memcpy(rec + maps[j].dst, src + maps[j].src, maps[j].size)
                        if maps[j].extreme and c.tag == TAG_OBJ:
                            c.v.handle = self.objs.put(objs[c.v.handle])
                    src += dsize
        finally:
            free(maps)
            self.c_slot = -1
        return 0

    def bucket_count(self, Py_ssize_t slot) -> int:
        """Live buckets held for ``slot`` (introspection for tests and memory accounting)."""
        return self.blocks[slot].n if slot < self.capacity else 0

    def nbytes(self) -> int:
        """Bytes of the buffers this arena allocated (headers, pool, scratch)."""
        return (self.capacity * sizeof(SlotBlock) + <size_t>self.pool_cap * self.rsize
                + self.rsize)


# --- the columns --------------------------------------------------------------------------

cdef WelfordCell EMPTY_CELL     # all zero: the empty state of every cell kind (the largest)
memset(&EMPTY_CELL, 0, sizeof(EMPTY_CELL))


cdef class CoreColumn(Column):
    """Shared machinery of the family-A columns; subclasses define ``feed`` (one event into
    one cell), ``value`` (lifetime read of one cell) and ``merged`` (windowed read)."""

    cdef readonly int kind
    cdef readonly Py_ssize_t csize
    cdef char* data                 # lifetime: capacity cells
    cdef ObjectTable objs           # lifetime min/max values that are not I64/F64
    cdef BucketArena arena          # windowed: where the cells live
    cdef Py_ssize_t off             # windowed: byte offset of the cell in a record
    cdef int64_t window
    cdef uint8_t guess              # where the last C row had ``field`` (row_field)

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        Column.__init__(self, name, field, where, params, window_ms)
        self.kind = self.op_kind()
        self.csize = cell_size(self.kind)
        self.objs = ObjectTable()
        self.takes_row = True
        if window_ms is not None:
            self.window = window_ms
            BucketArena(window_ms, (self,))

    def __dealloc__(self):
        PyMem_Free(self.data)

    cdef int op_kind(self) except -1:
        raise NotImplementedError(type(self).__name__)

    cdef int feed(self, char* cell, dict row, bint matched) except -1:
        raise NotImplementedError(type(self).__name__)

    cdef int feed_row(self, char* cell, const Row* row, bint matched) except -1:
        """``feed`` from a C row (row.pxd)."""
        raise NotImplementedError(type(self).__name__)

    cdef int value(self, char* cell, Number* out) except -1:
        raise NotImplementedError(type(self).__name__)

    cdef int merged(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        raise NotImplementedError(type(self).__name__)

    cdef void prefetch(self, Py_ssize_t slot, int stage) noexcept:
        if stage == 0 and self.data != NULL:
            prefetch_line(self.data + slot * self.csize)

    cdef int ensure(self, Py_ssize_t capacity) except -1:
        if self.arena is not None:
            return self.arena.ensure(capacity)
        if capacity <= self.capacity:
            return 0
        self.data = <char*>grow_zeroed(self.data, self.capacity, capacity, self.csize)
        self.capacity = capacity
        return 0

    cdef int clear(self, Py_ssize_t slot) except -1:
        cdef ExtremeCell* c
        if self.arena is not None:
            if len(self.arena.members) == 1:
                return self.arena.clear(slot)
            return self.arena.clear_member(self, slot)
        if self.kind == K_MIN or self.kind == K_MAX:
            c = <ExtremeCell*>(self.data + slot * self.csize)
            if c.tag == TAG_OBJ:
                self.objs.release(c.v.handle)
        memset(self.data + slot * self.csize, 0, self.csize)
        return 0

    cdef int update(self, Py_ssize_t slot, dict row, bint matched, int64_t now) except -1:
        if self.arena is None:
            return self.feed(self.data + slot * self.csize, row, matched)
        # the bucket exists from the first event of its epoch, matched or not (§3 step 5)
        return self.feed(self.arena.locate(slot, now) + self.off, row, matched)

    cdef int update_row(self, Py_ssize_t slot, const Row* row, bint matched,
                        int64_t now) except -1:
        if self.arena is None:
            return self.feed_row(self.data + slot * self.csize, row, matched)
        return self.feed_row(self.arena.locate(slot, now) + self.off, row, matched)

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        if self.arena is None:
            if slot >= self.capacity:
                return self.value(<char*>&EMPTY_CELL, out)
            return self.value(self.data + slot * self.csize, out)
        if slot >= self.arena.capacity:
            return self.merged_empty(out)
        return self.merged(slot, T, out)

    cdef int merged_empty(self, Number* out) except -1:
        return VALUE_NULL

    cdef int active_cells(self, Py_ssize_t slot, int64_t T, char** cells) noexcept:
        """This column's cells in the buckets of ``slot`` active at ``T``, ascending epoch,
        into ``cells`` (room for MAX_BUCKETS); their number."""
        cdef char* base
        cdef int n = self.arena.records(slot, &base)
        cdef int k, m = 0
        cdef char* rec
        for k in range(n):
            rec = base + k * self.arena.rsize
            if bucket_active(rec_epoch(rec), T, self.window):
                cells[m] = rec + self.off
                m += 1
        return m

    cdef inline ObjectTable objects(self):
        return self.objs if self.arena is None else self.arena.objs

    cpdef object dump(self, Py_ssize_t nslots):
        if self.arena is not None:
            return self.arena.dump_members(nslots, (self,))
        nslots = min(nslots, self.capacity)
        return {"cells": (<char*>self.data)[:nslots * self.csize] if nslots else b"",
                "objs": self.objs.snapshot()}

    cdef int take_slots(self, Column other, Py_ssize_t offset, Py_ssize_t n) except -1:
        # lifetime cells (a windowed column's cells move with its arena, the state column);
        # a min/max cell's value goes into this column's object table
        cdef CoreColumn src = <CoreColumn>other
        cdef Py_ssize_t slot
        cdef ExtremeCell* c
        self.ensure(offset + n)
        if n:
            memcpy(self.data + offset * self.csize, src.data, n * self.csize)
        if self.kind == K_MIN or self.kind == K_MAX:
            for slot in range(offset, offset + n):
                c = <ExtremeCell*>(self.data + slot * self.csize)
                if c.tag == TAG_OBJ:
                    c.v.handle = self.objs.put(src.objs.get(c.v.handle))
        return 0

    cpdef load(self, object state, Py_ssize_t nslots):
        cdef Py_ssize_t slot
        cdef ExtremeCell* c
        cdef ExtremeCell cell
        cdef bint extreme = self.kind == K_MIN or self.kind == K_MAX
        if self.arena is not None:
            self.ensure(nslots)
            for slot in range(self.capacity):
                self.clear(slot)
            self.arena.merge_state(state, nslots, None, True)
            return
        cdef dict d = state_dict(state, "core column")
        cdef bytes cells = state_buffer(d.get("cells"), nslots * self.csize, "core cells")
        cdef list objs = state_list(d.get("objs"), -1, "core column objects")
        cdef const char* src = cells
        if extreme:
            for slot in range(nslots):
                memcpy(&cell, src + slot * self.csize, sizeof(ExtremeCell))
                if cell.tag < TAG_EMPTY or cell.tag > TAG_OBJ or (
                        cell.tag == TAG_OBJ and not valid_handle(cell.v.handle, objs)):
                    raise ValueError(f"snapshot min/max cell of slot {slot}")
        self.ensure(nslots)
        for slot in range(self.capacity):
            self.clear(slot)
        if nslots:
            memcpy(self.data, src, nslots * self.csize)
        if extreme:
            for slot in range(nslots):
                c = <ExtremeCell*>(self.data + slot * self.csize)
                if c.tag == TAG_OBJ:
                    c.v.handle = self.objs.put(objs[c.v.handle])

    @property
    def bucket_arena(self):
        """The BucketArena holding this windowed column's cells (None in lifetime mode)."""
        return self.arena

    def nbytes(self) -> int:
        """Bytes of this column's own buffers (windowed cells are in the arena)."""
        return 0 if self.arena is not None else self.capacity * self.csize


cdef class CountColumn(CoreColumn):
    """count (§10.1): matched events."""

    cdef int op_kind(self) except -1:
        return K_COUNT

    cdef int feed(self, char* cell, dict row, bint matched) except -1:
        if matched:
            (<CountCell*>cell).n += 1
        return 0

    cdef int feed_row(self, char* cell, const Row* row, bint matched) except -1:
        if matched:
            (<CountCell*>cell).n += 1
        return 0

    cdef int value(self, char* cell, Number* out) except -1:
        out.i = (<CountCell*>cell).n
        return VALUE_INT

    cdef int merged_empty(self, Number* out) except -1:
        out.i = 0
        return VALUE_INT

    cdef int merged(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        cdef char* cells[MAX_BUCKETS]
        cdef int n = self.active_cells(slot, T, cells), k
        cdef int64_t total = 0
        for k in range(n):
            total += (<CountCell*>cells[k]).n
        out.i = total
        return VALUE_INT


cdef class SumColumn(CoreColumn):
    """sum (§10.2): IEEE sum of matched numeric values; null until one arrives."""

    cdef int op_kind(self) except -1:
        return K_SUM

    cdef int feed(self, char* cell, dict row, bint matched) except -1:
        cdef double x
        if matched and row_number(row, self.field, &x):
            (<SumCell*>cell).total += x
            (<SumCell*>cell).n += 1
        return 0

    cdef int feed_row(self, char* cell, const Row* row, bint matched) except -1:
        cdef double x
        if matched and field_number(row_field(row, self.field, &self.guess), &x):
            (<SumCell*>cell).total += x
            (<SumCell*>cell).n += 1
        return 0

    cdef int finish(self, double total, int64_t n, Number* out) except -1:
        out.f = total
        return VALUE_FLOAT if n else VALUE_NULL

    cdef int value(self, char* cell, Number* out) except -1:
        cdef SumCell* c = <SumCell*>cell
        return self.finish(c.total, c.n, out)

    cdef int merged(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        cdef char* cells[MAX_BUCKETS]
        cdef int n = self.active_cells(slot, T, cells), k
        cdef int64_t count = 0
        cdef double total = 0.0
        cdef SumCell* c
        for k in range(n):
            c = <SumCell*>cells[k]
            if c.n:
                total += c.total
                count += c.n
        return self.finish(total, count, out)


cdef class MeanColumn(SumColumn):
    """mean (§10.3): sum / n of matched numeric values."""

    cdef int op_kind(self) except -1:
        return K_MEAN

    cdef int finish(self, double total, int64_t n, Number* out) except -1:
        if not n:
            return VALUE_NULL
        out.f = total / n
        return VALUE_FLOAT


cdef class ExtremeColumn(CoreColumn):
    """min / max (§10.4): the value keeps its type; ints and floats compare numerically."""

    cdef int feed(self, char* cell, dict row, bint matched) except -1:
        if matched:
            extreme_feed(<ExtremeCell*>cell, dict_get(row, self.field), self.kind == K_MAX,
                         self.objects())
        return 0

    cdef int feed_row(self, char* cell, const Row* row, bint matched) except -1:
        if matched:
            extreme_feed_field(<ExtremeCell*>cell, row_field(row, self.field, &self.guess),
                               self.kind == K_MAX, self.objects())
        return 0

    cdef int value(self, char* cell, Number* out) except -1:
        return extreme_number(<ExtremeCell*>cell, self.objs, out)

    cdef int merged(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        cdef char* cells[MAX_BUCKETS]
        cdef int n = self.active_cells(slot, T, cells), k
        cdef ExtremeCell* c
        cdef ExtremeCell* best = NULL
        cdef ObjectTable objs = self.arena.objs
        cdef bint is_max = self.kind == K_MAX
        for k in range(n):
            c = <ExtremeCell*>cells[k]
            if c.tag == TAG_EMPTY:
                continue
            # strictly better replaces: ties keep the earlier bucket
            if best == NULL or (extreme_less(best, objs, c, objs) if is_max
                                else extreme_less(c, objs, best, objs)):
                best = c
        return VALUE_NULL if best == NULL else extreme_number(best, objs, out)


cdef class MinColumn(ExtremeColumn):
    """min (§10.4)."""

    cdef int op_kind(self) except -1:
        return K_MIN


cdef class MaxColumn(ExtremeColumn):
    """max (§10.4)."""

    cdef int op_kind(self) except -1:
        return K_MAX


cdef class VarColumn(CoreColumn):
    """var (§10.5): Welford, sample variance; windowed buckets fold by Chan's merge."""

    cdef int op_kind(self) except -1:
        return K_VAR

    cdef int feed(self, char* cell, dict row, bint matched) except -1:
        cdef double x
        if matched and row_number(row, self.field, &x):
            moments_add(<WelfordCell*>cell, x)
        return 0

    cdef int feed_row(self, char* cell, const Row* row, bint matched) except -1:
        cdef double x
        if matched and field_number(row_field(row, self.field, &self.guess), &x):
            moments_add(<WelfordCell*>cell, x)
        return 0

    cdef int finish(self, WelfordCell* c, Number* out) except -1:
        if c.n < 2:
            return VALUE_NULL
        out.f = c.m2 / (c.n - 1)
        return VALUE_FLOAT

    cdef int value(self, char* cell, Number* out) except -1:
        return self.finish(<WelfordCell*>cell, out)

    cdef int merged(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        cdef char* cells[MAX_BUCKETS]
        cdef int n = self.active_cells(slot, T, cells), k
        cdef WelfordCell* c
        cdef WelfordCell acc
        acc.n = 0
        acc.mean = 0.0
        acc.m2 = 0.0
        for k in range(n):
            c = <WelfordCell*>cells[k]
            if c.n:
                chan_merge(&acc, c)
        return self.finish(&acc, out)


cdef class StdColumn(VarColumn):
    """std (§10.5): sqrt of the sample variance."""

    cdef int op_kind(self) except -1:
        return K_STD

    cdef int finish(self, WelfordCell* c, Number* out) except -1:
        if c.n < 2:
            return VALUE_NULL
        out.f = sqrt(c.m2 / (c.n - 1))
        return VALUE_FLOAT


cdef class RatioColumn(CoreColumn):
    """ratio (§10.6): matched / total over every event that reaches the feature."""

    cdef int op_kind(self) except -1:
        return K_RATIO

    cdef int feed(self, char* cell, dict row, bint matched) except -1:
        (<RatioCell*>cell).total += 1
        if matched:
            (<RatioCell*>cell).matched += 1
        return 0

    cdef int feed_row(self, char* cell, const Row* row, bint matched) except -1:
        (<RatioCell*>cell).total += 1
        if matched:
            (<RatioCell*>cell).matched += 1
        return 0

    cdef int value(self, char* cell, Number* out) except -1:
        cdef RatioCell* c = <RatioCell*>cell
        return ratio(c.matched, c.total, out)

    cdef int merged(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        cdef char* cells[MAX_BUCKETS]
        cdef int n = self.active_cells(slot, T, cells), k
        cdef RatioCell* c
        cdef int64_t matched = 0, total = 0
        for k in range(n):
            c = <RatioCell*>cells[k]
            matched += c.matched
            total += c.total
        return ratio(matched, total, out)


COLUMNS = {
    "count": CountColumn,
    "sum": SumColumn,
    "mean": MeanColumn,
    "min": MinColumn,
    "max": MaxColumn,
    "var": VarColumn,
    "std": StdColumn,
    "ratio": RatioColumn,
}


def share_windows(columns) -> list:
    """Put the windowed core columns among ``columns`` that have the same window length
    on one BucketArena each, keeping their state; return the arenas (one per window).

    Columns already sharing exactly one arena keep it. Otherwise a new arena is built and
    the state of every member is merged into it by bucket epoch (state of columns that are
    not members is not carried over). Other columns are ignored.

    Linear in the number of columns: members are grouped by their current arena in one
    pass, and an arena that holds no slot has no state to carry over."""
    groups = {}
    for col in columns:
        if isinstance(col, CoreColumn) and (<CoreColumn>col).arena is not None:
            groups.setdefault((<CoreColumn>col).window, []).append(col)
    arenas = []
    cdef BucketArena old, arena
    cdef Py_ssize_t capacity
    cdef list own
    for window, members in groups.items():
        by_source = {}  # id(arena) -> (arena, its members among ``members``)
        for col in members:
            old = (<CoreColumn>col).arena
            entry = by_source.get(id(old))
            if entry is None:
                by_source[id(old)] = (old, [col])
            else:
                (<list>entry[1]).append(col)
        if len(by_source) == 1:
            old, own = next(iter(by_source.values()))
            if len(old.members) == len(own) and set(map(id, old.members)) == set(map(id, own)):
                arenas.append(old)
                continue
        capacity = 0
        states = []
        for old, own in by_source.values():
            capacity = max(capacity, old.capacity)
            if old.capacity:
                states.append((old.dump_members(old.capacity, tuple(own)), old.capacity,
                               tuple(own)))
        arena = BucketArena(window, members)
        arena.ensure(capacity)
        for state, nslots, targets in states:
            arena.merge_state(state, nslots, targets)
        arenas.append(arena)
    return arenas
