# cython: language_level=3, boundscheck=False, wraparound=False
"""A JSON array taken a few items at a time, so that a large request (a BATCH_GET of
100,000 entries) is decoded in slices of the event loop instead of one long call.

The array text must be valid JSON (the request was checked by the decoder that found it);
``JsonItems`` only finds where its top-level items end: it follows strings (and their
escapes) and nesting, so a ``,`` or ``]`` inside an item never ends it.
"""

cdef class JsonItems:
    """``take(n)``: the next ``n`` items (fewer at the end) as the text of a JSON array,
    ``b"[...]"``, or ``None`` once every item was taken."""

    cdef bytes _text
    cdef Py_ssize_t _pos  # where the next item starts (after its separator); -1: done

    def __init__(self, text: bytes) -> None:
        cdef const unsigned char* s = text
        cdef Py_ssize_t n = len(text)
        cdef Py_ssize_t i = _skip_space(s, 0, n)
        if i >= n or s[i] != b'[':
            raise ValueError("not a JSON array")
        i = _skip_space(s, i + 1, n)
        self._text = text
        self._pos = -1 if i < n and s[i] == b']' else i

    def take(self, Py_ssize_t count):
        if self._pos < 0:
            return None
        cdef const unsigned char* s = self._text
        cdef Py_ssize_t n = len(self._text)
        cdef Py_ssize_t start = self._pos
        cdef Py_ssize_t i = start
        cdef Py_ssize_t depth = 0
        cdef Py_ssize_t items = 0
        cdef unsigned char c
        while i < n:
            c = s[i]
            if c == b'"':
                i += 1
                while i < n and s[i] != b'"':
                    i += 2 if s[i] == b'\\' else 1
            elif c == b'[' or c == b'{':
                depth += 1
            elif c == b']' or c == b'}':
                if depth == 0:  # the end of the array
                    self._pos = -1
                    return b"[" + s[start:i] + b"]"
                depth -= 1
            elif c == b',' and depth == 0:
                items += 1
                if items == count:
                    self._pos = _skip_space(s, i + 1, n)
                    return b"[" + s[start:i] + b"]"
            i += 1
        raise ValueError("unterminated JSON array")


cdef inline Py_ssize_t _skip_space(const unsigned char* s, Py_ssize_t i, Py_ssize_t n):
    while i < n and (s[i] == b' ' or s[i] == b'\t' or s[i] == b'\n' or s[i] == b'\r'):
        i += 1
    return i
