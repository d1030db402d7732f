# WAL records built in C (wal_record.pyx), for the push pass.
from libc.stdint cimport uint8_t, uint32_t, uint64_t


# Append one record to the end of ``buf``; returns its size on disk. ValueError when the
# name or the record is over its limit.
cdef Py_ssize_t append_to(bytearray buf, uint64_t lsn, uint8_t rtype, uint8_t body_format,
                          uint64_t timestamp_ms, uint32_t registry_version,
                          const char* name, Py_ssize_t name_len,
                          const char* body, Py_ssize_t body_len) except -1


# The record at ``start`` of ``buf`` was appended with an empty body, then its body's bytes
# appended after it: set its lengths and CRC; returns its size (ValueError, ``buf`` cut back
# to ``start``, when over the limit).
cdef Py_ssize_t seal_body(bytearray buf, Py_ssize_t start, Py_ssize_t name_len) except -1
