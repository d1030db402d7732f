# cython: language_level=3
"""JSON text of MessagePack values, without building their Python objects: what a reader of
table scan pages needs for the columns it hands on as JSON text (beava_spark.reader).

A value of the types a reply holds (nil, booleans, integers, text, arrays, maps with text
keys) is transcoded byte by byte, giving the text ``msgspec.json`` gives the decoded value
(maps keep their order: a reply's maps are sorted already). A value holding a float, or
anything else (binary, extension types), is decoded and encoded by msgspec instead: the
JSON text of a float is msgspec's shortest round-trip form, which is not rewritten here.
"""

from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy

import msgspec

from beava._fast.wire.number_text cimport int_text, uint_text


cdef object _decode = msgspec.msgpack.decode
cdef object _encode = msgspec.json.encode


cdef struct Text:
    char* data      # malloc'd; NULL until the first byte
    Py_ssize_t size
    Py_ssize_t cap


cdef struct Source:
    const uint8_t* p
    const uint8_t* end


DEF MAX_DEPTH = 64  # nesting of the values read (a reply holds at most 64 containers)


cdef inline char* _room(Text* out, Py_ssize_t n) except NULL:
    cdef Py_ssize_t cap
    cdef char* grown
    if out.size + n > out.cap:
        cap = out.cap * 2 if out.cap else 256
        while cap < out.size + n:
            cap *= 2
        grown = <char*>realloc(out.data, cap)
        if grown == NULL:
            raise MemoryError()
        out.data = grown
        out.cap = cap
    out.size += n
    return out.data + out.size - n


cdef inline int _byte(Text* out, char c) except -1:
    _room(out, 1)[0] = c
    return 0


cdef inline bint _take(Source* src, Py_ssize_t n, const uint8_t** at) noexcept:
    """The next ``n`` bytes of ``src``; False when it holds fewer."""
    if src.end - src.p < n:
        return False
    at[0] = src.p
    src.p += n
    return True


cdef inline uint64_t _big(const uint8_t* p, int n) noexcept:
    cdef uint64_t v = 0
    cdef int i
    for i in range(n):
        v = (v << 8) | p[i]
    return v


cdef const char* _HEX = b"0123456789abcdef"


cdef int _string(Text* out, const uint8_t* s, Py_ssize_t n) except -1:
    """``s`` as a JSON string, escaped as msgspec escapes it (the short forms for \\b \\t
    \\n \\f \\r, ``\\u00XX`` for other control characters; UTF-8 as it is)."""
    cdef Py_ssize_t i, plain = 0  # s[plain:i] needs no escape
    cdef uint8_t c
    cdef char* p
    _byte(out, b'"')
    for i in range(n):
        c = s[i]
        if c >= 0x20 and c != b'"' and c != b'\\':
            continue
        if i > plain:
            memcpy(_room(out, i - plain), s + plain, i - plain)
        plain = i + 1
        if c == b'"' or c == b'\\':
            p = _room(out, 2)
            p[0] = b'\\'
            p[1] = <char>c
        elif c == 0x08 or c == 0x09 or c == 0x0a or c == 0x0c or c == 0x0d:
            p = _room(out, 2)
            p[0] = b'\\'
            p[1] = b"btn?fr"[c - 0x08]
        else:
            p = _room(out, 6)
            p[0] = b'\\'
            p[1] = b'u'
            p[2] = b'0'
            p[3] = b'0'
            p[4] = _HEX[c >> 4]
            p[5] = _HEX[c & 15]
    if n > plain:
        memcpy(_room(out, n - plain), s + plain, n - plain)
    _byte(out, b'"')
    return 0


