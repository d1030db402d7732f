# cython: language_level=3
"""Family G of spec/operators.md §16: buffers and distributions.

histogram, hour_of_day_histogram, dow_hour_histogram, seasonal_deviation, event_type_mix,
most_recent_n, reservoir_sample. All lifetime-only. Every per-slot structure is allocated on
the slot's first qualifying event and starts small: count histograms keep sparse
(cell, int32 count) pairs until a dense int32 array is no bigger (int64 cells past 2^31 - 1),
seasonal_deviation keeps only the UTC hours it saw, event_type_mix only the categories it
holds, and the value buffers are value rings grown geometrically up to their bound.
"""

import math

from msgspec import Raw
from msgspec.json import Encoder

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.ref cimport Py_INCREF, PyObject, Py_XDECREF
from cpython.tuple cimport PyTuple_GET_ITEM
from cpython.unicode cimport PyUnicode_Compare
from libc.math cimport sqrt
from libc.stdint cimport INT32_MAX, int32_t, int64_t, uint8_t, uint64_t
from libc.stdio cimport snprintf
from libc.string cimport memcmp, memcpy, memset

from beava._fast.ops.block_column cimport BlockColumn
from beava._fast.ops.column cimport VALUE_FLOAT, VALUE_NULL, Column, Number
from beava._fast.wire.msgpack_bytes cimport INT_MAX_BYTES, big_endian, int_at
from beava._fast.wire.msgpack_out cimport (
    Writer, put_double, put_map_header, put_raw, put_str,
)
from beava._fast.wire.number_text cimport int_text
from beava._fast.ops.op_params cimport lifetime_only
from beava._fast.ops.row cimport ROW_BOOL, ROW_INT, ROW_TEXT, Row, RowField, field_number, row_field
from beava._fast.ops.ops_point cimport LatestRingColumn, RingColumn
from beava._fast.ops.snapshot_state cimport (
    RECORD_HEADER,
    new_bytes,
    record_head,
    record_next,
    state_bytes,
    state_list,
)
from beava._fast.ops.slot_buffers cimport (
    Payload,
    ValueRing,
    check_dump_slots,
    event_encode,
    release_blocks,
    ring_append_value,
    ring_get,
    ring_oldest_to_newest,
    ring_replace_value,
    row_number,
    row_value,
)
from beava._fast.ops.window cimport floor_div

from beava.catalogue.float_display import fmt_f64_display

cdef extern from "Python.h":
    Py_ssize_t uni_length "PyUnicode_GET_LENGTH"(PyObject* o)
    int uni_kind "PyUnicode_KIND"(PyObject* o)
    void* uni_data "PyUnicode_DATA"(PyObject* o)

cdef int64_t MS_PER_HOUR = 3_600_000
cdef int64_t MS_PER_DAY = 86_400_000
I64_MIN = -(1 << 63)
I64_MAX = (1 << 63) - 1


cdef inline int32_t utc_hour(int64_t now) noexcept nogil:
    cdef int64_t h = floor_div(now, MS_PER_HOUR) % 24
    return <int32_t>(h + 24 if h < 0 else h)


cdef inline int32_t utc_weekday(int64_t now) noexcept nogil:
    # Monday = 0; 1970-01-01 was a Thursday.
    cdef int64_t d = (floor_div(now, MS_PER_DAY) + 3) % 7
    return <int32_t>(d + 7 if d < 0 else d)


# ---- count blocks (histograms) --------------------------------------------------------

cdef enum:
    SPARSE = 0    # SparseCell[cap] follow the header
    DENSE32 = 1   # int32_t[ncells]
    DENSE64 = 2   # int64_t[ncells]

ctypedef struct CountBlock:
    int32_t mode
    int32_t used      # sparse: pairs in use
    int32_t cap       # sparse: pairs allocated
    int32_t ncells

ctypedef struct SparseCell:
    int32_t cell
    int32_t count


cdef inline SparseCell* sparse_cells(CountBlock* b) noexcept nogil:
    return <SparseCell*>(b + 1)


cdef inline int32_t* dense32(CountBlock* b) noexcept nogil:
    return <int32_t*>(b + 1)


cdef inline int64_t* dense64(CountBlock* b) noexcept nogil:
    return <int64_t*>(b + 1)


cdef inline size_t count_block_size(int32_t mode, int32_t cap, int32_t ncells) noexcept nogil:
    if mode == SPARSE:
        return sizeof(CountBlock) + <size_t>cap * sizeof(SparseCell)
    if mode == DENSE32:
        return sizeof(CountBlock) + <size_t>ncells * sizeof(int32_t)
    return sizeof(CountBlock) + <size_t>ncells * sizeof(int64_t)


cdef CountBlock* count_block_alloc(int32_t mode, int32_t cap, int32_t ncells) except NULL:
    cdef size_t size = count_block_size(mode, cap, ncells)
    cdef CountBlock* b = <CountBlock*>PyMem_Malloc(size)
    if b == NULL:
        raise MemoryError()
    memset(b, 0, size)
    b.mode = mode
    b.cap = cap
    b.ncells = ncells
    return b


cdef CountBlock* count_block_new(int32_t ncells) except NULL:
    # Two sparse pairs to start, unless the dense array is no bigger.
    if <size_t>ncells * sizeof(int32_t) <= 2 * sizeof(SparseCell):
        return count_block_alloc(DENSE32, 0, ncells)
    return count_block_alloc(SPARSE, 2, ncells)


