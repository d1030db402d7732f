# The per-table kernel (table_kernel.pyx); the push pass calls apply() without a
# Python-level call.
cimport cython
from cpython.ref cimport PyObject
from libc.stdint cimport int64_t

from beava._fast.ops.key_map cimport KeyMap
from beava._fast.ops.row cimport Row, RowField


@cython.final
cdef class TableKernel:
    cdef readonly KeyMap keys
    cdef readonly tuple key_fields
    cdef readonly tuple names
    cdef dict by_name
    cdef list feature_state         # feature columns that own their storage
    cdef readonly list arenas
    cdef list state_cols            # feature_state + arenas
    cdef list update_cols
    cdef PyObject** upd             # borrowed from update_cols
    cdef int* upd_where
    cdef Py_ssize_t nupd
    cdef list preds
    cdef Py_ssize_t npreds
    cdef unsigned char* verdict     # [0] = True (no where), [i] = predicates[i - 1]
    cdef readonly Py_ssize_t capacity
    cdef int64_t* touch             # last-touch now per slot; NULL for global tables
    cdef int64_t cold_after         # -1: no cold TTL
    cdef readonly int64_t cold_evictions
    cdef const unsigned char* owned # one bit per hash slot this shard owns; NULL: unsharded
    cdef bytes owned_bits           # the buffer ``owned`` points into
    cdef bint owns_global           # a global table: whether its name's slot is ours
    cdef readonly int64_t skipped   # updates left to the shard owning their key
    cdef readonly bint takes_row    # it can be fed a C row (row.pxd): see apply_row
    cdef unsigned char key_guess    # where the last C row had the key field (row_field)

    cdef int grow(self, Py_ssize_t need) except -1
    cpdef object key_of(self, dict row)
    cdef void prefetch_key(self, dict row) noexcept
    cpdef Py_ssize_t apply(self, dict row, int64_t now) except -2
    cdef Py_ssize_t find(self, dict row, int64_t now) except -2
    cdef int owns_key(self, str key) except -1
    cdef int ownership(self, dict row) except -2
    cdef void follow(self, Py_ssize_t slot) noexcept
    cdef int touch_update(self, Py_ssize_t slot, dict row, int64_t now) except -1
    cpdef int update(self, Py_ssize_t slot, dict row, int64_t now) except -1
    cpdef int clear(self, Py_ssize_t slot) except -1
    # apply() and its steps for a C row, when ``takes_row``: the same state changes
    cdef Py_ssize_t apply_row(self, Row* row, int64_t now) except -2
    cdef void prefetch_row(self, Row* row) noexcept
    cdef Py_ssize_t row_key(self, Row* row, char* digits, const char** text,
                            RowField** field) noexcept
    cdef int ownership_row(self, Row* row) noexcept
    cdef Py_ssize_t find_row(self, Row* row, int64_t now) except -2
    cdef bint owns_text(self, const char* text, Py_ssize_t size) noexcept
    cdef int touch_update_row(self, Py_ssize_t slot, const Row* row, int64_t now) except -1
