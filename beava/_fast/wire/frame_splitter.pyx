# cython: language_level=3, boundscheck=False, wraparound=False
"""Incremental splitter for framed-TCP requests (spec/wire.md §2.1-§2.2).

A frame is ``[u32 length BE][u16 op BE][u8 ct][payload]`` where ``length`` counts
op + ct + payload. ``feed`` takes whatever one socket read brought and returns every
complete frame as ``(op, ct, payload)``; bytes of an incomplete frame are kept for the
next read. A framing violation ends the stream: ``feed`` returns the frames before it
followed by one ``(FRAME_TOO_LARGE | FRAME_TOO_SHORT, declared_length, b"")`` marker and
ignores all later input.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.string cimport memcpy

# Marker "opcodes" outside the u16 range, so they can never collide with a real op.
FRAME_TOO_LARGE = 0x10000
FRAME_TOO_SHORT = 0x10001

cdef enum:
    HEADER_SIZE = 7
    MIN_LENGTH = 3


cdef inline unsigned int _be32(const unsigned char* p) noexcept nogil:
    return (<unsigned int>p[0] << 24) | (<unsigned int>p[1] << 16) | (<unsigned int>p[2] << 8) | p[3]


cdef class FrameSplitter:
    """Splits a byte stream into frames; one instance per connection."""

    cdef bytearray _pending
    cdef Py_ssize_t _need  # bytes the pending prefix must reach before a frame completes
    cdef readonly unsigned long long max_payload
    cdef readonly bint failed

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
        cdef list frames = []
        if self.failed:
            return frames
        cdef bytes joined
        if self._pending:
            self._pending += data
            if len(self._pending) < self._need:
                return frames
            joined = bytes(self._pending)
            consumed = self._split(joined, frames)
            del self._pending[:consumed]
        else:
            consumed = self._split(data, frames)
            if consumed < len(data):
                self._pending += data[consumed:]
        return frames

    cdef Py_ssize_t _split(self, const unsigned char[:] buf, list frames) except -1:
        cdef Py_ssize_t n = buf.shape[0]
        cdef Py_ssize_t pos = 0
        cdef unsigned int length
        cdef unsigned int op
        cdef unsigned char ct
        cdef const unsigned char* base
        if n == 0:
            return 0
        base = &buf[0]
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
            op = (<unsigned int>base[pos + 4] << 8) | base[pos + 5]
            ct = base[pos + 6]
            frames.append((op, ct, PyBytes_FromStringAndSize(
                <const char*>(base + pos + HEADER_SIZE), length - MIN_LENGTH)))
            pos += 4 + length
        self._need = 4
        return pos

    cdef void _fail(self, list frames, unsigned int marker, unsigned int declared):
        self.failed = True
        self._pending = bytearray()
        frames.append((marker, declared, b""))


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
