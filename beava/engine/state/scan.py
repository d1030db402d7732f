"""Table scans (docs/wire.md, "Table scan"): every entity of a table, its key columns and
its features, one bounded page per request.

A table's entities live in dense slots that only grow: a new key takes the next slot and a
slot keeps its key until the table state is replaced, which only a registry change (or a
reset, which also changes the registry version) does. A scan position is therefore a slot
number, and a cursor is that position with the registry version it belongs to: pushes
between pages add slots after the existing ones and never move a row, so every entity that
existed when the scan started is returned exactly once, and entities created during the
scan are returned when their slot is still ahead of it. Each page reads its rows at its own
query time ``T``, as a GET at that moment would.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from beava._fast.wire.msgpack_out import RowPage, packb
from beava.catalogue.errors import BeavaError
from beava.catalogue.operators import CATALOGUE
from beava.engine.expressions.chain_ops import chain_output_schema

if TYPE_CHECKING:
    from beava._fast.ops.column import Column
    from beava.engine.registry import TableSpec
    from beava.engine.state.tables import TableState

__all__ = [
    "DEFAULT_SCAN_LIMIT",
    "MAX_SCAN_LIMIT",
    "MAX_SCAN_SPLITS",
    "SCAN_PAGE_BYTES",
    "SCAN_PAGE_SECONDS",
    "ScanPage",
    "ScanRequest",
    "decode_key",
    "parse_scan",
    "scan_columns",
    "scan_page",
]

DEFAULT_SCAN_LIMIT = 1_000
MAX_SCAN_LIMIT = 10_000
MAX_SCAN_SPLITS = 1_024
SCAN_PAGE_BYTES = 1 << 20
"""A page ends early once its encoded rows pass this many bytes (it has at least one row),
so a page of wide rows stays far below the 4 MiB frame limit and is quick to build."""
SCAN_PAGE_SECONDS = 0.02
"""A page also ends once building it has taken this long (it has at least one row): the
server serves one request at a time, so this bounds how long a push waits behind a scan."""

_FIELDS = frozenset(("table", "cursor", "limit", "until", "splits", "arrays"))
_CURSOR_DIGITS = 20
"""The most digits a cursor's version or position has: the registry version is a u32 and a
slot position is below 2**64 (20 digits). Longer parts are refused before ``int`` reads them
(it refuses more than 4,300 digits by raising, and is quadratic below that)."""


@dataclass(frozen=True, slots=True)
class ScanRequest:
    """A checked scan request: ``position`` is the first slot to read, ``until`` the slot
    the scan stops before (None: the end of the table)."""

    table: str
    position: int
    until: int | None
    limit: int
    splits: int | None
    first: bool  # the request had no cursor: the reply describes the columns
    arrays: bool = False  # rows as arrays of their values, in the order of the columns


@dataclass(frozen=True, slots=True)
class ScanPage:
    """One page: the encoded rows (MessagePack maps or JSON texts, in one buffer), where
    the next page starts (None: the scan is done), the table's entity count when the page
    was read, and the split cursors if asked."""

    rows: RowPage
    cursor: str | None
    entities: int
    splits: list[str] | None


def _invalid(path: str, message: str, version: int) -> BeavaError:
    return BeavaError("invalid_scan", path=path, message=message,
                      top={"registry_version": version})


def _table_tag(table: str) -> int:
    return zlib.crc32(table.encode("utf-8", "surrogatepass"))


def make_cursor(table: str, version: int, position: int) -> str:
    """The cursor of ``position`` in ``table`` under registry ``version``."""
    return f"{version}.{position}.{_table_tag(table):08x}"


def _position(text: Any, table: str, version: int, path: str) -> int:
    """The slot position a cursor names; raises invalid_scan / scan_cursor_expired."""
    if not isinstance(text, str):
        raise _invalid(path, f"`{path}` must be a cursor string from a scan reply or null",
                       version)
    parts = text.split(".")
    if (len(parts) != 3 or len(parts[2]) != 8
            or not all(p.isascii() and p.isdigit() and len(p) <= _CURSOR_DIGITS
                       for p in parts[:2])):
        raise _invalid(path, f"`{path}` is not a scan cursor", version)
    try:
        tag = int(parts[2], 16)
    except ValueError:
        raise _invalid(path, f"`{path}` is not a scan cursor", version) from None
    if tag != _table_tag(table):
        raise _invalid(path, f"`{path}` is a cursor of another table, not {table!r}", version)
    if int(parts[0]) != version:
        raise BeavaError(
            "scan_cursor_expired", path=path,
            message=f"the cursor belongs to registry version {parts[0]}; the registry is now "
                    f"at version {version}, so entity positions may have changed: start the "
                    f"scan again with cursor null",
            top={"registry_version": version})
    return int(parts[1])


def _count(body: Mapping[str, Any], name: str, default: int | None, high: int, low: int,
           version: int) -> int | None:
    value = body.get(name)
    if value is None:
        return default
    if type(value) is not int or not low <= value <= high:
        raise _invalid(name, f"`{name}` must be an integer from {low} to {high}", version)
    return value


def parse_scan(body: Any, tables: Callable[[str], TableState | None], version: int
               ) -> tuple[ScanRequest, TableState]:
    """Check a decoded scan request: ``{"table", "cursor"?, "limit"?, "until"?,
    "splits"?, "arrays"?}``. Raises BeavaError (invalid_scan, unknown_table,
    scan_cursor_expired)."""
    if not isinstance(body, dict):
        raise _invalid("", 'expected a map {"table", "cursor"?, "limit"?, "until"?, '
                           '"splits"?, "arrays"?}', version)
    unknown = sorted(str(k) for k in body if k not in _FIELDS)
    if unknown:
        raise _invalid(unknown[0], f"unknown field `{unknown[0]}` (fields: arrays, cursor, "
                                   f"limit, splits, table, until)", version)
    arrays = body.get("arrays")
    if arrays is None:
        arrays = False
    elif type(arrays) is not bool:
        raise _invalid("arrays", "`arrays` must be true (rows as arrays of their values in "
                                 "the order of the columns) or false (rows as maps)", version)
    name = body.get("table")
    if not isinstance(name, str):
        raise _invalid("table", "`table` must be a table name (string)", version)
    limit = _count(body, "limit", DEFAULT_SCAN_LIMIT, MAX_SCAN_LIMIT, 0, version)
    splits = _count(body, "splits", None, MAX_SCAN_SPLITS, 1, version)
    table = tables(name)
    if table is None:
        raise BeavaError("unknown_table", message=f"no table named {name!r}",
                         top={"registry_version": version})
    cursor = body.get("cursor")
    position = 0 if cursor is None else _position(cursor, name, version, "cursor")
    until = body.get("until")
    stop = None if until is None else _position(until, name, version, "until")
    assert limit is not None
    return ScanRequest(name, position, stop, limit, splits, cursor is None, arrays), table


def _key_part(kind: str) -> Callable[[str], Any] | None:
    """Stored key text -> the key column's value (the text a push's value keyed as); None
    when that value is the text itself."""
    if kind == "bool":
        return lambda text: text == "true" if text in ("true", "false") else text
    if kind in ("i64", "f64"):
        return _number
    return None


def _number(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def _key_parts(spec: TableSpec) -> list[Callable[[str], Any] | None]:
    """The :func:`_key_part` of each of ``spec``'s key columns."""
    schema = chain_output_schema(spec.chain, spec.input_schema)
    return [_key_part(schema.get(name, "str")) for name in spec.keys]


