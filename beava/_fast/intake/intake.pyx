# cython: language_level=3, boundscheck=False, wraparound=False
"""The push intake: the one owner of what accepting a push changes (spec/wire.md §6,
spec/durability.md §5-§6).

One :class:`Intake` per store hands out every LSN (pushes and the synchronous records of
register, reset and backfill alike), counts accepted pushes (in total, per event, dedupe
replays), appends each push's WAL record to the durability log's pending batch, applies a
push at once or leaves it to the durable batch as the durability mode says, and keeps the
LSNs the acknowledgements wait on (``applied_lsn``, ``hold_lsn``). The mode is read once,
from the log the intake is attached to. The store's Python path (``FeatureStore.push``:
validate, dedupe, then :meth:`Intake.push`) and the compiled push pass
(beava._fast.intake.push_pass, through the C method ``take``) both accept through it, so the two
share one set of counters and one LSN sequence with nothing to copy between them.

A call of the push pass is bracketed by ``begin`` and ``end``; a push the pass leaves to
the store runs inside that bracket: the log hears of the records appended (``accepted()``)
once, when the outermost bracket closes.
"""

from cpython.bytearray cimport PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport uint64_t

from beava._fast.intake.push_check cimport EventChecker
from beava._fast.intake.push_counts cimport PushCounts
from beava._fast.ops.row cimport Row
from beava._fast.ops.table_kernel cimport TableKernel
from beava._fast.wal.wal_record cimport BODY_MSGPACK, RECORD_EVENT, append_to, close_body


# The durability modes as the logs spell them (beava.durability.group_commit).
MEMORY = MEMORY_MODE
STRICT = STRICT_MODE
PERIODIC = PERIODIC_MODE

cdef enum:
    MAX_STEPPED = 16    # kernels of one route taken through apply's steps together


cdef class CheckerEntry:
    """What the intake needs of one registered event: its spec, compiled checker, index
    among the registry's events (its push count's) and name bytes, and whether it has a
    dedupe key (those pushes take the store's path, which keeps the dedupe cache)."""

    def __init__(self, str name, spec, EventChecker checker, Py_ssize_t index):
        self.spec = spec
        self.checker = checker
        self.index = index
        self.deduped = spec.dedupe_key is not None
        self.name = name.encode()


cdef class EventRoute:
    """Everything a push of one registered event needs, found once per push by its name:
    its checker entry, its route (the push functions of the tables it feeds; None when it
    feeds none) and whether that route takes C rows. Made for one registry's checkers and
    one engine's routes together (``event_routes``), so none of it is looked up per push."""

    def __init__(self, str event, CheckerEntry entry, tuple pushes):
        self.event = event
        self.entry = entry
        self.pushes = pushes
        self.by_row = pushes is not None and takes_rows(pushes)


cdef dict event_routes(dict checkers, dict routes):
    """Event name -> its EventRoute, for every event of ``checkers`` (a registry's) routed
    by ``routes`` (event -> push functions)."""
    return {event: EventRoute(event, entry, routes.get(event))
            for event, entry in checkers.items()}


cdef int feed(tuple pushes, object row, int64_t now) except -1:
    """One push to the tables of its route: a kernel in C, a chain through its function.
    A route of several kernels and nothing else (the usual case) takes the event through
    each step of TableKernel.apply for all of them before the next step, so the cache
    misses of their key lookups and their entities' state overlap."""
    cdef Py_ssize_t n = len(pushes), i
    cdef Py_ssize_t slots[MAX_STEPPED]
    if 1 < n <= MAX_STEPPED:
        for push in pushes:
            if type(push) is not TableKernel:
                break
        else:
            for push in pushes:
                (<TableKernel>push).prefetch_key(<dict>row)
            for i in range(n):
                slots[i] = (<TableKernel>pushes[i]).find(<dict>row, now)
            for i in range(n):
                if slots[i] >= 0:
                    (<TableKernel>pushes[i]).follow(slots[i])
            for i in range(n):
                if slots[i] >= 0:
                    (<TableKernel>pushes[i]).touch_update(slots[i], <dict>row, now)
            return 0
    for push in pushes:
        if type(push) is TableKernel:
            (<TableKernel>push).apply(<dict>row, now)
        else:
            push(row, now)
    return 0


cdef bint owns_any(object pushes, object row) except -1:
    """Sharded serving: whether this shard applies ``row`` to at least one table of its
    route (``pushes``, None: an event feeding no table), or no table has a key for it;
    False when every keyed table's key belongs to other shards (the push is misrouted).
    A chained table's key is known only after its chain: it counts as owned here, and its
    kernel checks the chain's output."""
    cdef int verdict
    cdef bint keyed = False
    if pushes is None:
        return True
    for push in <tuple>pushes:
        if type(push) is not TableKernel:
            return True
        verdict = (<TableKernel>push).ownership(<dict>row)
        if verdict == 1:
            return True
        keyed = keyed or verdict == 0
    return not keyed


