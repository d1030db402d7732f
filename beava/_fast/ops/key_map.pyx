# cython: language_level=3, boundscheck=False, wraparound=False
"""Entity key -> slot map of one table, laid out for the cache (DESIGN.md §3).

An open-addressing table (linear probing) of 16-byte entries, four to a 64-byte line, the
table aligned to lines: each entry holds the key's slot, a tag (high bits of the key's hash
beside the key's length) and either the key's UTF-8 bytes, when they are 8 or fewer, or
where the key's bytes lie in ``long_keys`` (a growing buffer of the longer keys). A hit on a
short key touches the one line where its probe starts (unless the run of entries before it
crosses into the next line); one on a longer key that line and the line of its bytes. The
stored key objects (``names``: slot -> key, in slot order: slots are dense and handed out
in insertion order) are never read by a lookup, as a ``dict[str, int]``'s would be. The
table doubles when three quarters full; entries keep no full hash (it would make them
half as big again), so growing hashes the keys again.

A key is found by its str or by its ASCII bytes where they lie (``lookup_text``: the push
pass's rows, row.pxd); an ASCII key is hashed from its bytes either way (key_map.pxd's
key_hash), so both ways meet; the str of a key found by its bytes is built only when the
key is new. Snapshots store the keys, not their hashes: a loaded map hashes them afresh.
"""

from libc.stdint cimport int32_t, uint32_t, uint64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcmp, memcpy, memset

from beava._fast.ops.column cimport prefetch_line
from beava._fast.ops.slot_hash cimport utf8_of


cdef extern from "Python.h":
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)

cdef extern from "stdlib.h":
    int posix_memalign(void** p, size_t alignment, size_t size) nogil


cdef enum:
    MIN_CAPACITY = 16
    LINE = 64        # bytes of a cache line
    LONG = 15        # the length kept in a tag: a key's, or LONG for LONG bytes or more
    LENGTH_BITS = 0xF


cdef inline uint32_t tag_of(Py_hash_t h, Py_ssize_t n) noexcept:
    """Bits 35-62 of the hash (the index takes the low ones) and the length up to LONG."""
    return ((<uint32_t>(<uint64_t>h >> 31)) & ~(<uint32_t>LENGTH_BITS)) | \
        <uint32_t>(n if n < LONG else LONG)


cdef inline uint64_t head_of(const char* p, Py_ssize_t n) noexcept:
    """The first HEAD bytes of ``p`` (``n`` long) as a word, zero-padded: at most two
    loads (two 4-byte ones overlap for 5 to 7 bytes, or-ing equal bytes)."""
    cdef uint64_t w = 0
    cdef uint32_t lo, hi
    if n >= HEAD:
        memcpy(&w, p, HEAD)  # little-endian hosts only, as the WAL format
    elif n >= 4:
        memcpy(&lo, p, 4)
        memcpy(&hi, p + n - 4, 4)
        w = lo | (<uint64_t>hi << (8 * (n - 4)))
    else:
        while n > 0:
            n -= 1
            w = (w << 8) | <unsigned char>p[n]
    return w


cdef inline void place(KeyEntry* entries, Py_ssize_t mask, Py_hash_t h,
                       KeyEntry entry) noexcept:
    """Write ``entry`` (of a key not in ``entries``, hashed ``h``) at the first free entry
    of its probe."""
    cdef Py_ssize_t i = <Py_ssize_t>(<size_t>h & <size_t>mask)
    while entries[i].slot >= 0:
        i = (i + 1) & mask
    entries[i] = entry


