# cython: language_level=3, boundscheck=False, wraparound=False
"""The framed-TCP push pass: a run of OP_PUSH frames in one C loop (spec/wire.md §6).

For each frame: decode the envelope, check the body with its event's compiled checker,
read the clock, assign the LSN, then apply the push to every table it feeds (memory-only,
periodic) or append its WAL record to the pending batch (strict, and periodic before it
applies), and write the ack frame. No Python-level function runs per push on this path
beyond the decoders, the durability log's ``submit`` and the table kernels.

Anything unusual leaves the frame to the Python handler it replaces (``slow``), before any
state is touched: a body that does not decode or does not pass its checks (the handler
answers the exact error), an event with a ``dedupe_key`` (the store's dedupe cache), a
frame that is not a push. The pass keeps the store's counters in C locals for one run and
writes them back before anything else can read them.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem
from cpython.object cimport PyObject
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

from beava._fast.push_check cimport EventChecker
from beava._fast.wal_record cimport append_to


cdef extern from "<time.h>" nogil:
    ctypedef long time_t
    struct timespec:
        time_t tv_sec
        long tv_nsec
    int clock_gettime(int clk_id, timespec* tp)
    int CLOCK_REALTIME


cdef enum:
    OP_PUSH = 0x0010
    CT_JSON = 0x01
    CT_MSGPACK = 0x02
    RECORD_EVENT = 1
    BODY_MSGPACK = 2
    HEADER = 7          # u32 length | u16 op | u8 ct
    ACK_ROOM = 128      # an ack frame is at most 7 + 80 bytes

cdef const char* ACK_HEAD = b'{"ack_lsn":'
cdef const char* ACK_MID = b',"idempotent_replay":false,"registry_version":'


cdef inline int64_t wall_ms() noexcept nogil:
    """time.time_ns() // 1_000_000, without the call."""
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000


cdef inline Py_ssize_t put_uint(char* p, uint64_t v) noexcept nogil:
    """Decimal text of ``v`` at ``p``; returns its length."""
    cdef char tmp[24]
    cdef Py_ssize_t n = 0, i
    while True:
        tmp[n] = <char>(48 + v % 10)
        n += 1
        v //= 10
        if v == 0:
            break
    for i in range(n):
        p[i] = tmp[n - 1 - i]
    return n


cdef inline void put_ack(bytearray out, uint32_t reply_op, uint64_t lsn,
                         uint64_t version) except *:
    """Append the ack frame ``{"ack_lsn":lsn,"idempotent_replay":false,
    "registry_version":version}`` (spec/wire.md §6.6) to ``out``."""
    cdef Py_ssize_t start = PyByteArray_GET_SIZE(out)
    PyByteArray_Resize(out, start + ACK_ROOM)
    cdef char* frame = PyByteArray_AS_STRING(out) + start
    cdef char* p = frame + HEADER
    memcpy(p, ACK_HEAD, 11)
    p += 11
    p += put_uint(p, lsn)
    memcpy(p, ACK_MID, 46)
    p += 46
    p += put_uint(p, version)
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
    PyByteArray_Resize(out, p - PyByteArray_AS_STRING(out))


def apply_rows(dict routes, list events, list rows, list nows, Py_ssize_t start,
               Py_ssize_t stop):
    """Apply pushes ``start..stop-1`` of a durable batch to the tables they feed
    (``routes``: event -> the tables' push functions); returns the newest time applied."""
    cdef Py_ssize_t i
    cdef PyObject* found
    cdef int64_t newest = 0, now
    for i in range(start, stop):
        found = PyDict_GetItem(routes, events[i])
        row = rows[i]
        now_obj = nows[i]
        if found is not NULL:
            for push in <tuple>found:
                push(row, now_obj)
        now = now_obj
        if now > newest:
            newest = now
    return newest


