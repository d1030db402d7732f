"""What this server owns of a sharded deployment (docs/sharding.md, DESIGN.md §7).

A shard applies a pushed event only to the tables whose key's hash slot it owns (the
table kernels test one bit per table per push); a push none of whose tables it owns, and a
read of a key it does not own, answer ``wrong_shard`` with the slot, its owner and the
map's epoch, so a client with an old map learns where to go.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from beava.catalogue.errors import BeavaError
from beava_client.slots import ShardMap, slot

if TYPE_CHECKING:
    from beava.engine.registry import TableSpec

__all__ = ["ShardOwnership"]


class ShardOwnership:
    """Shard ``shard_id`` of ``shard_map``: its slot bitmap and the wrong_shard counters
    (``wrong_pushes``, ``wrong_reads``: requests answered wrong_shard)."""

    __slots__ = ("map", "shard", "bits", "wrong_pushes", "wrong_reads")

    def __init__(self, shard_map: ShardMap, shard_id: str) -> None:
        self.map = shard_map
        self.shard = shard_map.shard(shard_id)
        self.bits = shard_map.owned_bitmap(shard_id)
        self.wrong_pushes = 0
        self.wrong_reads = 0

    def owns(self, slot_number: int) -> bool:
        return bool(self.bits[slot_number >> 3] >> (slot_number & 7) & 1)

    @staticmethod
    def table_slot(spec: TableSpec, stored_key: str) -> int:
        """The slot of a row of ``spec``'s table: its key's, or a global table's name's."""
        return slot(stored_key if spec.keys else spec.name)

    def owns_global(self, spec: TableSpec) -> bool:
        return self.owns(slot(spec.name))

    def wrong_shard(self, slot_number: int, what: str, **top: Any) -> BeavaError:
        """The ``wrong_shard`` answer for ``what`` (the misrouted request's subject)."""
        owner = self.map.owner(slot_number)
        return BeavaError(
            "wrong_shard", top=top or None,
            message=(f"{what} is in slot {slot_number}, owned by shard {owner.id!r}, not "
                     f"{self.shard.id!r} (map epoch {self.map.epoch}): send it there"),
            slot=slot_number, owner=owner.id, epoch=self.map.epoch, tcp=owner.tcp,
            http=owner.http)

    def check_read(self, spec: TableSpec, stored_key: str) -> None:
        """Raise wrong_shard when another shard owns this row of ``spec``'s table."""
        number = self.table_slot(spec, stored_key)
        if not self.owns(number):
            self.wrong_reads += 1
            raise self.wrong_shard(number, f"table {spec.name!r} key {stored_key!r}")

    def refuse_push(self, event: str, keyed: list[tuple[TableSpec, str]],
                    version: int) -> BeavaError:
        """The answer to a push of ``event`` none of whose tables this shard owns:
        ``keyed`` lists its tables with their keys (the first one names the owner)."""
        self.wrong_pushes += 1
        spec, key = keyed[0]
        return self.wrong_shard(self.table_slot(spec, key),
                                f"event {event!r}: table {spec.name!r} key {key!r}",
                                registry_version=version)
