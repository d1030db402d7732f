"""``spark.read.format("beava")``: the current rows of a table, read with the server's
table scan (an extension of this server, docs/wire.md "Table scan").

    df = spark.read.format("beava").option("url", "tcp://127.0.0.1:8081") \\
        .option("table", "UserSpend").load()

One row per entity: its key columns, then its features, each as a GET at read time
returns it. The schema comes from the server (the first page of a scan names every column
with its beava type); the driver asks each server for ``partitions`` cursors that divide
its table into slot ranges, and each Spark task reads one range page by page
(``page_size`` rows per request; over framed TCP, MessagePack pages whose rows are arrays
of their values in the order of the table's columns: the scan's ``arrays``). Entities
created after planning are read by the last range of each server. With several URLs, or
``shard_map`` (a sharded deployment's map file or any shard's URL, docs/sharding.md), the
rows of every server are read: each entity lives on one server.

Column types:

| beava type | Spark type |
|---|---|
| i64, epoch_ms | long |
| f64 | double (NaN and infinities arrive as null, as GET returns them) |
| bool | boolean |
| str, datetime | string |
| list, map, top_k, i64_list, json, bytes | string: the value as JSON text (``from_json``) |

A value that does not fit its column (an i64 field also accepts floats, so an i64 key or a
``min``/``max`` of one can hold 2.5) is read as null; an integral float (3.0) is read as 3.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any, TypedDict

import msgspec

from beava.offline import gc_paused, page_columns
from beava_client import ServerError, TransportError, client_for_url
from beava_client.urls import parse_url

from .access import Access
from .errors import ServerCheckError
from .shards import load_shard_map

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql.types import StructType

READ_OPTIONS = ("url", "shard_map", "table", "page_size", "partitions", "timeout", "token", "ca")
DEFAULT_PAGE_SIZE = 1_000
MAX_PAGE_SIZE = 10_000  # the server's largest scan page (docs/limits.md)
DEFAULT_PARTITIONS = 4
MAX_PARTITIONS = 1_024
DEFAULT_READ_TIMEOUT = 30.0

SPARK_TYPES = {"i64": "long", "epoch_ms": "long", "f64": "double", "bool": "boolean",
               "str": "string", "datetime": "string"}
"""beava column type -> Spark type name; every other type is JSON text (string)."""

_json = msgspec.json.Encoder(order="sorted").encode


@dataclass(frozen=True)
class Column:
    name: str
    beava_type: str
    key: bool

    @property
    def spark_type(self) -> str:
        return SPARK_TYPES.get(self.beava_type, "string")

    @property
    def as_json(self) -> bool:
        """Whether the value is sent to Spark as JSON text."""
        return self.beava_type not in SPARK_TYPES


@dataclass(frozen=True)
class ReadOptions:
    """The read options, checked."""

    urls: tuple[str, ...]
    table: str
    page_size: int
    partitions: int
    timeout: float
    access: Access = Access()  # token and TLS trust

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        opts = {_normal(k): v for k, v in options.items()}
        ours = {_normal(o): o for o in READ_OPTIONS}
        for name in set(opts) - set(ours):
            close = difflib.get_close_matches(name, list(ours), n=1, cutoff=0.8)
            if close:
                raise ValueError(f"format('beava') read: unknown option {name!r}; did you "
                                 f"mean {ours[close[0]]!r}? (options: {', '.join(READ_OPTIONS)})")
        shard_map = opts.get(_normal("shard_map"))
        if not (opts.get("url") or shard_map) or not opts.get("table"):
            raise ValueError("spark.read.format('beava') needs the options url (tcp://host:port "
                             "or http://host:port, comma-separated for several servers) or "
                             "shard_map, and table")
        if opts.get("url") and shard_map:
            raise ValueError("give url (servers) or shard_map (a sharded deployment), not both")
        urls = tuple(u.strip() for u in (opts.get("url") or "").split(",") if u.strip())
        for url in urls:
            try:
                parse_url(url)
            except ValueError as exc:
                raise ValueError(f"url: {exc}") from None
        if len(set(urls)) != len(urls):
            raise ValueError("url: the same server is listed twice")
        page_size = _int(opts, "page_size", DEFAULT_PAGE_SIZE, 1, MAX_PAGE_SIZE)
        partitions = _int(opts, "partitions", DEFAULT_PARTITIONS, 1, MAX_PARTITIONS)
        try:
            timeout = float(opts.get("timeout", DEFAULT_READ_TIMEOUT))
        except ValueError:
            raise ValueError(f"option timeout: expected seconds, got {opts['timeout']!r}") \
                from None
        if not timeout > 0:
            raise ValueError("option timeout: must be > 0 seconds")
        access = Access.resolve(opts.get("token"), opts.get("ca"))
        if shard_map:
            urls = load_shard_map(shard_map, access, timeout)
        return cls(urls, opts["table"], page_size, partitions, timeout, access)


@dataclass(frozen=True)
class ScanRange:
    """One Spark partition: the slots of ``url``'s table from ``start`` (a cursor; None:
    the first slot) up to ``until`` (None: the end of the table when the task reads it);
    ``layout``, the names of that server's columns in its scan's order (the order of a row
    as an array while the cursor is valid: a registry change expires it)."""

    url: str
    start: str | None
    until: str | None
    layout: tuple[str, ...]


def _normal(name: str) -> str:
    return name.replace("_", "").lower()


def _int(opts: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    text = opts.get(_normal(name))
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"option {name}: expected an integer, got {text!r}") from None
    if not low <= value <= high:
        raise ValueError(f"option {name}: must be from {low} to {high}, got {value}")
    return value


def _scan(url: str, table: str, timeout: float, access: Access, **request: Any
          ) -> dict[str, Any]:
    """One scan request to ``url``, failures worded for the driver (ServerCheckError)."""
    try:
        with client_for_url(url, timeout=timeout, **access.client_kwargs(url)) as client:
            return client.scan(table, **request)
    except ServerError as exc:
        if exc.code == "unknown_table":
            raise ServerCheckError(f"table {table!r} is not registered on {url} (an event "
                                   f"or a misspelt name?)") from exc
        if exc.code in ("unknown_op", "not_found"):
            raise ServerCheckError(f"{url} has no table scan (a beava server without the "
                                   f"scan extension)") from exc
        raise ServerCheckError(f"{url} refused the scan: {exc}") from exc
    except TransportError as exc:
        raise ServerCheckError(f"cannot read from {url}: {exc}") from exc


def table_columns(options: ReadOptions) -> list[Column]:
    """The table's columns, from the first server (every server of a sharded deployment
    has the same registry)."""
    return _columns(_scan(options.urls[0], options.table, options.timeout, options.access,
                          limit=0))


def _columns(page: Mapping[str, Any]) -> list[Column]:
    """The columns a scan's first page (cursor None) lists."""
    return [Column(c["name"], c["type"], bool(c["key"])) for c in page["columns"]]