cdef bint owns_any_row(tuple pushes, Row* row) noexcept:
    """``owns_any`` of a C row, for a route that ``takes_rows``."""
    cdef int verdict
    cdef bint keyed = False
    for push in pushes:
        verdict = (<TableKernel>push).ownership_row(row)
        if verdict == 1:
            return True
        keyed = keyed or verdict == 0
    return not keyed


cdef bint takes_rows(tuple pushes) noexcept:
    """Whether every table of a route can be fed a C row (feed_row)."""
    for push in pushes:
        if type(push) is not TableKernel or not (<TableKernel>push).takes_row:
            return False
    return True


cdef int feed_row(tuple pushes, Row* row, int64_t now) except -1:
    """``feed`` of a C row (row.pxd) to a route that ``takes_rows``, in the same steps."""
    cdef Py_ssize_t n = len(pushes), i
    cdef Py_ssize_t slots[MAX_STEPPED]
    if n == 1:
        (<TableKernel>pushes[0]).apply_row(row, now)
        return 0
    if n > MAX_STEPPED:
        for push in pushes:
            (<TableKernel>push).apply_row(row, now)
        return 0
    for push in pushes:
        (<TableKernel>push).prefetch_row(row)
    for i in range(n):
        slots[i] = (<TableKernel>pushes[i]).find_row(row, now)
    for i in range(n):
        if slots[i] >= 0:
            (<TableKernel>pushes[i]).follow(slots[i])
    for i in range(n):
        if slots[i] >= 0:
            (<TableKernel>pushes[i]).touch_update_row(slots[i], row, now)
    return 0


