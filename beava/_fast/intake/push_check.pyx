# cython: language_level=3
"""Push-side checks of one event body in C (spec/wire.md §6.2 steps 3, 5, 6).

``EventChecker`` is compiled once per event schema at register time. ``check(fields)``
walks the pushed map once: control characters in keys and strings at any depth, undeclared
fields, defaults, required fields and their types, integers beyond 64 bits (widened to
float; one beyond the range of a double is not storable), and non-finite floats (NaN,
±Infinity) as a field's value, which are refused (spec/wire.md §6.3). It returns None when
the body is accepted, else the error code.

``check_msgpack`` answers the same question from a MessagePack body's bytes, without
decoding it, for the bodies check() would accept unchanged (flat maps of declared names to
finite numbers, booleans and ASCII text): the push pass then skips check(), and in strict
mode logs the pushed bytes and decodes them only when it applies them. Anything else it
leaves to check().
"""

from datetime import datetime

from msgspec.msgpack import Ext

from cpython.dict cimport PyDict_GetItem, PyDict_Next, PyDict_SetItem
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport PyObject
from libc.math cimport isfinite
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

from beava._fast.intake.name_table cimport RawName, add_name, find_name, same_name, table_slots
from beava._fast.ops.row cimport ROW_BOOL, ROW_FLOAT, ROW_INT, ROW_TEXT, Row, RowField

from sys import intern

cdef extern from "Python.h":
    dict _PyDict_NewPresized(Py_ssize_t minused)
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    int PyUnicode_KIND(object o)
    void* PyUnicode_DATA(object o)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)
    Py_UCS4 PyUnicode_READ(int kind, void* data, Py_ssize_t index)
    int PyUnicode_IS_ASCII(object o)

_CODES = {"str": T_STR, "i64": T_NUM, "f64": T_NUM, "bool": T_BOOL}

# Bits of a body's seen-names mask: check_msgpack takes schemas of at most this many names.
cdef enum:
    MAX_RAW_NAMES = 64


cdef inline bint _cc(Py_UCS4 ch) noexcept:
    return ch < 0x20 or (0x7F <= ch <= 0x9F)


cdef bint str_has_control(str s):
    cdef Py_ssize_t i, n = PyUnicode_GET_LENGTH(s)
    cdef int kind = PyUnicode_KIND(s)
    cdef void* data = PyUnicode_DATA(s)
    cdef const unsigned char* ascii
    if PyUnicode_IS_ASCII(s):
        ascii = <const unsigned char*>data
        for i in range(n):
            if ascii[i] < 0x20 or ascii[i] == 0x7F:
                return True
        return False
    for i in range(n):
        if _cc(PyUnicode_READ(kind, data, i)):
            return True
    return False


# What a scan of a value found: nothing, a value that cannot be stored (invalid_event), or
# a control character (which wins: it is checked first). Not storable: a MessagePack
# extension (spec/wire.md §2.3), the timestamp extension (-1) included, which msgspec
# decodes to a datetime; an integer beyond 64 bits that no double can hold (the spec widens
# such integers to float; 10**400 has no float); a map key that is not a string (MessagePack allows any:
# JSON replies and dedupe keys could not render it); containers nested deeper than
# MAX_VALUE_DEPTH (replay, snapshots and reads walk values recursively).
cdef enum:
    SCAN_CLEAN = 0
    SCAN_INVALID = 1
    SCAN_CONTROL = 2

# Containers inside one field value: {"a": [1]} is depth 2 (docs/limits.md).
cdef enum:
    MAX_VALUE_DEPTH = 64


cdef bint int_unstorable(object value) except -1:
    """An int outside signed 64-bit that no finite double holds (its widening would fail)."""
    cdef int overflow = 0
    PyLong_AsLongLongAndOverflow(value, &overflow)
    if not overflow:
        return False
    try:
        float(value)
    except OverflowError:
        return True
    return False


