# Open-addressing tables of names looked up by their UTF-8 bytes where they lie in a
# MessagePack payload (no str built to look them up): an event checker's declared names
# (push_check.pyx), the push pass's event names (push_pass.pyx). A table has a power of two
# of slots, at least twice as many as names; its owner allocates it zeroed and keeps alive
# the bytes each name points into and the object it stands for.

from cpython.object cimport PyObject
from libc.stdint cimport uint64_t
from libc.string cimport memcmp, memcpy, memset


cdef struct RawName:
    const char* name        # NULL: an empty slot of the table
    Py_ssize_t size
    PyObject* object        # what the name stands for
    int code                # the owner's: type code and flags of a declared name
    int bit                 # the owner's: a declared name's bit in a body's seen-names mask
    uint64_t head[2]        # the name's first 16 bytes, zero-padded, as two words
    uint64_t mask[2]        # which bytes of ``head`` are the name's


cdef inline Py_ssize_t table_slots(Py_ssize_t names) noexcept nogil:
    """How many slots a table of ``names`` names has."""
    cdef Py_ssize_t size = 4
    while size < 2 * names:
        size *= 2
    return size


cdef inline uint64_t fnv1a(const char* p, Py_ssize_t n) noexcept nogil:
    """FNV-1a of ``n`` bytes."""
    cdef uint64_t h = 14695981039346656037ULL
    cdef Py_ssize_t i
    for i in range(n):
        h = (h ^ <unsigned char>p[i]) * 1099511628211ULL
    return h


cdef inline bint same_name(const RawName* e, const unsigned char* key,
                           Py_ssize_t room) noexcept nogil:
    """Whether the ``e.size`` bytes at ``key`` (``room`` bytes readable from it) are
    ``e``'s name: a name of up to 16 bytes is compared as one or two masked words."""
    cdef uint64_t w0, w1
    if e.size <= 8 and room >= 8:
        memcpy(&w0, key, 8)
        return (w0 & e.mask[0]) == e.head[0]
    if e.size <= 16 and room >= 16:
        memcpy(&w0, key, 8)
        memcpy(&w1, key + 8, 8)
        return ((w0 & e.mask[0]) ^ e.head[0]) | ((w1 & e.mask[1]) ^ e.head[1]) == 0
    return memcmp(e.name, key, e.size) == 0


cdef inline RawName* add_name(RawName* table, Py_ssize_t table_mask, const char* name,
                              Py_ssize_t size, PyObject* obj) noexcept nogil:
    """Put a name (``size`` bytes at ``name``, standing for ``obj``) into a free slot of
    the table; returns the slot."""
    cdef unsigned char padded[16]
    cdef Py_ssize_t slot = fnv1a(name, size) & table_mask
    while table[slot].name is not NULL:
        slot = (slot + 1) & table_mask
    cdef RawName* e = &table[slot]
    e.name = name
    e.size = size
    e.object = obj
    memset(padded, 0, 16)
    memcpy(padded, name, size if size < 16 else 16)
    memcpy(e.head, padded, 16)
    memset(padded, 0xFF, size if size < 16 else 16)
    memcpy(e.mask, padded, 16)
    return e


cdef inline const RawName* find_name(const RawName* table, Py_ssize_t table_mask,
                                     const unsigned char* key, Py_ssize_t size,
                                     Py_ssize_t room) noexcept nogil:
    """The table's entry for the ``size`` bytes at ``key`` (``room`` bytes readable from
    it), or NULL."""
    cdef Py_ssize_t slot = fnv1a(<const char*>key, size) & table_mask
    cdef const RawName* e
    while True:
        e = &table[slot]
        if e.name is NULL:
            return NULL
        if e.size == size and same_name(e, key, room):
            return e
        slot = (slot + 1) & table_mask
