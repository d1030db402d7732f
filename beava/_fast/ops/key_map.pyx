# cython: language_level=3, boundscheck=False, wraparound=False
"""Entity key -> slot map of one table, laid out for the cache (DESIGN.md §3).

An open-addressing table of 32-byte entries: the key's hash, its slot, and the key's
first 16 bytes inline when it is ASCII. A lookup of a short ASCII key touches one entry and
never the stored key object, which a ``dict[str, int]`` would (its entries point at the
keys, so every hit compares against an object elsewhere in memory). Longer or non-ASCII
keys are compared against the stored key in ``names`` (slot -> key, in slot order: slots
are dense and handed out in insertion order). The table doubles when three quarters full.

A key is found by its str or by its ASCII bytes where they lie (``lookup_text``: the push
pass's rows, row.pxd); an ASCII key is hashed from its bytes either way (key_map.pxd's
key_hash), so both ways meet; the str of a key found by its bytes is built only when the
key is new.
"""

from libc.stdint cimport int32_t, uint32_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcmp, memcpy

from beava._fast.ops.column cimport prefetch_line


cdef extern from "Python.h":
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)


cdef enum:
    MIN_CAPACITY = 16
    NOT_INLINE = 0xFFFFFFFF  # len of a key compared through ``names``


cdef inline uint32_t inline_len(str key) noexcept:
    """The key's length when it is ASCII (its bytes can be stored inline), else NOT_INLINE."""
    if PyUnicode_IS_ASCII(key):
        return <uint32_t>PyUnicode_GET_LENGTH(key)
    return NOT_INLINE


cdef class KeyMap:
    """Canonical key (str) -> slot; ``names[slot]`` is the key of each slot."""

    def __cinit__(self):
        self.entries = NULL
        self.mask = -1
        self.names = []

    def __dealloc__(self):
        free(self.entries)

    @staticmethod
    def from_keys(list keys):
        """A map whose slot ``i`` is ``keys[i]`` (ValueError if a key repeats or is not a
        str)."""
        cdef KeyMap m = KeyMap()
        for key in keys:
            if type(key) is not str:
                raise ValueError(f"entity key {key!r} is not a str")
            if m.lookup(<str>key) >= 0:
                raise ValueError(f"entity key {key!r} repeats")
            m.insert(<str>key)
        return m

    cdef int _resize(self, Py_ssize_t capacity) except -1:
        cdef KeyEntry* old = self.entries
        cdef Py_ssize_t old_cap = self.mask + 1, i, j
        cdef KeyEntry* fresh = <KeyEntry*>calloc(capacity, sizeof(KeyEntry))
        if fresh == NULL:
            raise MemoryError()
        for i in range(capacity):
            fresh[i].slot = -1
        for i in range(old_cap):
            if old[i].slot >= 0:
                j = <Py_ssize_t>(<size_t>old[i].hash & <size_t>(capacity - 1))
                while fresh[j].slot >= 0:
                    j = (j + 1) & (capacity - 1)
                fresh[j] = old[i]
        self.entries = fresh
        self.mask = capacity - 1
        free(old)
        return 0

    cdef Py_ssize_t lookup(self, str key) except -2:
        """The slot of ``key``, or -1."""
        if self.entries == NULL:
            return -1
        cdef Py_hash_t h = key_hash(key)
        cdef uint32_t n = inline_len(key)
        cdef Py_ssize_t i = <Py_ssize_t>(<size_t>h & <size_t>self.mask)
        cdef KeyEntry* e
        while True:
            e = &self.entries[i]
            if e.slot < 0:
                return -1
            if e.hash == h and e.length == n:
                if n <= INLINE:
                    if memcmp(e.text, PyUnicode_DATA(key), n) == 0:
                        return e.slot
                elif self.names[e.slot] == key:
                    return e.slot
            i = (i + 1) & self.mask

    cdef void prefetch(self, str key) noexcept:
        if self.entries != NULL:
            prefetch_line(&self.entries[<size_t>key_hash(key) & <size_t>self.mask])

    cdef Py_ssize_t lookup_text(self, const char* text, Py_ssize_t size,
                                Py_hash_t h) except -2:
        """See key_map.pxd: ``text`` is ASCII, so only an ASCII key of ``size`` can match."""
        if self.entries == NULL:
            return -1
        cdef Py_ssize_t i = <Py_ssize_t>(<size_t>h & <size_t>self.mask)
        cdef KeyEntry* e
        while True:
            e = &self.entries[i]
            if e.slot < 0:
                return -1
            if e.hash == h and e.length == <uint32_t>size:
                if size <= INLINE:
                    if memcmp(e.text, text, size) == 0:
                        return e.slot
                elif memcmp(PyUnicode_DATA(self.names[e.slot]), text, size) == 0:
                    return e.slot
            i = (i + 1) & self.mask

    cdef Py_ssize_t insert_text(self, const char* text, Py_ssize_t size,
                                Py_hash_t h) except -1:
        """Give the key of these ASCII bytes (not in the map) the next slot; returns it."""
        key = PyUnicode_New(size, 127)
        memcpy(PyUnicode_DATA(key), text, size)
        return self._insert(<str>key, h)

    cdef void prefetch_hash(self, Py_hash_t h) noexcept:
        if self.entries != NULL:
            prefetch_line(&self.entries[<size_t>h & <size_t>self.mask])

    cdef Py_ssize_t insert(self, str key) except -1:
        """Give ``key`` (not in the map) the next slot; returns it."""
        return self._insert(key, key_hash(key))

    cdef Py_ssize_t _insert(self, str key, Py_hash_t h) except -1:
        cdef Py_ssize_t slot = len(self.names)
        if slot >= 0x7FFFFFFF:
            raise OverflowError("a table holds at most 2^31 - 1 entities")
        if (slot + 1) * 4 > (self.mask + 1) * 3:
            self._resize(max(MIN_CAPACITY, (self.mask + 1) * 2))
        cdef uint32_t n = inline_len(key)
        cdef Py_ssize_t i = <Py_ssize_t>(<size_t>h & <size_t>self.mask)
        while self.entries[i].slot >= 0:
            i = (i + 1) & self.mask
        cdef KeyEntry* e = &self.entries[i]
        e.hash = h
        e.slot = <int32_t>slot
        e.length = n
        if n <= INLINE:
            memcpy(e.text, PyUnicode_DATA(key), n)
        self.names.append(key)
        return slot

    def get(self, str key, default=None):
        """The slot of ``key``, else ``default``."""
        cdef Py_ssize_t slot = self.lookup(key)
        return default if slot < 0 else slot

    def __len__(self):
        return len(self.names)

    def nbytes(self) -> int:
        """Bytes of the entry table (the key objects in ``names`` not counted)."""
        return (self.mask + 1) * sizeof(KeyEntry)