cdef int scan_value(object value, int depth) except -1:
    cdef type t = type(value)
    cdef int found = SCAN_CLEAN
    if t is str:
        return SCAN_CONTROL if str_has_control(<str>value) else SCAN_CLEAN
    if t is dict:
        return scan_dict(<dict>value, depth + 1)
    if t is list:
        if depth >= MAX_VALUE_DEPTH:
            return SCAN_INVALID
        for item in <list>value:
            found = max(found, scan_value(item, depth + 1))
            if found == SCAN_CONTROL:
                break
        return found
    if t is int:
        return SCAN_INVALID if int_unstorable(value) else SCAN_CLEAN
    if t is Ext or t is datetime:
        return SCAN_INVALID
    return SCAN_CLEAN


cdef int scan_dict(dict d, int depth) except -1:
    # ``depth``: containers from the field value down to ``d``, itself included
    cdef Py_ssize_t pos = 0
    cdef PyObject* key
    cdef PyObject* val
    cdef int found = SCAN_INVALID if depth > MAX_VALUE_DEPTH else SCAN_CLEAN
    if found == SCAN_INVALID:
        return found
    while PyDict_Next(d, &pos, &key, &val):
        if type(<object>key) is str:
            if str_has_control(<str>key):
                return SCAN_CONTROL
        else:
            found = SCAN_INVALID
        found = max(found, scan_value(<object>val, depth))
        if found == SCAN_CONTROL:
            return found
    return found


def has_control_character(object value):
    """Whether a string, or any key or string in a container, holds a Cc (containers are
    scanned down to MAX_VALUE_DEPTH)."""
    return scan_value(value, 0) == SCAN_CONTROL


cdef object _widen(object value):
    """An int outside signed 64-bit as float; containers widened in place."""
    cdef int overflow = 0
    cdef type t = type(value)
    if t is int:
        PyLong_AsLongLongAndOverflow(value, &overflow)
        if overflow:
            return float(value)
    elif t is dict:
        _widen_dict(<dict>value)
    elif t is list:
        _widen_list(<list>value)
    return value


cdef void _widen_dict(dict d) except *:
    cdef Py_ssize_t pos = 0
    cdef PyObject* key
    cdef PyObject* val
    cdef list changes = None
    while PyDict_Next(d, &pos, &key, &val):
        widened = _widen(<object>val)
        if widened is not <object>val:
            if changes is None:
                changes = []
            changes.append((<object>key, widened))
    if changes is not None:
        for k, v in changes:
            d[k] = v


cdef void _widen_list(list items) except *:
    cdef Py_ssize_t i
    for i in range(len(items)):
        items[i] = _widen(items[i])


# Bytes after the tag of float 32, float 64, uint 8-64, int 8-64 (tags 0xca..0xd3).
cdef Py_ssize_t[10] _NUMBER_SIZE = [4, 8, 1, 2, 4, 8, 1, 2, 4, 8]


cdef inline uint64_t _get_be(const unsigned char* p, int n) noexcept:
    cdef uint64_t v = 0
    cdef int k
    for k in range(n):
        v = (v << 8) | p[k]
    return v


cdef inline Py_ssize_t _text_size(const unsigned char* b, Py_ssize_t n,
                                  Py_ssize_t* at) noexcept:
    """The size of the MessagePack string at ``b[at[0]]`` (``at[0]`` moved past its header
    to its bytes), or -1 when it is not a string or runs past ``n``."""
    cdef Py_ssize_t i = at[0], size
    if i >= n:
        return -1
    cdef unsigned char c = b[i]
    if 0xa0 <= c <= 0xbf:
        size = c & 0x1f
        i += 1
    elif c == 0xd9 and i + 2 <= n:
        size = b[i + 1]
        i += 2
    elif c == 0xda and i + 3 <= n:
        size = <Py_ssize_t>_get_be(b + i + 1, 2)
        i += 3
    elif c == 0xdb and i + 5 <= n:
        size = <Py_ssize_t>_get_be(b + i + 1, 4)
        i += 5
    else:
        return -1
    if i + size > n:
        return -1
    at[0] = i
    return size