def spark_schema(columns: Sequence[Column]) -> StructType:
    from pyspark.sql import types as t

    kinds = {"long": t.LongType, "double": t.DoubleType, "boolean": t.BooleanType,
             "string": t.StringType}
    return t.StructType([t.StructField(column.name, kinds[column.spark_type](), nullable=True)
                         for column in columns])


def plan_read(options: ReadOptions) -> tuple[list[Column], list[ScanRange]]:
    """The table's columns and ``partitions`` slot ranges per server (fewer for a small
    table), the last range of each open-ended: one request per server, the first server's
    reply listing the columns too."""
    columns: list[Column] = []
    ranges = []
    for url in options.urls:
        page = _scan(url, options.table, options.timeout, options.access, limit=0,
                     splits=options.partitions)
        columns = columns or _columns(page)
        layout = tuple(c.name for c in _columns(page))
        starts = page["splits"]
        for i, start in enumerate(starts):
            ranges.append(ScanRange(url, start, starts[i + 1] if i + 1 < len(starts) else None,
                                    layout))
    return columns, ranges


def _converter(column: Column) -> Callable[[Any], Any]:
    """One value -> its Spark value, for a column (not a JSON one) whose values are not all
    of its type."""
    spark = column.spark_type
    if spark == "long":
        return _long
    if spark == "double":
        return lambda v: float(v) if type(v) is int or type(v) is float else None
    if spark == "boolean":
        return lambda v: v if type(v) is bool else None
    return lambda v: v if v is None or type(v) is str else _json(v).decode()


