# cython: language_level=3, boundscheck=False, wraparound=False
"""Incremental splitter for framed-TCP requests (spec/wire.md §2.1-§2.2).

A frame is ``[u32 length BE][u16 op BE][u8 ct][payload]`` where ``length`` counts
op + ct + payload. ``feed`` takes whatever one socket read brought and returns every
complete frame it finishes as one :class:`Frames`: a C array of their spans (payload
pointer and length, op, content type) into the read's own bytes, so splitting a read makes
no object per frame and copies none of it; ``frames[i]`` is frame ``i`` as ``(op, ct,
payload)``, its payload copied out for a Python handler. Bytes of an incomplete frame are
kept for the next read, which completes that one frame from its head (a bytes object of
that frame alone) before its own frames are split in place. A framing violation ends the
stream: ``feed`` returns the frames before it followed by one ``(FRAME_TOO_LARGE |
FRAME_TOO_SHORT, declared_length, b"")`` marker and ignores all later input.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
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
    """Complete frames of a stream, in order: one span per frame and the bytes objects the
    spans point into. A sequence of ``(op, ct, payload)``; a slice is a Frames sharing the
    same bytes."""

    def __cinit__(self):
        self.owners = ()
        self.spans = NULL
        self.n = 0
        self.room = 0

    def __dealloc__(self):
        PyMem_Free(self.spans)

    cdef int add(self, const char* at, Py_ssize_t size, unsigned int op,
                 unsigned int ct) except -1:
        """Append the span of a frame whose payload is ``size`` bytes at ``at`` (in a bytes
        object of ``owners``)."""
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
            part = Frames()
            part.owners = self.owners
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
        return span.op, span.ct, PyBytes_FromStringAndSize(span.at, span.size)


def join_frames(parts):
    """One Frames of the frames of ``parts`` (Frames, in order): their spans, no bytes
    copied."""
    cdef list taken = list(parts)
    cdef Frames part, joined
    cdef Py_ssize_t i
    if len(taken) == 1:
        return taken[0]
    joined = Frames()
    joined.owners = sum([(<Frames>part).owners for part in taken], ())
    for part in taken:
        for i in range(part.n):
            joined.add(part.spans[i].at, part.spans[i].size, part.spans[i].op,
                       part.spans[i].ct)
    return joined


cdef class FrameSplitter:
    """Splits a byte stream into frames; one instance per connection."""

    def __cinit__(self, unsigned long long max_payload=4194304):
        self._pending = bytearray()
        self._need = 4
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
        cdef Frames frames = Frames()
        cdef bytes buf, head = None
        cdef Py_ssize_t start = 0, consumed, rest
        if self.failed:
            return frames
        buf = data if type(data) is bytes else bytes(data)
        if PyByteArray_GET_SIZE(self._pending):
            start = self._top_up(PyBytes_AS_STRING(buf), PyBytes_GET_SIZE(buf), frames)
            if self.failed:
                return frames
            if PyByteArray_GET_SIZE(self._pending) < self._need:
                return frames  # the held frame is still incomplete: all of ``buf`` taken
            head = bytes(self._pending)  # the held frame, complete
            PyByteArray_Resize(self._pending, 0)
            self._split(head, 0, frames)
        consumed = self._split(buf, start, frames)
        rest = PyBytes_GET_SIZE(buf) - consumed
        if rest:
            PyByteArray_Resize(self._pending, rest)
            memcpy(PyByteArray_AS_STRING(self._pending), PyBytes_AS_STRING(buf) + consumed, rest)
        frames.owners = (buf,) if head is None else (head, buf)
        return frames

    cdef int _declared(self, const unsigned char* header, Frames frames) except -1:
        """Read a frame's declared length from its 4 bytes at ``header``: 1 and ``_need``
        set to the frame's whole size, or 0 after a framing violation (``_fail``)."""
        cdef unsigned int length = _be32(header)
        if length < MIN_LENGTH:
            self._fail(frames, FRAME_TOO_SHORT, length)
            return 0
        if length > self.max_payload + MIN_LENGTH:
            self._fail(frames, FRAME_TOO_LARGE, length)
            return 0
        self._need = 4 + <Py_ssize_t>length
        return 1

    cdef Py_ssize_t _top_up(self, const char* p, Py_ssize_t n, Frames frames) except -1:
        """Move into ``_pending`` (an incomplete frame) what it lacks of the ``n`` bytes at
        ``p``, reading its length once its 4 bytes are held; returns the bytes taken."""
        cdef Py_ssize_t held = PyByteArray_GET_SIZE(self._pending)
        cdef Py_ssize_t take, taken = 0
        while taken < n:
            take = min(self._need - held, n - taken)
            PyByteArray_Resize(self._pending, held + take)
            memcpy(PyByteArray_AS_STRING(self._pending) + held, p + taken, take)
            held += take
            taken += take
            if held == 4 and self._need == 4:  # the length has arrived
                if not self._declared(<const unsigned char*>PyByteArray_AS_STRING(
                        self._pending), frames):
                    return n
                continue
            break
        return taken

    cdef Py_ssize_t _split(self, bytes buf, Py_ssize_t pos, Frames frames) except -1:
        """Add the complete frames of ``buf`` from byte ``pos`` on to ``frames``; returns
        where the first incomplete one starts (``len(buf)``: none)."""
        cdef const unsigned char* base = <const unsigned char*>PyBytes_AS_STRING(buf)
        cdef Py_ssize_t n = PyBytes_GET_SIZE(buf)
        while n - pos >= 4:
            if not self._declared(base + pos, frames):
                return n
            if n - pos < self._need:
                return pos
            frames.add(<const char*>base + pos + HEADER_SIZE, self._need - HEADER_SIZE,
                       (<unsigned int>base[pos + 4] << 8) | base[pos + 5], base[pos + 6])
            pos += self._need
        self._need = 4
        return pos

    cdef void _fail(self, Frames frames, unsigned int marker, unsigned int declared) except *:
        self.failed = True
        PyByteArray_Resize(self._pending, 0)
        frames.add(NULL, 0, marker, declared)


cdef inline void _put_header(unsigned char* p, unsigned int op, unsigned int ct,
                             Py_ssize_t n) noexcept:
    cdef unsigned int length = <unsigned int>(n + MIN_LENGTH)
    p[0] = (length >> 24) & 0xFF
    p[1] = (length >> 16) & 0xFF
    p[2] = (length >> 8) & 0xFF
    p[3] = length & 0xFF
    p[4] = (op >> 8) & 0xFF
    p[5] = op & 0xFF
    p[6] = ct & 0xFF


def encode_frame(unsigned int op, unsigned int ct, bytes payload):
    """One frame around ``payload``."""
    cdef Py_ssize_t n = len(payload)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, n + HEADER_SIZE)
    cdef unsigned char* p = <unsigned char*><char*>out
    _put_header(p, op, ct, n)
    if n:
        memcpy(p + HEADER_SIZE, <const char*>payload, n)
    return out


def frame_header(unsigned int op, unsigned int ct, Py_ssize_t payload_size):
    """The header of a frame whose payload of ``payload_size`` bytes is written after it
    by the caller (a reply assembled in one buffer)."""
    cdef bytes out = PyBytes_FromStringAndSize(NULL, HEADER_SIZE)
    _put_header(<unsigned char*><char*>out, op, ct, payload_size)
    return out