cdef CountBlock* count_block_dense(CountBlock* b, int32_t mode) except NULL:
    # The same counts in a new dense block (DENSE32 or DENSE64); frees b.
    cdef CountBlock* d = count_block_alloc(mode, 0, b.ncells)
    cdef int32_t i
    cdef SparseCell* e
    if b.mode == SPARSE:
        e = sparse_cells(b)
        for i in range(b.used):
            if mode == DENSE32:
                dense32(d)[e[i].cell] = e[i].count
            else:
                dense64(d)[e[i].cell] = e[i].count
    else:
        # Only DENSE32 -> DENSE64 happens here.
        for i in range(b.ncells):
            dense64(d)[i] = dense32(b)[i]
    PyMem_Free(b)
    return d


cdef CountBlock* count_block_add(CountBlock* b, int32_t cell) except NULL:
    # Count one event in `cell`; returns the block, possibly moved (growth, densify, widen).
    cdef SparseCell* e
    cdef int32_t i
    cdef CountBlock* grown
    if b.mode == DENSE32:
        if dense32(b)[cell] == INT32_MAX:
            b = count_block_dense(b, DENSE64)
            dense64(b)[cell] += 1
        else:
            dense32(b)[cell] += 1
        return b
    if b.mode == DENSE64:
        dense64(b)[cell] += 1
        return b
    e = sparse_cells(b)
    for i in range(b.used):
        if e[i].cell == cell:
            if e[i].count == INT32_MAX:
                b = count_block_dense(b, DENSE64)
                dense64(b)[cell] += 1
            else:
                e[i].count += 1
            return b
    if b.used == b.cap:
        if <size_t>b.cap * 2 * sizeof(SparseCell) >= <size_t>b.ncells * sizeof(int32_t):
            b = count_block_dense(b, DENSE32)
            dense32(b)[cell] += 1
            return b
        grown = <CountBlock*>PyMem_Realloc(b, count_block_size(SPARSE, b.cap * 2, b.ncells))
        if grown == NULL:
            raise MemoryError()
        b = grown
        # zeroed so that snapshot bytes depend on the state only
        memset(sparse_cells(b) + b.cap, 0, <size_t>b.cap * sizeof(SparseCell))
        b.cap *= 2
    e = sparse_cells(b) + b.used
    e.cell = cell
    e.count = 1
    b.used += 1
    return b


cdef void count_block_fill(const CountBlock* b, int64_t* out, int32_t ncells) noexcept:
    # Every cell's count (zeros included) into out[0:ncells]; b may be NULL.
    cdef int32_t i
    cdef const SparseCell* e
    if b == NULL or b.mode == SPARSE:
        memset(out, 0, ncells * sizeof(int64_t))
        if b != NULL:
            e = sparse_cells(<CountBlock*>b)
            for i in range(b.used):
                out[e[i].cell] = e[i].count
    elif b.mode == DENSE32:
        for i in range(ncells):
            out[i] = dense32(<CountBlock*>b)[i]
    else:
        memcpy(out, dense64(<CountBlock*>b), ncells * sizeof(int64_t))


cdef enum:
    CELLS_ON_STACK = 256  # counts read into a stack array up to this many cells


cdef list count_block_cells(CountBlock* b, int32_t ncells):
    # Every cell's count (zeros included); b may be NULL.
    cdef int64_t on_stack[CELLS_ON_STACK]
    cdef int64_t* counts = on_stack
    cdef int32_t i
    if ncells > CELLS_ON_STACK:
        counts = <int64_t*>PyMem_Malloc(ncells * sizeof(int64_t))
        if counts == NULL:
            raise MemoryError()
    count_block_fill(b, counts, ncells)
    try:
        return [counts[i] for i in range(ncells)]
    finally:
        if counts != on_stack:
            PyMem_Free(counts)


encode_json = Encoder(order="sorted").encode  # as the reply encoder writes a label


cdef enum:
    TEXT_ON_STACK = 8192  # count-map JSON written into a stack array up to this many bytes


cdef object counts_json(const CountBlock* b, int32_t ncells, const char* keys,
                        const int32_t* key_ends, const int32_t* cells, int32_t n):
    # A map of counts as the JSON text the reply encoder writes (msgspec.Raw): the i-th of
    # its ``n`` entries is the pre-encoded key ``keys[key_ends[i - 1]:key_ends[i]]`` (its
    # quoted text and the colon, keys in sorted order) and the count of cell ``cells[i]``.
    cdef int64_t counts_on_stack[CELLS_ON_STACK]
    cdef char text_on_stack[TEXT_ON_STACK]
    cdef int64_t* counts = counts_on_stack
    cdef char* text = text_on_stack
    cdef Py_ssize_t room = 2 + (key_ends[n - 1] if n else 0) + 21 * <Py_ssize_t>n
    cdef char* p
    cdef int32_t i, at = 0
    try:
        if ncells > CELLS_ON_STACK:
            counts = <int64_t*>PyMem_Malloc(ncells * sizeof(int64_t))
            if counts == NULL:
                raise MemoryError()
        if room > TEXT_ON_STACK:
            text = <char*>PyMem_Malloc(room)
            if text == NULL:
                raise MemoryError()
        count_block_fill(b, counts, ncells)
        p = text
        p[0] = b'{'
        p += 1
        for i in range(n):  # an entry's key (with its colon), count and comma
            memcpy(p, keys + at, key_ends[i] - at)
            p += key_ends[i] - at
            at = key_ends[i]
            p += int_text(p, counts[cells[i]])
            p[0] = b','
            p += 1
        if n:
            p -= 1  # no comma after the last entry
        p[0] = b'}'
        return Raw(PyBytes_FromStringAndSize(text, p + 1 - text))
    finally:
        if counts != counts_on_stack:
            PyMem_Free(counts)
        if text != text_on_stack:
            PyMem_Free(text)


