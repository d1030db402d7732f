# cython: language_level=3
"""UDDSketch, the quantile sketch of spec/operators.md §18.2.

Values map to logarithmic buckets ``k = floor(ln|x| / ln_gamma)`` (separate lists for
positive and negative values, plus a zero count). The answer for a quantile is the
arithmetic centre of the bucket that holds it, so the relative error on the returned value
is bounded by ``alpha`` (0.01 until the sketch holds more than 2048 buckets; every collapse
then halves the resolution). Unlike rank-error sketches (KLL, REQ) it is deterministic:
the state is a function of the inserted values only.

The arithmetic follows the reference implementation step by step so that values are
bit-identical to beava 0.0.6.
"""

from libc.math cimport exp, floor, isfinite, log
from libc.stdint cimport int32_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memmove

cdef double ALPHA0 = 0.01
cdef uint32_t MAX_BUCKETS = 2048
cdef uint32_t MIN_CAP = 8


# The snapshot encoding: this header (44 bytes, native byte order), then the npos positive
# and the nneg negative buckets.
cdef packed struct UddHeader:
    double alpha
    double ln_gamma
    int32_t collapses
    uint32_t npos
    uint32_t nneg
    uint64_t zero
    uint64_t total


cdef inline int32_t floor_half(int32_t k) noexcept nogil:
    # floor(k / 2) for negative k too (cdivision truncates toward zero)
    if k < 0 and (k & 1):
        return (k - 1) // 2
    return k // 2


cdef void udd_init(UddSketch* sk) noexcept nogil:
    sk.alpha = ALPHA0
    sk.ln_gamma = log((1.0 + ALPHA0) / (1.0 - ALPHA0))
    sk.collapses = 0
    sk.npos = 0
    sk.nneg = 0
    sk.cap_pos = 0
    sk.cap_neg = 0
    sk.zero = 0
    sk.total = 0
    sk.pos = NULL
    sk.neg = NULL


cdef void udd_release(UddSketch* sk) noexcept nogil:
    free(sk.pos)
    free(sk.neg)
    udd_init(sk)


cdef UddBucket* _dup(const UddBucket* src, uint32_t n) noexcept nogil:
    cdef UddBucket* out
    if n == 0:
        return NULL
    out = <UddBucket*>malloc(n * sizeof(UddBucket))
    if out != NULL:
        memcpy(out, src, n * sizeof(UddBucket))
    return out


cdef int udd_copy(UddSketch* dst, const UddSketch* src) except -1 nogil:
    dst[0] = src[0]
    dst.pos = _dup(src.pos, src.npos)
    dst.neg = _dup(src.neg, src.nneg)
    dst.cap_pos = src.npos
    dst.cap_neg = src.nneg
    if (src.npos and dst.pos == NULL) or (src.nneg and dst.neg == NULL):
        free(dst.pos)
        free(dst.neg)
        udd_init(dst)
        with gil:
            raise MemoryError()
    return 0


cdef int _bump(UddBucket** arr, uint32_t* n, uint32_t* cap, int32_t key,
               uint64_t count) noexcept nogil:
    # Add ``count`` to bucket ``key`` of a sorted list, inserting it if absent; -1 = no memory.
    cdef uint32_t lo = 0, hi = n[0], mid, newcap
    cdef UddBucket* grown
    cdef UddBucket* a = arr[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid].key < key:
            lo = mid + 1
        else:
            hi = mid
    if lo < n[0] and a[lo].key == key:
        a[lo].count += count
        return 0
    if n[0] == cap[0]:
        newcap = cap[0] * 2 if cap[0] else MIN_CAP
        grown = <UddBucket*>realloc(a, newcap * sizeof(UddBucket))
        if grown == NULL:
            return -1
        a = grown
        arr[0] = a
        cap[0] = newcap
    memmove(&a[lo + 1], &a[lo], (n[0] - lo) * sizeof(UddBucket))
    a[lo].key = key
    a[lo].count = count
    n[0] += 1
    return 0


cdef uint32_t _halve_keys(UddBucket* a, uint32_t n) noexcept nogil:
    # k <- floor(k/2) over a sorted list, adding the counts of keys that become equal.
    cdef uint32_t i, out = 0
    cdef int32_t key
    for i in range(n):
        key = floor_half(a[i].key)
        if out and a[out - 1].key == key:
            a[out - 1].count += a[i].count
        else:
            a[out].key = key
            a[out].count = a[i].count
            out += 1
    return out


