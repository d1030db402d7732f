# cython: language_level=3
"""top_k (spec/operators.md §11.3, §18.3): the most frequent typed items, exact counts up to
1024 items, then a DataSketches frequent-items sketch. Blocks and bucket lists:
sketch_base."""

from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, qsort

import heapq

from beava._fast.ops.sketch_base cimport (
    FLOAT_BY_VALUE,
    KIND_TOP_K,
    KM_INSERTED,
    MODE_OBJ,
    Head,
    KeyMap,
    KeyView,
    Node,
    ObjBlock,
    SketchColumn,
    datasketches,
    feed_string,
    key_value,
    km_count,
    km_key,
    km_n,
    km_new,
    km_offer,
    km_room,
    km_union,
    obj_block,
    parse_feed_string,
    put_key,
)
from beava._fast.ops.window cimport MAX_BUCKETS
from beava._fast.wire.msgpack_out cimport (
    Writer,
    put_array_header,
    put_int,
    put_map_header,
    put_raw,
    put_value,
)

# Exact-mode limit and frequent-items size (spec/operators.md §11.3, §18.3).
cdef uint32_t TOPK_EXACT_MAX = 1024
cdef int FREQ_LG_MAX = 11


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
    sketch = datasketches().frequent_strings_sketch(FREQ_LG_MAX)
    for i in range(km_n(m)):
        km_key(m, i, True, &k)
        sketch.update(feed_string(&k, True), km_count(m, i))
    return sketch


cdef Ranked* ranked_items(KeyMap* m) except NULL:
    """The items of ``m`` by count, most first (ties in key order); the caller frees it."""
    cdef Ranked* ranked = <Ranked*>malloc(sizeof(Ranked) * (<size_t>km_n(m) + 1))
    cdef uint32_t i
    if ranked == NULL:
        raise MemoryError()
    for i in range(km_n(m)):
        ranked[i].count = km_count(m, i)
        ranked[i].index = i
    qsort(ranked, km_n(m), sizeof(Ranked), _cmp_ranked)
    return ranked


cdef list top_of_map(KeyMap* m, Py_ssize_t k):
    cdef Ranked* ranked = ranked_items(m)
    cdef uint32_t i
    cdef KeyView key
    cdef list out = []
    try:
        for i in range(km_n(m) if km_n(m) < k else k):
            km_key(m, ranked[i].index, True, &key)
            out.append({"count": ranked[i].count, "value": key_value(&key)})
    finally:
        free(ranked)
    return out


cdef int put_top_of_map(Writer* out, KeyMap* m, Py_ssize_t k) except -1:
    """``top_of_map(m, k)`` as the reply encoder writes it, without its dicts."""
    cdef Ranked* ranked = ranked_items(m)
    cdef uint32_t i, n = km_n(m) if km_n(m) < k else <uint32_t>k
    cdef KeyView key
    try:
        put_array_header(out, n)
        for i in range(n):
            km_key(m, ranked[i].index, True, &key)
            put_map_header(out, 2)  # its keys in the encoder's sorted order
            put_raw(out, b"\xa5count", 6)
            put_int(out, <int64_t>ranked[i].count)
            put_raw(out, b"\xa5value", 6)
            put_key(out, &key)
    finally:
        free(ranked)
    return 0


cdef list top_of_sketch(object sketch, Py_ssize_t k):
    items = sketch.get_frequent_items(datasketches().frequent_items_error_type.NO_FALSE_NEGATIVES, 0)
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
        self.key_mode = FLOAT_BY_VALUE
        k = params.get("k")
        self.k = 10 if k is None else k

    cdef Node* new_block(self, object value) except NULL:
        return <Node*>km_new(km_room(value, True))

    cdef int insert_key(self, Node** link, KeyView* k) except -1:
        cdef KeyView key = k[0]
        cdef KeyMap* m
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

    cdef object merged(self, Py_ssize_t slot, int64_t T, KeyMap** exact, bint* owned):
        """The items of ``slot`` at ``T``: a frequent-items sketch, or None with their exact
        counts in ``exact[0]`` (NULL: no items), which the caller frees when ``owned[0]``
        (a merge of buckets, not a bucket's own map)."""
        cdef Node* act[MAX_BUCKETS]
        cdef int n, i
        cdef KeyMap* acc = NULL
        cdef KeyMap* merged
        exact[0] = NULL
        owned[0] = False
        if not self.windowed:
            if self.blocks[slot] == NULL:
                return None
            act[0] = <Node*>self.blocks[slot]
            n = 1
        else:
            n = self.active(slot, T, act)
        if n == 0:
            return None
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
                        return <object>(<ObjBlock*>act[i]).obj
                    sketch = datasketches().frequent_strings_sketch(FREQ_LG_MAX)
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
            if sketch is None:
                exact[0] = acc
                owned[0] = acc != <KeyMap*>act[0]
                acc = NULL
            return sketch
        finally:
            if acc != NULL and acc != <KeyMap*>act[0]:
                free(acc)

    cdef object read(self, Py_ssize_t slot, int64_t T):
        cdef KeyMap* exact
        cdef bint owned
        sketch = self.merged(slot, T, &exact, &owned)
        if sketch is not None:
            return top_of_sketch(sketch, self.k)
        if exact == NULL:
            return []
        try:
            return top_of_map(exact, self.k)
        finally:
            if owned:
                free(exact)

    cdef int put_msgpack(self, Writer* out, Py_ssize_t slot, int64_t T) except -1:
        # exact counts (the usual case) written without a dict per item; a sketch's items
        # as read() gives them
        cdef KeyMap* exact
        cdef bint owned
        sketch = self.merged(slot, T, &exact, &owned)
        if sketch is not None:
            return put_value(out, top_of_sketch(sketch, self.k))
        if exact == NULL:
            return put_array_header(out, 0)
        try:
            return put_top_of_map(out, exact, self.k)
        finally:
            if owned:
                free(exact)


COLUMNS = {"top_k": TopKColumn}
