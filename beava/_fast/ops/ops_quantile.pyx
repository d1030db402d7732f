# cython: language_level=3
"""quantile (spec/operators.md §11.2, §18.2): the q-quantile of a field, an exact list of
at most 256 values (QList), then UDDSketch (QSketch). Blocks and bucket lists: sketch_base."""

from cpython.ref cimport PyObject
from libc.math cimport ceil, floor, isfinite
from libc.stdint cimport int64_t, uint16_t, uint32_t
from libc.stdlib cimport free, malloc, realloc

from beava._fast.ops.column cimport VALUE_FLOAT, VALUE_NULL, Number, number_object
from beava._fast.ops.row cimport RowField, field_number
from beava._fast.ops.sketch_base cimport (
    KIND_QUANTILE,
    MODE_UDD,
    MODE_VALUES,
    QUANTILE_EXACT_MAX,
    Head,
    Node,
    QList,
    QSketch,
    SketchColumn,
    fit,
    ql_new,
    ql_sort,
    ql_values,
)
from beava._fast.ops.slot_buffers cimport number_value
from beava._fast.ops.uddsketch cimport (
    UddSketch,
    udd_copy,
    udd_init,
    udd_insert,
    udd_merge,
    udd_quantile,
    udd_release,
)
from beava._fast.ops.window cimport MAX_BUCKETS


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
        if not number_value(<PyObject*>value, &x) or not isfinite(x):
            return 0
        return self.insert_number(link, x)

    cdef int insert_field(self, Node** link, const RowField* f) except -1:
        cdef double x
        if not field_number(f, &x):  # a C row's floats are finite
            return 0
        return self.insert_number(link, x)

    cdef int insert_number(self, Node** link, double x) except -1:
        cdef QList* q
        cdef QList* grown
        cdef QSketch* s
        cdef uint32_t i, cap
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

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        return self.quantile(slot, T, self.q, out)

    cpdef object read_q(self, Py_ssize_t slot, int64_t T, double q):
        """The feature value for another ``q`` over the same state (lets the table share
        one column between quantile features that differ only in ``q``)."""
        cdef Number n
        return number_object(self.quantile(slot, T, q, &n), &n)

    cdef int quantile(self, Py_ssize_t slot, int64_t T, double q, Number* out) except -1:
        """The ``q`` quantile at ``T`` as Column.number() gives it."""
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
                return VALUE_NULL
            act[0] = <Node*>self.blocks[slot]
            n = 1
        else:
            n = self.active(slot, T, act)
            if n == 0:
                return VALUE_NULL
        if n == 1:
            if (<Head*>act[0]).mode == MODE_UDD:
                out.f = udd_quantile(&(<QSketch*>act[0]).sk, q)
                return VALUE_FLOAT
            ql = <QList*>act[0]
            ql_sort(ql)
            if not ql.n:
                return VALUE_NULL
            out.f = exact_quantile(ql_values(ql), ql.n, q)
            return VALUE_FLOAT
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
                out.f = udd_quantile(&sk, q)
                return VALUE_FLOAT
            if not count:
                return VALUE_NULL
            out.f = exact_quantile(acc, count, q)
            return VALUE_FLOAT
        finally:
            udd_release(&sk)


COLUMNS = {"quantile": QuantileColumn}
