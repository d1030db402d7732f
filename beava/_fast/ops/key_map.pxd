# Entity key -> slot map of one table (key_map.pyx).
from cpython.object cimport PyObject_Hash
from libc.stdint cimport int32_t, uint32_t, uint64_t
from libc.string cimport memcpy

from beava._fast.ops.slot_hash cimport XXH_P1, XXH_P2, XXH_P3, xxh64


cdef extern from "Python.h":
    int PyUnicode_IS_ASCII(object o)
    void* PyUnicode_DATA(object o)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)

cdef extern from *:
    """
    /* The 128-bit product of two words folded to one: every bit of either reaches every
       bit of the result. */
    static inline uint64_t beava_fold_mul(uint64_t a, uint64_t b) {
        __uint128_t r = (__uint128_t)a * b;
        return (uint64_t)r ^ (uint64_t)(r >> 64);
    }
    /* The interpreter's per-process hash secret (random unless PYTHONHASHSEED fixes it),
       one for every module that hashes keys: keys chosen to collide in one process's maps
       collide nowhere else, as with CPython's own str hash. */
    static inline uint64_t beava_key_secret0(void) { return _Py_HashSecret.siphash.k0; }
    static inline uint64_t beava_key_secret1(void) { return _Py_HashSecret.siphash.k1; }
    """
    uint64_t fold_mul "beava_fold_mul"(uint64_t a, uint64_t b) noexcept nogil
    uint64_t key_secret0 "beava_key_secret0"() noexcept nogil
    uint64_t key_secret1 "beava_key_secret1"() noexcept nogil


cdef enum:
    HEAD = 8  # key bytes held in the entry: a key this long or shorter is compared there
    KEY_SEED = 0x6b6579  # the map's XXH64 seed for keys over 16 bytes (not the shard
                         # slot's, whose low bits a shard's keys share)


cdef inline Py_hash_t text_key_hash(const char* text, Py_ssize_t size) noexcept nogil:
    """The map's hash of an ASCII key given by its bytes. A key of at most 16 bytes (an
    entity key, mostly) is read as two words (overlapping, so every byte counts) mixed by
    two folded multiplications: a few cycles, where CPython's str hash runs SipHash and
    XXH64 a chain of multiplications per 4 bytes; a longer key takes XXH64. Both are keyed
    by the process's hash secret, so no one can choose keys that collide in advance."""
    cdef uint64_t a = 0, b = 0
    cdef uint32_t w
    if size > 16:
        return <Py_hash_t>xxh64(text, size, KEY_SEED ^ key_secret0())
    if size >= 8:
        memcpy(&a, text, 8)
        memcpy(&b, text + size - 8, 8)
    elif size >= 4:
        memcpy(&w, text, 4)
        a = w
        memcpy(&w, text + size - 4, 4)
        b = w
    elif size > 0:
        a = ((<uint64_t>(<unsigned char>text[0]) << 16)
             | (<uint64_t>(<unsigned char>text[size >> 1]) << 8)
             | <unsigned char>text[size - 1])
    return <Py_hash_t>fold_mul(fold_mul(a ^ key_secret0() ^ XXH_P1, b ^ key_secret1() ^ XXH_P2)
                               ^ <uint64_t>size, XXH_P3)


cdef inline Py_hash_t key_hash(str key) except? -1:
    """The map's hash of ``key``: an ASCII key's bytes' (text_key_hash, so a key found by
    its bytes meets the same key inserted as a str), any other key's str hash (no bytes
    lookup can match it: those are ASCII)."""
    if PyUnicode_IS_ASCII(key):
        return text_key_hash(<const char*>PyUnicode_DATA(key), PyUnicode_GET_LENGTH(key))
    return PyObject_Hash(key)


cdef struct KeyEntry:    # 16 bytes: four to a cache line
    uint32_t tag         # the hash's high bits, and the key's length up to LONG
    int32_t slot         # -1: empty entry
    uint64_t head        # a key of at most HEAD bytes: its UTF-8 bytes, zero-padded; a
                         # longer one: where ``long_keys`` holds it


cdef class KeyMap:
    cdef KeyEntry* entries          # cache-line aligned
    cdef Py_ssize_t mask            # capacity - 1 (capacity a power of two), -1 when empty
    cdef readonly list names        # slot -> key
    # The keys longer than HEAD bytes, each a u32 length and its UTF-8 bytes, in slot order
    cdef char* long_keys
    cdef Py_ssize_t long_used, long_size

    cdef int _resize(self, Py_ssize_t capacity) except -1
    # The slot of ``key``, or -1.
    cdef Py_ssize_t lookup(self, str key) except -2
    # Give ``key`` (not in the map) the next slot; returns it.
    cdef Py_ssize_t insert(self, str key) except -1
    cdef Py_ssize_t _insert(self, str key, const char* p, Py_ssize_t n,
                            Py_hash_t h) except -1
    # Ask for the cache line where a lookup of ``key`` starts (a hint; hashes the key).
    cdef void prefetch(self, str key) noexcept
    # The same for a key given by its ASCII bytes and their text_key_hash (row.pxd's
    # text_hash): no str is built to find it.
    cdef Py_ssize_t lookup_text(self, const char* text, Py_ssize_t size,
                                Py_hash_t h) except -2
    cdef Py_ssize_t insert_text(self, const char* text, Py_ssize_t size,
                                Py_hash_t h) except -1
    cdef void prefetch_hash(self, Py_hash_t h) noexcept
    cdef int _grow_long(self, Py_ssize_t need) except -1