def _key_texts(key: str, count: int) -> list[str]:
    """The texts of a stored key of ``count`` (at least 2) key columns: ``|`` separates
    them, ``%7C`` in one is ``|``. Not ``count`` of them is not possible for a key the
    kernel built."""
    texts = key.split("|")
    if len(texts) != count:
        raise ValueError(f"stored key {key!r} does not have {count} parts")
    return [text.replace("%7C", "|") for text in texts]


def decode_key(spec: TableSpec) -> Callable[[str], dict[str, Any]]:
    """Stored key -> ``{key column: value}`` for ``spec``'s key columns: a number column
    gives the integer or float that was pushed (its text as keys store it: ``5``, ``5.0``,
    ``1e16``), a bool column true/false, every other column the key text. Sending those
    values back as a GET key (an array for several columns) addresses the same entity."""
    names = spec.keys
    parts = [(name, part or str) for name, part in zip(names, _key_parts(spec), strict=True)]
    if not names:
        return lambda key: {}
    if len(names) == 1:
        ((name, part),) = parts
        return lambda key: {name: part(key)}
    count = len(names)
    return lambda key: {n: p(t) for (n, p), t in zip(parts, _key_texts(key, count),
                                                      strict=True)}


def scan_columns(spec: TableSpec) -> list[dict[str, Any]]:
    """The row's columns: key columns first (their field type), then the features (the
    operator's output type, ``inherits`` resolved to the field's type)."""
    schema = chain_output_schema(spec.chain, spec.input_schema)
    columns: list[dict[str, Any]] = [
        {"key": True, "name": name, "type": schema.get(name, "str")} for name in spec.keys]
    for name, feature in spec.features.items():
        output = CATALOGUE[feature.op].output if feature.op in CATALOGUE else "json"
        if output == "inherits":
            output = schema.get(str(feature.params.get("field")), "json")
        columns.append({"key": False, "name": name, "type": output})
    return columns


def _layout(table: TableState, arrays: bool) -> tuple[tuple[bytes, Column | None, int], ...]:
    """The entries of a scan row as ``TableKernel.scan_rows`` writes them: every key column
    and feature by name in sorted order, as the reply encoders sort a map's keys (a feature
    cannot take a key column's name: the registry refuses it); for rows as arrays, in the
    order of the columns (``scan_columns``: key columns, then features)."""
    spec = table.spec
    entries: list[tuple[str, Column | None, int]] = [
        (name, None, index) for index, name in enumerate(spec.keys)]
    entries.extend((name, table.column(name), -1) for name in spec.features)
    if not arrays:
        entries.sort()
    return tuple((packb(name), column, index) for name, column, index in entries)


def scan_page(table: TableState, request: ScanRequest, version: int, T: int, json: bool
              ) -> ScanPage:
    """Read one page of ``request`` at query time ``T``: each row a MessagePack map written
    from the table's columns, as the read fast path writes a GET's row (or an array of its
    values, when the request asks for arrays), or (``json``) its JSON text, the text the
    JSON reply encoder gives the row."""
    entities = table.entity_count
    stop = entities if request.until is None else min(request.until, entities)
    position = request.position
    end = min(stop, position + request.limit)
    spec = table.spec
    nkeys = len(spec.keys)
    rows = table.scan_rows(
        position, end, T, _layout(table, request.arrays), tuple(_key_parts(spec)),
        (lambda key: _key_texts(key, nkeys)) if nkeys > 1 else None,
        SCAN_PAGE_BYTES, SCAN_PAGE_SECONDS, json, request.arrays)
    position += len(rows)
    name = request.table
    cursor = make_cursor(name, version, position) if position < stop else None
    splits = None
    if request.splits is not None:
        count = request.splits
        starts = sorted({request.position + (stop - request.position) * i // count
                         for i in range(count)} if stop > request.position
                        else {request.position})
        splits = [make_cursor(name, version, start) for start in starts]
    return ScanPage(rows, cursor, entities, splits)
