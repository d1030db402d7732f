# Snapshot state of the columns (column.pxd, dump/load): plain data only, checked on load.
#
# A dump is built from None, bool, int, float, str, bytes, list and dict (str keys), so that
# MessagePack carries it and decodes it back to the same values; typed buffers travel as
# bytes. A snapshot file may be damaged or crafted, so load() checks the type, length and
# range of everything before it is copied into a buffer or used as an index, and raises
# ValueError with the reason (recovery then treats the snapshot as invalid).
#
# Block records: one bytes object concatenating, for each slot that holds a block, in
# ascending slot order, ``[int64 slot][int64 n][n bytes]`` (native byte order).
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport int64_t
from libc.string cimport memcpy

cdef enum:
    RECORD_HEADER = 16      # bytes of [int64 slot][int64 n]


cdef inline bytes state_bytes(object value, str what):
    if type(value) is not bytes:
        raise ValueError(f"snapshot {what}: expected bytes, got {type(value).__name__}")
    return <bytes>value


cdef inline list state_list(object value, Py_ssize_t n, str what):
    # A list of exactly n items (any length when n < 0).
    if type(value) is not list:
        raise ValueError(f"snapshot {what}: expected a list, got {type(value).__name__}")
    if n >= 0 and len(<list>value) != n:
        raise ValueError(f"snapshot {what}: expected {n} items, got {len(<list>value)}")
    return <list>value


cdef inline dict state_dict(object value, str what):
    if type(value) is not dict:
        raise ValueError(f"snapshot {what}: expected a map, got {type(value).__name__}")
    return <dict>value


cdef inline int64_t state_int(object value, int64_t lo, int64_t hi, str what) except? -1:
    # An int (never a bool) in [lo, hi].
    if type(value) is not int or not lo <= value <= hi:
        raise ValueError(f"snapshot {what}: expected an integer in [{lo}, {hi}], "
                         f"got {value!r}")
    return value


cdef inline bytes state_buffer(object value, Py_ssize_t nbytes, str what):
    # Bytes of exactly nbytes (a typed buffer of a known number of slots).
    cdef bytes data = state_bytes(value, what)
    if len(data) != nbytes:
        raise ValueError(f"snapshot {what}: {len(data)} bytes, expected {nbytes}")
    return data


cdef inline Py_ssize_t record_next(const char* p, Py_ssize_t total, Py_ssize_t off,
                                   int64_t prev, Py_ssize_t nslots, int64_t* slot,
                                   Py_ssize_t* n, str what) except -1:
    # Parse the block record header at `off` of `total` bytes: its slot (> prev, < nslots)
    # and data size n (> 0, within the bytes left). Returns the offset of its data.
    cdef int64_t header[2]
    if total - off < RECORD_HEADER:
        raise ValueError(f"snapshot {what}: truncated block record")
    memcpy(header, p + off, RECORD_HEADER)
    off += RECORD_HEADER
    if header[0] <= prev or header[0] >= nslots:
        raise ValueError(f"snapshot {what}: block record for slot {header[0]} out of order "
                         f"or outside [0, {nslots})")
    if header[1] <= 0 or header[1] > total - off:
        raise ValueError(f"snapshot {what}: block record of {header[1]} bytes does not fit")
    slot[0] = header[0]
    n[0] = <Py_ssize_t>header[1]
    return off


cdef inline char* record_head(char* out, int64_t slot, Py_ssize_t n) noexcept:
    # Write the header of a block record of n data bytes at `out`; returns where they go.
    cdef int64_t header[2]
    header[0] = slot
    header[1] = n
    memcpy(out, header, RECORD_HEADER)
    return out + RECORD_HEADER


cdef inline char* record_put(char* out, int64_t slot, const void* data, Py_ssize_t n) noexcept:
    # Write one block record at `out` (room for RECORD_HEADER + n bytes); returns its end.
    out = record_head(out, slot, n)
    if n:
        memcpy(out, data, n)
    return out + n


cdef inline bytes new_bytes(Py_ssize_t n, char** data):
    # An uninitialised bytes object of n bytes to fill through data[0].
    cdef bytes out = PyBytes_FromStringAndSize(NULL, n)
    data[0] = PyBytes_AS_STRING(out)
    return out