cdef class TcpPushPass:
    """Runs of OP_PUSH frames for one server's store (see the module docstring)."""

    cdef object store
    cdef object slow            # (ct, payload) -> reply frame: the Python push handler
    cdef object failed          # exception -> error frame
    cdef object decode_msgpack  # payload -> envelope with .event and .body
    cdef object decode_json     # payload -> envelope with .event and a raw JSON .body
    cdef object decode_json_body
    cdef object encode_msgpack  # row -> MessagePack bytes (the WAL record body)
    cdef object wall_clock      # the store's clock when it is the wall clock
    cdef uint32_t reply_op
    cdef object names_for       # the checkers dict the cached event names belong to
    cdef dict names             # event -> its UTF-8 bytes

    def __init__(self, store, slow, failed, decode_msgpack, decode_json, decode_json_body,
                 encode_msgpack, wall_clock, uint32_t reply_op):
        self.store = store
        self.slow = slow
        self.failed = failed
        self.decode_msgpack = decode_msgpack
        self.decode_json = decode_json
        self.decode_json_body = decode_json_body
        self.encode_msgpack = encode_msgpack
        self.wall_clock = wall_clock
        self.reply_op = reply_op
        self.names_for = None
        self.names = {}

    def run(self, list frames, Py_ssize_t start, Py_ssize_t stop, bytearray out):
        """Handle the frames ``start..stop-1`` while they are OP_PUSH frames in a content
        type the pass takes, appending each reply to ``out``; returns the index of the first
        frame not handled."""
        store = self.store
        log = store.log
        cdef dict checkers = store.checkers
        cdef dict routes = store.engine.routes
        if checkers is not self.names_for:
            self.names_for = checkers
            self.names = {}
        cdef object clock = store.clock
        cdef bint wall = clock is self.wall_clock
        cdef bint memory = log.acks_immediately and log.mode == "memory"
        cdef uint64_t version = store.registry.version
        cdef int64_t last_lsn = store.last_lsn
        cdef int64_t applied_lsn = store.applied_lsn
        cdef int64_t hold_lsn = store.hold_lsn
        cdef int64_t watermark = store.watermark_ms
        cdef int64_t pushes = store.pushes_total
        cdef int64_t now
        cdef bint apply_now
        cdef Py_ssize_t i = start
        cdef tuple frame
        cdef int op, ct
        cdef PyObject* found
        cdef EventChecker checker
        cdef bytes name, body
        cdef bytearray buf
        while i < stop:
            frame = <tuple>frames[i]
            op = frame[0]
            ct = frame[1]
            if op != OP_PUSH or (ct != CT_MSGPACK and ct != CT_JSON):
                break
            payload = frame[2]
            i += 1
            # decode and check; anything unusual goes to the Python handler untouched
            try:
                if ct == CT_MSGPACK:
                    envelope = self.decode_msgpack(payload)
                    fields = envelope.body
                else:
                    envelope = self.decode_json(payload)
                    fields = self.decode_json_body(envelope.body)
                event = envelope.event
            except Exception:
                fields = None
            found = NULL
            if type(fields) is dict:
                found = PyDict_GetItem(checkers, event)
            if found is NULL or (<tuple>found)[0].dedupe_key is not None:
                self._write_back(store, last_lsn, applied_lsn, hold_lsn, watermark, pushes)
                self._slow(ct, payload, out)
                last_lsn = store.last_lsn
                applied_lsn = store.applied_lsn
                hold_lsn = store.hold_lsn
                watermark = store.watermark_ms
                pushes = store.pushes_total
                continue
            checker = <EventChecker>(<tuple>found)[1]
            if checker.check(fields) is not None:
                self._slow(ct, payload, out)  # answers the error; touches no state
                continue
            now = wall_ms() if wall else clock()
            last_lsn += 1
            pushes += 1
            try:
                if memory:
                    apply_now = True
                else:
                    found = PyDict_GetItem(self.names, event)
                    if found is NULL:
                        name = (<str>event).encode()
                        self.names[event] = name
                    else:
                        name = <bytes>found
                    body = self.encode_msgpack(fields)
                    buf = log.buf
                    append_to(buf, <uint64_t>last_lsn, RECORD_EVENT, BODY_MSGPACK,
                              <uint64_t>now, <uint32_t>version,
                              PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name),
                              PyBytes_AS_STRING(body), PyBytes_GET_SIZE(body))
                    apply_now = log.submit(last_lsn, event, fields, now, None)
                if apply_now:
                    found = PyDict_GetItem(routes, event)
                    if found is not NULL:
                        for push in <tuple>found:
                            push(fields, now)
                    applied_lsn = last_lsn
                    if now > watermark:
                        watermark = now
                else:
                    hold_lsn = last_lsn
            except Exception as exc:  # a bug: this push answers internal_error
                self._write_back(store, last_lsn, applied_lsn, hold_lsn, watermark, pushes)
                out += self.failed(exc)
                continue
            put_ack(out, self.reply_op, <uint64_t>last_lsn, version)
        self._write_back(store, last_lsn, applied_lsn, hold_lsn, watermark, pushes)
        return i

    cdef void _slow(self, int ct, object payload, bytearray out) except *:
        try:
            reply = self.slow(ct, payload)
        except Exception as exc:
            reply = self.failed(exc)
        out += reply

    cdef void _write_back(self, object store, int64_t last_lsn, int64_t applied_lsn,
                          int64_t hold_lsn, int64_t watermark, int64_t pushes) except *:
        store.last_lsn = last_lsn
        store.applied_lsn = applied_lsn
        store.hold_lsn = hold_lsn
        store.watermark_ms = watermark
        store.pushes_total = pushes