cdef class CountColumn(BlockColumn):
    """Per-slot counts over ``ncells`` cells in a lazily allocated count block."""

    cdef int32_t ncells

    cdef int count(self, Py_ssize_t slot, int32_t cell) except -1:
        cdef CountBlock* b = <CountBlock*>self.blocks[slot]
        if b == NULL:
            b = count_block_new(self.ncells)
            self.blocks[slot] = b
        self.blocks[slot] = count_block_add(b, cell)
        return 0

    cdef list cells(self, Py_ssize_t slot):
        return count_block_cells(<CountBlock*>self.blocks[slot], self.ncells)

    cdef int update_row(self, Py_ssize_t slot, const Row* row, bint matched,
                        int64_t now) except -1:
        # update() of the histograms of time, which read no field (histogram reads one)
        return self.update(slot, None, matched, now)

    cdef Py_ssize_t block_nbytes(self, const void* block) except -1:
        cdef const CountBlock* b = <const CountBlock*>block
        return count_block_size(b.mode, b.cap, b.ncells)

    cdef int check_block(self, const char* raw, Py_ssize_t n) except -1:
        cdef CountBlock header
        cdef SparseCell e
        cdef int32_t i
        if n < <Py_ssize_t>sizeof(CountBlock):
            raise ValueError(f"snapshot histogram block of {n} bytes")
        memcpy(&header, raw, sizeof(CountBlock))
        if (header.ncells != self.ncells or header.mode < SPARSE or header.mode > DENSE64
                or header.used < 0 or header.used > header.cap
                or <size_t>n != count_block_size(header.mode, header.cap, header.ncells)):
            raise ValueError("snapshot histogram block header does not fit the op")
        if header.mode == SPARSE:
            for i in range(header.used):
                memcpy(&e, raw + sizeof(CountBlock) + i * sizeof(SparseCell),
                       sizeof(SparseCell))
                if not 0 <= e.cell < self.ncells:
                    raise ValueError(f"snapshot histogram cell {e.cell} outside the op's")
        return 0


def edge_text(edge: int | float) -> str:
    """Label text E(v) of a histogram edge (§16.1)."""
    if type(edge) is int or (math.isfinite(edge) and edge == int(edge)):
        return str(min(max(int(edge), I64_MIN), I64_MAX))
    return fmt_f64_display(edge)


def histogram_labels(edges: tuple) -> list[str]:
    """The label of every cell for these edges (§16.1)."""
    m = len(edges)
    if m == 0:
        return ["all"]
    text = [edge_text(b) for b in edges]
    return (["<" + text[0]] + [text[i - 1] + "-" + text[i] for i in range(1, m)]
            + [">=" + text[m - 1]])


def sorted_label_cells(labels: list[str]) -> list[tuple[str, int]]:
    """(label, cell) in ascending label order; a repeated label reads as its last cell."""
    return sorted((label, cell) for cell, label in enumerate(labels))


cdef double edge_value(object edge):
    try:
        return float(edge)
    except OverflowError:
        return math.inf if edge > 0 else -math.inf


cdef class HistogramColumn(CountColumn):
    """histogram (§16.1): counts of numeric values per edge interval."""

    cdef double* edges
    cdef int32_t nedges
    cdef bint ascending       # edges non-decreasing: the first edge above v is found by bisection
    cdef list label_cells
    # read()'s keys for a JSON reply: each label once (its last cell), quoted, with a colon
    cdef bytes json_keys
    cdef int32_t* json_key_ends
    cdef int32_t* json_cells
    cdef int32_t njson
    cdef uint8_t guess          # where the last C row had ``field`` (row_field)

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        cdef int32_t i
        lifetime_only("histogram", window_ms)
        Column.__init__(self, name, field, where, params, window_ms)
        edges = tuple(params.get("buckets") or ())
        self.nedges = len(edges)
        self.ncells = self.nedges + 1
        self.takes_row = True
        self.edges = <double*>PyMem_Malloc((self.nedges + 1) * sizeof(double))
        if self.edges == NULL:
            raise MemoryError()
        self.ascending = True
        for i in range(self.nedges):
            self.edges[i] = edge_value(edges[i])
            if i > 0 and not self.edges[i - 1] <= self.edges[i]:
                self.ascending = False
        self.label_cells = sorted_label_cells(histogram_labels(edges))
        last_cells = dict(self.label_cells)  # as read() builds its map: the last cell wins
        keys = [encode_json(label) + b":" for label in last_cells]
        self.njson = len(keys)
        self.json_keys = b"".join(keys)
        self.json_key_ends = <int32_t*>PyMem_Malloc(self.njson * sizeof(int32_t))
        self.json_cells = <int32_t*>PyMem_Malloc(self.njson * sizeof(int32_t))
        if self.json_key_ends == NULL or self.json_cells == NULL:
            raise MemoryError()
        end = 0
        for i, cell in enumerate(last_cells.values()):
            end += len(keys[i])
            self.json_key_ends[i] = end
            self.json_cells[i] = cell

    def __dealloc__(self):
        PyMem_Free(self.edges)
        PyMem_Free(self.json_key_ends)
        PyMem_Free(self.json_cells)

    cdef inline int32_t cell_of(self, double v) noexcept:
        # The first i with v < edges[i], else nedges (NaN compares false: last cell).
        cdef int32_t lo = 0, hi = self.nedges, mid, i
        if self.ascending:
            while lo < hi:
                mid = (lo + hi) >> 1
                if v < self.edges[mid]:
                    hi = mid
                else:
                    lo = mid + 1
            return lo
        for i in range(self.nedges):
            if v < self.edges[i]:
                return i
        return self.nedges

    cdef int update(self, Py_ssize_t slot, dict row, bint matched, int64_t now) except -1:
        cdef double x
        if matched and row_number(row, self.field, &x):
            self.count(slot, self.cell_of(x))
        return 0

    cdef int update_row(self, Py_ssize_t slot, const Row* row, bint matched,
                        int64_t now) except -1:
        cdef double x
        if matched and field_number(row_field(row, self.field, &self.guess), &x):
            self.count(slot, self.cell_of(x))
        return 0

    cdef object read(self, Py_ssize_t slot, int64_t T):
        cdef list counts = self.cells(slot)
        return {label: counts[cell] for label, cell in self.label_cells}

    cdef object json_value(self, Py_ssize_t slot, int64_t T):
        return counts_json(<CountBlock*>self.blocks[slot], self.ncells, self.json_keys,
                           self.json_key_ends, self.json_cells, self.njson)


