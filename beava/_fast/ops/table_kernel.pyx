# cython: language_level=3
"""The per-table kernel (DESIGN.md §2-§3, spec/operators.md §3 steps 2-5).

One ``TableKernel`` per table derivation holds the canonical key -> slot map, the feature
columns and the where predicates. ``apply(row, now)`` is the single Python->Cython call a
table costs per event: canonical group key, slot lookup or creation, cold TTL, each
distinct ``where`` evaluated once, then every column updated through cdef calls.

A table whose columns all read C rows (row.pxd), with no ``where`` and at most one key
field, ``takes_row``: ``apply_row`` then does what ``apply`` does from a row without Python
objects, its key found by its bytes (no str unless the key is new).
"""

cimport cython
from cpython.list cimport PyList_GET_ITEM
from cpython.ref cimport PyObject
from cpython.unicode cimport PyUnicode_DecodeASCII
from libc.math cimport isfinite
from libc.stdint cimport int64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy

from beava._fast.ops.column cimport Column, prefetch_line, row_key
from beava._fast.ops.key_map cimport KeyMap, text_key_hash
from beava._fast.ops.slot_hash cimport SLOT_COUNT, SLOT_SEED, text_slot, xxh64
from beava._fast.ops.row cimport (
    ROW_BOOL,
    ROW_INT,
    ROW_TEXT,
    Row,
    RowField,
    row_field,
    text_hash,
)
from beava._fast.timing.clocks cimport monotonic
from beava._fast.wire.msgpack_out cimport (
    RowPage,
    Writer,
    as_bytes,
    put_array_header,
    put_map_header,
    put_raw,
    put_str,
    put_value,
    release,
    reserve,
)
from beava._fast.wire.msgpack_json cimport json_row
from beava._fast.wire.number_text cimport int_text, repr_double
from beava._fast.ops.slot_buffers cimport dict_get
from beava._fast.ops.snapshot_state cimport state_buffer, state_dict, state_list

from beava._fast.ops.ops_core import BucketArena, share_windows


cdef extern from "Python.h":
    ctypedef struct PyTypeObject:
        pass
    PyTypeObject PyFloat_Type
    PyTypeObject PyLong_Type
    PyTypeObject PyUnicode_Type
    PyTypeObject PyBool_Type
    PyObject* Py_True
    PyTypeObject* Py_TYPE(PyObject* o)
    double float_value "PyFloat_AS_DOUBLE"(PyObject* o)


cpdef str fmt_f64_debug(double x):
    """Rust ``{:?}`` text of a float (spec/operators.md §1): ``9.0``, ``1e16``, ``1.5e-7``."""
    cdef char text[32]
    return PyUnicode_DecodeASCII(text, repr_double(x, True, text), NULL)


cdef object key_component(PyObject* v):
    """keystr of one group-key value, or None when it makes the event skip the table
    (absent, null, non-finite float, not a scalar)."""
    if v == NULL:
        return None
    cdef PyTypeObject* t = Py_TYPE(v)
    cdef double d
    if t == &PyUnicode_Type:
        return <object>v
    if t == &PyBool_Type:
        return "true" if v == Py_True else "false"
    if t == &PyLong_Type:
        return str(<object>v)
    if t == &PyFloat_Type:
        d = float_value(v)
        return fmt_f64_debug(d) if isfinite(d) else None
    value = <object>v
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return fmt_f64_debug(value) if isfinite(value) else None
    return None


cpdef object group_key(dict row, tuple key_fields):
    """The canonical key string of ``row`` for ``key_fields`` (spec/wire.md §7.1), or None
    when the event has no valid key. One key: its keystr unescaped; several: each keystr
    with ``|`` escaped as ``%7C``, joined by ``|``; none (global table): ``""``."""
    cdef Py_ssize_t n = len(key_fields)
    if n == 0:
        return ""
    if n == 1:
        return key_component(dict_get(row, key_fields[0]))
    parts = []
    for field in key_fields:
        text = key_component(dict_get(row, field))
        if text is None:
            return None
        parts.append((<str>text).replace("|", "%7C"))
    return "|".join(parts)


def key_slot(str text) -> int:
    """The hash slot of a canonical key string, as the ownership check computes it."""
    return text_slot(text)