cdef void _collapse(UddSketch* sk) noexcept nogil:
    sk.alpha = 2.0 * sk.alpha / (1.0 + sk.alpha * sk.alpha)
    sk.ln_gamma = 2.0 * sk.ln_gamma
    sk.npos = _halve_keys(sk.pos, sk.npos)
    sk.nneg = _halve_keys(sk.neg, sk.nneg)
    sk.collapses += 1


cdef int udd_insert(UddSketch* sk, double x) except -1 nogil:
    cdef int32_t key
    cdef int rc
    if not isfinite(x):
        return 0
    if x == 0.0:
        sk.zero += 1
    else:
        if x > 0.0:
            key = <int32_t>floor(log(x) / sk.ln_gamma)
            rc = _bump(&sk.pos, &sk.npos, &sk.cap_pos, key, 1)
        else:
            key = <int32_t>floor(log(-x) / sk.ln_gamma)
            rc = _bump(&sk.neg, &sk.nneg, &sk.cap_neg, key, 1)
        if rc < 0:
            with gil:
                raise MemoryError()
        if sk.npos + sk.nneg > MAX_BUCKETS:
            _collapse(sk)
    sk.total += 1
    return 0


cdef int _merge_lists(UddBucket** arr, uint32_t* n, uint32_t* cap, const UddBucket* b,
                      uint32_t nb) noexcept nogil:
    # Key-wise sum of two sorted lists, into ``arr``; -1 = no memory (``arr`` unchanged).
    cdef uint32_t na = n[0], i = 0, j = 0, out = 0
    cdef const UddBucket* a = arr[0]
    cdef UddBucket* merged
    if nb == 0:
        return 0
    merged = <UddBucket*>malloc((na + nb) * sizeof(UddBucket))
    if merged == NULL:
        return -1
    while i < na or j < nb:
        if j == nb or (i < na and a[i].key < b[j].key):
            merged[out] = a[i]
            i += 1
        elif i == na or b[j].key < a[i].key:
            merged[out] = b[j]
            j += 1
        else:
            merged[out].key = a[i].key
            merged[out].count = a[i].count + b[j].count
            i += 1
            j += 1
        out += 1
    free(arr[0])
    arr[0] = merged
    n[0] = out
    cap[0] = na + nb
    return 0


cdef int udd_merge(UddSketch* sk, const UddSketch* other) except -1 nogil:
    cdef UddSketch tmp
    cdef const UddSketch* src = other
    cdef int rc
    if other.total == 0:
        return 0
    while sk.collapses < other.collapses:
        _collapse(sk)
    if other.collapses < sk.collapses:
        udd_copy(&tmp, other)
        while tmp.collapses < sk.collapses:
            _collapse(&tmp)
        src = &tmp
    rc = _merge_lists(&sk.pos, &sk.npos, &sk.cap_pos, src.pos, src.npos)
    if rc == 0:
        rc = _merge_lists(&sk.neg, &sk.nneg, &sk.cap_neg, src.neg, src.nneg)
    if src == &tmp:
        udd_release(&tmp)
    if rc < 0:
        with gil:
            raise MemoryError()
    sk.zero += other.zero
    sk.total += other.total
    if sk.npos + sk.nneg > MAX_BUCKETS:
        _collapse(sk)
    return 0


cdef inline double _centre(int32_t key, double ln_gamma) noexcept nogil:
    return (exp(<double>key * ln_gamma) + exp(<double>(key + 1) * ln_gamma)) / 2.0


cdef double udd_quantile(const UddSketch* sk, double q) noexcept nogil:
    cdef uint64_t rank = <uint64_t>floor(q * <double>(sk.total - 1))
    cdef uint64_t seen = 0
    cdef uint32_t i
    # negative values first, most negative (largest |x| key) first
    i = sk.nneg
    while i > 0:
        i -= 1
        seen += sk.neg[i].count
        if seen > rank:
            return -_centre(sk.neg[i].key, sk.ln_gamma)
    seen += sk.zero
    if seen > rank:
        return 0.0
    for i in range(sk.npos):
        seen += sk.pos[i].count
        if seen > rank:
            return _centre(sk.pos[i].key, sk.ln_gamma)
    # unreachable while total counts every bucket; the largest bucket is the answer
    if sk.npos:
        return _centre(sk.pos[sk.npos - 1].key, sk.ln_gamma)
    return 0.0


cdef Py_ssize_t udd_heap_bytes(const UddSketch* sk) noexcept nogil:
    return (sk.cap_pos + sk.cap_neg) * sizeof(UddBucket)