cdef int _value(Text* out, Source* src, int depth, bint key) except -2:
    """Transcode the next value of ``src`` (a map key: text only); 0 when done, 1 when it
    is not one this transcoder writes (a float, binary, an extension, bad bytes)."""
    cdef const uint8_t* at
    cdef uint8_t tag
    cdef Py_ssize_t n, i
    cdef int width
    cdef uint64_t u
    cdef char* p
    if depth > MAX_DEPTH or not _take(src, 1, &at):
        return 1
    tag = at[0]
    # text
    if 0xa0 <= tag <= 0xbf or 0xd9 <= tag <= 0xdb:
        if tag <= 0xbf:
            n = tag & 0x1f
        else:
            width = 1 << (tag - 0xd9)
            if not _take(src, width, &at):
                return 1
            n = <Py_ssize_t>_big(at, width)
        if not _take(src, n, &at):
            return 1
        return _string(out, at, n)
    if key:
        return 1
    # integers
    if tag <= 0x7f or tag >= 0xe0:
        p = _room(out, 21)
        out.size -= 21 - int_text(p, <int64_t><signed char>tag if tag >= 0xe0 else tag)
        return 0
    if 0xcc <= tag <= 0xd3:
        width = 1 << ((tag - 0xcc) & 3)
        if not _take(src, width, &at):
            return 1
        u = _big(at, width)
        p = _room(out, 21)
        if tag <= 0xcf:
            out.size -= 21 - uint_text(p, u)
        else:  # two's complement of the width read
            if width < 8 and u >> (8 * width - 1):
                u |= ~((<uint64_t>1 << (8 * width)) - 1)
            out.size -= 21 - int_text(p, <int64_t>u)
        return 0
    if tag == 0xc0:
        memcpy(_room(out, 4), b"null", 4)
        return 0
    if tag == 0xc2:
        memcpy(_room(out, 5), b"false", 5)
        return 0
    if tag == 0xc3:
        memcpy(_room(out, 4), b"true", 4)
        return 0
    # arrays and maps
    if 0x90 <= tag <= 0x9f or tag == 0xdc or tag == 0xdd:
        if tag <= 0x9f:
            n = tag & 0x0f
        else:
            width = 2 if tag == 0xdc else 4
            if not _take(src, width, &at):
                return 1
            n = <Py_ssize_t>_big(at, width)
        _byte(out, b'[')
        for i in range(n):
            if i:
                _byte(out, b',')
            if _value(out, src, depth + 1, False):
                return 1
        _byte(out, b']')
        return 0
    if 0x80 <= tag <= 0x8f or tag == 0xde or tag == 0xdf:
        if tag <= 0x8f:
            n = tag & 0x0f
        else:
            width = 2 if tag == 0xde else 4
            if not _take(src, width, &at):
                return 1
            n = <Py_ssize_t>_big(at, width)
        _byte(out, b'{')
        for i in range(n):
            if i:
                _byte(out, b',')
            if _value(out, src, depth + 1, True):
                return 1
            _byte(out, b':')
            if _value(out, src, depth + 1, False):
                return 1
        _byte(out, b'}')
        return 0
    return 1  # floats, binary, extension types, the unused tag 0xc1


def json_texts(list values) -> list:
    """The JSON text of each MessagePack value in ``values`` (bytes-like, one value each;
    msgspec.Raw from a typed decode), None for nil: the text ``msgspec.json`` gives the
    decoded value."""
    cdef Py_ssize_t i, n = PyList_GET_SIZE(values)
    cdef list texts = [None] * n
    cdef Text out = Text(NULL, 0, 0)
    cdef Source src
    cdef const uint8_t[::1] view
    cdef object raw
    try:
        for i in range(n):
            raw = <object>PyList_GET_ITEM(values, i)
            view = memoryview(raw).cast("B")
            if view.shape[0] == 1 and view[0] == 0xc0:
                continue
            out.size = 0
            src.p = &view[0] if view.shape[0] else NULL
            src.end = src.p + view.shape[0]
            if view.shape[0] and _value(&out, &src, 0, False) == 0 and src.p == src.end:
                texts[i] = PyUnicode_DecodeUTF8(out.data, out.size, "surrogatepass")
            else:
                texts[i] = _encode(_decode(raw)).decode("utf-8", "surrogatepass")
        return texts
    finally:
        free(out.data)