def _long(value: Any) -> int | None:
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    return None


_ARROW_TYPES = {"long": "int64", "double": "float64", "boolean": "bool_", "string": "string"}
_FITTING = {"long": int | None, "double": float | None, "boolean": bool | None,
            "string": str | None}
"""Spark type -> the values msgspec decodes for a column as they are: a double column takes
integers too (as floats), never a bool; a long column takes no float."""
_JSON_NULL = msgspec.Raw(b"null")  # a JSON column's value absent from a row
_typed_dict: Any = TypedDict  # called with fields known at run time (mypy checks literal ones)


class PageColumns:
    """JSON scan pages (HTTP) as Arrow record batches, built column by column.

    A page is decoded to ``page_type``: its rows are msgspec Structs whose fields are the
    columns (entries of other names are skipped, absent ones are null), each typed as its
    Spark type takes its values, so that msgspec checks them in C; a JSON column's value is
    left encoded (``msgspec.Raw``): its JSON text is the bytes, so its maps and lists never
    become Python objects. Each column's values are then taken from every row at once and
    become an Arrow array in one call. A page that does not decode so holds a value that
    does not fit its column (an i64 field also takes floats): it is decoded to
    ``loose_type``, where each value is converted on its own (as :func:`_converter`
    says)."""

    def __init__(self, columns: Sequence[Column]) -> None:
        import pyarrow as pa

        self._pa = pa
        self.columns = list(columns)
        self.names = [c.name for c in columns]
        self._types = [getattr(pa, _ARROW_TYPES[c.spark_type])() for c in columns]
        self._converters = [_converter(c) for c in columns]
        self.page_type = self._page([_FITTING[c.spark_type] for c in columns])
        self.loose_type = self._page([Any] * len(columns))
        self._get = attrgetter(*(f"f{i}" for i in range(len(columns))))

    def _page(self, kinds: list[Any]) -> Any:
        """A page whose rows are Structs with ``kinds`` as the fields of the columns that are
        not JSON, named f0, f1, ... (a column's name need not be an identifier)."""
        fields = [(f"f{i}", msgspec.Raw, _JSON_NULL) if c.as_json else (f"f{i}", kind, None)
                  for i, (c, kind) in enumerate(zip(self.columns, kinds, strict=True))]
        row = msgspec.defstruct("ScanRow", fields, gc=False, forbid_unknown_fields=False,
                                rename={f"f{i}": name for i, name in enumerate(self.names)})
        rows = list[row]  # type: ignore[valid-type]
        return _typed_dict("ScanPage", {"rows": rows, "cursor": str | None}, total=False)

    def read(self, client: Any, table: str, cursor: str | None, limit: int,
             until: str | None) -> tuple[pa.RecordBatch | None, str | None]:
        """The batch of the page at ``cursor`` (None: no rows) and the next cursor."""
        # a page's objects are freed by their reference counts: a collection while they
        # live would walk them all
        with gc_paused():
            loose = False
            try:
                page = client.scan(table, cursor, limit=limit, until=until,
                                   decode_as=self.page_type)
            except ServerError as exc:
                if exc.code != "unparseable_reply":
                    raise
                loose = True  # a value that does not fit its column: read it again
                page = client.scan(table, cursor, limit=limit, until=until,
                                   decode_as=self.loose_type)
            rows = page["rows"]
            return (self.batch(rows, loose) if rows else None), page["cursor"]

    def batch(self, rows: list[Any], loose: bool = False) -> pa.RecordBatch:
        """The record batch of a page's rows (at least one), decoded as ``page_type`` (or
        ``loose_type``)."""
        values: list[Sequence[Any]] = ([list(map(self._get, rows))] if len(self.columns) == 1
                                       else list(zip(*map(self._get, rows), strict=True)))
        arrays = [self._array(column, column_values, kind, convert if loose else None)
                  for column, column_values, kind, convert
                  in zip(self.columns, values, self._types, self._converters, strict=True)]
        return self._pa.RecordBatch.from_arrays(arrays, names=self.names)

    def _array(self, column: Column, values: Sequence[Any], kind: pa.DataType,
               convert: Callable[[Any], Any] | None) -> pa.Array:
        pa = self._pa
        if column.as_json:
            return pa.array([None if bytes(v) == b"null" else bytes(v) for v in values],
                            type=kind)
        if convert is not None:
            values = [convert(v) for v in values]
        return pa.array(values, type=kind)


