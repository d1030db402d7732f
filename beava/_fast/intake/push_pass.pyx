# cython: language_level=3, boundscheck=False, wraparound=False
"""The push pass: pushes accepted in one C loop (spec/wire.md §6, §10).

For each push: check the body with its event's compiled checker, take its time (the wall
clock is read once per CHECK_EVERY pushes of a call: they arrived in the same socket reads),
hand it to the store's intake (beava._fast.intake.intake: its LSN, counts, WAL record, and its
apply now or once durable, as the durability mode says), and, for a framed-TCP push, write
the ack frame. ``PushPass.run`` takes runs of
OP_PUSH frames of a socket read (frame_splitter.Frames: each payload read where it lies in
the read's bytes, no object per frame); ``PushPass.push_bodies`` the bodies of one
PUSH_MANY. A MessagePack envelope laid out as clients write it (``{"event": name, "body":
...}`` in that order) is split here and only its body decoded; when the checks change
nothing, the WAL record's body is the pushed body's own bytes. When the event's checker can
settle such a body from its bytes (a flat map of declared names to numbers, booleans and
ASCII text), the checker builds its row in the same pass (``EventChecker.row_msgpack``: no
decoder call); in strict mode the body is only checked at intake (``check_msgpack``) and its
row built once, when its durable record is applied. When every table the event feeds can
read a C row (``takes_rows``: beava._fast.ops.row), the row is that instead of a dict
(``EventChecker.fill_row``: typed values, text as views into the body's bytes): such a push
is checked, applied and acknowledged without a Python object of its own. No Python-level
function runs per push on this path beyond the decoder of other bodies and the table
kernels; the durability log hears of a call's records once, at its end (the intake's
bracket).

Anything unusual goes to the store's Python path before any state is touched: a body that
does not decode or does not pass its checks (which answers the exact error), an event with
a ``dedupe_key`` (the store's dedupe cache); the store accepts it through the same intake,
inside the call's bracket. :func:`apply_records` applies a durable batch
from its records: the rows decoded at intake are let go of at once, while they are fresh in
the cache, instead of living until the fsync.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport PyObject
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy, memset

from beava._fast.wire.byte_buffers cimport resize_growing
from beava._fast.timing.clocks cimport monotonic, wall_ms
from beava._fast.intake.name_table cimport RawName, add_name, find_name, table_slots
from beava._fast.wire.number_text cimport uint_text
from beava._fast.intake.intake cimport (
    STRICT_MODE,
    CheckerEntry,
    EventRoute,
    Intake,
    event_routes,
    feed,
    feed_row,
    owns_any,
    owns_any_row,
    takes_rows,
)
from beava._fast.intake.push_check cimport EventChecker
from beava._fast.ops.row cimport Row
from beava._fast.ops.slot_buffers cimport dict_get
from beava._fast.wal.wal_record cimport event_record_at
from beava._fast.wire.frame_splitter cimport Frames, FrameSpan


cdef enum:
    OP_PUSH = 0x0010
    CT_JSON = 0x01
    CT_MSGPACK = 0x02
    HEADER = 7          # u32 length | u16 op | u8 ct
    CHECK_EVERY = 16    # pushes between clock reads against a run's deadline
    ACK_ROOM = 128      # an ack frame is at most 7 + 80 bytes

cdef const char* ACK_HEAD = b'{"ack_lsn":'
cdef const char* ACK_MID = b',"idempotent_replay":false,"registry_version":'
# MessagePack: fixmap(2), fixstr(5) "event"; fixstr(4) "body"
cdef const char* ENVELOPE_HEAD = b'\x82\xa5event'
cdef const char* BODY_KEY = b'\xa4body'


cdef inline void put_ack(bytearray out, uint32_t reply_op, uint64_t lsn,
                         uint64_t version) except *:
    """Append the ack frame ``{"ack_lsn":lsn,"idempotent_replay":false,
    "registry_version":version}`` (spec/wire.md §6.6) to ``out``."""
    cdef char frame[ACK_ROOM]
    cdef char* p = frame + HEADER
    memcpy(p, ACK_HEAD, 11)
    p += 11
    p += uint_text(p, lsn)
    memcpy(p, ACK_MID, 46)
    p += 46
    p += uint_text(p, version)
    p[0] = b'}'
    p += 1
    cdef uint32_t length = <uint32_t>(p - frame - 4)
    frame[0] = <char>(length >> 24)
    frame[1] = <char>((length >> 16) & 0xFF)
    frame[2] = <char>((length >> 8) & 0xFF)
    frame[3] = <char>(length & 0xFF)
    frame[4] = <char>(reply_op >> 8)
    frame[5] = <char>(reply_op & 0xFF)
    frame[6] = <char>CT_JSON
    cdef Py_ssize_t start = PyByteArray_GET_SIZE(out)
    resize_growing(out, start + (p - frame))
    memcpy(PyByteArray_AS_STRING(out) + start, frame, p - frame)


cdef Row _records_row  # apply_records' row (the event loop's thread only)


def apply_records(dict routes, dict checkers, list events, bytearray data, Py_ssize_t offset,
                  Py_ssize_t start, Py_ssize_t stop, double deadline, object decode_msgpack,
                  object decode_json):
    """Apply pushes ``start..stop-1`` of a durable batch to the tables they feed
    (``routes``: event -> the tables' push functions), each from its event record in
    ``data`` (push ``start``'s at byte ``offset``, the others following it): its body
    decoded as recovery does (a body its event's checker settles from its bytes, as the
    push pass reads it: ``checkers`` are the store's), its time from the record; when
    ``deadline`` (a time.perf_counter() value; 0.0: none) passes, checked every
    CHECK_EVERY pushes, stop early. A body whose tables all take C rows is applied from
    one (EventChecker.fill_row). Returns ``(the newest time applied, the offset after the
    last push applied's record, the index after it)``."""
    cdef Py_ssize_t i, at, size
    cdef PyObject* found
    cdef int64_t newest = 0, now
    cdef bint msgpack
    cdef const char* raw
    cdef EventChecker checker = None
    cdef object event, last = None  # the event of the push before (most are the same)
    cdef tuple route = None
    cdef bint by_row = False
    for i in range(start, stop):
        if (deadline != 0.0 and i != start and (i - start) % CHECK_EVERY == 0
                and monotonic() > deadline):
            return newest, offset, i
        offset = event_record_at(data, offset, i, &at, &size, &now, &msgpack)
        raw = PyByteArray_AS_STRING(data) + at
        event = events[i]
        if event is not last:
            last = event
            found = dict_get(checkers, event)
            checker = (<CheckerEntry?><object>found).checker if found is not NULL else None
            found = dict_get(routes, event)
            route = <tuple>found if found is not NULL else None
            by_row = route is not None and checker is not None and takes_rows(route)
        if (by_row and msgpack
                and checker.fill_row(<const char*>raw, size, &_records_row)):
            feed_row(route, &_records_row, now)
            if now > newest:
                newest = now
            continue
        row = checker.row_msgpack(raw, size) if checker is not None and msgpack else None
        if row is None:
            body = PyBytes_FromStringAndSize(raw, size)
            row = decode_msgpack(body) if msgpack else decode_json(body)
        if route is not None:
            feed(route, row, now)
        if now > newest:
            newest = now
    return newest, offset, stop


cdef class PushPass:
    """Pushes accepted in C for one server's store (see the module docstring): ``run`` for
    runs of OP_PUSH frames, ``push_bodies`` for the bodies of one PUSH_MANY. Every push is
    accepted by the store's intake, whose bracket spans the call (``_begin``, ``_end``)."""

    cdef object store
    cdef object slow            # (ct, payload) -> reply frame: the Python push handler
    cdef object failed          # exception -> error frame
    cdef object decode_msgpack  # payload -> envelope with .event and .body
    cdef object decode_body     # a MessagePack body -> its value (as recovery decodes it)
    cdef object decode_json     # payload -> envelope with .event and a raw JSON .body
    cdef object decode_json_body
    cdef object wall_clock      # the store's clock when it is the wall clock
    cdef uint32_t reply_op
    cdef object checkers_for    # the checkers dict ``by_event`` was made of
    cdef object routes_for      # and the routes dict
    cdef dict by_event          # event -> its EventRoute (event_routes)
    cdef Row row                # the C row of the push at hand
    cdef RawName* event_table   # ``by_event``'s EventRoutes, found by their names' UTF-8 bytes
    cdef Py_ssize_t event_mask
    # set by _begin for one call
    cdef Intake intake
    cdef object clock
    cdef bint wall
    cdef int64_t wall_now       # the wall clock's last reading (ms), good for wall_left pushes
    cdef int wall_left
    cdef bint strict            # the intake's mode is strict: bodies only checked here
    cdef uint32_t version
    cdef bint writable          # False: writes refused (a full disk, a fenced shard)
    cdef bint sharded           # the store applies only the keys its shard owns

    def __init__(self, store, slow, failed, decode_msgpack, decode_body, decode_json,
                 decode_json_body, wall_clock, uint32_t reply_op):
        self.store = store
        self.slow = slow
        self.failed = failed
        self.decode_msgpack = decode_msgpack
        self.decode_body = decode_body
        self.decode_json = decode_json
        self.decode_json_body = decode_json_body
        self.wall_clock = wall_clock
        self.reply_op = reply_op
        self.checkers_for = self.routes_for = None
        self.event_table = NULL

    def __dealloc__(self):
        PyMem_Free(self.event_table)

    cdef void _index_events(self, dict checkers, dict routes) except *:
        """The EventRoutes of the registry's ``checkers`` and the engine's ``routes``, by
        event and by name bytes (both are replaced, never changed in place, when a
        registry or a table state is installed)."""
        cdef dict by_event = event_routes(checkers, routes)
        cdef Py_ssize_t size = table_slots(len(by_event))
        cdef RawName* table = <RawName*>PyMem_Malloc(size * sizeof(RawName))
        cdef bytes name
        if table is NULL:
            raise MemoryError()
        memset(table, 0, size * sizeof(RawName))
        for route in by_event.values():
            name = (<EventRoute>route).entry.name
            add_name(table, size - 1, PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name),
                     <PyObject*>route)
        PyMem_Free(self.event_table)
        self.event_table = table
        self.event_mask = size - 1
        self.by_event = by_event
        self.checkers_for = checkers
        self.routes_for = routes

    cdef void _begin(self) except *:
        store = self.store
        self.intake = <Intake>store.intake
        checkers = store.checkers
        routes = store.engine.routes
        if checkers is not self.checkers_for or routes is not self.routes_for:
            self._index_events(checkers, routes)
        self.clock = store.clock
        self.wall = self.clock is self.wall_clock
        self.wall_left = 0  # each call reads the clock afresh
        self.strict = self.intake.mode == STRICT_MODE
        self.version = store.registry.version
        self.writable = self.intake.log.writable and not store.fenced
        self.sharded = store.shard is not None
        self.intake.begin()

    cdef void _end(self) except *:
        intake, self.intake = self.intake, None
        (<Intake>intake).end()

    cdef object _split(self, const char* p, Py_ssize_t n, Py_ssize_t* body_at):
        """The EventRoute of a MessagePack envelope (the ``n`` bytes at ``p``) laid out
        ``{"event": name, "body": ...}`` (in that order, the name at most 255 bytes), its
        body from byte ``body_at[0]`` to the end; None when it is laid out otherwise or
        names no registered event (msgspec decodes the envelope then, and the handler
        answers what is wrong with it)."""
        cdef Py_ssize_t at, name_len
        cdef unsigned char c
        cdef const RawName* e
        if n < 9 or memcmp(p, ENVELOPE_HEAD, 7) != 0:
            return None
        c = <unsigned char>p[7]
        if 0xa0 <= c <= 0xbf:  # fixstr
            name_len = c & 0x1f
            at = 8
        elif c == 0xd9:  # str 8
            name_len = <unsigned char>p[8]
            at = 9
        else:
            return None
        if at + name_len + 5 >= n or memcmp(p + at + name_len, BODY_KEY, 5) != 0:
            return None
        body_at[0] = at + name_len + 5
        e = find_name(self.event_table, self.event_mask, <const unsigned char*>p + at,
                      name_len, n - at)
        return None if e is NULL else <object>e.object

    cdef EventRoute _route(self, object event):
        """``event``'s EventRoute, or None (not a registered event)."""
        cdef PyObject* found = dict_get(self.by_event, event)
        return <EventRoute>found if found is not NULL else None

    cdef CheckerEntry _entry(self, EventRoute route):
        """The checker entry of an event (``route``: its EventRoute, or None) when the pass
        takes its pushes, else None (not a registered event, a dedupe key: the store's
        path; writes refused)."""
        if not self.writable or route is None or route.entry.deduped:
            return None
        return route.entry

    cdef int _accept(self, EventRoute route, CheckerEntry entry, object fields,
                     const char* raw, Py_ssize_t raw_len) except -1:
        """Accept one push of ``route``'s event (``entry``: its ``_entry``): 1 when done (the
        intake's ``last_lsn`` is its LSN), 0 when it must go to the store's Python path
        instead (not a map, no entry, a check that fails): nothing has been touched then.
        ``raw`` (or NULL): the MessagePack bytes ``fields`` were decoded from."""
        if entry is None or type(fields) is not dict:
            return 0
        checker = entry.checker
        if checker.check(<dict>fields) is not None:
            return 0
        if not self._owned(route, fields, NULL):
            return 0
        if checker.changed:  # the pushed bytes are not the row any more
            raw = NULL
            raw_len = 0
        self._take(route, entry, fields, raw, raw_len, NULL)
        return 1

    cdef inline bint _owned(self, EventRoute route, object fields, Row* row) except -1:
        """Whether this server applies a checked push (``fields``, or ``row`` when not
        NULL): always, unless sharded: then it must own one of its tables' keys (decided
        from the row before anything is applied; a misrouted push takes the store's path,
        which answers wrong_shard)."""
        if not self.sharded:
            return True
        if row != NULL:
            return owns_any_row(route.pushes, row)
        return owns_any(route.pushes, fields)

    cdef inline void _take(self, EventRoute route, CheckerEntry entry, object fields,
                           const char* raw, Py_ssize_t raw_len, Row* row) except *:
        """Hand an accepted push to the intake at the call's clock (``row``: its C row, or
        NULL)."""
        cdef int64_t now
        if not self.wall:
            now = self.clock()
        else:  # the wall clock, read once per CHECK_EVERY pushes of a call
            if self.wall_left == 0:
                self.wall_now = wall_ms()
                self.wall_left = CHECK_EVERY
            self.wall_left -= 1
            now = self.wall_now
        self.intake.take(route.event, entry, fields, raw, raw_len, now, self.version,
                         route.pushes, row)

    def run(self, Frames frames, Py_ssize_t start, Py_ssize_t stop, bytearray out,
            double deadline=0.0):
        """Handle the frames ``start..stop-1`` while they are OP_PUSH frames in a content
        type the pass takes, appending each reply to ``out``, and, when ``deadline`` (a
        time.perf_counter() value) is given, until it passes (checked every CHECK_EVERY
        frames); returns the index of the first frame not handled. A push's payload is
        read where it lies in ``frames``' bytes: a bytes object is made of it only for
        a decoder or the Python handler."""
        if start < 0 or stop > frames.n:
            raise IndexError(f"frames {start}..{stop - 1} of {frames.n}")
        cdef Py_ssize_t i = start
        cdef const FrameSpan* span
        cdef const char* p
        cdef Py_ssize_t size
        cdef unsigned int op, ct
        cdef int taken
        cdef Py_ssize_t body_at, raw_len
        cdef const char* raw
        cdef bint checked
        cdef Row* row
        cdef CheckerEntry entry = None
        cdef EventRoute route
        self._begin()
        try:
            while i < stop:
                if (deadline != 0.0 and i != start and (i - start) % CHECK_EVERY == 0
                        and monotonic() > deadline):
                    break
                span = &frames.spans[i]
                op = span.op
                ct = span.ct
                if op != OP_PUSH or (ct != CT_MSGPACK and ct != CT_JSON):
                    break
                p = span.at
                size = span.size
                payload = None  # made only when a decoder or the handler needs it
                i += 1
                raw = NULL
                raw_len = 0
                checked = False
                row = NULL
                try:
                    route = None
                    if ct == CT_MSGPACK:
                        route = self._split(p, size, &body_at)
                    if route is not None:
                        raw = p + body_at
                        raw_len = size - body_at
                        entry = self._entry(route)
                        fields = None
                        # strict: no row until applied (a shard's owner test reads the
                        # row: a C row where the tables take one, then not applied)
                        if entry is not None and self.strict and not self.sharded:
                            checked = entry.checker.check_msgpack(raw, raw_len)
                        elif entry is not None and route.by_row:
                            checked = entry.checker.fill_row(raw, raw_len, &self.row)
                            if checked:  # the row without objects, read in one pass
                                row = &self.row
                        elif entry is not None:  # the row read from the bytes, in one pass
                            fields = entry.checker.row_msgpack(raw, raw_len)
                            checked = fields is not None
                        if not checked:
                            fields = self.decode_body(PyBytes_FromStringAndSize(raw, raw_len))
                    elif ct == CT_MSGPACK:
                        payload = PyBytes_FromStringAndSize(p, size)
                        envelope = self.decode_msgpack(payload)
                        fields = envelope.body
                        route = self._route(envelope.event)
                        entry = self._entry(route)
                    else:
                        payload = PyBytes_FromStringAndSize(p, size)
                        envelope = self.decode_json(payload)
                        fields = self.decode_json_body(envelope.body)
                        route = self._route(envelope.event)
                        entry = self._entry(route)
                except Exception:  # the handler answers what is wrong with it
                    route = fields = entry = None
                    raw = NULL
                    raw_len = 0
                    checked = False
                    row = NULL
                try:
                    if checked:  # check() would accept it unchanged: not asked
                        taken = self._owned(route, fields, row)
                        if taken:
                            self._take(route, entry, fields, raw, raw_len, row)
                    else:
                        taken = self._accept(route, entry, fields, raw, raw_len)
                except Exception as exc:  # a bug: this push answers internal_error
                    out += self.failed(exc)
                    continue
                if taken:
                    put_ack(out, self.reply_op, <uint64_t>self.intake.last_lsn, self.version)
                else:  # the Python handler answers (an ack, a replay or the error)
                    if payload is None:
                        payload = PyBytes_FromStringAndSize(p, size)
                    try:
                        reply = self.slow(ct, payload)
                    except Exception as exc:
                        reply = self.failed(exc)
                    out += reply
        finally:
            self._end()
        return i

    def push_bodies(self, str event, list bodies, object fallback):
        """Accept the bodies of one PUSH_MANY in order; a body the pass does not take goes
        to ``fallback(index, body)`` (the store's Python path, which records its error).
        Returns ``(acks, newest LSN or 0)`` of the bodies accepted here."""
        cdef Py_ssize_t index
        cdef Py_ssize_t acks = 0
        cdef int64_t newest = 0
        self._begin()
        try:
            route = self._route(event)  # one event for the whole call
            entry = self._entry(route)
            for index in range(len(bodies)):
                body = bodies[index]
                if self._accept(route, entry, body, NULL, 0):
                    acks += 1
                    newest = self.intake.last_lsn
                else:
                    fallback(index, body)
        finally:
            self._end()
        return acks, newest