cdef class HourOfDayHistogramColumn(CountColumn):
    """hour_of_day_histogram (§16.2): matched events per UTC hour, a list of 24 counts."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        lifetime_only("hour_of_day_histogram", window_ms)
        Column.__init__(self, name, field, where, params, window_ms)
        self.ncells = 24
        self.takes_row = True

    cdef int update(self, Py_ssize_t slot, dict row, bint matched, int64_t now) except -1:
        if matched:
            self.count(slot, utc_hour(now))
        return 0

    cdef object read(self, Py_ssize_t slot, int64_t T):
        return self.cells(slot)

    cdef int put_msgpack(self, Writer* out, Py_ssize_t slot, int64_t T) except -1:
        # read()'s 24 counts as an array, written from the counts into a stack buffer
        cdef int64_t counts[24]
        cdef uint8_t buf[3 + 24 * INT_MAX_BYTES]
        cdef Py_ssize_t n = 3
        cdef int i
        count_block_fill(<CountBlock*>self.blocks[slot], counts, 24)
        buf[0] = 0xdc  # array 16 of 24 items
        big_endian(buf + 1, 24, 2)
        for i in range(24):
            n += int_at(buf + n, counts[i])
        return put_raw(out, <const char*>buf, n)


DAY_NAMES = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
# (key, cell) in ascending key order; cell = weekday * 24 + hour.
DOW_HOUR_CELLS = sorted((f"{DAY_NAMES[d]}-{h:02d}", d * 24 + h)
                        for d in range(7) for h in range(24))
# The same keys as MessagePack text (fixstr of 6 bytes: 7 each), and their cells, in order.
DEF DOW_HOUR_KEY_BYTES = 7
cdef bytes DOW_HOUR_KEYS = b"".join(b"\xa6" + key.encode() for key, _ in DOW_HOUR_CELLS)
# The map of 168 zero counts (map 16 header, then each key and a fixint 0).
cdef bytes DOW_HOUR_ZEROS = b"\xde\x00\xa8" + b"".join(
    b"\xa6" + key.encode() + b"\x00" for key, _ in DOW_HOUR_CELLS)
cdef int32_t DOW_HOUR_ORDER[168]
for _i, (_key, _cell) in enumerate(DOW_HOUR_CELLS):
    DOW_HOUR_ORDER[_i] = _cell
DEF DOW_HOUR_JSON_KEY_BYTES = 9  # "Mon-00":
cdef bytes DOW_HOUR_JSON_KEYS = b"".join(b'"' + key.encode() + b'":' for key, _ in DOW_HOUR_CELLS)
cdef int32_t DOW_HOUR_JSON_KEY_ENDS[168]
for _i in range(168):
    DOW_HOUR_JSON_KEY_ENDS[_i] = DOW_HOUR_JSON_KEY_BYTES * (_i + 1)


cdef class DowHourHistogramColumn(CountColumn):
    """dow_hour_histogram (§16.3): matched events per (UTC weekday, hour), 168 keys."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        lifetime_only("dow_hour_histogram", window_ms)
        Column.__init__(self, name, field, where, params, window_ms)
        self.ncells = 168
        self.takes_row = True

    cdef int update(self, Py_ssize_t slot, dict row, bint matched, int64_t now) except -1:
        if matched:
            self.count(slot, utc_weekday(now) * 24 + utc_hour(now))
        return 0

    cdef object read(self, Py_ssize_t slot, int64_t T):
        cdef list counts = self.cells(slot)
        return {key: counts[cell] for key, cell in DOW_HOUR_CELLS}

    cdef int put_msgpack(self, Writer* out, Py_ssize_t slot, int64_t T) except -1:
        # read()'s map written from the counts (168 keys, already in sorted order): while
        # every count is a one-byte fixint (the common case), the map with zero counts is
        # copied and the counts set in it; otherwise it is built in a stack buffer
        cdef int64_t counts[168]
        cdef uint8_t buf[3 + 168 * (DOW_HOUR_KEY_BYTES + INT_MAX_BYTES)]
        cdef const char* keys = DOW_HOUR_KEYS
        cdef uint8_t* p
        cdef Py_ssize_t n = 3, begin = out.size
        cdef int64_t bits = 0
        cdef int i
        count_block_fill(<CountBlock*>self.blocks[slot], counts, 168)
        for i in range(168):
            bits |= counts[i]
        if 0 <= bits < 0x80:
            put_raw(out, DOW_HOUR_ZEROS, len(DOW_HOUR_ZEROS))
            p = <uint8_t*>out.data + begin + 3 + DOW_HOUR_KEY_BYTES
            for i in range(168):
                p[(DOW_HOUR_KEY_BYTES + 1) * i] = <uint8_t>counts[DOW_HOUR_ORDER[i]]
            return 0
        buf[0] = 0xde  # map 16 of 168 entries
        big_endian(buf + 1, 168, 2)
        for i in range(168):
            memcpy(buf + n, keys + DOW_HOUR_KEY_BYTES * i, DOW_HOUR_KEY_BYTES)
            n += DOW_HOUR_KEY_BYTES
            n += int_at(buf + n, counts[DOW_HOUR_ORDER[i]])
        return put_raw(out, <const char*>buf, n)

    cdef object json_value(self, Py_ssize_t slot, int64_t T):
        # read()'s map as the JSON text the reply encoder gives it, written from the counts
        return counts_json(<CountBlock*>self.blocks[slot], 168, DOW_HOUR_JSON_KEYS,
                           DOW_HOUR_JSON_KEY_ENDS, DOW_HOUR_ORDER, 168)


