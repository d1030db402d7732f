# cython: language_level=3
"""Table scan pages read without building their Python objects: a page's rows as the
buffers of Arrow arrays, one per column (page_columns, which beava_spark.reader's
PageBuffers hands to pyarrow), JSON columns as the JSON text of their MessagePack values;
and the JSON text of a MessagePack row (json_row: a JSON scan page's rows, written by the
table kernel as MessagePack first).

A value of the types a reply holds (nil, booleans, integers, floats, text, arrays, maps
with text keys) is transcoded byte by byte, giving the text ``msgspec.json`` gives the
decoded value (maps keep their order: a reply's maps are sorted already; a float from
1e-5 to 1e15 is written by _json_double). A value holding another float, or anything else
(binary, extension types), is decoded and encoded by msgspec instead.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.math cimport fabs, floor, frexp, log10
from libc.stdint cimport INT64_MAX, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, realloc
from libc.string cimport memcmp, memcpy, memset

import msgspec

from beava._fast.wire.msgpack_out cimport Writer
from beava._fast.wire.number_text cimport int_text, uint_text


cdef object _decode = msgspec.msgpack.decode
cdef object _encode = msgspec.json.encode


ctypedef Writer Text  # a growing byte buffer (msgpack_out.pxd's)


cdef struct Source:
    const uint8_t* p
    const uint8_t* end


# nesting of the containers read: a stored value nests at most 64 (push_validation's
# _unstorable), and a scan page holds it in a feature's list of values, in a row, in the
# rows' list, in the reply's map
DEF MAX_DEPTH = 64 + 8
DEF DOUBLE_TEXT = 24  # room for the text _json_double writes (17 digits, "-0.0000", ".")

cdef extern from *:
    """
    typedef unsigned __int128 beava_u128;
    """
    ctypedef unsigned long long u128 "beava_u128"  # 128 bits (gcc, clang)

cdef u128 POW10[22]  # 10^0 .. 10^21, exact
POW10[0] = 1
for _k in range(1, 22):
    POW10[_k] = POW10[_k - 1] * 10


cdef Py_ssize_t _json_double(double x, char* out) noexcept:
    """``x`` as msgspec.json writes it, into ``out`` (DOUBLE_TEXT bytes): its length, or -1
    when ``|x|`` is not 0 or within [1e-5, 1e15) (the caller has msgspec write it).

    The digits are the fewest that read back as ``x`` (as msgspec's and Python's repr):
    with ``x = f / 2^s`` (``f`` its 53-bit significand), ``m``, ``f * 10^k / 2^s`` rounded
    to an integer of p = 15, 16, then 17 digits, is exact in 128 bits, and reads back as
    ``x`` when it lies within half a unit in the last place of ``x``; 15 digits that do are
    the shortest once their trailing zeros go. Within this range neither finer rule of
    reading back can matter: a power of two (whose lower gap is half as wide) has at most 15
    digits, so its 15 are exact, and a point halfway between two doubles has 19 digits or
    more, so no ``m`` of 17 lies on it. They are laid out in msgspec's fixed notation
    (``0.00001``, ``123.0``; Python's repr would write ``1e-05``)."""
    cdef double a = fabs(x)
    cdef int ex, e10, p, k, s, n = 0, i, j = 0, count, d
    cdef uint64_t f, mm
    cdef u128 big, q, r, half, m = 0, dist
    cdef bint above, ok = False
    cdef char digits[20]
    if a == 0.0:
        memcpy(out, b"-0.0" if (1.0 / x) < 0 else b"0.0", 4 if (1.0 / x) < 0 else 3)
        return 4 if (1.0 / x) < 0 else 3
    if not (1e-5 <= a < 1e15):
        return -1
    f = <uint64_t>(frexp(a, &ex) * 9007199254740992.0)  # 2^53: f in [2^52, 2^53)
    s = 53 - ex  # a = f / 2^s, 4 <= s <= 70 here
    e10 = <int>floor(log10(a))
    for i in range(3):  # the decade of a: 17 digits in the floor of a * 10^(16 - e10)
        q = (<u128>f * POW10[16 - e10]) >> s
        if q >= POW10[17]:
            e10 += 1
        elif q < POW10[16]:
            e10 -= 1
        else:
            break
    else:
        return -1
    for p in range(15, 18):
        k = p - 1 - e10  # 0 <= k <= 21
        big = <u128>f * POW10[k]
        q = big >> s
        r = big & ((<u128>1 << s) - 1)
        half = <u128>1 << (s - 1)
        above = r > half or (r == half and (q & 1))
        m = q + 1 if above else q
        dist = (<u128>1 << s) - r if above else r  # |a * 10^k - m|, in units of 2^-s
        ok = 2 * dist < POW10[k]
        if ok:
            break
    if not ok:
        return -1
    if m == POW10[p]:  # rounded up into the next decade
        m = POW10[p - 1]
        e10 += 1
    mm = <uint64_t>m
    while mm:  # digits[n - 1] is the leading one
        digits[n] = <char>(48 + <int>(mm % 10))
        mm //= 10
        n += 1
    i = 0
    while i < n - 1 and digits[i] == b'0':
        i += 1
    count = n - i
    if x < 0:
        out[j] = b'-'
        j += 1
    if e10 >= 0:
        for d in range(e10 + 1):
            out[j] = digits[n - 1 - d] if d < count else b'0'
            j += 1
        out[j] = b'.'
        j += 1
        if count > e10 + 1:
            for d in range(e10 + 1, count):
                out[j] = digits[n - 1 - d]
                j += 1
        else:
            out[j] = b'0'
            j += 1
        return j
    out[j] = b'0'
    out[j + 1] = b'.'
    j += 2
    for d in range(-e10 - 1):
        out[j] = b'0'
        j += 1
    for d in range(count):
        out[j] = digits[n - 1 - d]
        j += 1
    return j


cdef inline char* _room(Text* out, Py_ssize_t n) except NULL:
    # a buffer is made at the first call, even for no bytes (an empty text first in a
    # column): NULL is this function's error
    cdef Py_ssize_t cap
    cdef char* grown
    if out.data == NULL or out.size + n > out.cap:
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


cdef inline double _float_at(const uint8_t* p, bint wide) noexcept:
    """The big-endian float 64 (``wide``) or float 32 at ``p``, as a double."""
    cdef uint64_t u
    cdef uint32_t bits32
    cdef double x
    cdef float f32
    if wide:
        u = _big(p, 8)
        memcpy(&x, &u, 8)
        return x
    bits32 = <uint32_t>_big(p, 4)
    memcpy(&f32, &bits32, 4)
    return f32


cdef const char* _HEX = b"0123456789abcdef"


cdef int _string(Text* out, const uint8_t* s, Py_ssize_t n) except -1:
    """``s`` as a JSON string, escaped as msgspec escapes it (the short forms for \\b \\t
    \\n \\f \\r, ``\\u00XX`` for other control characters; UTF-8 as it is)."""
    cdef Py_ssize_t i, plain = 0  # s[plain:i] needs no escape
    cdef uint8_t c
    cdef char* p
    for i in range(n):  # most text needs no escape: quoted in one piece
        c = s[i]
        if c < 0x20 or c == b'"' or c == b'\\':
            break
    else:
        p = _room(out, n + 2)
        p[0] = b'"'
        memcpy(p + 1, s, n)
        p[n + 1] = b'"'
        return 0
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


cdef inline bint _small_entry(Text* out, Source* src) except -1:
    """Write the map entry next in ``src`` when its key is short text needing no escape
    and its value an integer from 0 to 127 (a histogram's bins, counts by name): True when
    written, False (nothing read) for any other entry."""
    cdef const uint8_t* p = src.p
    cdef Py_ssize_t n, i
    cdef char* w
    cdef uint8_t c
    if src.end - p < 2 or not (0xa0 <= p[0] <= 0xbf):
        return False
    n = p[0] & 0x1f
    if src.end - p < n + 2 or p[n + 1] > 0x7f:
        return False
    for i in range(1, n + 1):
        c = p[i]
        if c < 0x20 or c == b'"' or c == b'\\':
            return False
    c = p[n + 1]
    w = _room(out, n + 6)
    w[0] = b'"'
    memcpy(w + 1, p + 1, n)
    w[n + 1] = b'"'
    w[n + 2] = b':'
    out.size -= 3 - uint_text(w + n + 3, c)
    src.p = p + n + 2
    return True


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
    if tag == 0xcb or tag == 0xca:  # float 64, float 32 (msgspec widens it to a double)
        if not _take(src, 8 if tag == 0xcb else 4, &at):
            return 1
        p = _room(out, DOUBLE_TEXT)
        n = _json_double(_float_at(at, tag == 0xcb), p)
        out.size -= DOUBLE_TEXT - (n if n >= 0 else 0)
        return 1 if n < 0 else 0
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
            if _small_entry(out, src):  # the common entry, written in one piece
                continue
            if _value(out, src, depth + 1, True):
                return 1
            _byte(out, b':')
            if _value(out, src, depth + 1, False):
                return 1
        _byte(out, b'}')
        return 0
    return 1  # binary, extension types, the unused tag 0xc1


# ---- scan pages into column buffers ---------------------------------------------------------
# A page's rows (a MessagePack array of maps) become, per column, the buffers of an Arrow
# array: a validity bitmap and values (int64, float64, a bitmap of booleans) or int32
# offsets and UTF-8 data (text). What each value becomes follows the Spark reader's column
# kinds (beava_spark.reader): a value that does not fit a number or boolean column is null.

cdef enum:
    KIND_LONG = 0     # integers; an integral float within int64 too
    KIND_DOUBLE = 1   # integers and floats
    KIND_BOOL = 2
    KIND_TEXT = 3     # text as it is, any other value as its JSON text
    KIND_JSON = 4     # the JSON text of any value


cdef struct Out:
    Text valid      # one byte per row: 1 when the value is not null
    Text values     # 8 bytes per row (long, double), one byte per row (bool), or UTF-8 text
    Text offsets    # int32 per row and one more (text kinds)
    Py_ssize_t nulls
    int kind


cdef int _skip(Source* src, int depth) except -1:
    """Move past the next value of ``src``, whatever its type; -1 with ValueError when the
    bytes are not a value."""
    cdef const uint8_t* at
    cdef uint8_t tag
    cdef Py_ssize_t n = 0, i, items = 0
    if depth > MAX_DEPTH or not _take(src, 1, &at):
        raise ValueError("a scan page that is not MessagePack rows")
    tag = at[0]
    if tag <= 0x7f or tag >= 0xe0 or 0xc0 <= tag <= 0xc3:
        return 0
    if 0xa0 <= tag <= 0xbf:
        n = tag & 0x1f
    elif 0x90 <= tag <= 0x9f:
        items = tag & 0x0f
    elif 0x80 <= tag <= 0x8f:
        items = 2 * (tag & 0x0f)
    elif 0xcc <= tag <= 0xd3:
        n = 1 << ((tag - 0xcc) & 3)
    elif tag == 0xca:
        n = 4
    elif tag == 0xcb:
        n = 8
    elif 0xd4 <= tag <= 0xd8:  # fixext: a type byte and 1 to 16 bytes
        n = 1 + (1 << (tag - 0xd4))
    elif tag in (0xd9, 0xda, 0xdb, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9):
        i = 1 << ((tag - 0xd9) if tag >= 0xd9 else (tag - 0xc4) % 3)
        if not _take(src, i, &at):
            raise ValueError("a scan page that is not MessagePack rows")
        n = <Py_ssize_t>_big(at, <int>i) + (1 if 0xc7 <= tag <= 0xc9 else 0)
    elif tag in (0xdc, 0xdd, 0xde, 0xdf):
        i = 2 if tag in (0xdc, 0xde) else 4
        if not _take(src, i, &at):
            raise ValueError("a scan page that is not MessagePack rows")
        items = <Py_ssize_t>_big(at, <int>i) * (2 if tag >= 0xde else 1)
    else:
        raise ValueError("a scan page that is not MessagePack rows")
    if n and not _take(src, n, &at):
        raise ValueError("a scan page that is not MessagePack rows")
    for i in range(items):
        _skip(src, depth + 1)
    return 0


cdef Py_ssize_t _count(Source* src, uint8_t fix, uint8_t tag16) except -1:
    """The item count of the array (``fix`` 0x90, ``tag16`` 0xdc) or map (0x80, 0xde)
    header next in ``src``."""
    cdef const uint8_t* at
    if not _take(src, 1, &at):
        raise ValueError("a scan page that is not MessagePack rows")
    if at[0] & 0xf0 == fix:
        return at[0] & 0x0f
    if at[0] == tag16 or at[0] == tag16 + 1:
        width = 2 if at[0] == tag16 else 4
        if not _take(src, width, &at):
            raise ValueError("a scan page that is not MessagePack rows")
        return <Py_ssize_t>_big(at, width)
    raise ValueError("a scan page that is not MessagePack rows")


cdef int _json_of(Text* out, Source* src) except -1:
    """The JSON text of the next value of ``src`` appended to ``out``: written byte by
    byte, or by msgspec for a value this transcoder does not write."""
    cdef const uint8_t* start = src.p
    cdef Py_ssize_t size = out.size
    cdef const char* text
    cdef Py_ssize_t n
    if _value(out, src, 0, False) == 0:
        return 0
    out.size = size
    src.p = start
    _skip(src, 0)
    encoded = _encode(_decode(PyBytes_FromStringAndSize(<const char*>start, src.p - start)))
    n = len(encoded)
    text = encoded
    memcpy(_room(out, n), text, n)
    return 0


cdef int json_row(Writer* out, const char* data, Py_ssize_t n, bint array) except -1:
    cdef Source src
    cdef Py_ssize_t i, count
    src.p = <const uint8_t*>data
    src.end = src.p + n
    count = _count(&src, 0x90, 0xdc) if array else _count(&src, 0x80, 0xde)
    _byte(out, b'[' if array else b'{')
    for i in range(count):
        if i:
            _byte(out, b',')
        if not array:
            if _value(out, &src, 0, True):
                raise ValueError("a MessagePack map whose key is not text")
            _byte(out, b':')
        _json_of(out, &src)
    _byte(out, b']' if array else b'}')
    return 0


cdef int _cell(Out* col, Source* src) except -1:
    """The next value of ``src`` appended to ``col`` (its validity byte included)."""
    cdef const uint8_t* at = src.p
    cdef uint8_t tag
    cdef int64_t i64 = 0
    cdef uint64_t u = 0
    cdef double x = 0
    cdef bint number = False, integer = False, ok = False
    cdef int width
    cdef Py_ssize_t n
    if src.p >= src.end:
        raise ValueError("a scan page that is not MessagePack rows")
    tag = at[0]
    if col.kind >= KIND_TEXT:
        if tag == 0xc0:
            src.p += 1
        else:
            ok = True
            if col.kind == KIND_TEXT and (0xa0 <= tag <= 0xbf or 0xd9 <= tag <= 0xdb):
                src.p += 1
                if tag <= 0xbf:
                    n = tag & 0x1f
                else:
                    width = 1 << (tag - 0xd9)
                    if not _take(src, width, &at):
                        raise ValueError("a scan page that is not MessagePack rows")
                    n = <Py_ssize_t>_big(at, width)
                if not _take(src, n, &at):
                    raise ValueError("a scan page that is not MessagePack rows")
                memcpy(_room(&col.values, n), at, n)
            else:
                _json_of(&col.values, src)
        (<int32_t*>_room(&col.offsets, 4))[0] = <int32_t>col.values.size
    else:
        if tag <= 0x7f or tag >= 0xe0:
            i64 = <int64_t><signed char>tag if tag >= 0xe0 else tag
            integer = True
            src.p += 1
        elif 0xcc <= tag <= 0xd3:
            src.p += 1
            width = 1 << ((tag - 0xcc) & 3)
            if not _take(src, width, &at):
                raise ValueError("a scan page that is not MessagePack rows")
            u = _big(at, width)
            if tag <= 0xcf:
                if u <= <uint64_t>INT64_MAX:
                    i64 = <int64_t>u
                    integer = True
                else:
                    x = <double>u
                    number = True
            else:
                if width < 8 and u >> (8 * width - 1):
                    u |= ~((<uint64_t>1 << (8 * width)) - 1)
                i64 = <int64_t>u
                integer = True
        elif tag == 0xcb or tag == 0xca:
            src.p += 1
            if not _take(src, 8 if tag == 0xcb else 4, &at):
                raise ValueError("a scan page that is not MessagePack rows")
            x = _float_at(at, tag == 0xcb)
            number = True
        else:
            _skip(src, 0)
        if col.kind == KIND_LONG:
            if integer:
                ok = True
            elif number and x == floor(x) and -9223372036854775808.0 <= x < 9223372036854775808.0:
                i64 = <int64_t>x
                ok = True
            memcpy(_room(&col.values, 8), &i64, 8)
        elif col.kind == KIND_DOUBLE:
            if integer:
                x = <double>i64
            ok = integer or number
            memcpy(_room(&col.values, 8), &x, 8)
        else:
            ok = tag == 0xc2 or tag == 0xc3
            _room(&col.values, 1)[0] = tag == 0xc3
    _room(&col.valid, 1)[0] = ok
    if not ok:
        col.nulls += 1
    return 0


cdef bytes _bitmap(Text* bytes_per_row, Py_ssize_t rows):
    """One byte per row (0 or 1) packed into an Arrow bitmap (least significant bit
    first)."""
    cdef bytes packed = PyBytes_FromStringAndSize(NULL, (rows + 7) // 8)
    cdef uint8_t* p = <uint8_t*><char*>packed
    cdef Py_ssize_t i
    memset(p, 0, (rows + 7) // 8)
    for i in range(rows):
        if bytes_per_row.data[i]:
            p[i >> 3] |= <uint8_t>(1 << (i & 7))
    return packed


cdef Py_ssize_t _text(Source* src, const uint8_t** at) except -1:
    """The length of the text next in ``src`` (a map key), its bytes at ``at``; -1 with
    ValueError when the next value is not text."""
    cdef Py_ssize_t n, width
    if not _take(src, 1, at) or not (0xa0 <= at[0][0] <= 0xbf or 0xd9 <= at[0][0] <= 0xdb):
        raise ValueError("a scan page with a key that is not text")
    if at[0][0] <= 0xbf:
        n = at[0][0] & 0x1f
    else:
        width = 1 << (at[0][0] - 0xd9)
        if not _take(src, width, at):
            raise ValueError("a scan page that is not MessagePack rows")
        n = <Py_ssize_t>_big(at[0], <int>width)
    if not _take(src, n, at):
        raise ValueError("a scan page that is not MessagePack rows")
    return n


cdef struct Entry:
    const uint8_t* key  # the name of this entry in the row before (in the page), or NULL
    Py_ssize_t size
    Py_ssize_t column   # the column of that name, -1: none


cdef Py_ssize_t _rows(Out* cols, Py_ssize_t ncols, Source* src, dict index,
                      const Py_ssize_t* order, Py_ssize_t norder) except -1:
    """Read the array of rows next in ``src`` into the columns; the row count. A row of
    values alone (an array) has value i in column ``order[i]`` (none when -1 or past
    ``norder``). A map row lists its entries in one order (the server sorts them), so an
    entry whose name is the one the row before had in its place is that row's column, found
    without a lookup."""
    cdef Py_ssize_t nrows, r, e, klen, nentries, nseen = 0
    cdef const uint8_t* at
    cdef Entry* seen = NULL
    cdef Entry* entry
    cdef object found
    nrows = _count(src, 0x90, 0xdc)
    try:
        for r in range(nrows):
            if src.p < src.end and (src.p[0] & 0xf0 == 0x90 or src.p[0] == 0xdc
                                    or src.p[0] == 0xdd):
                nentries = _count(src, 0x90, 0xdc)
                for e in range(nentries):
                    _place(cols, order[e] if e < norder else -1, r, src)
            else:
                nentries = _count(src, 0x80, 0xde)
                if nentries > nseen:
                    seen = <Entry*>realloc(seen, nentries * sizeof(Entry))
                    if seen == NULL:
                        raise MemoryError()
                    memset(seen + nseen, 0, (nentries - nseen) * sizeof(Entry))
                    nseen = nentries
                for e in range(nentries):
                    klen = _text(src, &at)
                    entry = &seen[e]
                    if (entry.key == NULL or entry.size != klen
                            or memcmp(entry.key, at, klen) != 0):
                        found = index.get(PyBytes_FromStringAndSize(<const char*>at, klen))
                        entry.column = -1 if found is None else found
                    entry.key = at
                    entry.size = klen
                    _place(cols, entry.column, r, src)
            _absent(cols, ncols, r)
    finally:
        free(seen)
    return nrows


cdef int _place(Out* cols, Py_ssize_t k, Py_ssize_t r, Source* src) except -1:
    """The next value of ``src`` into column ``k`` as row ``r``'s; skipped when it is no
    column's (-1) or its column has row ``r``'s value already."""
    if k < 0 or cols[k].valid.size > r:
        return _skip(src, 0)
    return _cell(&cols[k], src)


cdef int _absent(Out* cols, Py_ssize_t ncols, Py_ssize_t r) except -1:
    """A null in each column that row ``r`` gave no value."""
    cdef Py_ssize_t c
    for c in range(ncols):
        if cols[c].valid.size == r:
            _room(&cols[c].valid, 1)[0] = 0
            cols[c].nulls += 1
            if cols[c].kind >= KIND_TEXT:
                (<int32_t*>_room(&cols[c].offsets, 4))[0] = <int32_t>cols[c].values.size
            else:
                memset(_room(&cols[c].values, 1 if cols[c].kind == KIND_BOOL else 8),
                       0, 1 if cols[c].kind == KIND_BOOL else 8)
    return 0


def page_columns(page, list names, bytes kinds, list order=None) -> tuple:
    """A scan reply's body (``page``: bytes-like, a MessagePack map holding ``rows``, an
    array of maps or of arrays, and ``cursor``) read in one pass: ``(row count, [per
    column: (validity bitmap, values, offsets or None, null count)], cursor)``. ``names``
    are the columns' names (UTF-8 bytes) and ``kinds`` their kinds, one byte each
    (KIND_LONG ... KIND_JSON); a row's entries of other names are skipped, a column absent
    from a row is null; the body's other entries are skipped. A row that is an array (the
    scan's ``arrays``) has its i-th value in column ``order[i]`` (-1: none of them)."""
    cdef const uint8_t[::1] view = memoryview(page).cast("B")
    cdef Py_ssize_t ncols = len(names), nrows = 0, i, nkeys, klen
    cdef Source src
    cdef const uint8_t* at
    cdef Out* cols = <Out*>calloc(ncols + 1, sizeof(Out))
    cdef dict index = {name: i for i, name in enumerate(names)}
    cdef int32_t zero = 0
    cdef bint has_rows = False
    cdef Py_ssize_t norder = len(order) if order is not None else 0
    cdef Py_ssize_t* positions
    cursor = None
    if len(kinds) != ncols:
        free(cols)
        raise ValueError("one kind per column")
    if order is not None and not all(-1 <= k < ncols for k in order):
        free(cols)
        raise ValueError("an order entry that is not a column's index or -1")
    positions = <Py_ssize_t*>calloc(norder + 1, sizeof(Py_ssize_t))
    if cols == NULL or positions == NULL:
        free(cols)
        free(positions)
        raise MemoryError()
    for i in range(norder):
        positions[i] = order[i]
    src.p = &view[0] if view.shape[0] else NULL
    src.end = src.p + view.shape[0]
    try:
        for i in range(ncols):
            cols[i].kind = kinds[i]
            if cols[i].kind >= KIND_TEXT:
                memcpy(_room(&cols[i].offsets, 4), &zero, 4)
        nkeys = _count(&src, 0x80, 0xde)
        for i in range(nkeys):
            klen = _text(&src, &at)
            if klen == 4 and memcmp(at, b"rows", 4) == 0 and not has_rows:
                nrows = _rows(cols, ncols, &src, index, positions, norder)
                has_rows = True
            elif klen == 6 and memcmp(at, b"cursor", 6) == 0 and src.p < src.end \
                    and src.p[0] != 0xc0:
                klen = _text(&src, &at)
                cursor = PyUnicode_DecodeUTF8(<const char*>at, klen, NULL)
            else:
                _skip(&src, 0)
        if src.p != src.end:
            raise ValueError("a scan page with bytes after its rows")
        out = []
        for i in range(ncols):
            col = &cols[i]
            if col.kind == KIND_BOOL:
                values = _bitmap(&col.values, nrows)
            else:
                values = PyBytes_FromStringAndSize(col.values.data, col.values.size)
            offsets = (PyBytes_FromStringAndSize(col.offsets.data, col.offsets.size)
                       if col.kind >= KIND_TEXT else None)
            out.append((_bitmap(&col.valid, nrows), values, offsets, col.nulls))
        return nrows, out, cursor
    finally:
        for i in range(ncols):
            free(cols[i].valid.data)
            free(cols[i].values.data)
            free(cols[i].offsets.data)
        free(cols)
        free(positions)
