# cython: language_level=3, boundscheck=False, wraparound=False
"""Incremental splitter for framed-TCP requests (spec/wire.md §2.1-§2.2).

A frame is ``[u32 length BE][u16 op BE][u8 ct][payload]`` where ``length`` counts
op + ct + payload. ``feed`` takes whatever one socket read brought and returns every
complete frame it finishes as one :class:`Frames`: the bytes they lie in (the read itself
when no earlier bytes were held back) and a C array of their spans, so splitting a read
makes no object per frame; ``frames[i]`` is frame ``i`` as ``(op, ct, payload)``, its
payload copied out for a Python handler. Bytes of an incomplete frame are kept for the
next read. A framing violation ends the stream: ``feed`` returns the frames before it
followed by one ``(FRAME_TOO_LARGE | FRAME_TOO_SHORT, declared_length, b"")`` marker and
ignores all later input.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from libc.string cimport memcpy

# Marker "opcodes" outside the u16 range, so they can never collide with a real op.
FRAME_TOO_LARGE = 0x10000
FRAME_TOO_SHORT = 0x10001

cdef enum:
    HEADER_SIZE = 7
    MIN_LENGTH = 3
    FIRST_ROOM = 16     # spans a Frames allocates first; it doubles from there


cdef inline unsigned int _be32(const unsigned char* p) noexcept nogil:
    return (<unsigned int>p[0] << 24) | (<unsigned int>p[1] << 16) | (<unsigned int>p[2] << 8) | p[3]


cdef class Frames:
    """Complete frames of a stream, in order: their bytes and one span per frame. A
    sequence of ``(op, ct, payload)``; a slice is a Frames sharing the same bytes."""

    def __cinit__(self, bytes data=b""):
        self.data = data
        self.spans = NULL
        self.n = 0
        self.room = 0

    def __dealloc__(self):
        PyMem_Free(self.spans)

    cdef int add(self, Py_ssize_t at, Py_ssize_t size, unsigned int op,
                 unsigned int ct) except -1:
        """Append the span of a frame whose payload is ``size`` bytes at ``at``."""
        cdef Py_ssize_t room
        cdef FrameSpan* grown
        if self.n == self.room:
            room = FIRST_ROOM if self.room == 0 else 2 * self.room
            grown = <FrameSpan*>PyMem_Realloc(self.spans, room * sizeof(FrameSpan))
            if grown is NULL:
                raise MemoryError()
            self.spans = grown
            self.room = room
        self.spans[self.n] = FrameSpan(at, size, op, ct)
        self.n += 1
        return 0

    def __len__(self):
        return self.n

    def op(self, Py_ssize_t index):
        """Frame ``index``'s op (or framing-error marker), its payload left in place."""
        if not 0 <= index < self.n:
            raise IndexError(index)
        return self.spans[index].op

    def __iter__(self):
        cdef Py_ssize_t i
        for i in range(self.n):
            yield self[i]

    def __getitem__(self, index):
        cdef Py_ssize_t i, start, stop, step
        cdef FrameSpan* span
        cdef Frames part
        if isinstance(index, slice):
            start, stop, step = index.indices(self.n)
            if step != 1:
                raise ValueError("a slice of frames has no step")
            part = Frames(self.data)
            for i in range(start, stop):
                span = &self.spans[i]
                part.add(span.at, span.size, span.op, span.ct)
            return part
        i = index
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(index)
        span = &self.spans[i]
        return (span.op, span.ct,
                PyBytes_FromStringAndSize(PyBytes_AS_STRING(self.data) + span.at, span.size))


def join_frames(parts):
    """One Frames of the frames of ``parts`` (Frames, in order)."""
    cdef list taken = list(parts)
    cdef Frames part, joined
    cdef Py_ssize_t i, shift = 0
    if len(taken) == 1:
        return taken[0]
    joined = Frames(b"".join([(<Frames>part).data for part in taken]))
    for part in taken:
        for i in range(part.n):
            joined.add(part.spans[i].at + shift, part.spans[i].size, part.spans[i].op,
                       part.spans[i].ct)
        shift += PyBytes_GET_SIZE(part.data)
    return joined


cdef class FrameSplitter:
    """Splits a byte stream into frames; one instance per connection."""

    def __cinit__(self, unsigned long long max_payload=4194304):
        self._pending = bytearray()
        self._need = 0
        self.max_payload = max_payload
        self.failed = False

    @property
    def buffered(self):
        """Bytes held back as an incomplete frame."""
        return len(self._pending)

    @property
    def reserved(self):
        """Bytes the incomplete frame will hold once complete: its declared length and
        header once its length has arrived, else what is held of it; 0 without one."""
        cdef Py_ssize_t held = len(self._pending)
        return 0 if held == 0 else max(held, self._need)

    def feed(self, data):
        """Consume one read; return the complete frames it finishes, in order."""
        cdef Frames frames
        cdef Py_ssize_t consumed
        if self.failed:
            return Frames()
        if self._pending:
            self._pending += data
            if len(self._pending) < self._need:
                return Frames()
            frames = Frames(bytes(self._pending))
            consumed = self._split(frames)
            del self._pending[:consumed]
        else:
            frames = Frames(data if type(data) is bytes else bytes(data))
            consumed = self._split(frames)
            if consumed < PyBytes_GET_SIZE(frames.data):
                self._pending += frames.data[consumed:]
        return frames

    cdef Py_ssize_t _split(self, Frames frames) except -1:
        """Add the complete frames of ``frames.data`` to ``frames``; returns the bytes
        they take."""
        cdef const unsigned char* base = <const unsigned char*>PyBytes_AS_STRING(frames.data)
        cdef Py_ssize_t n = PyBytes_GET_SIZE(frames.data)
        cdef Py_ssize_t pos = 0
        cdef unsigned int length
        while n - pos >= 4:
            length = _be32(base + pos)
            if length < MIN_LENGTH:
                self._fail(frames, FRAME_TOO_SHORT, length)
                return n
            if length > self.max_payload + MIN_LENGTH:
                self._fail(frames, FRAME_TOO_LARGE, length)
                return n
            if n - pos < 4 + <Py_ssize_t>length:
                self._need = 4 + <Py_ssize_t>length
                return pos
            frames.add(pos + HEADER_SIZE, length - MIN_LENGTH,
                       (<unsigned int>base[pos + 4] << 8) | base[pos + 5], base[pos + 6])
            pos += 4 + length
        self._need = 4
        return pos

    cdef void _fail(self, Frames frames, unsigned int marker, unsigned int declared) except *:
        self.failed = True
        self._pending = bytearray()
        frames.add(0, 0, marker, declared)


def encode_frame(unsigned int op, unsigned int ct, bytes payload):
    """One frame around ``payload``."""
    cdef Py_ssize_t n = len(payload)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, n + HEADER_SIZE)
    cdef unsigned char* p = <unsigned char*><char*>out
    cdef unsigned int length = <unsigned int>(n + MIN_LENGTH)
    p[0] = (length >> 24) & 0xFF
    p[1] = (length >> 16) & 0xFF
    p[2] = (length >> 8) & 0xFF
    p[3] = length & 0xFF
    p[4] = (op >> 8) & 0xFF
    p[5] = op & 0xFF
    p[6] = ct & 0xFF
    if n:
        memcpy(p + HEADER_SIZE, <const char*>payload, n)
    return out
