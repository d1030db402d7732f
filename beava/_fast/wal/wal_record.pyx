# cython: language_level=3, boundscheck=False, wraparound=False
"""WAL records built in C (spec/durability.md §5; layout in beava.durability.wal_format):
the one encoder of the record format, wal_format.encode_record included.

Record::

    record_len u32 | crc u32 | lsn u64 | type u8 | body_format u8 | flags u16 |
    timestamp_ms u64 | registry_version u32 | name_len u16 | name | body_len u32 | body

little-endian; ``crc`` is zlib's CRC-32 (initial value 0) of every byte after itself.
:func:`append_record` writes one record straight onto the end of a bytearray (the pending
batch), so a push costs no intermediate bytes objects; :func:`event_record_at` reads an event
record back (a durable batch is applied from its records). The push pass appends its records
unsealed (CRC 0) and :func:`seal_records` sets the CRC of every record of a batch just before
it is written: on the WAL writer thread, off the event loop (beava._fast.wal.batch_writer), or by
:func:`seal` for a batch written synchronously. The CRC is table driven (slicing by 8, the
reflected polynomial 0xEDB88320 of zlib), so the module needs no zlib headers; on a CPU
with carry-less multiplication the whole 16-byte blocks of 32 bytes or more are folded
with it first (crc32_fold.h).
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

from beava._fast.wire.byte_buffers cimport resize_growing

# Bytes after record_len when name and body are empty; bytes before the name.
DEF FIXED_LEN = 34
DEF NAME_OFFSET = 34
DEF MAX_RECORD_LEN = 1 << 30
# Offsets of the other fields read back (the push pass applies a durable batch from them).
DEF TYPE_OFFSET = 16
DEF FORMAT_OFFSET = 17
DEF TIMESTAMP_OFFSET = 20
DEF NAME_LEN_OFFSET = 32

cdef extern from "crc32_fold.h" nogil:
    int beava_crc32_can_fold()
    uint32_t beava_crc32_fold(uint32_t reg, const uint8_t* p, size_t n)

cdef uint32_t _table[8][256]
cdef bint _can_fold = beava_crc32_can_fold()
CRC32_FOLDS = bool(_can_fold)  # whether crc32 folds with carry-less multiplication here
# Bytes from which the folding by carry-less multiplication goes first (below: the tables).
DEF FOLD_FROM = 32


cdef void _init_table() noexcept:
    cdef uint32_t c, n, k
    cdef uint32_t poly = 0xEDB88320
    for n in range(256):
        c = n
        for k in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        _table[0][n] = c
    for n in range(256):
        c = _table[0][n]
        for k in range(1, 8):
            c = _table[0][c & 0xFF] ^ (c >> 8)
            _table[k][n] = c


_init_table()


cdef inline uint32_t _crc32(uint32_t crc, const uint8_t* p, Py_ssize_t n) noexcept nogil:
    cdef uint32_t a, b
    cdef Py_ssize_t folded
    crc = ~crc
    if _can_fold and n >= FOLD_FROM:  # whole 16-byte blocks folded, the rest by the tables
        folded = n & ~(<Py_ssize_t>15)
        crc = beava_crc32_fold(crc, p, <size_t>folded)
        p += folded
        n -= folded
    while n >= 8:
        a = (<uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16)
             | (<uint32_t>p[3] << 24)) ^ crc
        b = (<uint32_t>p[4] | (<uint32_t>p[5] << 8) | (<uint32_t>p[6] << 16)
             | (<uint32_t>p[7] << 24))
        crc = (_table[7][a & 0xFF] ^ _table[6][(a >> 8) & 0xFF]
               ^ _table[5][(a >> 16) & 0xFF] ^ _table[4][a >> 24]
               ^ _table[3][b & 0xFF] ^ _table[2][(b >> 8) & 0xFF]
               ^ _table[1][(b >> 16) & 0xFF] ^ _table[0][b >> 24])
        p += 8
        n -= 8
    while n > 0:
        crc = _table[0][(crc ^ p[0]) & 0xFF] ^ (crc >> 8)
        p += 1
        n -= 1
    return ~crc


cdef inline void _put16(uint8_t* p, uint16_t v) noexcept nogil:
    p[0] = v & 0xFF
    p[1] = v >> 8


cdef inline void _put32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = v & 0xFF
    p[1] = (v >> 8) & 0xFF
    p[2] = (v >> 16) & 0xFF
    p[3] = v >> 24


cdef inline void _put64(uint8_t* p, uint64_t v) noexcept nogil:
    _put32(p, <uint32_t>v)
    _put32(p + 4, <uint32_t>(v >> 32))


cdef inline uint64_t _get(const uint8_t* p, int n) noexcept nogil:
    """The little-endian unsigned integer of ``n`` bytes at ``p``."""
    cdef uint64_t v = 0
    cdef int k
    for k in range(n - 1, -1, -1):
        v = (v << 8) | p[k]
    return v


def crc32(data, unsigned long value=0):
    """zlib.crc32(data, value) (any buffer)."""
    cdef const uint8_t[::1] view = data
    return _crc32(<uint32_t>value, &view[0] if view.shape[0] else NULL, view.shape[0])


cdef Py_ssize_t _write(uint8_t* p, uint64_t lsn, uint8_t rtype, uint8_t body_format,
                       uint64_t timestamp_ms, uint32_t registry_version,
                       const char* name, Py_ssize_t name_len,
                       const char* body, Py_ssize_t body_len, bint sealed) noexcept:
    """Write the record at ``p`` (room for it checked by the caller), its CRC when
    ``sealed`` (else 0, set by seal_records later); returns its size."""
    cdef Py_ssize_t record_len = FIXED_LEN + name_len + body_len
    _put32(p, <uint32_t>record_len)
    _put64(p + 8, lsn)
    p[16] = rtype
    p[17] = body_format
    _put16(p + 18, 0)
    _put64(p + 20, timestamp_ms)
    _put32(p + 28, registry_version)
    _put16(p + 32, <uint16_t>name_len)
    if name_len:
        memcpy(p + NAME_OFFSET, name, name_len)
    _put32(p + NAME_OFFSET + name_len, <uint32_t>body_len)
    if body_len:
        memcpy(p + NAME_OFFSET + name_len + 4, body, body_len)
    _put32(p + 4, _crc32(0, p + 8, record_len - 4) if sealed else 0)
    return record_len + 4


cdef inline void _check(Py_ssize_t name_len, Py_ssize_t body_len) except *:
    if name_len > 0xFFFF:
        raise ValueError(f"record name of {name_len} bytes exceeds 65535")
    if FIXED_LEN + name_len + body_len > MAX_RECORD_LEN:
        raise ValueError(f"record of {FIXED_LEN + name_len + body_len} bytes exceeds 2^30")


cdef Py_ssize_t append_to(bytearray buf, uint64_t lsn, uint8_t rtype, uint8_t body_format,
                          uint64_t timestamp_ms, uint32_t registry_version,
                          const char* name, Py_ssize_t name_len,
                          const char* body, Py_ssize_t body_len, bint sealed) except -1:
    _check(name_len, body_len)
    cdef Py_ssize_t start = PyByteArray_GET_SIZE(buf)
    resize_growing(buf, start + 4 + FIXED_LEN + name_len + body_len)
    return _write(<uint8_t*>PyByteArray_AS_STRING(buf) + start, lsn, rtype, body_format,
                  timestamp_ms, registry_version, name, name_len, body, body_len, sealed)


cdef void seal_records(uint8_t* data, Py_ssize_t size) noexcept nogil:
    cdef Py_ssize_t at = 0
    cdef uint64_t record_len
    while at + 8 <= size:
        record_len = _get(data + at, 4)
        if record_len < 4 or <uint64_t>(size - at - 4) < record_len:
            return  # not a whole record: left as it is
        _put32(data + at + 4, _crc32(0, data + at + 8, <Py_ssize_t>record_len - 4))
        at += 4 + <Py_ssize_t>record_len


def seal(bytearray data):
    """seal_records on a batch written synchronously."""
    seal_records(<uint8_t*>PyByteArray_AS_STRING(data), PyByteArray_GET_SIZE(data))


cdef Py_ssize_t close_body(bytearray buf, Py_ssize_t start, Py_ssize_t name_len) except -1:
    """The record at ``start`` was appended unsealed with an empty body and its body's bytes
    were appended right after it (e.g. encoded in place): set its lengths (its CRC is set
    when the batch is sealed). Returns its size; ValueError (and ``buf`` cut back to
    ``start``) when it is over the limit."""
    cdef Py_ssize_t size = PyByteArray_GET_SIZE(buf) - start
    cdef Py_ssize_t body_len = size - 4 - FIXED_LEN - name_len
    try:
        _check(name_len, body_len)
    except ValueError:
        PyByteArray_Resize(buf, start)
        raise
    cdef uint8_t* p = <uint8_t*>PyByteArray_AS_STRING(buf) + start
    _put32(p, <uint32_t>(size - 4))
    _put32(p + NAME_OFFSET + name_len, <uint32_t>body_len)
    return size


cdef Py_ssize_t event_record_at(bytearray data, Py_ssize_t offset, Py_ssize_t push,
                                Py_ssize_t* body, Py_ssize_t* body_len,
                                int64_t* timestamp_ms, bint* msgpack) except -1:
    cdef Py_ssize_t size = PyByteArray_GET_SIZE(data)
    cdef Py_ssize_t record_len, name_len
    if offset + 4 + FIXED_LEN > size:
        raise ValueError(f"batch of {size} bytes ends before push {push}'s record")
    cdef const uint8_t* p = <const uint8_t*>PyByteArray_AS_STRING(data) + offset
    record_len = <Py_ssize_t>_get(p, 4)
    name_len = <Py_ssize_t>_get(p + NAME_LEN_OFFSET, 2)
    if offset + 4 + record_len > size or FIXED_LEN + name_len > record_len:
        raise ValueError(f"push {push}'s record at byte {offset} is no event record")
    body_len[0] = <Py_ssize_t>_get(p + NAME_OFFSET + name_len, 4)
    if FIXED_LEN + name_len + body_len[0] != record_len or p[TYPE_OFFSET] != RECORD_EVENT:
        raise ValueError(f"push {push}'s record at byte {offset} is no event record")
    body[0] = offset + NAME_OFFSET + name_len + 4
    timestamp_ms[0] = <int64_t>_get(p + TIMESTAMP_OFFSET, 8)
    msgpack[0] = p[FORMAT_OFFSET] == BODY_MSGPACK
    return offset + 4 + record_len


def append_record(bytearray buf, uint64_t lsn, uint8_t rtype, uint8_t body_format,
                  uint64_t timestamp_ms, uint32_t registry_version, bytes name, bytes body,
                  bint sealed=True):
    """Append one record to ``buf``; returns its size on disk. ``sealed`` False: its CRC is
    left 0 (the durability log seals a pending batch when it writes it)."""
    return append_to(buf, lsn, rtype, body_format, timestamp_ms, registry_version,
                     PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name),
                     PyBytes_AS_STRING(body), PyBytes_GET_SIZE(body), sealed)
