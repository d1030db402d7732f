"""Arrow record batches -> event bodies, for the ``format("beava")`` data source.

Spark hands a Python data source writer the rows as Arrow record batches; each column is
converted to its wire values with Arrow compute kernels (the same values as the Spark
expressions of ``beava_spark.conversion``), then each row is encoded as one JSON object
with msgspec (null fields left out). With several servers, each row goes to the server of
its key (``beava_spark.routing``), or with a shard map to the owner of each of its tables'
keys (``beava_spark.shards``), and each task keeps one connection per server.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import msgspec

from .conversion import MS_PER_DAY, FieldConversion
from .routing import canonical_key, shard_for_key

if TYPE_CHECKING:
    from .shards import ShardRouting

Chunk = tuple[int, list[bytes]]

_UNIT_DIVISOR = {"s": None, "ms": 1, "us": 1000, "ns": 1_000_000}


def wire_array(array: Any, conv: FieldConversion) -> Any:
    """The wire values of one Arrow column (nulls stay null)."""
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    family, wire = conv.family, conv.wire_type
    if family == "floating":
        values = pc.cast(array, pa.float64())
        return pc.if_else(pc.is_finite(values), values, pa.scalar(None, pa.float64()))
    if family in ("integral", "decimal"):
        target = {"i64": pa.int64(), "f64": pa.float64(), "str": pa.string()}[wire]
        return pc.cast(array, target)
    if family == "date":
        if wire == "i64":
            return pc.multiply(pc.cast(pc.cast(array, pa.int32()), pa.int64()), MS_PER_DAY)
        return pc.cast(array, pa.string())
    if family in ("timestamp", "timestamp_ntz"):
        millis = _epoch_millis(array)
        if wire == "i64":
            return millis
        text = pc.strftime(pc.cast(millis, pa.timestamp("ms")), format="%Y-%m-%dT%H:%M:%S")
        if family == "timestamp":
            text = pc.binary_join_element_wise(text, "Z", "")
        return text
    if family == "null":
        return pa.nulls(len(array))
    return array  # string, boolean: already wire values


def _epoch_millis(array: Any) -> Any:
    """Epoch milliseconds (floored) of an Arrow timestamp column, whatever its unit and
    zone (an instant for zoned values; the wall clock read as UTC for naive ones)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    unit = array.type.unit
    raw = pc.cast(array.cast(pa.timestamp(unit)), pa.int64())
    divisor = _UNIT_DIVISOR[unit]
    if divisor is None:
        return pc.multiply(raw, 1000)
    if divisor == 1:
        return raw
    quotient = pc.divide(raw, divisor)  # truncates toward zero
    below = pc.less(pc.subtract(raw, pc.multiply(quotient, divisor)), 0)
    return pc.if_else(below, pc.subtract(quotient, 1), quotient)


class BodyEncoder:
    """Turns record batches into ``(server, bodies)`` chunks of at most ``batch_size``
    rows. ``key_fields`` (with ``servers`` > 1) routes each row by its key values as
    sent; ``routing`` (a shard map) sends each row to the owner of each of its tables'
    keys."""

    def __init__(self, fields: tuple[FieldConversion, ...], batch_size: int,
                 servers: int = 1, key_fields: tuple[str, ...] | None = None,
                 routing: ShardRouting | None = None) -> None:
        self.fields = fields
        self.batch_size = batch_size
        self.servers = servers
        names = [f"f{i}" for i in range(len(fields))]
        body_type = msgspec.defstruct(
            "Body", [(n, Any, None) for n in names], omit_defaults=True,
            rename=dict(zip(names, (f.name for f in fields), strict=True)))
        self._body = body_type
        self._encode = msgspec.json.Encoder().encode
        positions = {f.name: i for i, f in enumerate(fields)}
        self._key_positions = (tuple(positions[k] for k in key_fields)
                               if key_fields and servers > 1 else None)
        self._routing = routing
        # the sent fields any table is keyed by, with their positions
        self._routing_fields = tuple((name, positions[name]) for name in sorted(
            routing.key_fields & positions.keys())) if routing is not None else ()

    def chunks(self, batches: Iterable[Any]) -> Iterator[Chunk]:
        buffers: list[list[bytes]] = [[] for _ in range(self.servers)]
        size = self.batch_size
        for batch in batches:
            if batch.num_rows == 0:
                continue
            columns = [wire_array(batch.column(f.name), f).to_pylist() for f in self.fields]
            body, encode = self._body, self._encode
            bodies = [encode(body(*values)) for values in zip(*columns, strict=True)]
            if self._routing is not None:
                routed: Iterable[tuple[int, list[bytes]]] = self._route_shards(bodies, columns)
            elif self._key_positions is None:
                routed = ((0, bodies),)
            else:
                routed = self._route(bodies, columns)
            for server, rows in routed:
                buffer = buffers[server]
                buffer += rows
                while len(buffer) >= size:
                    yield server, buffer[:size]
                    del buffer[:size]
        for server, buffer in enumerate(buffers):
            if buffer:
                yield server, buffer

    def _route(self, bodies: list[bytes], columns: list[list[Any]]
               ) -> list[tuple[int, list[bytes]]]:
        assert self._key_positions is not None
        keys = [columns[p] for p in self._key_positions]
        per_server: list[list[bytes]] = [[] for _ in range(self.servers)]
        servers = self.servers
        for index, body in enumerate(bodies):
            key = canonical_key([values[index] for values in keys])
            per_server[shard_for_key(key, servers)].append(body)
        return list(enumerate(per_server))

    def _route_shards(self, bodies: list[bytes], columns: list[list[Any]]
                      ) -> list[tuple[int, list[bytes]]]:
        routing = self._routing
        assert routing is not None
        per_shard: list[list[bytes]] = [[] for _ in range(self.servers)]
        fields = [(name, columns[p]) for name, p in self._routing_fields]
        for index, body in enumerate(bodies):
            row = {name: values[index] for name, values in fields
                   if values[index] is not None}
            for shard in routing.owners(row):
                per_shard[shard].append(body)
        return list(enumerate(per_shard))