# ---- seasonal_deviation ---------------------------------------------------------------
# Per slot: the latest (x, hour) and (n, sum, sum of squares) for each UTC hour seen, in
# first-seen order (at most 24 entries, grown 1, 2, 4, ... 24).

ctypedef struct HourStats:
    int64_t n
    double total
    double total_sq
    int64_t hour

ctypedef struct SeasonBlock:
    int32_t cap
    int32_t used
    int32_t last_hour
    int32_t _reserved
    double last_x


cdef inline HourStats* season_hours(SeasonBlock* b) noexcept nogil:
    return <HourStats*>(b + 1)


cdef inline size_t season_size(int32_t cap) noexcept nogil:
    return sizeof(SeasonBlock) + <size_t>cap * sizeof(HourStats)


cdef class SeasonalDeviationColumn(BlockColumn):
    """seasonal_deviation (§16.4): z of the latest value within its own UTC-hour bucket."""

    cdef uint8_t guess          # where the last C row had ``field`` (row_field)

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        lifetime_only("seasonal_deviation", window_ms)
        Column.__init__(self, name, field, where, params, window_ms)
        self.takes_row = True

    cdef int update(self, Py_ssize_t slot, dict row, bint matched, int64_t now) except -1:
        cdef double x
        if matched and row_number(row, self.field, &x):
            self.observe(slot, x, now)
        return 0

    cdef int update_row(self, Py_ssize_t slot, const Row* row, bint matched,
                        int64_t now) except -1:
        cdef double x
        if matched and field_number(row_field(row, self.field, &self.guess), &x):
            self.observe(slot, x, now)
        return 0

    cdef int observe(self, Py_ssize_t slot, double x, int64_t now) except -1:
        # One numeric value of a matched event at ``now``.
        cdef int32_t h = utc_hour(now), i, cap
        cdef SeasonBlock* b
        cdef HourStats* e
        b = <SeasonBlock*>self.blocks[slot]
        if b == NULL:
            b = <SeasonBlock*>PyMem_Malloc(season_size(1))
            if b == NULL:
                raise MemoryError()
            memset(b, 0, season_size(1))
            b.cap = 1
            self.blocks[slot] = b
        e = NULL
        for i in range(b.used):
            if season_hours(b)[i].hour == h:
                e = season_hours(b) + i
                break
        if e == NULL:
            if b.used == b.cap:
                cap = b.cap * 2 if b.cap * 2 < 24 else 24
                b = <SeasonBlock*>PyMem_Realloc(b, season_size(cap))
                if b == NULL:
                    raise MemoryError()
                # zeroed so that snapshot bytes depend on the state only
                memset(season_hours(b) + b.cap, 0, <size_t>(cap - b.cap) * sizeof(HourStats))
                b.cap = cap
                self.blocks[slot] = b
            e = season_hours(b) + b.used
            b.used += 1
            e.n = 0
            e.total = 0.0
            e.total_sq = 0.0
            e.hour = h
        e.n += 1
        e.total += x
        e.total_sq += x * x
        b.last_x = x
        b.last_hour = h
        return 0

    cdef int number(self, Py_ssize_t slot, int64_t T, Number* out) except -1:
        cdef SeasonBlock* b = <SeasonBlock*>self.blocks[slot]
        cdef HourStats* e
        cdef double n, mean, var
        cdef int32_t i
        if b == NULL:
            return VALUE_NULL
        for i in range(b.used):
            e = season_hours(b) + i
            if e.hour != b.last_hour:
                continue
            if e.n < 2:
                return VALUE_NULL
            n = <double>e.n
            mean = e.total / n
            var = (e.total_sq - e.total * e.total / n) / (n - 1.0)
            if var <= 0.0:
                return VALUE_NULL
            out.f = (b.last_x - mean) / sqrt(var)
            return VALUE_FLOAT
        return VALUE_NULL

    cdef Py_ssize_t block_nbytes(self, const void* block) except -1:
        return season_size((<const SeasonBlock*>block).cap)

    cdef int check_block(self, const char* raw, Py_ssize_t n) except -1:
        cdef SeasonBlock header
        if n < <Py_ssize_t>sizeof(SeasonBlock):
            raise ValueError(f"snapshot seasonal_deviation block of {n} bytes")
        memcpy(&header, raw, sizeof(SeasonBlock))
        if (header.cap < 1 or header.cap > 24 or header.used < 1
                or header.used > header.cap or <size_t>n != season_size(header.cap)):
            raise ValueError("snapshot seasonal_deviation block header does not fit the op")
        return 0


