"""Entity state of one table derivation (spec/operators.md §3, §8; DESIGN.md §3).

A ``TableState`` compiles its spec once (chain, where predicates, one column per feature)
into a Cython ``TableKernel`` and then costs one kernel call per event: the chain runs in
Python on a copy of the pushed row, everything after it runs in the kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from beava._fast.ops.column import Column
from beava._fast.ops.key_map import KeyMap
from beava._fast.ops.ops_core import BucketArena
from beava._fast.ops.table_kernel import TableKernel
from beava._fast.wire.msgpack_out import RowPage
from beava.engine.expressions import check_where, compile_where, format_expression
from beava.engine.expressions.chain_ops import chain_output_schema, compile_chain
from beava.engine.registry import TableSpec
from beava.engine.state.columns import make_column

if TYPE_CHECKING:
    from beava.engine.sharding import ShardOwnership

__all__ = ["TableState", "UnknownFeatures"]

Row = dict[str, Any]


class UnknownFeatures(KeyError):
    """A read named features the table does not have (wire.md §7.2 `feature_not_found`)."""

    def __init__(self, table: str, missing: list[str]) -> None:
        super().__init__(missing)
        self.table = table
        self.missing = missing  # unknown names, request order

    def __str__(self) -> str:
        names = ", ".join(f'"{name}"' for name in self.missing)
        return f"feature_not_found: missing=[{names}] table={self.table}"


class TableState:
    """Keys, slots and feature state of one table.

    ``previous`` (same name, same keys, chain and source) hands over its entities: features
    that exist in both with the same FeatureSpec and are not listed in ``reset`` keep their
    state, every other feature starts empty for every entity (registry.md §9).
    """

    __slots__ = ("spec", "push", "_kernel", "_names", "_name_set", "_shard")
    spec: TableSpec
    push: Callable[[Row, int], Any]
    _kernel: TableKernel
    _names: tuple[str, ...]
    _name_set: frozenset[str]
    _shard: ShardOwnership | None

    def __init__(
        self,
        spec: TableSpec,
        previous: TableState | None = None,
        reset: Collection[str] = (),
    ) -> None:
        self.spec = spec
        schema = chain_output_schema(spec.chain, spec.input_schema)
        predicates: list[Callable[[Mapping[str, Any]], bool]] = []
        where_index: dict[str, int] = {}
        text_index: dict[str, int] = {}  # where text -> index: each text is parsed once
        features = []
        for name, feature in spec.features.items():
            index = 0
            text = feature.params.get("where")
            if text is not None:
                index = text_index.get(text, 0)
                if not index:
                    expr = check_where(text, schema)
                    canonical = format_expression(expr)
                    index = where_index.get(canonical, 0)
                    if not index:
                        predicates.append(compile_where(expr))
                        index = where_index[canonical] = len(predicates)
                    text_index[text] = index
            where = predicates[index - 1] if index else None
            if (
                previous is not None
                and name not in reset
                and previous.spec.features.get(name) == feature
            ):
                column = previous._kernel.column(name)
            else:
                column = make_column(feature, where)
            features.append((name, column, index))
        self._kernel = TableKernel(tuple(spec.keys), features, predicates, spec.cold_after_ms)
        if previous is not None:
            self._kernel.adopt(previous._kernel)
        self._names = self._kernel.names
        self._name_set = frozenset(self._names)
        self._shard = None
        self.push = self._compile_push(spec)

    def own(self, shard: ShardOwnership | None) -> None:
        """Serve only the keys ``shard`` owns (None: every key, an unsharded server):
        pushes skip the others, reads of them answer wrong_shard."""
        self._shard = shard
        if shard is None:
            self._kernel.set_ownership(None, True)
        else:
            self._kernel.set_ownership(shard.bits, shard.owns_global(self.spec))

    def key_of(self, row: Row) -> str | None:
        """The canonical key of a pushed row (None: it skips this table); None too for a
        chained table, whose key is known only after its chain."""
        return None if self.spec.chain else self._kernel.key_of(row)

    def _compile_push(self, spec: TableSpec) -> Callable[[Row, int], Any]:
        """The per-event entry point: the kernel itself (callable as its ``apply``, and
        called in C by the push pass), or chain-then-kernel."""
        if not spec.chain:
            return self._kernel
        kernel_apply = self._kernel.apply
        chain = compile_chain(spec.chain, spec.input_schema)

        def push(row: Row, now: int) -> None:
            out = chain(dict(row))  # the chain may mutate; other tables share `row`
            if out is not None:
                kernel_apply(out, now)

        return push

    def row(
        self, stored_key: str, T: int, features: Sequence[str] | None = None
    ) -> dict[str, Any] | None:
        """The entity row at query time ``T`` (keys sorted), narrowed to ``features``;
        None when the entity has no row. Unknown feature names raise UnknownFeatures."""
        found = self._slot_names(stored_key, features)
        return None if found is None else self._kernel.read(found[0], T, found[1])

    def row_json(self, stored_key: str, T: int, features: Sequence[str] | None = None
                 ) -> dict[str, Any] | None:
        """``row`` for a JSON reply encoded by msgspec: a big map-valued feature may be its
        JSON text already (msgspec.Raw), written from the columns."""
        found = self._slot_names(stored_key, features)
        return None if found is None else self._kernel.read_json(found[0], T, found[1])

    def row_msgpack(self, stored_key: str, T: int, features: Sequence[str] | None = None
                    ) -> bytes | None:
        """``row`` as the MessagePack bytes a reply carries (written from the columns)."""
        found = self._slot_names(stored_key, features)
        return None if found is None else self._kernel.read_msgpack(found[0], T, found[1])

    def _slot_names(self, stored_key: str, features: Sequence[str] | None
                    ) -> tuple[int, Sequence[str]] | None:
        """The entity's slot and the sorted feature names of its row narrowed to
        ``features``; None when it has no row (unknown names raise first)."""
        if features is None:
            names: Sequence[str] = self._names
        else:
            missing = [name for name in features if name not in self._name_set]
            if missing:
                raise UnknownFeatures(self.spec.name, missing)
            names = sorted(set(features))
        if self._shard is not None:
            self._shard.check_read(self.spec, stored_key)
        slot = self.slot(stored_key)
        return None if slot is None else (slot, names)

    @property
    def keys(self) -> KeyMap:
        """The entity key map: stored key -> slot (a replay's read finds a row by it)."""
        return self._kernel.keys

    def slot(self, stored_key: str) -> int | None:
        """The entity's slot; None when it holds no state."""
        return self._kernel.keys.get(stored_key)

    def slot_keys(self, start: int, stop: int) -> list[str]:
        """Stored keys of the slots ``start`` to ``stop - 1`` that exist, in slot order
        (slots are dense and only grow: a new key takes the next slot, so a slot's key
        never changes while this table state lives)."""
        return self._kernel.keys.names[start:stop]

    def read_slot(self, slot: int, T: int) -> dict[str, Any]:
        """Every feature of ``slot`` at query time ``T`` (what ``row`` returns for its key)."""
        return self._kernel.read(slot, T)

    def scan_rows(self, start: int, stop: int, T: int,
                  layout: tuple[tuple[bytes, Column | None, int], ...],
                  key_parts: tuple[Callable[[str], Any] | None, ...],
                  split: Callable[[str], list[str]] | None, max_bytes: int, seconds: float,
                  json: bool, arrays: bool) -> RowPage:
        """Rows of slots ``start`` to ``stop - 1`` as MessagePack maps (``arrays``: arrays
        of their values) or their JSON text, written from the columns into one buffer
        (TableKernel.scan_rows)."""
        return self._kernel.scan_rows(start, stop, T, layout, key_parts, split, max_bytes,
                                      seconds, json, arrays)

    def column(self, name: str) -> Column:
        """The column of feature ``name``."""
        return self._kernel.column(name)

    @property
    def feature_names(self) -> tuple[str, ...]:
        """Every feature, sorted."""
        return self._names

    @property
    def entity_count(self) -> int:
        return self._kernel.entity_count

    @property
    def cold_evictions(self) -> int:
        """Entity rows reset by the cold TTL since this table's state was created."""
        return self._kernel.cold_evictions

    @property
    def skipped(self) -> int:
        """Updates left to the shard that owns their key (sharded serving)."""
        return self._kernel.skipped

    @property
    def bucket_reclaims(self) -> int:
        """Windowed buckets evicted by the 64-bucket cap (current columns)."""
        return self._kernel.bucket_reclaims

    def dump(self) -> dict[str, Any]:
        """State of every entity of this table as plain data (TableKernel.dump)."""
        return self._kernel.dump()

    def load(self, state: Any) -> None:
        """Replace all entities by a ``dump()`` taken under the same TableSpec (ValueError
        when it does not fit)."""
        self._kernel.load(state)

    def absorb(self, other: TableState) -> None:
        """Append the entities of ``other`` (a table of the same spec, discarded afterwards)
        after this table's own: a backfill installs a table from key-disjoint parts. Raises
        KeyError(key) for a key both hold, before anything changes."""
        self._kernel.absorb(other._kernel)

    def stored_columns(self) -> tuple[dict[str, Column], list[BucketArena]]:
        """The columns whose state a ``dump()`` holds under ``columns``, by feature name, and
        the bucket arenas it holds under ``arenas`` (in that order). Meant for a new table:
        it dumps the state to learn the names."""
        kernel = self._kernel
        return {name: kernel.column(name) for name in kernel.dump()["columns"]}, kernel.arenas