_KINDS = {"long": 0, "double": 1, "boolean": 2, "string": 3}
"""Spark type -> the kind ``page_columns`` reads a column as; a JSON column is kind 4."""


class PageBuffers:
    """MessagePack scan pages as Arrow record batches, read in C: one pass over a page's
    body fills the buffers of every column's Arrow array (``page_columns``), each value
    converted as :func:`_converter` says (a JSON column's value as its JSON text, written
    from the bytes), with no Python object per row or value, and finds the next cursor.
    It asks for rows as arrays of their values (they do not name each column in each row,
    as maps do), ``layout`` being every column of the table in the order of the scan's
    ``columns``."""

    def __init__(self, columns: Sequence[Column], layout: Sequence[str]) -> None:
        import pyarrow as pa

        self._pa = pa
        self.names = [c.name for c in columns]
        self._order = [self.names.index(name) if name in self.names else -1
                       for name in layout]
        self._encoded = [c.name.encode() for c in columns]
        self._kinds = bytes(4 if c.as_json else _KINDS[c.spark_type] for c in columns)
        self._types = [getattr(pa, _ARROW_TYPES[c.spark_type])() for c in columns]

    def read(self, client: Any, table: str, cursor: str | None, limit: int,
             until: str | None) -> tuple[pa.RecordBatch | None, str | None]:
        """The batch of the page at ``cursor`` (None: no rows) and the next cursor."""
        return self.batch(client.scan(table, cursor, limit=limit, until=until,
                                      arrays=True, decode_as=msgspec.Raw))

    def batch(self, page: bytes) -> tuple[pa.RecordBatch | None, str | None]:
        """The record batch of a page's rows (None when it has none) and its cursor, from
        the page's body."""
        pa = self._pa
        count, buffers, cursor = page_columns(page, self._encoded, self._kinds, self._order)
        if not count:
            return None, cursor
        arrays = []
        for kind, (valid, values, offsets, nulls) in zip(self._types, buffers, strict=True):
            parts = [pa.py_buffer(valid) if nulls else None]
            if offsets is not None:
                parts.append(pa.py_buffer(offsets))
            parts.append(pa.py_buffer(values))
            arrays.append(pa.Array.from_buffers(kind, count, parts, null_count=nulls))
        return pa.RecordBatch.from_arrays(arrays, names=self.names), cursor


def read_range(columns: Sequence[Column], table: str, scan_range: ScanRange, page_size: int,
               timeout: float, access: Access | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of one range as one Arrow record batch per page (MessagePack pages over
    framed TCP, which the server writes straight from its columns and PageBuffers reads
    in C, rows as arrays in the order of the range's ``layout``; JSON pages over HTTP,
    rows as maps)."""
    kwargs = (access or Access()).client_kwargs(scan_range.url)
    pages: PageBuffers | PageColumns
    if parse_url(scan_range.url).is_tcp:
        kwargs["content_type"] = "msgpack"
        pages = PageBuffers(columns, scan_range.layout)
    else:
        pages = PageColumns(columns)
    cursor = scan_range.start
    with client_for_url(scan_range.url, timeout=timeout, **kwargs) as client:
        while True:
            batch, cursor = pages.read(client, table, cursor, page_size, scan_range.until)
            if batch is not None:
                yield batch
            if cursor is None:
                return