# ---- event_type_mix -------------------------------------------------------------------
# Per slot: total categorisable matched events and the held categories (str keys, one
# owned reference each) with their counts, in admission order.

ctypedef struct CatCount:
    PyObject* key
    int64_t count

ctypedef struct MixBlock:
    int32_t cap
    int32_t used
    int64_t total


cdef inline CatCount* mix_entries(MixBlock* b) noexcept nogil:
    return <CatCount*>(b + 1)


cdef inline size_t mix_size(int32_t cap) noexcept nogil:
    return sizeof(MixBlock) + <size_t>cap * sizeof(CatCount)


cdef inline bint same_text(PyObject* key, const void* data, int kind,
                           Py_ssize_t length) noexcept:
    # Equal str content: canonical (PEP 393) strings of equal text share kind and length.
    return (uni_length(key) == length and uni_kind(key) == kind
            and memcmp(uni_data(key), data, <size_t>(length * kind)) == 0)


cdef inline bint text_after(PyObject* a, PyObject* b) noexcept:
    # Whether str ``a`` sorts after str ``b`` (code point order, as Python compares them):
    # the bytes of two one-byte-per-character strings compared directly.
    cdef Py_ssize_t na, nb
    cdef int c
    if uni_kind(a) == 1 and uni_kind(b) == 1:
        na = uni_length(a)
        nb = uni_length(b)
        c = memcmp(uni_data(a), uni_data(b), <size_t>(na if na < nb else nb))
        return c > 0 or (c == 0 and na > nb)
    return PyUnicode_Compare(<object>a, <object>b) > 0


# Categories of each column are shared between its entities (at most this many distinct
# strings kept), so an entity holding "view" costs a pointer, not a string.
cdef Py_ssize_t MAX_SHARED_NAMES = 4096
cdef enum:
    MIX_SORTED_ON_STACK = 64  # categories a MessagePack write sorts in a stack array
cdef int64_t EXACT_DOUBLE_INT = 1LL << 53  # every integer up to this is exact as a double


cdef void mix_free(void* block) noexcept:
    # The BlockRelease of event_type_mix: drops the category references, then the block.
    cdef MixBlock* b = <MixBlock*>block
    cdef int32_t i
    if b == NULL:
        return
    for i in range(b.used):
        Py_XDECREF(mix_entries(b)[i].key)
    PyMem_Free(b)