cdef inline bint _non_finite(unsigned char tag, const unsigned char* p) noexcept:
    """Whether the MessagePack float at ``p`` (its big-endian bytes; ``tag`` 0xca: float 32,
    0xcb: float 64) is NaN or ±Infinity: every bit of its exponent is set, as its first two
    bytes tell (the sign and the exponent's top 7 bits, then the rest of the exponent). For
    a body only checked, whose numbers are not decoded; a decoded one tests its double."""
    if p[0] & 0x7f != 0x7f:  # almost every float ends here
        return False
    return p[1] & 0x80 != 0 if tag == 0xca else p[1] & 0xf0 == 0xf0


cdef inline bint _plain_ascii(const unsigned char* p, Py_ssize_t n) noexcept:
    """Whether every byte is printable ASCII (no control character, nothing to decode)."""
    cdef Py_ssize_t i
    for i in range(n):
        if p[i] < 0x20 or p[i] >= 0x7f:
            return False
    return True


cdef inline bint _of_type(int code, type t, object value) noexcept:
    """Whether ``value`` (of type ``t``) is a value a field of type ``code`` takes."""
    if code == T_STR:
        return t is str
    if code == T_NUM:
        return t is int or t is float
    if code == T_BOOL:
        return t is bool
    return value is not None


cdef class EventChecker:
    """Compiled push checks for one event schema (attributes in push_check.pxd)."""

    def __init__(self, fields, optional, required, defaults):
        self.required = tuple((name, _CODES.get(fields[name], T_ANY)) for name in
                              sorted(required))
        self.defaults = tuple(defaults.items())
        self.declared = {}
        for name in [*fields, *optional]:
            code = _CODES.get(fields.get(name), T_ANY)
            if name in required:
                code |= REQUIRED
            if str_has_control(name):
                code |= CONTROL
            self.declared[name] = code
        # check_msgpack's table of the declared names
        names = list(self.declared)
        self.takes_msgpack = (0 < len(names) <= MAX_RAW_NAMES
                              and all(name in self.declared for name in defaults))
        if not self.takes_msgpack:
            return
        cdef Py_ssize_t size = table_slots(len(names)), bit
        self.table = <RawName*>PyMem_Malloc(size * sizeof(RawName))
        if self.table is NULL:
            raise MemoryError()
        memset(self.table, 0, size * sizeof(RawName))
        self.mask = size - 1
        self.raw_names = tuple(name.encode() for name in names)
        self.name_objects = tuple(intern(name) for name in names)
        cdef RawName* e
        for bit in range(len(names)):
            raw = <bytes>self.raw_names[bit]
            e = add_name(self.table, self.mask, PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw),
                         <PyObject*>self.name_objects[bit])
            e.code = self.declared[names[bit]]
            e.bit = bit
            if e.code & REQUIRED:
                self.required_bits |= (<uint64_t>1) << bit
            if names[bit] in defaults:
                self.default_bits |= (<uint64_t>1) << bit
            if bit == 0:  # the guess for every key until bodies are seen: a declared name
                memset(self.last_slots, <int>(e - self.table), MAX_RAW_NAMES)

    def __dealloc__(self):
        PyMem_Free(self.table)

    cdef int check_msgpack(self, const char* p, Py_ssize_t n) except -1:
        """See push_check.pxd."""
        return self._settle(p, n, False, NULL) is not None

    cdef dict row_msgpack(self, const char* p, Py_ssize_t n):
        """See push_check.pxd."""
        return self._settle(p, n, True, NULL)

    cdef int fill_row(self, const char* p, Py_ssize_t n, Row* row) except -1:
        """See push_check.pxd."""
        return self._settle(p, n, False, row) is not None

    cdef const RawName* _name_at(self, const unsigned char* b, Py_ssize_t n, Py_ssize_t at,
                                 Py_ssize_t size, Py_ssize_t i) noexcept:
        """The declared name whose bytes are the ``size`` bytes at ``b[at]`` (the ``i``-th key
        of a body), or NULL. Tried first: the name the last body settled had at ``i``."""
        cdef const RawName* e
        if i < MAX_RAW_NAMES:
            e = &self.table[self.last_slots[i]]
            if e.size == size and same_name(e, b + at, n - at):
                return e
        e = find_name(self.table, self.mask, b + at, size, n - at)
        if e is not NULL and i < MAX_RAW_NAMES:
            self.last_slots[i] = <uint8_t>(e - self.table)
        return e

    cdef object _settle(self, const char* p, Py_ssize_t n, bint build, Row* crow):
        """When check() would accept the MessagePack body at ``p`` (``n`` bytes) unchanged
        (see check_msgpack): its row (``build``: its values under the declared names, in the
        body's order), else True (its values in ``crow`` too, when not NULL); None
        otherwise."""
        cdef const unsigned char* b = <const unsigned char*>p
        cdef Py_ssize_t at, entries, size, i = 0
        cdef uint64_t seen = 0, typed = 0, bit, bits64
        cdef uint32_t bits32
        cdef float f32
        cdef double f64
        cdef unsigned char c
        cdef int code, kind
        cdef const RawName* name
        cdef object value
        cdef dict row = None
        cdef RowField* field = NULL
        cdef bint decode = build or crow != NULL  # the values are read, not only checked
        if not self.takes_msgpack or n < 1:
            return None
        c = b[0]
        if 0x80 <= c <= 0x8f:
            entries = c & 0x0f
            at = 1
        elif c == 0xde and n >= 3:
            entries = (<Py_ssize_t>b[1] << 8) | b[2]
            at = 3
        else:
            return None
        if build:  # a body of more entries than names is refused below
            row = _PyDict_NewPresized(min(entries, <Py_ssize_t>MAX_RAW_NAMES))
        if crow != NULL:
            crow.n = 0
        while i < entries:
            # the key: a declared name without control characters, once (a name's bytes are
            # its UTF-8: no key matching one can be anything but that text)
            size = _text_size(b, n, &at)
            if size < 0:
                return None
            name = self._name_at(b, n, at, size, i)
            i += 1
            if name is NULL:
                return None
            at += size
            code = name.code
            bit = (<uint64_t>1) << name.bit
            if code & CONTROL or seen & bit:
                return None
            seen |= bit
            if crow != NULL:  # entries <= MAX_RAW_NAMES: each key is a distinct name
                field = &crow.fields[crow.n]
                crow.n += 1
                field.name = name.object
                field.hash = -1
            # the value: a finite number, a boolean or ASCII text without control characters
            if at >= n:
                return None
            c = b[at]
            if c <= 0x7f or c >= 0xe0:  # positive and negative fixint
                kind = T_NUM
                if field != NULL:
                    field.tag = ROW_INT
                    field.i = <long>c if c <= 0x7f else <long>(<signed char>c)
                if row is not None:
                    value = <long>c if c <= 0x7f else <long>(<signed char>c)
                at += 1
            elif c == 0xc2 or c == 0xc3:
                kind = T_BOOL
                if field != NULL:
                    field.tag = ROW_BOOL
                    field.i = c == 0xc3
                if row is not None:
                    value = c == 0xc3
                at += 1
            elif 0xa0 <= c <= 0xbf or 0xd9 <= c <= 0xdb:
                size = _text_size(b, n, &at)
                if size < 0 or not _plain_ascii(b + at, size):
                    return None
                kind = T_STR
                if field != NULL:
                    field.tag = ROW_TEXT
                    field.text = p + at
                    field.size = size
                if row is not None:
                    value = PyUnicode_New(size, 127)
                    memcpy(PyUnicode_DATA(value), p + at, size)
                at += size
            elif 0xca <= c <= 0xd3:
                size = _NUMBER_SIZE[c - 0xca]
                if at + 1 + size > n:
                    return None
                bits64 = _get_be(b + at + 1, <int>size)
                if c == 0xcf and bits64 >> 63:  # uint 64 beyond int64: widened by check()
                    return None
                kind = T_NUM
                if not decode:  # NaN and ±Infinity are refused by check() (§6.3)
                    if c <= 0xcb and _non_finite(c, b + at + 1):
                        return None
                elif c <= 0xcb:
                    if c == 0xca:
                        bits32 = <uint32_t>bits64
                        memcpy(&f32, &bits32, 4)
                        f64 = f32
                    else:
                        memcpy(&f64, &bits64, 8)
                    if not isfinite(f64):  # refused by check() (§6.3)
                        return None
                    if field != NULL:
                        field.tag = ROW_FLOAT
                        field.f = f64
                    if row is not None:
                        value = f64
                else:
                    if c >= 0xd0 and size < 8 and bits64 >> (8 * size - 1):
                        # int 8..32: sign-extended from its size (uint 8..64: as it is)
                        bits64 |= ~((<uint64_t>1 << (8 * size)) - 1)
                    if field != NULL:
                        field.tag = ROW_INT
                        field.i = <long long>bits64
                    if row is not None:
                        value = <long long>bits64
                at += 1 + size
            else:  # nil, binary, extensions, arrays, maps, 0xc1
                return None
            if code & REQUIRED and (kind == code & TYPE_BITS or code & TYPE_BITS == T_ANY):
                typed |= bit
            if row is not None:
                PyDict_SetItem(row, <object>name.object, value)
        if (at == n and typed & self.required_bits == self.required_bits
                and seen & self.default_bits == self.default_bits):
            return row if build else True
        return None

    cpdef object check(self, dict fields):
        """Steps 3 (keys and values), 5 and 6 of spec/wire.md §6.2; None when accepted."""
        cdef Py_ssize_t pos = 0
        cdef PyObject* key
        cdef PyObject* val
        cdef PyObject* found
        cdef bint undeclared = False
        cdef bint event_time = False
        cdef bint widen = False
        cdef bint unstorable = False  # an extension, a non-string key, too deep, 1e400, NaN
        cdef int overflow = 0
        cdef int scanned
        cdef int code
        cdef Py_ssize_t required_ok = 0  # required fields present with a value of their type
        cdef type t
        while PyDict_Next(fields, &pos, &key, &val):
            t = type(<object>val)
            found = NULL
            if type(<object>key) is str:
                found = PyDict_GetItem(self.declared, <object>key)
                if found is NULL:
                    if str_has_control(<str><object>key):
                        return "control_character_in_string"
                    undeclared = True
                    if <object>key == "event_time" or <object>key == "event_time_ms":
                        event_time = True
                else:
                    code = <object>found
                    if code & CONTROL:
                        return "control_character_in_string"
                    if code & REQUIRED and _of_type(code & TYPE_BITS, t, <object>val):
                        required_ok += 1
            else:
                undeclared = True
            if t is str:
                if str_has_control(<str><object>val):
                    return "control_character_in_string"
            elif t is float:  # NaN and ±Infinity: refused in any field (spec/wire.md §6.3)
                unstorable = unstorable or not isfinite(PyFloat_AS_DOUBLE(<object>val))
            elif t is dict or t is list:
                scanned = scan_value(<object>val, 0)
                if scanned == SCAN_CONTROL:
                    return "control_character_in_string"
                unstorable = unstorable or scanned == SCAN_INVALID
                widen = True
            elif t is Ext or t is datetime:
                unstorable = True
            elif t is int:
                PyLong_AsLongLongAndOverflow(<object>val, &overflow)
                if overflow:
                    widen = True
                    unstorable = unstorable or int_unstorable(<object>val)
        if undeclared:
            return "unknown_field_event_time_v0" if event_time else "unknown_field_v0"
        self.changed = widen  # a nested value may be widened (not told apart from none)
        for name, default in self.defaults:
            found = PyDict_GetItem(fields, name)
            if found is NULL or <object>found is None:
                PyDict_SetItem(fields, name, default)
                self.changed = True
        if required_ok != len(self.required):  # one is missing or not of its type (unless a
            for name, code in self.required:   # default filled it in)
                found = PyDict_GetItem(fields, name)
                if found is NULL or not _of_type(code, type(<object>found), <object>found):
                    return "invalid_event"
        if unstorable:
            return "invalid_event"
        if widen:
            _widen_dict(fields)
        return None
