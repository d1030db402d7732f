# WAL records built in C (wal_record.pyx), for the push pass.
from libc.stdint cimport uint8_t, uint32_t, uint64_t


# Append one record to the end of ``buf``; returns its size on disk. ValueError when the
# name or the record is over its limit.
cdef Py_ssize_t append_to(bytearray buf, uint64_t lsn, uint8_t rtype, uint8_t body_format,
                          uint64_t timestamp_ms, uint32_t registry_version,
                          const char* name, Py_ssize_t name_len,
                          const char* body, Py_ssize_t body_len) except -1