cdef class EventTypeMixColumn(BlockColumn):
    """event_type_mix (§16.5): proportion of each held category among categorisable events."""

    cdef object allow           # tuple of allowed categories, or None
    cdef int64_t max_categories
    cdef dict shared_names
    cdef uint8_t guess          # where the last C row had ``field`` (row_field)

    def __cinit__(self, *args, **kwargs):
        self.release = mix_free

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        lifetime_only("event_type_mix", window_ms)
        Column.__init__(self, name, field, where, params, window_ms)
        categories = params.get("categories")
        if categories is not None:
            categories = tuple(dict.fromkeys(c for c in categories if type(c) is str))
        self.allow = categories
        max_categories = params.get("max_categories")
        if max_categories is None:
            max_categories = 256
        if type(max_categories) is not int or max_categories < 0:
            raise ValueError(f"event_type_mix: max_categories must be an integer >= 0, "
                             f"got {max_categories!r}")
        self.max_categories = min(max_categories, INT32_MAX)
        self.shared_names = {}
        self.takes_row = True

    cdef object shared(self, object key):
        # One str object per distinct category of this column (bounded).
        cdef object found = self.shared_names.get(key)
        if found is not None:
            return found
        if len(self.shared_names) < MAX_SHARED_NAMES:
            self.shared_names[key] = key
        return key

    cdef MixBlock* add_entry(self, Py_ssize_t slot, MixBlock* b, object key) except NULL:
        cdef int32_t cap
        cdef CatCount* e
        if b.used == b.cap:
            cap = b.cap * 2 if b.cap else 2
            b = <MixBlock*>PyMem_Realloc(b, mix_size(cap))
            if b == NULL:
                raise MemoryError()
            b.cap = cap
            self.blocks[slot] = b
        e = mix_entries(b) + b.used
        Py_INCREF(key)
        e.key = <PyObject*>key
        e.count = 1
        b.used += 1
        return b

    cdef int update(self, Py_ssize_t slot, dict row, bint matched, int64_t now) except -1:
        cdef PyObject* v
        cdef type t
        cdef char digits[24]
        cdef long long i64
        cdef int overflow = 0
        cdef object text   # the category's str, unless it is ``digits``
        if not matched:
            return 0
        v = row_value(row, self.field)
        if v == NULL:
            return 0
        t = type(<object>v)
        if t is str:
            text = <object>v
        elif t is bool:
            text = "true" if <object>v is True else "false"
        elif t is int:
            i64 = PyLong_AsLongLongAndOverflow(<object>v, &overflow)
            if not overflow:
                return self.tally(slot, digits, 1, snprintf(digits, sizeof(digits), "%lld", i64),
                                  None)
            text = str(<object>v)
        else:
            return 0  # F64 and other values are not categories
        return self.tally(slot, uni_data(<PyObject*>text), uni_kind(<PyObject*>text),
                          uni_length(<PyObject*>text), text)

    cdef int update_row(self, Py_ssize_t slot, const Row* row, bint matched,
                        int64_t now) except -1:
        cdef const RowField* f
        cdef char digits[24]
        if not matched:
            return 0
        f = row_field(row, self.field, &self.guess)
        if f == NULL:
            return 0
        if f.tag == ROW_TEXT:  # ASCII: one byte per character, as its str holds it
            return self.tally(slot, f.text, 1, f.size, None)
        if f.tag == ROW_BOOL:
            return self.tally(slot, b"true" if f.i else b"false", 1, 4 if f.i else 5, None)
        if f.tag == ROW_INT:
            return self.tally(slot, digits, 1,
                              snprintf(digits, sizeof(digits), "%lld", <long long>f.i), None)
        return 0  # F64 is not a category

    cdef int tally(self, Py_ssize_t slot, const void* data, int kind, Py_ssize_t length,
                   object text) except -1:
        # One categorisable matched event of the category whose str has these characters
        # (PEP 393 ``kind``); ``text`` is that str, or None when it is ASCII not yet built.
        cdef int32_t i
        cdef MixBlock* b = <MixBlock*>self.blocks[slot]
        if b == NULL:
            b = <MixBlock*>PyMem_Malloc(mix_size(0))
            if b == NULL:
                raise MemoryError()
            b.cap = 0
            b.used = 0
            b.total = 0
            self.blocks[slot] = b
        b.total += 1
        for i in range(b.used):
            if same_text(mix_entries(b)[i].key, data, kind, length):
                mix_entries(b)[i].count += 1
                return 0
        if self.allow is not None:
            for i in range(len(<tuple>self.allow)):
                if same_text(PyTuple_GET_ITEM(self.allow, i), data, kind, length):
                    self.add_entry(slot, b, <object>PyTuple_GET_ITEM(self.allow, i))
                    return 0
            return 0
        if b.used < self.max_categories:
            if text is None:
                text = (<const char*>data)[:length].decode("ascii")
            self.add_entry(slot, b, self.shared(text))
        return 0

    cdef object read(self, Py_ssize_t slot, int64_t T):
        cdef MixBlock* b = <MixBlock*>self.blocks[slot]
        cdef int32_t i
        if b == NULL or b.total == 0:
            return {}
        held = sorted((<object>mix_entries(b)[i].key, mix_entries(b)[i].count)
                      for i in range(b.used))
        total = b.total
        return {key: count / total for key, count in held}

    cdef int put_msgpack(self, Writer* out, Py_ssize_t slot, int64_t T) except -1:
        # read()'s map written from the block: categories in sorted order (an insertion
        # sort of the few held), each count / total as a C division, which is Python's
        # true division of two integers while the total is exact as a double
        cdef MixBlock* b = <MixBlock*>self.blocks[slot]
        cdef int32_t on_stack[MIX_SORTED_ON_STACK]
        cdef int32_t* order = on_stack
        cdef int32_t i, j, k
        cdef double total
        if b == NULL or b.total == 0:
            return put_map_header(out, 0)
        if b.total > EXACT_DOUBLE_INT:
            return Column.put_msgpack(self, out, slot, T)
        if b.used > MIX_SORTED_ON_STACK:
            order = <int32_t*>PyMem_Malloc(b.used * sizeof(int32_t))
            if order == NULL:
                raise MemoryError()
        try:
            for i in range(b.used):
                k = i
                j = i
                while j > 0 and text_after(mix_entries(b)[order[j - 1]].key,
                                           mix_entries(b)[k].key):
                    order[j] = order[j - 1]
                    j -= 1
                order[j] = k
            total = <double>b.total
            put_map_header(out, b.used)
            for i in range(b.used):
                put_str(out, <str>mix_entries(b)[order[i]].key)
                put_double(out, <double>mix_entries(b)[order[i]].count / total)
        finally:
            if order != on_stack:
                PyMem_Free(order)
        return 0

    cpdef object dump(self, Py_ssize_t nslots):
        # [names, records]: `names` lists the categories held in this column (first-seen
        # order); the data of a slot's block record is [int64 total] then, per held category
        # in admission order, [int64 index in names][int64 count].
        cdef Py_ssize_t i, total = 0
        cdef int32_t k
        cdef int64_t entry[2]
        cdef MixBlock* b
        cdef char* out
        cdef dict index = {}
        cdef list names = []
        check_dump_slots(nslots, self.capacity)
        for i in range(nslots):
            b = <MixBlock*>self.blocks[i]
            if b != NULL:
                total += RECORD_HEADER + sizeof(int64_t) + b.used * sizeof(entry)
        records = new_bytes(total, &out)
        for i in range(nslots):
            b = <MixBlock*>self.blocks[i]
            if b == NULL:
                continue
            out = record_head(out, i, sizeof(int64_t) + b.used * sizeof(entry))
            memcpy(out, &b.total, sizeof(int64_t))
            out += sizeof(int64_t)
            for k in range(b.used):
                key = <object>mix_entries(b)[k].key
                found = index.get(key)
                if found is None:
                    found = index[key] = len(names)
                    names.append(key)
                entry[0] = found
                entry[1] = mix_entries(b)[k].count
                memcpy(out, entry, sizeof(entry))
                out += sizeof(entry)
        return [names, records]

    cpdef load(self, object state, Py_ssize_t nslots):
        cdef list parts = state_list(state, 2, "event_type_mix state")
        cdef list names = state_list(parts[0], -1, "event_type_mix categories")
        cdef bytes records = state_bytes(parts[1], "event_type_mix records")
        cdef const char* p = records
        cdef Py_ssize_t total = len(records), off = 0, n, used, k
        cdef int64_t slot = -1
        cdef int64_t entry[2]
        cdef MixBlock* b
        for name in names:
            if type(name) is not str:
                raise ValueError(f"snapshot event_type_mix category {name!r} is not a str")
        names = [self.shared(name) for name in names]
        self.ensure(nslots)
        release_blocks(self.blocks, nslots, self.release)
        try:
            while off < total:
                off = record_next(p, total, off, slot, nslots, &slot, &n, "event_type_mix")
                used = (n - <Py_ssize_t>sizeof(int64_t)) // <Py_ssize_t>sizeof(entry)
                if n != <Py_ssize_t>sizeof(int64_t) + used * <Py_ssize_t>sizeof(entry):
                    raise ValueError(f"snapshot event_type_mix block of {n} bytes")
                b = <MixBlock*>PyMem_Malloc(mix_size(<int32_t>used))
                if b == NULL:
                    raise MemoryError()
                b.cap = <int32_t>used
                b.used = 0
                memcpy(&b.total, p + off, sizeof(int64_t))
                self.blocks[slot] = b
                for k in range(used):
                    memcpy(entry, p + off + sizeof(int64_t) + k * sizeof(entry), sizeof(entry))
                    if not 0 <= entry[0] < len(names):
                        raise ValueError(f"snapshot event_type_mix category index {entry[0]}")
                    key = names[entry[0]]
                    Py_INCREF(key)
                    mix_entries(b)[k].key = <PyObject*>key
                    mix_entries(b)[k].count = entry[1]
                    b.used += 1
                off += n
        except BaseException:
            release_blocks(self.blocks, nslots, self.release)
            raise


