# The hash slot of a canonical key string on the push path (docs/sharding.md): XXH64 of
# its UTF-8 bytes, seed 42, modulo 16384 (= its low 14 bits), as beava_client.slots and
# Spark's pmod(xxhash64(text), 16384) compute it (tests/vectors/slots.json).
from cpython.exc cimport PyErr_Clear
from libc.stdint cimport uint32_t, uint64_t
from libc.string cimport memcpy

cdef enum:
    SLOT_COUNT = 16384
    SLOT_SEED = 42

cdef extern from "Python.h":
    # NULL with an exception set (cleared by the caller) when the text is not valid UTF-8
    const char* _utf8_of "PyUnicode_AsUTF8AndSize"(object text, Py_ssize_t* size)

# The five primes of the XXH64 specification, as C constants: a module-level cdef variable
# would make every module that cimports this file import a slot_hash module.
cdef extern from *:
    """
    #define BEAVA_XXH_P1 0x9E3779B185EBCA87ULL
    #define BEAVA_XXH_P2 0xC2B2AE3D27D4EB4FULL
    #define BEAVA_XXH_P3 0x165667B19E3779F9ULL
    #define BEAVA_XXH_P4 0x85EBCA77C2B2AE63ULL
    #define BEAVA_XXH_P5 0x27D4EB2F165667C5ULL
    """
    const uint64_t XXH_P1 "BEAVA_XXH_P1"
    const uint64_t XXH_P2 "BEAVA_XXH_P2"
    const uint64_t XXH_P3 "BEAVA_XXH_P3"
    const uint64_t XXH_P4 "BEAVA_XXH_P4"
    const uint64_t XXH_P5 "BEAVA_XXH_P5"


cdef inline uint64_t _rotl(uint64_t x, int r) noexcept nogil:
    return (x << r) | (x >> (64 - r))


cdef inline uint64_t _lane(const char* p) noexcept nogil:
    cdef uint64_t v
    memcpy(&v, p, 8)  # little-endian hosts only (x86-64, aarch64), as the WAL format
    return v


cdef inline uint64_t _round(uint64_t acc, uint64_t lane) noexcept nogil:
    acc += lane * XXH_P2
    return _rotl(acc, 31) * XXH_P1


cdef inline uint64_t _merge(uint64_t h, uint64_t v) noexcept nogil:
    h ^= _round(0, v)
    return h * XXH_P1 + XXH_P4


cdef inline uint64_t xxh64(const char* p, Py_ssize_t n, uint64_t seed) noexcept nogil:
    cdef const char* end = p + n
    cdef uint64_t h, v1, v2, v3, v4
    cdef uint32_t w
    if n >= 32:
        v1 = seed + XXH_P1 + XXH_P2
        v2 = seed + XXH_P2
        v3 = seed
        v4 = seed - XXH_P1
        while p + 32 <= end:
            v1 = _round(v1, _lane(p))
            v2 = _round(v2, _lane(p + 8))
            v3 = _round(v3, _lane(p + 16))
            v4 = _round(v4, _lane(p + 24))
            p += 32
        h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
        h = _merge(_merge(_merge(_merge(h, v1), v2), v3), v4)
    else:
        h = seed + XXH_P5
    h += <uint64_t>n
    while p + 8 <= end:
        h ^= _round(0, _lane(p))
        h = _rotl(h, 27) * XXH_P1 + XXH_P4
        p += 8
    if p + 4 <= end:
        memcpy(&w, p, 4)
        h ^= <uint64_t>w * XXH_P1
        h = _rotl(h, 23) * XXH_P2 + XXH_P3
        p += 4
    while p < end:
        h ^= <uint64_t>(<unsigned char>p[0]) * XXH_P5
        h = _rotl(h, 11) * XXH_P1
        p += 1
    h ^= h >> 33
    h *= XXH_P2
    h ^= h >> 29
    h *= XXH_P3
    h ^= h >> 32
    return h


cdef inline object utf8_of(str text, const char** p, Py_ssize_t* n):
    """Point ``p``, ``n`` at the UTF-8 bytes of ``text``; returns the object holding them,
    to be kept while they are read: ``text`` itself (CPython caches its UTF-8 bytes, and an
    ASCII str's characters are they), or, for a lone surrogate, which strict UTF-8 refuses,
    the bytes "surrogatepass" writes (no valid text has them)."""
    p[0] = _utf8_of(text, n)
    if p[0] != NULL:
        return text
    PyErr_Clear()  # no try block: it would cost more than the hash on the push path
    raw = text.encode("utf-8", "surrogatepass")
    p[0] = <bytes>raw
    n[0] = len(raw)
    return raw


cdef inline int text_slot(str text) except -1:
    """The slot of ``text``."""
    cdef Py_ssize_t n
    cdef const char* p
    held = utf8_of(text, &p, &n)
    return <int>(xxh64(p, n, SLOT_SEED) & (SLOT_COUNT - 1))
