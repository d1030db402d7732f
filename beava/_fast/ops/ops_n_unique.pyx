# cython: language_level=3
"""n_unique (spec/operators.md §11.1, §18.1): distinct typed values, an exact key map up to
1024, then a DataSketches HLL (lg_k 12). Blocks and bucket lists: sketch_base."""

from libc.math cimport round
from libc.stdint cimport int64_t, uint32_t
from libc.stdlib cimport free

from beava._fast.ops.column cimport VALUE_INT, Number
from beava._fast.ops.sketch_base cimport (
    FLOAT_BY_BITS,
    KIND_N_UNIQUE,
    KM_FULL,
    MODE_KEYS,
    MODE_OBJ,
    Head,
    KeyMap,
    KeyView,
    Node,
    ObjBlock,
    SketchColumn,
    datasketches,
    feed_string,
    km_feed_hll,
    km_n,
    km_new,
    km_offer,
    km_room,
    km_union_of,
    obj_block,
)
from beava._fast.ops.window cimport MAX_BUCKETS

# Exact-mode limit and HLL size (spec/operators.md §11.1, §18.1).
cdef uint32_t NUNIQUE_EXACT_MAX = 1024
cdef int HLL_LG_K = 12


cdef class NUniqueColumn(SketchColumn):
    """Distinct typed values: exact set up to 1024, then DataSketches HLL (lg_k 12)."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        SketchColumn.__init__(self, name, field, where, params, window_ms)
        self.kind = KIND_N_UNIQUE
        self.key_mode = FLOAT_BY_BITS

    cdef Node* new_block(self, object value) except NULL:
        return <Node*>km_new(km_room(value, False))

    cdef int insert_key(self, Node** link, KeyView* k_) except -1:
        cdef KeyView k = k_[0]
        cdef KeyMap* m
        if link[0] != NULL and (<Head*>link[0]).mode == MODE_OBJ:
            (<object>(<ObjBlock*>link[0]).obj).update(feed_string(&k, False))
            return 0
        if km_offer(link, &k, False, NUNIQUE_EXACT_MAX) != KM_FULL:
            return 0
        m = <KeyMap*>link[0]  # the 1025th distinct value: the HLL takes them all
        ds = datasketches()
        hll = ds.hll_sketch(HLL_LG_K, ds.tgt_hll_type.HLL_8)
        km_feed_hll(m, hll)
        hll.update(feed_string(&k, False))
        link[0] = obj_block(hll, link[0])
        free(m)
        return 0

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        cdef Node* act[MAX_BUCKETS]
        cdef int n, i
        cdef KeyMap* acc
        cdef bint exact = True
        if not self.windowed:
            out.i = nunique_of(<Node*>self.blocks[slot])
            return VALUE_INT
        n = self.active(slot, T, act)
        if n <= 1:
            out.i = nunique_of(act[0]) if n else 0
            return VALUE_INT
        for i in range(n):
            if (<Head*>act[i]).mode != MODE_KEYS:
                exact = False
        if exact:
            acc = km_union_of(act, n, False, NUNIQUE_EXACT_MAX)
            if acc != NULL:
                out.i = km_n(acc)
                free(acc)
                return VALUE_INT
        union = datasketches().hll_union(HLL_LG_K)
        for i in range(n):
            if (<Head*>act[i]).mode == MODE_OBJ:
                union.update(<object>(<ObjBlock*>act[i]).obj)
            else:
                km_feed_hll(<KeyMap*>act[i], union)
        out.i = <int64_t>round(union.get_result().get_estimate())
        return VALUE_INT


cdef int64_t nunique_of(Node* b) except? -1:
    if b == NULL:
        return 0
    if (<Head*>b).mode == MODE_KEYS:
        return km_n(<KeyMap*>b)
    return <int64_t>round((<object>(<ObjBlock*>b).obj).get_estimate())


COLUMNS = {"n_unique": NUniqueColumn}