cdef Py_ssize_t udd_encoded_size(const UddSketch* sk) noexcept nogil:
    return sizeof(UddHeader) + (sk.npos + sk.nneg) * sizeof(UddBucket)


cdef Py_ssize_t udd_encode(const UddSketch* sk, uint8_t* out) noexcept nogil:
    cdef UddHeader h
    cdef Py_ssize_t at = sizeof(UddHeader)
    h.alpha = sk.alpha
    h.ln_gamma = sk.ln_gamma
    h.collapses = sk.collapses
    h.npos = sk.npos
    h.nneg = sk.nneg
    h.zero = sk.zero
    h.total = sk.total
    memcpy(out, &h, sizeof(UddHeader))
    memcpy(out + at, sk.pos, sk.npos * sizeof(UddBucket))
    at += sk.npos * sizeof(UddBucket)
    memcpy(out + at, sk.neg, sk.nneg * sizeof(UddBucket))
    at += sk.nneg * sizeof(UddBucket)
    return at


cdef Py_ssize_t udd_decode(UddSketch* sk, const uint8_t* data, Py_ssize_t size) except -1:
    """Read an encoded sketch into an uninitialised struct; returns the bytes consumed."""
    cdef UddHeader h
    cdef Py_ssize_t at = sizeof(UddHeader)
    cdef uint32_t npos, nneg
    udd_init(sk)
    if size < at:
        raise ValueError("truncated UDDSketch")
    memcpy(&h, data, sizeof(UddHeader))
    npos = h.npos
    nneg = h.nneg
    if npos > MAX_BUCKETS + 1 or nneg > MAX_BUCKETS + 1 or \
            size - at < <Py_ssize_t>((npos + nneg) * sizeof(UddBucket)):
        raise ValueError("truncated UDDSketch")
    sk.alpha = h.alpha
    sk.ln_gamma = h.ln_gamma
    sk.collapses = h.collapses
    sk.zero = h.zero
    sk.total = h.total
    sk.pos = _dup(<const UddBucket*>(data + at), npos)
    at += npos * sizeof(UddBucket)
    sk.neg = _dup(<const UddBucket*>(data + at), nneg)
    at += nneg * sizeof(UddBucket)
    if (npos and sk.pos == NULL) or (nneg and sk.neg == NULL):
        udd_release(sk)
        raise MemoryError()
    sk.npos = sk.cap_pos = npos
    sk.nneg = sk.cap_neg = nneg
    return at


cdef class UDDSketch:
    """A standalone UDDSketch (tests, tools); the quantile column embeds the C struct.

    >>> sk = UDDSketch()
    >>> for x in (1.0, 2.0, 3.0):
    ...     sk.update(x)
    >>> abs(sk.quantile(0.5) - 2.0) <= 0.0101 * 2.0
    True
    """

    cdef UddSketch sk

    def __cinit__(self):
        udd_init(&self.sk)

    def __dealloc__(self):
        udd_release(&self.sk)

    def update(self, double x) -> None:
        """Insert one value (non-finite values are ignored)."""
        udd_insert(&self.sk, x)

    def merge(self, UDDSketch other not None) -> None:
        """Fold ``other`` into this sketch."""
        udd_merge(&self.sk, &other.sk)

    def quantile(self, double q):
        """The q-quantile estimate, or None when empty."""
        if self.sk.total == 0:
            return None
        return udd_quantile(&self.sk, q)

    @property
    def total(self) -> int:
        return self.sk.total

    @property
    def collapses(self) -> int:
        return self.sk.collapses

    @property
    def alpha(self) -> float:
        return self.sk.alpha

    @property
    def num_buckets(self) -> int:
        return self.sk.npos + self.sk.nneg

    def to_bytes(self) -> bytes:
        """The snapshot encoding of this sketch."""
        cdef bytearray out = bytearray(udd_encoded_size(&self.sk))
        udd_encode(&self.sk, <uint8_t*>(<char*>out))
        return bytes(out)

    @staticmethod
    def from_bytes(const uint8_t[::1] data) -> UDDSketch:
        """Inverse of ``to_bytes``."""
        cdef UDDSketch out = UDDSketch.__new__(UDDSketch)
        udd_release(&out.sk)
        if data.shape[0] == 0:
            raise ValueError("truncated UDDSketch")
        if udd_decode(&out.sk, &data[0], data.shape[0]) != data.shape[0]:
            raise ValueError("trailing bytes after UDDSketch")
        return out