cdef tuple kernel_layout(TableKernel kernel):
    """The key fields and, per state column in order, its class and feature names (what
    two kernels built from the same spec share)."""
    cols = []
    for col in kernel.state_cols:
        if isinstance(col, BucketArena):
            cols.append((type(col), col.window, tuple((m.name, type(m)) for m in col.members)))
        else:
            cols.append((type(col), (<Column>col).name))
    return (kernel.key_fields, tuple(cols))


DEF SCAN_AHEAD = 4  # slots between a scan's prefetch of a slot's state and its reading
DEF SCAN_CLOCK_EVERY = 8  # rows of a scan page between two reads of the clock


@cython.final
cdef class TableKernel:  # attributes in table_kernel.pxd
    """State of one table: ``keys`` (canonical key -> slot) and one column per feature.

    ``features`` lists ``(name, column, where_index)``: ``where_index`` 0 means no where,
    ``i`` means ``predicates[i - 1]``. Windowed core columns are put on shared bucket
    arenas (ops_core.share_windows); the arenas, not those columns, then own slot storage.
    ``cold_after_ms`` None disables the cold TTL; global tables never expire.
    """

    def __init__(self, tuple key_fields, list features, list predicates, object cold_after_ms):
        self.keys = KeyMap()
        self.key_fields = tuple(row_key(f) for f in key_fields)
        self.preds = list(predicates)
        self.npreds = len(self.preds)
        self.set_cold_after(cold_after_ms)
        self.by_name = {}
        self.update_cols = []
        where_of = []
        for name, column, where_index in features:
            if not isinstance(column, Column):
                raise TypeError(f"feature {name!r}: {type(column).__name__} is not a Column")
            if not 0 <= where_index <= self.npreds:
                raise ValueError(f"feature {name!r}: where index {where_index} out of range")
            self.by_name[name] = column
            self.update_cols.append(column)
            where_of.append(where_index)
        self.names = tuple(sorted(self.by_name))
        self.arenas = share_windows(self.update_cols)
        in_arena = {id(m) for arena in self.arenas for m in arena.members}
        self.feature_state = [c for c in self.update_cols if id(c) not in in_arena]
        self.state_cols = self.feature_state + self.arenas
        self.nupd = len(self.update_cols)
        self.upd = <PyObject**>realloc(NULL, (self.nupd + 1) * sizeof(PyObject*))
        self.upd_where = <int*>realloc(NULL, (self.nupd + 1) * sizeof(int))
        self.verdict = <unsigned char*>realloc(NULL, self.npreds + 1)
        if self.upd == NULL or self.upd_where == NULL or self.verdict == NULL:
            raise MemoryError()
        for i in range(self.nupd):
            self.upd[i] = <PyObject*>self.update_cols[i]
            self.upd_where[i] = where_of[i]
        self.verdict[0] = True
        self.touch = NULL
        self.capacity = 0
        self.owned = NULL
        self.takes_row = (self.npreds == 0 and len(self.key_fields) <= 1
                          and all((<Column>c).takes_row for c in self.update_cols))

    def __dealloc__(self):
        free(self.upd)
        free(self.upd_where)
        free(self.verdict)
        free(self.touch)

    def set_cold_after(self, object cold_after_ms) -> None:
        """Change the cold TTL (a register may change it in place)."""
        self.cold_after = -1 if cold_after_ms is None else cold_after_ms

    def set_ownership(self, bytes owned_bits, bint owns_global) -> None:
        """Sharded serving (docs/sharding.md): apply only the keys whose hash slot has its
        bit set in ``owned_bits`` (16384 bits, slot s at byte s >> 3, bit s & 7); a global
        table is applied when ``owns_global``. None: every key (an unsharded server)."""
        if owned_bits is not None and len(owned_bits) * 8 != 16384:
            raise ValueError(f"ownership bitmap of {len(owned_bits)} bytes, not 2048")
        self.owned_bits = owned_bits
        self.owned = NULL
        if owned_bits is not None:
            self.owned = <const unsigned char*>owned_bits
        self.owns_global = owns_global

    cdef int owns_key(self, str key) except -1:
        """1 when this shard owns ``key`` (the canonical key of a row), else 0."""
        cdef int s
        if self.owned == NULL:
            return 1
        if not self.key_fields:
            return self.owns_global
        s = text_slot(key)
        return (self.owned[s >> 3] >> (s & 7)) & 1

    cdef bint owns_text(self, const char* text, Py_ssize_t size) noexcept:
        """``owns_key`` of a key given by its UTF-8 bytes (a C row's)."""
        cdef int s
        if not self.key_fields:
            return self.owns_global
        s = <int>(xxh64(text, size, SLOT_SEED) & (SLOT_COUNT - 1))
        return (self.owned[s >> 3] >> (s & 7)) & 1

    cdef int ownership(self, dict row) except -2:
        """Whether this shard applies ``row``: 1 yes, 0 another shard owns its key, -1 the
        row has no valid key (no shard applies it)."""
        key = group_key(row, self.key_fields)
        if key is None:
            return -1
        return self.owns_key(<str>key)

    # -- slots -----------------------------------------------------------------------------

    cdef int grow(self, Py_ssize_t need) except -1:
        cdef Py_ssize_t cap = max(need, self.capacity + self.capacity // 4, 16)
        cdef int64_t* grown
        for col in self.state_cols:
            (<Column>col).ensure(cap)
        if self.key_fields:
            grown = <int64_t*>realloc(self.touch, cap * sizeof(int64_t))
            if grown == NULL:
                raise MemoryError()
            self.touch = grown
        self.capacity = cap
        return 0

    cpdef object key_of(self, dict row):
        """The canonical key of a post-chain row, or None (skip the table)."""
        return group_key(row, self.key_fields)

    def __call__(self, dict row, int64_t now):
        """``apply(row, now)``: a table without a chain is its own push function."""
        return self.apply(row, now)

    cdef void prefetch_key(self, dict row) noexcept:
        """Ask for the key map's line of ``row``'s key (one str key field: the usual case)
        ahead of ``apply``, so the lookups of the tables an event feeds overlap."""
        cdef PyObject* value
        if len(self.key_fields) == 1:
            value = dict_get(row, self.key_fields[0])
            if value != NULL and type(<object>value) is str:
                self.keys.prefetch(<str>value)

    cpdef Py_ssize_t apply(self, dict row, int64_t now) except -2:
        """Apply one post-chain row (§3 steps 2-5); the slot it reached, -1 if skipped."""
        cdef Py_ssize_t slot = self.find(row, now)
        if slot >= 0:
            self.follow(slot)
            self.touch_update(slot, row, now)
        return slot

    # apply() in three steps, so that the push pass can take an event through each step
    # for all the tables it feeds before the next step: the cache misses of their state
    # overlap (the state of an existing entity is likely out of cache).

    cdef Py_ssize_t find(self, dict row, int64_t now) except -2:
        """The slot of ``row``'s key, -1 if it has none; a new key gets the next slot (last
        touched ``now``). For an existing one, every state column asks for its cell
        (prefetch stage 0), and the last-touch line is asked for."""
        key = group_key(row, self.key_fields)
        if key is None:
            return -1
        if self.owned != NULL and not self.owns_key(<str>key):
            self.skipped += 1
            return -1
        cdef Py_ssize_t slot = self.keys.lookup(<str>key)
        if slot < 0:
            slot = len(self.keys.names)
            if slot >= self.capacity:
                self.grow(slot + 1)
            self.keys.insert(<str>key)
            if self.touch != NULL:
                self.touch[slot] = now
            return slot
        for col in self.state_cols:
            (<Column>col).prefetch(slot, 0)
        if self.touch != NULL:
            prefetch_line(&self.touch[slot])
        return slot

    cdef void follow(self, Py_ssize_t slot) noexcept:
        """Every state column asks for what its cell of ``slot`` points to (stage 1)."""
        for col in self.state_cols:
            (<Column>col).prefetch(slot, 1)

    cdef int touch_update(self, Py_ssize_t slot, dict row, int64_t now) except -1:
        """The cold TTL (a slot idle longer starts empty again), the last touch, then
        :meth:`update`."""
        if self.touch != NULL:
            if self.cold_after >= 0 and now - self.touch[slot] > self.cold_after:
                self.clear(slot)
                self.cold_evictions += 1
            self.touch[slot] = now
        return self.update(slot, row, now)

    cpdef int update(self, Py_ssize_t slot, dict row, int64_t now) except -1:
        """Feed one event to every column of ``slot``: each distinct where runs once."""
        cdef Py_ssize_t i
        cdef unsigned char* verdict = self.verdict
        if slot >= self.capacity:
            self.grow(slot + 1)
        for i in range(self.npreds):
            verdict[i + 1] = self.preds[i](row) is True
        for i in range(self.nupd):
            (<Column>self.upd[i]).update(slot, row, verdict[self.upd_where[i]], now)
        return 0

    # -- C rows (row.pxd) ---------------------------------------------------------------

    cdef Py_ssize_t apply_row(self, Row* row, int64_t now) except -2:
        """``apply`` of a C row (``takes_row``)."""
        cdef Py_ssize_t slot = self.find_row(row, now)
        if slot >= 0:
            self.follow(slot)
            self.touch_update_row(slot, row, now)
        return slot

    cdef void prefetch_row(self, Row* row) noexcept:
        """``prefetch_key`` of a C row: its key text's hash is computed here, once for
        every table keyed by the same field."""
        cdef RowField* f
        if len(self.key_fields) == 1:
            f = <RowField*>row_field(row, self.key_fields[0], &self.key_guess)
            if f != NULL and f.tag == ROW_TEXT:
                self.keys.prefetch_hash(text_hash(f))

    cdef Py_ssize_t row_key(self, Row* row, char* digits, const char** text,
                            RowField** field) noexcept:
        """The text of a C row's key as group_key writes it (a text as it is, an integer
        in decimal, a boolean as true/false, a float as fmt_f64_debug; the global table's
        is empty): its size, its bytes at ``text[0]`` (``digits``: 32 bytes for a number's)
        and its field at ``field[0]`` (NULL: the global table); -1 when the row lacks it."""
        cdef RowField* f = NULL
        text[0] = digits
        field[0] = NULL
        if len(self.key_fields) == 0:
            return 0
        f = <RowField*>row_field(row, self.key_fields[0], &self.key_guess)
        if f == NULL:
            return -1
        field[0] = f
        if f.tag == ROW_TEXT:
            text[0] = f.text
            return f.size
        if f.tag == ROW_INT:
            return int_text(digits, f.i)
        if f.tag == ROW_BOOL:
            text[0] = "true" if f.i else "false"
            return 4 if f.i else 5
        return repr_double(f.f, True, digits)  # ROW_FLOAT: finite (the checks refuse others)

    cdef int ownership_row(self, Row* row) noexcept:
        """``ownership`` of a C row."""
        cdef char digits[32]
        cdef const char* text
        cdef RowField* f
        cdef Py_ssize_t size = self.row_key(row, digits, &text, &f)
        if size < 0:
            return -1
        return 1 if self.owned == NULL else self.owns_text(text, size)

    cdef Py_ssize_t find_row(self, Row* row, int64_t now) except -2:
        """``find`` of a C row: its key's text (row_key) looked up by its bytes."""
        cdef char digits[32]
        cdef const char* text
        cdef RowField* f
        cdef Py_ssize_t size = self.row_key(row, digits, &text, &f), slot
        cdef Py_hash_t h
        if size < 0:
            return -1
        h = text_hash(f) if f != NULL and f.tag == ROW_TEXT else text_key_hash(text, size)
        if self.owned != NULL and not self.owns_text(text, size):
            self.skipped += 1
            return -1
        slot = self.keys.lookup_text(text, size, h)
        if slot < 0:
            slot = len(self.keys.names)
            if slot >= self.capacity:
                self.grow(slot + 1)
            self.keys.insert_text(text, size, h)
            if self.touch != NULL:
                self.touch[slot] = now
            return slot
        for col in self.state_cols:
            (<Column>col).prefetch(slot, 0)
        if self.touch != NULL:
            prefetch_line(&self.touch[slot])
        return slot

    cdef int touch_update_row(self, Py_ssize_t slot, const Row* row, int64_t now) except -1:
        """``touch_update`` of a C row: no where to evaluate (``takes_row``)."""
        cdef Py_ssize_t i
        if self.touch != NULL:
            if self.cold_after >= 0 and now - self.touch[slot] > self.cold_after:
                self.clear(slot)
                self.cold_evictions += 1
            self.touch[slot] = now
        if slot >= self.capacity:
            self.grow(slot + 1)
        for i in range(self.nupd):
            (<Column>self.upd[i]).update_row(slot, row, True, now)
        return 0

    cpdef int clear(self, Py_ssize_t slot) except -1:
        """Put every feature of ``slot`` back to its empty state."""
        for col in self.state_cols:
            (<Column>col).clear(slot)
        return 0

    def read(self, Py_ssize_t slot, int64_t T, names=None) -> dict:
        """``{name: value}`` of ``slot`` at query time ``T`` for ``names`` (all features
        in sorted order when None); names must be features of this table."""
        out = {}
        for name in (self.names if names is None else names):
            out[name] = (<Column>self.by_name[name]).read(slot, T)
        return out

    def read_json(self, Py_ssize_t slot, int64_t T, names=None) -> dict:
        """What ``read`` answers, for a JSON reply: a big map-valued feature may be its JSON
        text already (msgspec.Raw, Column.json_value)."""
        out = {}
        for name in (self.names if names is None else names):
            out[name] = (<Column>self.by_name[name]).json_value(slot, T)
        return out

    def read_msgpack(self, Py_ssize_t slot, int64_t T, names=None) -> bytes:
        """What ``read`` answers, as the MessagePack bytes the reply encoder gives it (a
        map, its keys in the order of ``names``), written from the columns."""
        cdef Writer out = Writer(NULL, 0, 0)
        chosen = self.names if names is None else names
        try:
            put_map_header(&out, len(chosen))
            for name in chosen:
                put_str(&out, name)
                (<Column>self.by_name[name]).put_msgpack(&out, slot, T)
            return as_bytes(&out)
        finally:
            release(&out)

    def scan_rows(self, Py_ssize_t start, Py_ssize_t stop, int64_t T, tuple layout,
                  tuple key_parts, object split, Py_ssize_t max_bytes, double seconds,
                  bint json, bint arrays) -> RowPage:
        """Rows of the slots ``start`` to ``stop - 1`` at query time ``T``, each the map a
        reply carries (``arrays``: its values alone, an array in the layout's order),
        written from the columns one after another into one buffer: a page of a table
        scan (beava.engine.state.scan). A row is MessagePack, or (``json``) the JSON text
        of that MessagePack (msgpack_json.json_row: the text msgspec gives its
        value). ``layout`` lists the row's entries in the order they are written, ``(name as
        MessagePack, feature column or None, key part index)``; ``key_parts`` has, per key
        column, a callable that turns its text into the value written (None: the text
        itself); ``split`` turns a stored key into its key column texts when there are
        several. The page ends after the row that takes its bytes to ``max_bytes``, or once
        ``seconds`` have passed since the start (the clock is read after the first row and
        every 8th), with one row at least."""
        cdef Py_ssize_t n = len(layout), nparts = len(key_parts), i, j, slot, size, guess
        cdef Py_ssize_t nstate = len(self.state_cols)
        cdef Py_ssize_t last = min(stop, len(self.keys.names))
        cdef list names = self.keys.names
        cdef RowPage page = RowPage(b"," if json else b"")
        cdef Writer row = Writer(NULL, 0, 0)  # a JSON row's MessagePack
        cdef Writer* out = &row if json else &page.out
        cdef double deadline = monotonic() + seconds
        cdef PyObject** cols = <PyObject**>malloc((n + 1) * sizeof(PyObject*))
        cdef PyObject** state = <PyObject**>malloc((nstate + 1) * sizeof(PyObject*))
        cdef int* part_of = <int*>malloc((n + 1) * sizeof(int))
        cdef list packed = [entry[0] for entry in layout]
        cdef bint far, near, close
        cdef bytes name
        cdef object convert
        cdef list texts
        cdef PyObject* key
        if cols == NULL or state == NULL or part_of == NULL:
            free(cols)
            free(state)
            free(part_of)
            raise MemoryError()
        try:
            for i in range(n):
                column = layout[i][1]
                if column is not None and not isinstance(column, Column):
                    raise TypeError(f"scan layout entry {i}: not a Column")
                cols[i] = <PyObject*>column if column is not None else NULL
                part_of[i] = layout[i][2]
                if column is None and not 0 <= part_of[i] < nparts:
                    raise ValueError(f"scan layout entry {i}: no key part {part_of[i]}")
            # borrowed: state_cols does not change while no Python code of ours runs
            for j in range(nstate):
                state[j] = PyList_GET_ITEM(self.state_cols, j)
            texts = [None] * nparts
            for slot in range(start, last):
                # cells of slot + 8, what the cells of slot + 4 point to, the objects held
                # by slot + 2 and its stored key (a str of its own: its header, its text)
                far = slot + 2 * SCAN_AHEAD < last
                near = slot + SCAN_AHEAD < last
                close = slot + SCAN_AHEAD // 2 < last
                for j in range(nstate):
                    if far:
                        (<Column>state[j]).prefetch(slot + 2 * SCAN_AHEAD, 0)
                    if near:
                        (<Column>state[j]).prefetch(slot + SCAN_AHEAD, 1)
                    if close:
                        (<Column>state[j]).prefetch(slot + SCAN_AHEAD // 2, 2)
                if close:
                    key = PyList_GET_ITEM(names, slot + SCAN_AHEAD // 2)
                    prefetch_line(key)
                    prefetch_line((<char*>key) + 64)
                if nparts > 1:
                    texts = split(<str>PyList_GET_ITEM(names, slot))
                elif nparts:
                    texts[0] = <str>PyList_GET_ITEM(names, slot)
                page.start_row()
                row.size = 0
                if arrays:
                    put_array_header(out, n)
                else:
                    put_map_header(out, n)
                for i in range(n):
                    if not arrays:
                        name = <bytes>PyList_GET_ITEM(packed, i)
                        put_raw(out, name, len(name))
                    if cols[i] != NULL:
                        (<Column>cols[i]).put_msgpack(out, slot, T)
                        continue
                    convert = key_parts[part_of[i]]
                    if convert is None:
                        put_str(out, <str>texts[part_of[i]])
                    else:
                        put_value(out, convert(texts[part_of[i]]))
                if json:
                    json_row(&page.out, row.data, row.size, arrays)
                page.end_row()
                if slot == start:
                    # room for the page at the first row's size, so that the buffer
                    # seldom grows (a copy of all written) while the page is written
                    size = page.out.size
                    guess = size * (last - start)
                    reserve(&page.out, min(guess + guess // 8, max_bytes + 2 * size) - size)
                # the rows' bytes (a JSON page's separators not counted); the clock after
                # the first row, then every few rows (a read of it costs as much as a
                # small feature)
                if page.out.size - (page.count - 1) * json >= max_bytes or (
                        (slot - start) % SCAN_CLOCK_EVERY == 0 and monotonic() >= deadline):
                    break
            return page
        finally:
            release(&row)
            free(cols)
            free(state)
            free(part_of)

    def column(self, str name):
        """The column of feature ``name``."""
        return self.by_name[name]

    @property
    def entity_count(self) -> int:
        return len(self.keys)

    @property
    def bucket_reclaims(self) -> int:
        """Bucket evictions caused by the 64-bucket cap, summed over this table's columns
        (a column reports them through an optional ``bucket_reclaims`` attribute)."""
        return sum(getattr(col, "bucket_reclaims", 0) for col in self.state_cols)

    def last_touch(self, Py_ssize_t slot) -> int | None:
        """The ``now`` of the latest event that reached ``slot`` (None for global tables)."""
        if self.touch == NULL or slot >= len(self.keys):
            return None
        return self.touch[slot]

    def nbytes(self) -> int:
        """Bytes of the malloc'd buffers of this table (touch, core columns and arenas);
        other columns are counted when they expose ``nbytes()``."""
        total = self.capacity * sizeof(int64_t) if self.touch != NULL else 0
        total += self.keys.nbytes()
        for col in self.state_cols:
            measure = getattr(col, "nbytes", None)
            if measure is not None:
                total += measure()
        return total

    # -- transitions and snapshots ---------------------------------------------------------

    def adopt(self, TableKernel previous) -> None:
        """Take over the entities of ``previous`` (same key columns): keys, last-touch
        times, counters; columns of this kernel get storage for every existing slot."""
        self.keys = previous.keys
        self.cold_evictions = previous.cold_evictions
        self.skipped = previous.skipped
        if previous.capacity:
            self.grow(previous.capacity)
            if self.touch != NULL and previous.touch != NULL:
                memcpy(self.touch, previous.touch, previous.capacity * sizeof(int64_t))

    def absorb(self, TableKernel other) -> None:
        """Append the entities of ``other``, a kernel built from the same spec, after this
        kernel's own, in ``other``'s slot order, with their last-touch times (a backfill
        installs a table from key-disjoint parts this way). ``other`` gives its state up and
        is discarded afterwards. Raises KeyError(key) for a key both hold, ValueError for a
        kernel of another layout, before anything changes."""
        cdef Py_ssize_t n = len(self.keys.names), m = len(other.keys.names)
        cdef Py_ssize_t i
        if kernel_layout(self) != kernel_layout(other):
            raise ValueError("a kernel of another layout")
        for key in other.keys.names:
            if self.keys.lookup(<str>key) >= 0:
                raise KeyError(key)
        if n + m > self.capacity:
            self.grow(n + m)
        for key in other.keys.names:
            self.keys.insert(<str>key)
        if self.touch != NULL and m:
            memcpy(self.touch + n, other.touch, m * sizeof(int64_t))
        for i in range(len(self.state_cols)):
            (<Column>self.state_cols[i]).take_slots(<Column>other.state_cols[i], n, m)
        other.keys = KeyMap()

    def dump(self) -> dict:
        """State of every entity as plain data (column.pxd): keys in slot order, last-touch
        times (int64 per slot, empty for global tables), the state of each column that owns
        storage (by feature name) and of each bucket arena."""
        cdef Py_ssize_t n = len(self.keys.names)
        keys = list(self.keys.names)
        touch = b""
        if self.touch != NULL and n:
            touch = (<char*>self.touch)[:n * sizeof(int64_t)]
        return {
            "keys": keys,
            "touch": touch,
            "columns": {col.name: col.dump(n) for col in self.feature_state},
            "arenas": [arena.dump(n) for arena in self.arenas],
        }

    def load(self, object state) -> None:
        """Replace all entities by a ``dump()`` of a kernel built from the same spec.

        The state comes from a snapshot file: anything that does not fit this kernel raises
        ValueError, and the kernel is then left without entities."""
        cdef dict d = state_dict(state, "table")
        cdef list keys = state_list(d.get("keys"), -1, "table keys")
        cdef Py_ssize_t n = len(keys)
        cdef bytes touch = state_buffer(d.get("touch"),
                                        n * sizeof(int64_t) if self.key_fields else 0,
                                        "table last-touch times")
        cdef dict columns = state_dict(d.get("columns"), "table columns")
        cdef list arenas = state_list(d.get("arenas"), len(self.arenas), "table bucket arenas")
        if not self.key_fields and keys != [] and keys != [""]:
            raise ValueError(f"snapshot keys {keys!r} of a global table")
        try:
            slots = KeyMap.from_keys(keys)
        except ValueError as exc:  # a key that is not a str, or repeats
            raise ValueError(f"snapshot {exc}") from None
        owned = {}
        for col in self.feature_state:
            owned[(<Column>col).name] = col
        if set(columns) != set(owned):
            raise ValueError(f"snapshot columns {sorted(map(str, columns))} do not match "
                             f"{sorted(owned)}")
        by_window = {}
        for arena_state in arenas:
            window = state_dict(arena_state, "bucket arena").get("window_ms")
            arena = None
            for candidate in self.arenas:
                if candidate.window == window and type(window) is int:
                    arena = candidate
            if arena is None or window in by_window:
                raise ValueError(f"snapshot bucket arena of {window!r} ms does not match")
            by_window[window] = (arena, arena_state)
        if n > self.capacity:
            self.grow(n)
        for col in self.state_cols:
            for slot in range(self.capacity):
                (<Column>col).clear(slot)
        self.keys = slots
        try:
            if self.touch != NULL and n:
                memcpy(self.touch, <const char*>touch, n * sizeof(int64_t))
            for name, col_state in columns.items():
                (<Column>owned[name]).load(col_state, n)
            for arena, arena_state in by_window.values():
                (<Column>arena).load(arena_state, n)
        except BaseException:
            self.keys = KeyMap()
            for col in self.state_cols:
                for slot in range(self.capacity):
                    (<Column>col).clear(slot)
            raise
