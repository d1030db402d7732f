"""All table state of one registry version, pushes routed to it, and register transitions
(spec/operators.md §3, spec/registry.md §9)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from beava.engine.registry import Registry, TableSpec
from beava.engine.state.columns import family_counters
from beava.engine.state.tables import TableState

if TYPE_CHECKING:
    from beava.engine.sharding import ShardOwnership

__all__ = ["EngineState"]


def _same_entities(old: TableSpec, new: TableSpec) -> bool:
    """Whether rows of ``old`` are rows of ``new``: same source, chain and group keys."""
    return old.source == new.source and old.keys == new.keys and old.chain == new.chain


class EngineState:
    """The tables of the current registry and their entities; ``shard`` (sharded
    serving): the slots this server owns, every table serving only their keys."""

    def __init__(self, registry: Registry, shard: ShardOwnership | None = None) -> None:
        self._registry = registry
        self._shard = shard
        self._tables: dict[str, TableState] = {
            name: TableState(spec) for name, spec in registry.tables.items()
        }
        # event -> the push functions of the tables it feeds (the push pass calls them)
        self.routes: dict[str, tuple[Callable[[dict[str, Any], int], Any], ...]] = {}
        # cold resets of table states that no longer exist, so the total never goes down
        self._cold_base = 0
        self._skipped_base = 0  # the same for updates skipped (sharded serving)
        self._route()

    def _route(self) -> None:
        for table in self._tables.values():
            table.own(self._shard)
        routes = {}
        for event in self._registry.events:
            pushes = tuple(self._tables[t.name].push for t in self._registry.feeds(event))
            if pushes:
                routes[event] = pushes
        self.routes = routes

    def apply(self, event: str, row: dict[str, Any], now: int) -> None:
        """Apply one pushed event (validated fields, not mutated) to every table it feeds."""
        for push in self.routes.get(event, ()):
            push(row, now)

    def table(self, name: str) -> TableState | None:
        return self._tables.get(name)

    @property
    def tables(self) -> dict[str, TableState]:
        return dict(self._tables)

    def _replace_tables(self, tables: dict[str, TableState]) -> None:
        cold, skipped = self.cold_evictions, self.skipped_updates
        self._tables = tables
        self._cold_base = cold - sum(t.cold_evictions for t in tables.values())
        self._skipped_base = skipped - sum(t.skipped for t in tables.values())

    @property
    def skipped_updates(self) -> int:
        """Table updates left to the shards owning their keys (monotonic, as
        ``cold_evictions``)."""
        return self._skipped_base + sum(t.skipped for t in self._tables.values())

    def misrouted(self, event: str, row: dict[str, Any]) -> list[tuple[TableSpec, str]]:
        """The tables ``event`` feeds with their keys in ``row``, when this shard owns
        none of them (a push to answer wrong_shard); [] when it owns one, a chained table
        (whose key its chain computes) or none has a key."""
        shard = self._shard
        if shard is None:
            return []
        keyed = []
        for spec in self._registry.feeds(event):
            table = self._tables[spec.name]
            if spec.chain:
                return []
            key = table.key_of(row)
            if key is None:
                continue
            if shard.owns(shard.table_slot(spec, key)):
                return []
            keyed.append((spec, key))
        return keyed

    def transition(self, new_registry: Registry, plan: Mapping[str, Any]) -> None:
        """Carry state over to ``new_registry`` (registry.md §9) as the register ``plan``
        says (the ``plan`` of the REGISTRY record: the same object the live call and its
        WAL replay execute). Dropped and replaced tables lose their state; in tables
        updated in place, added features start empty, removed features are dropped, the
        ``reset_features`` restart empty, and every other feature keeps its state. A table
        whose TableSpec is unchanged is kept as is."""
        replaced = set(plan["replace"])
        resets: dict[str, set[str]] = {}
        for table, feature in plan["reset_features"]:
            resets.setdefault(table, set()).add(feature)
        tables: dict[str, TableState] = {}
        for name, spec in new_registry.tables.items():
            current = self._tables.get(name)
            if (
                current is None
                or name in replaced
                or not _same_entities(current.spec, spec)
            ):
                tables[name] = TableState(spec)
            elif current.spec == spec and name not in resets:
                tables[name] = current
            else:
                tables[name] = TableState(spec, previous=current, reset=resets.get(name, ()))
        self._registry = new_registry
        self._replace_tables(tables)
        self._route()

    def replace_table(self, name: str, table: TableState) -> None:
        """Swap in ``table`` (built from the current TableSpec of ``name``) for the state
        of table ``name``: a backfill's install, one step on the event loop."""
        current = self._tables.get(name)
        if current is None or current.spec != table.spec:
            raise ValueError(f"table {name!r} is not a table of this registry with that spec")
        tables = dict(self._tables)
        tables[name] = table
        self._replace_tables(tables)
        self._route()

    @property
    def entity_count(self) -> int:
        """Resident (table, entity) rows."""
        return sum(t.entity_count for t in self._tables.values())

    def table_entity_counts(self) -> dict[str, int]:
        """Resident entity rows per table."""
        return {name: t.entity_count for name, t in self._tables.items()}

    @property
    def cold_evictions(self) -> int:
        """Entity rows reset by the cold TTL (monotonic over this object's life)."""
        return self._cold_base + sum(t.cold_evictions for t in self._tables.values())

    @property
    def bucket_reclaims(self) -> int:
        """Feature buckets evicted by the 64-bucket cap: the op families' process-wide
        counter (monotonic for the process, like the Prometheus counter it feeds)."""
        return family_counters().get("beava_bucket_reclaim_total", 0)

    def dump(self) -> dict[str, Any]:
        """State of every table as plain data (for snapshots; MessagePack-encodable)."""
        return {"tables": {name: t.dump() for name, t in self._tables.items()}}

    def load(self, state: Any) -> None:
        """Restore a ``dump()`` taken under the current registry: one entry per table.

        ``state`` is decoded snapshot data; ValueError when it does not fit the registry
        (this object is then left unchanged)."""
        if type(state) is not dict or type(state.get("tables")) is not dict:
            raise ValueError("snapshot state is not a map of tables")
        dumped = state["tables"]
        if set(dumped) != set(self._tables):
            raise ValueError(f"snapshot has state for tables {sorted(map(str, dumped))}, "
                             f"the registry has {sorted(self._tables)}")
        fresh = {name: TableState(spec) for name, spec in self._registry.tables.items()}
        for name, table_state in dumped.items():
            fresh[name].load(table_state)
        self._replace_tables(fresh)
        self._route()
