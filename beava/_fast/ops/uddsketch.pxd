# UDDSketch: value-error bounded quantile sketch (spec/operators.md §18.2), C-level API.
from libc.stdint cimport int32_t, uint8_t, uint32_t, uint64_t


cdef packed struct UddBucket:
    int32_t key          # floor(ln|x| / ln_gamma) at the current collapse level
    uint64_t count


cdef struct UddSketch:
    double alpha         # current relative accuracy (grows with every collapse)
    double ln_gamma      # ln((1 + alpha0) / (1 - alpha0)) * 2**collapses
    int32_t collapses
    uint32_t npos        # buckets of positive values, ascending key
    uint32_t nneg        # buckets of negative values (key of |x|), ascending key
    uint32_t cap_pos
    uint32_t cap_neg
    uint64_t zero        # count of x == 0
    uint64_t total       # every inserted value, zeros included
    UddBucket* pos
    UddBucket* neg


# Put an (uninitialised) struct into the empty state; owns no memory yet.
cdef void udd_init(UddSketch* sk) noexcept nogil
# Release the bucket arrays and return to the empty state.
cdef void udd_release(UddSketch* sk) noexcept nogil
# Deep copy of ``src`` into an uninitialised ``dst``.
cdef int udd_copy(UddSketch* dst, const UddSketch* src) except -1 nogil
# Insert one value; non-finite values are dropped.
cdef int udd_insert(UddSketch* sk, double x) except -1 nogil
# Fold ``other`` into ``sk`` (``other`` is left unchanged).
cdef int udd_merge(UddSketch* sk, const UddSketch* other) except -1 nogil
# The q-quantile; the sketch must hold at least one value.
cdef double udd_quantile(const UddSketch* sk, double q) noexcept nogil
# Snapshot encoding: size, write into ``out`` (returns bytes written), read back.
cdef Py_ssize_t udd_encoded_size(const UddSketch* sk) noexcept nogil
cdef Py_ssize_t udd_encode(const UddSketch* sk, uint8_t* out) noexcept nogil
cdef Py_ssize_t udd_decode(UddSketch* sk, const uint8_t* data, Py_ssize_t size) except -1
# Heap bytes owned by the bucket arrays.
cdef Py_ssize_t udd_heap_bytes(const UddSketch* sk) noexcept nogil
