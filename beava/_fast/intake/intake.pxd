# The push intake (intake.pyx): the one owner of accepted pushes' LSNs, counters and WAL
# records; the push pass cimports it to accept pushes in C.
from libc.stdint cimport int64_t, uint32_t

from beava._fast.intake.push_check cimport EventChecker
from beava._fast.intake.push_counts cimport PushCounts
from beava._fast.ops.row cimport Row

# durability modes (the durability log's ``mode``; read once, when the log is attached)
cdef enum:
    MEMORY_MODE = 0
    STRICT_MODE = 1
    PERIODIC_MODE = 2


cdef class CheckerEntry:
    cdef readonly object spec            # the event's EventSpec
    cdef readonly EventChecker checker   # its compiled checks
    cdef readonly Py_ssize_t index       # its place among the registry's events (counts)
    cdef readonly bint deduped           # it has a dedupe key: the store's path
    cdef readonly bytes name             # its name in UTF-8 (its WAL records')


cdef class EventRoute:
    cdef readonly object event           # the event's name (str)
    cdef readonly CheckerEntry entry
    cdef readonly tuple pushes           # its route: the push functions of its tables, or None
    cdef readonly bint by_row            # every table of its route takes C rows (takes_rows)


cdef class Intake:
    cdef readonly int mode
    cdef readonly object log
    cdef public object wal
    cdef readonly int64_t last_lsn, applied_lsn, hold_lsn, watermark_ms
    cdef readonly int64_t pushes_total, replays_total
    cdef PushCounts counts
    cdef dict earlier
    cdef object encode_into
    cdef int depth
    cdef bint logged
    cdef bytearray buf
    cdef object batch
    cdef list b_events

    cdef void begin(self) except *
    cdef void end(self) except *
    cdef int take(self, object event, CheckerEntry entry, object fields, const char* raw,
                  Py_ssize_t raw_len, int64_t now, uint32_t version, tuple pushes,
                  Row* row) except -1


cdef dict event_routes(dict checkers, dict routes)
cdef int feed(tuple pushes, object row, int64_t now) except -1
cdef bint owns_any(object pushes, object row) except -1
cdef bint owns_any_row(tuple pushes, Row* row) noexcept
cdef bint takes_rows(tuple pushes) noexcept
cdef int feed_row(tuple pushes, Row* row, int64_t now) except -1
