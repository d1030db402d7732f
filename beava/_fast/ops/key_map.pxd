# Entity key -> slot map of one table (key_map.pyx).
from libc.stdint cimport int32_t, uint32_t


cdef enum:
    INLINE = 16  # key bytes stored in the entry


cdef struct KeyEntry:
    Py_hash_t hash
    int32_t slot         # -1: empty entry
    uint32_t length      # bytes of an ASCII key, or NOT_INLINE
    char text[INLINE]    # the first bytes of an ASCII key


cdef class KeyMap:
    cdef KeyEntry* entries
    cdef Py_ssize_t mask            # capacity - 1 (capacity a power of two), -1 when empty
    cdef readonly list names        # slot -> key

    cdef int _resize(self, Py_ssize_t capacity) except -1
    # The slot of ``key``, or -1.
    cdef Py_ssize_t lookup(self, str key) except -2
    # Give ``key`` (not in the map) the next slot; returns it.
    cdef Py_ssize_t insert(self, str key) except -1
    cdef Py_ssize_t _insert(self, str key, Py_hash_t h) except -1
    # Ask for the cache line where a lookup of ``key`` starts (a hint; hashes the key).
    cdef void prefetch(self, str key) noexcept
    # The same for a key given by its ASCII bytes and their hash (row.pxd's text_hash, the
    # hash of the key as a str): no str is built to find it.
    cdef Py_ssize_t lookup_text(self, const char* text, Py_ssize_t size,
                                Py_hash_t h) except -2
    cdef Py_ssize_t insert_text(self, const char* text, Py_ssize_t size,
                                Py_hash_t h) except -1
    cdef void prefetch_hash(self, Py_hash_t h) noexcept