cdef class KeyMap:
    """Canonical key (str) -> slot; ``names[slot]`` is the key of each slot."""

    def __cinit__(self):
        self.entries = NULL
        self.mask = -1
        self.names = []
        self.long_keys = NULL
        self.long_used = 0
        self.long_size = 0

    def __dealloc__(self):
        free(self.entries)
        free(self.long_keys)

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
        """A table of ``capacity`` entries holding the entries of this one."""
        cdef void* fresh = NULL
        cdef Py_ssize_t i
        cdef KeyEntry* e
        if posix_memalign(&fresh, LINE, capacity * sizeof(KeyEntry)) != 0:
            raise MemoryError()
        memset(fresh, 0xFF, capacity * sizeof(KeyEntry))  # every slot -1: empty
        for i in range(self.mask + 1):
            e = &self.entries[i]
            if e.slot >= 0:
                place(<KeyEntry*>fresh, capacity - 1, key_hash(<str>self.names[e.slot]), e[0])
        free(self.entries)
        self.entries = <KeyEntry*>fresh
        self.mask = capacity - 1
        return 0

    cdef Py_ssize_t lookup(self, str key) except -2:
        """The slot of ``key``, or -1."""
        cdef const char* p
        cdef Py_ssize_t n
        cdef Py_hash_t h = key_hash(key)
        held = utf8_of(key, &p, &n)
        return self.lookup_text(p, n, h)

    cdef void prefetch(self, str key) noexcept:
        if self.entries != NULL:
            prefetch_line(&self.entries[<size_t>key_hash(key) & <size_t>self.mask])

    cdef Py_ssize_t lookup_text(self, const char* text, Py_ssize_t size,
                                Py_hash_t h) except -2:
        """See key_map.pxd (``text``: a key's UTF-8 bytes, ``h``: its key_hash)."""
        if self.entries == NULL:
            return -1
        cdef uint32_t tag = tag_of(h, size)
        cdef uint64_t head = head_of(text, size) if size <= HEAD else 0
        cdef Py_ssize_t i = <Py_ssize_t>(<size_t>h & <size_t>self.mask)
        cdef KeyEntry* e
        cdef const char* stored
        cdef uint32_t n
        if size <= HEAD:
            while True:
                e = &self.entries[i]
                if e.slot < 0:
                    return -1
                if e.tag == tag and e.head == head:
                    return e.slot
                i = (i + 1) & self.mask
        while True:
            e = &self.entries[i]
            if e.slot < 0:
                return -1
            if e.tag == tag:
                stored = self.long_keys + e.head
                memcpy(&n, stored, 4)
                if <Py_ssize_t>n == size and memcmp(stored + 4, text, size) == 0:
                    return e.slot
            i = (i + 1) & self.mask

    cdef Py_ssize_t insert_text(self, const char* text, Py_ssize_t size,
                                Py_hash_t h) except -1:
        """Give the key of these ASCII bytes (not in the map) the next slot; returns it."""
        key = PyUnicode_New(size, 127)
        memcpy(PyUnicode_DATA(key), text, size)
        return self._insert(<str>key, text, size, h)

    cdef void prefetch_hash(self, Py_hash_t h) noexcept:
        if self.entries != NULL:
            prefetch_line(&self.entries[<size_t>h & <size_t>self.mask])

    cdef Py_ssize_t insert(self, str key) except -1:
        """Give ``key`` (not in the map) the next slot; returns it."""
        cdef const char* p
        cdef Py_ssize_t n
        cdef Py_hash_t h = key_hash(key)
        held = utf8_of(key, &p, &n)
        return self._insert(key, p, n, h)

    cdef Py_ssize_t _insert(self, str key, const char* p, Py_ssize_t n,
                            Py_hash_t h) except -1:
        """``insert`` of ``key`` whose UTF-8 bytes are ``p``, ``n``, hashed ``h``."""
        cdef Py_ssize_t slot = len(self.names)
        cdef KeyEntry entry
        cdef uint32_t length = <uint32_t>n
        if slot >= 0x7FFFFFFF:
            raise OverflowError("a table holds at most 2^31 - 1 entities")
        if n > 0xFFFFFFFF:
            raise OverflowError("an entity key is at most 2^32 - 1 bytes")
        if (slot + 1) * 4 > (self.mask + 1) * 3:
            self._resize(max(MIN_CAPACITY, (self.mask + 1) * 2))
        entry.tag = tag_of(h, n)
        entry.slot = <int32_t>slot
        if n <= HEAD:
            entry.head = head_of(p, n)
        else:
            if self.long_used + 4 + n > self.long_size:
                self._grow_long(self.long_used + 4 + n)
            entry.head = <uint64_t>self.long_used
            memcpy(self.long_keys + self.long_used, &length, 4)
            memcpy(self.long_keys + self.long_used + 4, p, n)
            self.long_used += 4 + n
        place(self.entries, self.mask, h, entry)
        self.names.append(key)
        return slot

    cdef int _grow_long(self, Py_ssize_t need) except -1:
        """Room for ``need`` bytes of long keys (doubling)."""
        cdef Py_ssize_t size = max(need, 2 * self.long_size, 256)
        cdef char* grown = <char*>realloc(self.long_keys, size)
        if grown == NULL:
            raise MemoryError()
        self.long_keys = grown
        self.long_size = size
        return 0

    def get(self, str key, default=None):
        """The slot of ``key``, else ``default``."""
        cdef Py_ssize_t slot = self.lookup(key)
        return default if slot < 0 else slot

    def __len__(self):
        return len(self.names)

    def nbytes(self) -> int:
        """Bytes of the entry table and the long keys' bytes (the key objects in ``names``
        not counted)."""
        return (self.mask + 1) * sizeof(KeyEntry) + self.long_size


def hash_of(str key) -> int:
    """The maps' hash of ``key`` in this process (key_hash), as a lookup computes it."""
    return key_hash(key)