cdef class Intake:
    """Accepted pushes of one store (module docstring). ``encode_into(row, buf, -1)``
    appends a row as MessagePack to ``buf`` (the body of a push record whose pushed bytes
    are not the row); ``log``: the durability log (its ``mode``, ``buf``, ``batch``,
    ``accepted()``, ``after_pending()``)."""

    def __init__(self, encode_into, log):
        self.encode_into = encode_into
        self.earlier = {}
        self.counts = PushCounts(())  # no event until a registry's are counted
        self.attach(log)

    def attach(self, log):
        """Use ``log`` from now on; its mode is read here, once."""
        mode = log.mode
        if mode not in (MEMORY_MODE, STRICT_MODE, PERIODIC_MODE):
            raise ValueError(f"unknown durability mode {mode!r}")
        self.log = log
        self.mode = mode

    @property
    def sealed_lsn(self):
        """The last LSN handed to the WAL worker; later records share the pending batch."""
        return self.log.sealed_lsn

    @property
    def next_lsn(self):
        return self.last_lsn + 1

    # counts -------------------------------------------------------------------------

    def count_events(self, names):
        """Count pushes of a new registry's events (``names``, in index order) from now
        on: the current counts are folded into the per-name totals first (a count belongs
        to its event's name and never goes down)."""
        earlier = self.earlier
        for name, count in self.counts.totals().items():
            if count:
                earlier[name] = earlier.get(name, 0) + count
        self.counts = PushCounts(names)

    def pushes_by_event(self):
        """Accepted pushes (excluding replays) per event name since the process started,
        for every event ever pushed or registered now."""
        totals = dict(self.earlier)
        for name, count in self.counts.totals().items():
            totals[name] = totals.get(name, 0) + count
        return totals

    # accepting pushes ------------------------------------------------------------------

    cdef void begin(self) except *:
        """Open a bracket of pushes: the pending batch is at hand until the outermost
        ``end``, which tells the log of the records appended."""
        if self.depth == 0 and self.mode != MEMORY_MODE:
            self.buf = self.log.buf
            if self.mode == STRICT_MODE:
                self.batch = self.log.batch
                self.b_events = self.batch.events
        self.depth += 1

    cdef void end(self) except *:
        self.depth -= 1
        if self.depth == 0:
            self.buf = None
            self.batch = self.b_events = None
            if self.logged:
                self.logged = False
                self.log.accepted()

    cdef int take(self, object event, CheckerEntry entry, object fields, const char* raw,
                  Py_ssize_t raw_len, int64_t now, uint32_t version, tuple pushes,
                  Row* row) except -1:
        """Accept one checked push of ``event`` at time ``now``: its LSN (``last_lsn``
        after), its counts, its WAL record (its body: ``raw``, the pushed bytes, or
        ``fields`` encoded when ``raw`` is NULL), then apply it now (memory-only,
        periodic) or once its batch is durable (strict: from its record; ``fields`` may be
        None then) to ``pushes``, its route (None: no table). ``row`` (or NULL): the push as
        a C row, for a route that ``takes_rows`` (``fields`` is None then and ``raw`` its bytes). Inside a bracket
        (``begin``). Nothing changes when it raises."""
        cdef int64_t lsn = self.last_lsn + 1
        cdef Py_ssize_t start
        cdef bytes name
        if self.mode != MEMORY_MODE:
            name = entry.name
            start = PyByteArray_GET_SIZE(self.buf)
            append_to(self.buf, <uint64_t>lsn, RECORD_EVENT, BODY_MSGPACK, <uint64_t>now,
                      version, PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name), raw, raw_len,
                      False)  # sealed before it is written (wal_record.seal_records)
            if raw == NULL:  # the row encoded straight onto the pending batch
                try:
                    self.encode_into(fields, self.buf, -1)
                    close_body(self.buf, start, PyBytes_GET_SIZE(name))
                except BaseException:
                    PyByteArray_Resize(self.buf, start)
                    raise
            self.logged = True
        self.last_lsn = lsn
        self.pushes_total += 1
        self.counts.values[entry.index] += 1
        if self.mode == STRICT_MODE:  # applied from its record once the fsync covers it
            if not self.b_events:
                self.batch.first_lsn = lsn
            self.b_events.append(event)
            self.hold_lsn = lsn
            return 0
        if pushes is not None:
            if row != NULL:
                feed_row(pushes, row, now)
            else:
                feed(pushes, fields, now)
        self.applied_lsn = lsn
        if now > self.watermark_ms:
            self.watermark_ms = now
        return 0

    def push(self, str event, CheckerEntry entry, dict row, int64_t now, uint32_t version,
             dict routes, on_durable):
        """Accept one push the store has checked and deduped; returns ``(lsn, pending)``.
        ``pending`` (strict mode): not applied yet; ``on_durable`` (or None) runs once it
        is, and its acknowledgement waits until ``applied_lsn`` reaches ``hold_lsn``."""
        self.begin()
        try:
            self.take(event, entry, row, NULL, 0, now, version, routes.get(event), NULL)
            if self.mode == STRICT_MODE and on_durable is not None:
                self.batch.waiters.append((len(self.b_events), on_durable))
        finally:
            self.end()
        return self.last_lsn, self.mode == STRICT_MODE

    def replayed(self, int64_t original, on_durable):
        """A dedupe replay of the push at LSN ``original``: count it; True when the original
        is not applied yet (strict): the replay's acknowledgement waits for everything
        accepted so far (``hold_lsn``), and ``on_durable`` (or None) runs once it is."""
        self.replays_total += 1
        if original <= self.applied_lsn:
            return False
        if self.log.after_pending(on_durable if on_durable is not None else _nothing):
            return False
        self.hold_lsn = self.last_lsn
        return True

    def unwritten(self, int64_t first_lsn, indexes):
        """Strict mode, a full disk: the pushes from ``first_lsn`` on (their events'
        ``indexes``) were accepted but never written, nor applied: uncount them and give
        their LSNs out again."""
        cdef Py_ssize_t index
        if self.last_lsn < first_lsn:
            return
        self.pushes_total -= self.last_lsn - first_lsn + 1
        for index in indexes:
            self.counts.add(index, -1)
        self.last_lsn = self.hold_lsn = first_lsn - 1

    def applied(self, int64_t lsn, int64_t newest_ms):
        """Pushes up to ``lsn`` of a durable batch are applied, the newest at ``newest_ms``."""
        self.applied_lsn = lsn
        if newest_ms > self.watermark_ms:
            self.watermark_ms = newest_ms

    # records other than live pushes ------------------------------------------------------

    def restore(self, int64_t lsn, int64_t watermark_ms):
        """The state holds every record up to ``lsn`` (recovery, a snapshot, a reset) and
        its time is ``watermark_ms``."""
        self.last_lsn = self.applied_lsn = lsn
        self.watermark_ms = watermark_ms

    def advance(self, int64_t lsn):
        """Recovery applied the record at ``lsn`` (not a push: its time is unchanged)."""
        self.last_lsn = self.applied_lsn = lsn

    def write_sync(self, int record_type, int body_format, clock, uint32_t version,
                   bytes name, const unsigned char[::1] body, bint boundary):
        """The one way register, reset and backfill log their change: one record with the
        next LSN, stamped ``clock()``, written and fsynced before it returns (``boundary``:
        the record of a reset, which starts the WAL's history anew), that LSN then being
        applied (memory-only: no record, the LSN only). Call with no push pending (after
        the log's barrier). Returns the LSN. ValueError (before anything is written) when
        the record is over the WAL's limit; the WAL's own errors pass through, the LSN
        unused. ``body`` is any contiguous buffer; the record is handed to the WAL as the
        bytearray it was made in (a backfill's is the size of a table's state: no copy)."""
        cdef int64_t lsn = self.last_lsn + 1
        cdef bytearray record
        if self.wal is not None:
            record = bytearray()
            append_to(record, <uint64_t>lsn, <unsigned char>record_type,
                      <unsigned char>body_format, <uint64_t>clock(), version,
                      PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name),
                      <const char*>&body[0] if body.shape[0] else NULL, body.shape[0], True)
            if boundary:
                self.wal.reset(lsn, record)
            else:
                self.wal.write_registry_record(record)
        self.last_lsn = self.applied_lsn = lsn
        return lsn

def _nothing():
    pass
