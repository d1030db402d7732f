# The frames of a socket read without an object per frame (frame_splitter.pyx): the push
# pass (beava._fast.intake.push_pass) walks a Frames' spans in C.

cdef struct FrameSpan:
    const char* at          # the payload's first byte, in one of the Frames' ``owners``
    Py_ssize_t size         # the payload's length
    unsigned int op         # or a framing-error marker (FRAME_TOO_LARGE | FRAME_TOO_SHORT)
    unsigned int ct         # a marker's: the declared length


cdef class Frames:
    cdef tuple owners       # the bytes objects the spans point into, kept alive with them
    cdef FrameSpan* spans
    cdef Py_ssize_t n
    cdef Py_ssize_t room    # spans allocated

    cdef int add(self, const char* at, Py_ssize_t size, unsigned int op,
                 unsigned int ct) except -1


cdef class FrameSplitter:
    cdef bytearray _pending
    cdef Py_ssize_t _need   # bytes the pending prefix must reach before a frame completes
    cdef readonly unsigned long long max_payload
    cdef readonly bint failed

    cdef int _declared(self, const unsigned char* header, Frames frames) except -1
    cdef Py_ssize_t _top_up(self, const char* p, Py_ssize_t n, Frames frames) except -1
    cdef Py_ssize_t _split(self, bytes buf, Py_ssize_t pos, Frames frames) except -1
    cdef void _fail(self, Frames frames, unsigned int marker, unsigned int declared) except *
