# WAL records built and read in C (wal_record.pyx), for the push pass.
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t

# a record's type and body format (spec/durability.md §5; beava.durability.wal_format)
cdef enum:
    RECORD_EVENT = 1
    BODY_MSGPACK = 2


# Append one record to the end of ``buf``; returns its size on disk. ValueError when the
# name or the record is over its limit. Unless ``sealed``, its CRC is left 0 for
# seal_records to set before the batch is written.
cdef Py_ssize_t append_to(bytearray buf, uint64_t lsn, uint8_t rtype, uint8_t body_format,
                          uint64_t timestamp_ms, uint32_t registry_version,
                          const char* name, Py_ssize_t name_len,
                          const char* body, Py_ssize_t body_len, bint sealed) except -1


# Set the CRC of every whole record in the ``size`` bytes at ``data`` (a batch of records,
# sealed or not: a sealed record's CRC is set again to the same value). Stops at bytes that
# are not a whole record. Takes no GIL: the WAL writer thread seals a batch before writing it.
cdef void seal_records(uint8_t* data, Py_ssize_t size) noexcept nogil


# The record at ``start`` of ``buf`` was appended unsealed with an empty body, then its
# body's bytes were appended after it: set its lengths (the batch's sealing sets its CRC);
# returns its size (ValueError, ``buf`` cut back to ``start``, when over the limit).
cdef Py_ssize_t close_body(bytearray buf, Py_ssize_t start, Py_ssize_t name_len) except -1


# The event record at ``offset`` of ``data`` (push ``push``'s, named in errors): its body's
# offset and length into ``body`` and ``body_len``, its timestamp into ``timestamp_ms``,
# whether the body is MessagePack into ``msgpack``; returns the offset after the record.
# ValueError when the bytes there are no whole event record. The CRC is not checked: the
# bytes are the batch this process wrote and made durable.
cdef Py_ssize_t event_record_at(bytearray data, Py_ssize_t offset, Py_ssize_t push,
                                Py_ssize_t* body, Py_ssize_t* body_len,
                                int64_t* timestamp_ms, bint* msgpack) except -1