# ---- value buffers --------------------------------------------------------------------

cdef int32_t ring_bound(str op, object n) except -1:
    # Unbounded params are clamped to the ring's int32 index range (2^31 - 1 values per
    # entity is far beyond any memory that could hold them).
    if type(n) is not int or n < 0:
        raise ValueError(f"{op}: size must be an integer >= 0, got {n!r}")
    return min(n, INT32_MAX)


cdef class MostRecentNColumn(LatestRingColumn):
    """most_recent_n (§16.6): the last n non-null matched values, oldest -> newest."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        lifetime_only("most_recent_n", window_ms)
        Column.__init__(self, name, field, where, params, window_ms)
        n = params.get("n")
        self.limit = ring_bound("most_recent_n", 10 if n is None else n)
        self.takes_row = True

    cdef object read(self, Py_ssize_t slot, int64_t T):
        return ring_oldest_to_newest(<ValueRing*>self.blocks[slot], self.limit)

    cdef int put_msgpack(self, Writer* out, Py_ssize_t slot, int64_t T) except -1:
        return self.put_oldest_to_newest(out, slot)


cdef inline uint64_t reservoir_draw(uint64_t seen) noexcept nogil:
    # The spec's seeded xorshift of `seen` (§16.7); a pure function of the count.
    cdef uint64_t s = seen ^ 0xA0B1C2D3E4F50617ULL ^ 0x9E3779B97F4A7C15ULL
    if s == 0:
        s = 0xD2B74E4572D7C2B0ULL
    s ^= s << 13
    s ^= s >> 7
    s ^= s << 17
    return s % seen


cdef class ReservoirSampleColumn(RingColumn):
    """reservoir_sample (§16.7): deterministic Algorithm R over non-null matched values."""

    def __init__(self, str name, object field, object where, dict params, object window_ms):
        lifetime_only("reservoir_sample", window_ms)
        Column.__init__(self, name, field, where, params, window_ms)
        k = params.get("samples")
        self.limit = ring_bound("reservoir_sample", 10 if k is None else k)
        self.takes_row = True

    cdef int offer(self, Py_ssize_t slot, PyObject* v, const RowField* f) except -1:
        # Kept while the reservoir fills, then over entry j when j < limit; the value is
        # only encoded (a C row's text built as a str) when kept.
        cdef ValueRing* r = <ValueRing*>self.blocks[slot]
        cdef int64_t seen = (0 if r == NULL else r.seen) + 1
        cdef uint64_t j = 0
        cdef Payload value
        cdef uint8_t tag
        if self.limit == 0 or (v == NULL and f == NULL):  # none: absent or null
            return 0
        if r != NULL and r.held == self.limit:
            j = reservoir_draw(<uint64_t>seen)
            if j < <uint64_t>self.limit:
                tag = event_encode(v, f, &value)
                ring_replace_value(r, <int32_t>j, tag, value)
        else:
            tag = event_encode(v, f, &value)
            r = ring_append_value(r, tag, value, self.limit)
            self.blocks[slot] = r
        r.seen = seen
        return 0

    cdef object read(self, Py_ssize_t slot, int64_t T):
        cdef ValueRing* r = <ValueRing*>self.blocks[slot]
        cdef int32_t i
        if r == NULL:
            return []
        return [ring_get(r, i) for i in range(r.held)]

    cdef int put_msgpack(self, Writer* out, Py_ssize_t slot, int64_t T) except -1:
        cdef ValueRing* r = <ValueRing*>self.blocks[slot]
        return self.put_entries(out, r, 0, 0 if r == NULL else r.held)


COLUMNS = {
    "histogram": HistogramColumn,
    "hour_of_day_histogram": HourOfDayHistogramColumn,
    "dow_hour_histogram": DowHourHistogramColumn,
    "seasonal_deviation": SeasonalDeviationColumn,
    "event_type_mix": EventTypeMixColumn,
    "most_recent_n": MostRecentNColumn,
    "reservoir_sample": ReservoirSampleColumn,
}
