# cython: language_level=3
"""entropy (spec/operators.md §11.5): Shannon entropy (bits) of keystr categories, at most
1024 categories per state. Blocks and bucket lists: sketch_base."""

from libc.math cimport log2
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.stdlib cimport free

from beava._fast.ops.column cimport VALUE_FLOAT, Number
from beava._fast.ops.sketch_base cimport (
    KIND_ENTROPY,
    KM_FULL,
    KeyMap,
    KeyView,
    Node,
    SketchColumn,
    km_count,
    km_n,
    km_new,
    km_offer,
    km_room,
    km_union_of,
    KEY_STR,
)
from beava._fast.ops.window cimport MAX_BUCKETS

cdef uint32_t ENTROPY_MAX_CATEGORIES = 1024

# Process-wide counter the server exports as Prometheus metrics (spec/server.md §8).
cdef uint64_t _entropy_capped = 0


def counters() -> dict:
    """Current values of this module's metric counters, by Prometheus metric name: every
    dropped entropy category counts for both the entropy metric and the lifetime cap-hit
    metric."""
    return {
        "beava_entropy_categories_capped_total": _entropy_capped,
        "beava_lifetime_op_cap_hit_total": _entropy_capped,
    }


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
        self.key_mode = KEY_STR

    cdef Node* new_block(self, object value) except NULL:
        return <Node*>km_new(km_room(value, True))

    cdef int insert_key(self, Node** link, KeyView* key) except -1:
        global _entropy_capped
        if km_offer(link, key, True, ENTROPY_MAX_CATEGORIES) == KM_FULL:
            _entropy_capped += 1
        return 0

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        cdef Node* act[MAX_BUCKETS]
        cdef int n
        cdef KeyMap* acc
        out.f = 0.0
        if not self.windowed:
            if self.blocks[slot] != NULL:
                out.f = entropy_of(<KeyMap*>self.blocks[slot])
            return VALUE_FLOAT
        n = self.active(slot, T, act)
        if n:
            acc = km_union_of(act, n, True, 0)
            out.f = entropy_of(acc)
            if acc != <KeyMap*>act[0]:
                free(acc)
        return VALUE_FLOAT


COLUMNS = {"entropy": EntropyColumn}
