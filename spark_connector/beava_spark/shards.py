"""Sharded deployments (docs/sharding.md): the shards' URLs from a shard map, and each row
routed to the owners of its event's tables' keys.

``push_dataframe(..., shard_map=...)`` computes the owners in Spark SQL
(``owner_column``: ``pmod(xxhash64(key), 16384)`` in the JVM, the server's slot); the
``format("beava")`` writer, which receives its rows in the tasks, computes them there
(``owners``, the client's slot function). Either way a row goes once to each distinct
owner, and each shard applies it to the tables whose keys it owns: every feature equals a
single server's.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from beava_client import ShardedClient, TransportError
from beava_client.errors import ServerError
from beava_client.keys import key_text
from beava_client.shard_routes import Routes, RoutingError
from beava_client.sharded_base import OWNER_CACHE
from beava_client.slots import SLOTS, ShardMap, slot
from beava_client.urls import parse_url

from .access import Access
from .errors import ServerCheckError

if TYPE_CHECKING:
    from pyspark import RDD
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

    from .backfill import BackfillTotals

# Spark types whose text (cast to string) is the server's key text: strings as they are,
# integers in decimal, booleans true/false.
_KEY_TYPES = frozenset({"string", "bigint", "int", "smallint", "tinyint", "boolean"})


def _client(shard_map: str, access: Access, timeout: float) -> ShardedClient:
    """A sharded client over framed TCP, with TLS when the URL asks for it or the map
    gives every shard a ``tcps`` address (as the clients decide)."""
    if "://" in shard_map:
        tls = parse_url(shard_map).tls
    else:
        tls = ShardedClient(shard_map).transport == "tcps"  # reads the file, no I/O else
    scheme = "tcps" if tls else "tcp"
    return ShardedClient(shard_map, transport=scheme, timeout=timeout,
                         **access.client_kwargs(f"{scheme}://map"))


def shard_urls(shard_map: ShardMap, tls: bool = False) -> tuple[str, ...]:
    """Each shard's framed-TCP URL, in the map's order."""
    scheme = "tcps" if tls else "tcp"
    urls = []
    for shard in shard_map.shards:
        address = getattr(shard, scheme)
        if address is None:
            raise ValueError(f"shard_map: shard {shard.id!r} has no {scheme!r} address")
        urls.append(f"{scheme}://{address}")
    return tuple(urls)


def _map_and_routes(shard_map: str, access: Access, timeout: float
                    ) -> tuple[tuple[str, ...], ShardMap, Routes]:
    """The shards' URLs, the map and the registry's routes (a shard's describe);
    ServerCheckError when either cannot be had or a table cannot be placed by a client."""
    client = _client(shard_map, access, timeout)
    try:
        loaded = client.refresh_map()
        routes = Routes.from_describe(client.describe())
        routes.check_routable()
    except RoutingError as exc:
        raise ServerCheckError(f"shard_map: {exc}") from exc
    except (ServerError, TransportError) as exc:
        raise ServerCheckError(f"shard_map: cannot read the map and the registry from "
                               f"{shard_map}: {exc}") from exc
    finally:
        client.close()
    return shard_urls(loaded, client.transport == "tcps"), loaded, routes


def load_shard_map(shard_map: str, access: Access, timeout: float) -> tuple[str, ...]:
    """The shards' URLs from a map file or any shard's URL; ServerCheckError when the map
    cannot be had."""
    client = _client(shard_map, access, timeout)
    try:
        loaded = client.refresh_map()
    except (ServerError, TransportError) as exc:
        raise ServerCheckError(f"shard_map: cannot read the map from {shard_map}: {exc}") \
            from exc
    finally:
        client.close()
    return shard_urls(loaded, client.transport == "tcps")


@dataclass(frozen=True)
class ShardRouting:
    """Where each row of ``event`` goes: ``urls`` (one per shard, in the map's order), the
    owner of every slot, and the routes of the registry (pickled into the tasks)."""

    event: str
    urls: tuple[str, ...]
    owner_by_slot: bytes | tuple[int, ...]
    routes: Routes
    # slot text -> shard index, filled in each task (keys recur; the hash is Python's)
    _owners: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def load(cls, shard_map: str, event: str, access: Access, timeout: float
             ) -> ShardRouting:
        """The map and the registry (a shard's describe); ServerCheckError when either
        cannot be had or the event's tables cannot be placed by a client."""
        urls, loaded, routes = _map_and_routes(shard_map, access, timeout)
        if not routes.knows_event(event):
            raise ServerCheckError(f"event {event!r} is not registered on the shards of "
                                   f"{shard_map}; register it first (nothing was sent)")
        return cls(event, urls, _owner_by_slot(loaded), routes)

    @property
    def key_fields(self) -> frozenset[str]:
        """Every field a table of the event is keyed by."""
        return frozenset(f for _, keys in self.routes.fed_tables(self.event) for f in keys)

    def owners(self, row: Mapping[str, Any]) -> list[int]:
        """The shard indexes a row goes to (its fields as sent)."""
        texts = self.routes.push_texts(self.event, row) or {self.event}
        return sorted({self.owner_of_text(text) for text in texts})

    def owner_column(self, schema: StructType) -> Column:
        """A Spark SQL column: the sorted, distinct shard indexes of each row of a
        DataFrame with ``schema`` (the bodies as sent), computed in the JVM."""
        from pyspark.sql import functions as f

        types = {field.name: field.dataType.simpleString() for field in schema.fields}
        defaults = self.routes.defaults(self.event)
        owners = []
        for table, keys in self.routes.fed_tables(self.event):
            if not keys:
                owners.append(f.lit(self.owner_of_text(table)))
                continue
            text = _key_text(table, keys, types, defaults)
            if text is not None:
                slot_of = f.pmod(f.xxhash64(text), f.lit(SLOTS))
                owners.append(f.when(text.isNotNull(), self._owner_of(slot_of)))
        fallback = f.array(f.lit(self.owner_of_text(self.event)))
        if not owners:
            return fallback
        found = f.array_sort(f.array_distinct(
            f.filter(f.array(*owners), lambda x: x.isNotNull())))
        return f.when(f.size(found) == 0, fallback).otherwise(found)

    def owner_of_text(self, text: str) -> int:
        """The shard index owning a slot text."""
        owners = self._owners
        found = owners.get(text)
        if found is None:
            if len(owners) >= OWNER_CACHE:
                owners.clear()
            found = owners[text] = self.owner_by_slot[slot(text)]
        return found

    def _owner_of(self, slot_of: Column) -> Column:
        return _owner_of(self.owner_by_slot, slot_of)


def _owner_of(by_slot: bytes | tuple[int, ...], slot_of: Column) -> Column:
    """The shard index of a slot column: one CASE branch per run of slots of one shard."""
    from pyspark.sql import functions as f

    runs: list[tuple[int, int]] = []  # (end, shard) of each run of slots
    for s in range(SLOTS):
        if runs and runs[-1][1] == by_slot[s]:
            runs[-1] = (s + 1, by_slot[s])
        else:
            runs.append((s + 1, by_slot[s]))
    branches = f.when(slot_of < runs[0][0], runs[0][1])
    for end, shard in runs[1:]:
        branches = branches.when(slot_of < end, shard)
    return branches


def _owner_by_slot(shard_map: ShardMap) -> bytes | tuple[int, ...]:
    """Each slot's owner, as the shard's index in the map."""
    index = {shard.id: i for i, shard in enumerate(shard_map.shards)}
    owners = [index[shard_map.owner(s).id] for s in range(SLOTS)]
    return bytes(owners) if len(index) <= 256 else tuple(owners)


def routed_lines(bodies: DataFrame, routing: ShardRouting, per_shard: int) -> RDD[bytes]:
    """The rows of ``bodies`` as JSON objects (UTF-8 bytes), each once in a partition of
    every shard it goes to: partition ``p`` holds rows for shard ``p % shards``
    (``per_shard`` partitions each, a row's chosen by the hash of its body). The owners
    and the JSON are computed in the JVM."""
    from pyspark.sql import functions as f

    shards = len(routing.urls)
    body = f.to_json(f.struct(*[f.col(_quoted(c)) for c in bodies.columns]))
    routed = bodies.select(f.explode(routing.owner_column(bodies.schema)).alias("shard"),
                           body.alias("body"))
    partition = f.col("shard")
    if per_shard > 1:
        partition = partition + shards * f.pmod(f.xxhash64(f.col("body")), f.lit(per_shard))
    pairs = routed.select(partition.alias("p"), "body").rdd.map(_pair)
    return pairs.partitionBy(shards * per_shard, _identity).values()


def _pair(row: Any) -> tuple[int, bytes]:
    return int(row[0]), row[1].encode()


def _identity(index: int) -> int:
    return index


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _key_text(table: str, keys: Sequence[str], types: Mapping[str, str],
              defaults: Mapping[str, Any]) -> Column | None:
    """The canonical key of ``table`` as a Spark SQL column (null when a key value is);
    None when a key field is never sent and has no default (the table is skipped)."""
    from pyspark.sql import functions as f

    parts = []
    for name in keys:
        kind = types.get(name)
        if kind is None:
            text = key_text(defaults.get(name))
            if text is None:
                return None
            parts.append(f.lit(text))
        elif kind in _KEY_TYPES:
            column = f.col(_quoted(name))
            parts.append(column if kind == "string" else column.cast("string"))
        else:
            raise ValueError(f"shard_map: table {table!r} is keyed by {name!r}, a {kind} "
                             "column; a sharded write routes string, integer and boolean "
                             "keys (cast the column)")
    if len(parts) == 1:
        return parts[0]
    escaped = [f.regexp_replace(p, r"\|", "%7C") for p in parts]
    joined = [escaped[0]]
    for part in escaped[1:]:
        joined += [f.lit("|"), part]
    return f.concat(*joined)


def warn_single_key(doc: Mapping[str, Any], event: str, key_fields: Sequence[str]) -> None:
    """Warn when routing ``event`` by one key over several servers splits a table: one of
    its tables is keyed by fields that do not include the routing key's (each server then
    holds a partial state of that table's rows, each answering a different, wrong
    value). A table keyed by the routing fields and more stays whole on one server."""
    others = sorted({f"{table} by {list(keys) or 'no key'}"
                     for table, keys in Routes.from_describe(doc).fed_tables(event)
                     if not set(key_fields) <= set(keys)})
    if others:
        warnings.warn(
            f"routing {event!r} by {list(key_fields)} over several servers splits the tables "
            f"keyed otherwise ({', '.join(others)}): their rows end up as partial states on "
            "every server. Run the servers as shards and write with shard_map instead "
            "(docs/sharding.md)", UserWarning, stacklevel=3)


def backfill_shards(events: Mapping[str, DataFrame], registry: Any, shard_map: str,
                    options: Mapping[str, Any]) -> BackfillTotals:
    """``backfill`` into a sharded deployment: each table's state computed from the events
    whose key that shard owns, and installed on that shard (a global table's, from every
    event, on the owner of its name). One ``backfill`` per key (the tables keyed by the
    same fields together) and shard, each with the same ``until_ms``; the totals summed
    per table (``lsn``: the highest). ``options``: ``backfill``'s keyword arguments, with
    ``until_ms``."""
    from pyspark.sql import functions as f

    from .backfill import BackfillTotals, backfill
    from .replay_exchange import compile_pipeline, table_names

    timeout = float(options.get("timeout", 300.0))
    urls, loaded, routes = _map_and_routes(shard_map, Access.resolve(), timeout)
    by_slot = _owner_by_slot(loaded)
    pipeline = compile_pipeline(registry)
    plans = [pipeline.table(name) for name in table_names(pipeline, options.get("tables"))]
    until_ms = int(options["until_ms"])
    totals = BackfillTotals(until_ms, dry_run=bool(options.get("dry_run", False)))
    runs: list[tuple[str, list[str], dict[str, DataFrame]]] = []  # (url, tables, events)
    by_keys: dict[tuple[str, ...], list[Any]] = {}
    for plan in plans:
        if plan.keys:
            by_keys.setdefault(plan.keys, []).append(plan)
        else:
            owner = by_slot[slot(plan.name)]
            runs.append((urls[owner], [plan.name], {e: events[e] for e in plan.events}))
    for keys, group in by_keys.items():
        needed = list(dict.fromkeys(e for p in group for e in p.events))
        owners: dict[str, Column | None] = {}
        for event in needed:
            df = events[event]
            types = {fld.name: fld.dataType.simpleString() for fld in df.schema.fields}
            text = _key_text(group[0].name, keys, types, routes.defaults(event))
            owners[event] = None if text is None else _owner_of(
                by_slot, f.pmod(f.xxhash64(text), f.lit(SLOTS)))
        for index, url in enumerate(urls):
            mine = {}
            for event in needed:
                placed = owners[event]
                mine[event] = events[event].limit(0) if placed is None \
                    else events[event].where(placed == f.lit(index))
            runs.append((url, [p.name for p in group], mine))
    for url, tables, mine in runs:
        part = backfill(mine, registry, url, **{**options, "tables": tables,
                                                "until_ms": until_ms})
        totals.events += part.events
        for name, table in part.tables.items():
            totals.tables[name] = _summed(totals.tables.get(name), table)
    return totals


def _summed(before: Any, table: Any) -> Any:
    """Two shards' counts of one table's backfill, added (the install's WAL LSN: the
    highest, each shard having its own log)."""
    if before is None:
        return table
    from dataclasses import fields, replace

    return replace(table, **{
        fld.name: max(getattr(before, fld.name), getattr(table, fld.name))
        if fld.name == "lsn" else getattr(before, fld.name) + getattr(table, fld.name)
        for fld in fields(table)})
