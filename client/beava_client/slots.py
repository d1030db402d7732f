"""Hash slots and the shard map of a sharded beava (docs/sharding.md, DESIGN.md §7).

``slot(text)`` places a table's canonical key string (``keys.encode_key`` for clients, the
server's ``keystr`` parts joined by ``|``) on one of ``SLOTS`` hash slots; a global table
(no key) is placed by its table name. The hash is XXH64 with seed 42, the one Spark's
``xxhash64`` computes, so ``pmod(xxhash64(col), 16384)`` in Spark SQL gives the same slot
(tests/vectors/slots.json holds vectors checked against this module, the server's kernel
and Spark). ``ShardMap`` parses, validates and serialises the shard map file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAP_VERSION",
    "SEED",
    "SLOTS",
    "Shard",
    "ShardMap",
    "ShardMapError",
    "slot",
    "split_slots",
    "xxh64",
]

SLOTS = 16384
SEED = 42
MAP_VERSION = 1

_MASK = 0xFFFFFFFFFFFFFFFF
# The five primes of the XXH64 specification.
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK


def _round(acc: int, lane: int) -> int:
    acc = (acc + lane * _P2) & _MASK
    return (_rotl(acc, 31) * _P1) & _MASK


def _merge(acc: int, val: int) -> int:
    acc ^= _round(0, val)
    return (acc * _P1 + _P4) & _MASK


def xxh64(data: bytes, seed: int = SEED) -> int:
    """XXH64 of ``data`` as an unsigned 64-bit integer."""
    n = len(data)
    i = 0
    if n >= 32:
        v1 = (seed + _P1 + _P2) & _MASK
        v2 = (seed + _P2) & _MASK
        v3 = seed & _MASK
        v4 = (seed - _P1) & _MASK
        stop = n - 32
        while i <= stop:
            v1 = _round(v1, int.from_bytes(data[i:i + 8], "little"))
            v2 = _round(v2, int.from_bytes(data[i + 8:i + 16], "little"))
            v3 = _round(v3, int.from_bytes(data[i + 16:i + 24], "little"))
            v4 = _round(v4, int.from_bytes(data[i + 24:i + 32], "little"))
            i += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _MASK
        for v in (v1, v2, v3, v4):
            h = _merge(h, v)
    else:
        h = (seed + _P5) & _MASK
    h = (h + n) & _MASK
    while i + 8 <= n:
        h ^= _round(0, int.from_bytes(data[i:i + 8], "little"))
        h = (_rotl(h, 27) * _P1 + _P4) & _MASK
        i += 8
    if i + 4 <= n:
        h ^= (int.from_bytes(data[i:i + 4], "little") * _P1) & _MASK
        h = (_rotl(h, 23) * _P2 + _P3) & _MASK
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _MASK
        h = (_rotl(h, 11) * _P1) & _MASK
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _MASK
    h ^= h >> 29
    h = (h * _P3) & _MASK
    h ^= h >> 32
    return h


def slot(text: str) -> int:
    """The hash slot of a canonical key string (or of a global table's name).

    Spark's ``pmod(xxhash64(text), 16384)`` reads the hash as a signed long; 16384 divides
    2**64, so its non-negative remainder equals the unsigned hash's low 14 bits."""
    return xxh64(text.encode("utf-8", "surrogatepass")) % SLOTS


class ShardMapError(ValueError):
    """A shard map that cannot be used; ``field`` names the offending part
    (``"shards[1].ranges[0]"``, ``"slot 5462"`` ...)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"shard map: {field}: {message}")
        self.field = field
        self.message = message


_ADDRESS_KEYS = ("tcp", "http", "admin", "tcps", "https")
_REQUIRED_ADDRESSES = ("tcp", "http")


@dataclass(frozen=True, slots=True)
class Shard:
    """One shard: its id, its half-open slot ranges and its addresses (``tcp`` is
    ``host:port``; ``http``/``https`` are URLs; ``admin``/``tcps``/``https`` optional)."""

    id: str
    ranges: tuple[tuple[int, int], ...]
    tcp: str
    http: str
    admin: str | None = None
    tcps: str | None = None
    https: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "ranges": [list(r) for r in self.ranges]}
        for name in _ADDRESS_KEYS:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


def _int_field(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ShardMapError(field, f"must be an integer, got {type(value).__name__}")
    return value


def _parse_shard(obj: Any, where: str) -> Shard:
    if not isinstance(obj, dict):
        raise ShardMapError(where, "must be an object")
    unknown = sorted(set(obj) - {"id", "ranges", *_ADDRESS_KEYS})
    if unknown:
        raise ShardMapError(f"{where}.{unknown[0]}", "unknown field")
    shard_id = obj.get("id")
    if not isinstance(shard_id, str) or not shard_id:
        raise ShardMapError(f"{where}.id", "must be a non-empty string")
    addresses: dict[str, str | None] = {}
    for name in _ADDRESS_KEYS:
        value = obj.get(name)
        if value is None and name not in _REQUIRED_ADDRESSES:
            addresses[name] = None
            continue
        if not isinstance(value, str) or not value:
            raise ShardMapError(f"{where}.{name}", "must be a non-empty string")
        addresses[name] = value
    raw_ranges = obj.get("ranges")
    if not isinstance(raw_ranges, list):
        raise ShardMapError(f"{where}.ranges", "must be a list of [start, end) pairs")
    ranges: list[tuple[int, int]] = []
    for j, pair in enumerate(raw_ranges):
        field = f"{where}.ranges[{j}]"
        if not isinstance(pair, list) or len(pair) != 2:
            raise ShardMapError(field, "must be a [start, end) pair")
        start = _int_field(pair[0], field)
        end = _int_field(pair[1], field)
        if not 0 <= start < end <= SLOTS:
            raise ShardMapError(field, f"needs 0 <= start < end <= {SLOTS}, got [{start}, {end}]")
        ranges.append((start, end))
    tcp, http = addresses["tcp"], addresses["http"]
    assert tcp is not None and http is not None  # required above
    return Shard(shard_id, tuple(ranges), tcp, http, addresses["admin"], addresses["tcps"],
                 addresses["https"])


class ShardMap:
    """A validated shard map: every slot owned by exactly one shard."""

    __slots__ = ("_by_id", "_owners", "epoch", "shards")

    def __init__(self, epoch: int, shards: list[Shard] | tuple[Shard, ...]) -> None:
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 1:
            raise ShardMapError("epoch", f"must be an integer >= 1, got {epoch!r}")
        if not shards:
            raise ShardMapError("shards", "must list at least one shard")
        self.epoch = epoch
        self.shards = tuple(shards)
        self._by_id: dict[str, int] = {}
        owners = [-1] * SLOTS
        for index, shard in enumerate(self.shards):
            if shard.id in self._by_id:
                raise ShardMapError(f"shards[{index}].id", f"duplicate shard id {shard.id!r}")
            self._by_id[shard.id] = index
            for start, end in shard.ranges:
                for s in range(start, end):
                    if owners[s] != -1:
                        other = self.shards[owners[s]].id
                        raise ShardMapError(
                            f"slot {s}", f"owned by both {other!r} and {shard.id!r}")
                    owners[s] = index
        if -1 in owners:
            raise ShardMapError(f"slot {owners.index(-1)}", "owned by no shard")
        self._owners = bytes(owners) if len(self.shards) <= 256 else tuple(owners)

    # -- reading ------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, obj: Any) -> ShardMap:
        if not isinstance(obj, dict):
            raise ShardMapError("map", "must be a JSON object")
        unknown = sorted(set(obj) - {"version", "epoch", "slots", "shards"})
        if unknown:
            raise ShardMapError(unknown[0], "unknown field")
        if obj.get("version") != MAP_VERSION or isinstance(obj.get("version"), bool):
            raise ShardMapError("version", f"must be {MAP_VERSION}, got {obj.get('version')!r}")
        if obj.get("slots") != SLOTS or isinstance(obj.get("slots"), bool):
            raise ShardMapError("slots", f"must be {SLOTS}, got {obj.get('slots')!r}")
        raw_shards = obj.get("shards")
        if not isinstance(raw_shards, list):
            raise ShardMapError("shards", "must be a list")
        shards = [_parse_shard(s, f"shards[{i}]") for i, s in enumerate(raw_shards)]
        return cls(obj.get("epoch"), shards)  # type: ignore[arg-type]  # checked there

    @classmethod
    def from_json(cls, text: str | bytes) -> ShardMap:
        try:
            obj = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ShardMapError("map", f"not valid JSON: {exc}") from None
        return cls.from_dict(obj)

    @classmethod
    def load(cls, path: str) -> ShardMap:
        """Read a shard map file; an unreadable file is a ShardMapError naming it."""
        try:
            with open(path, "rb") as f:
                data = f.read(16 * 1024 * 1024 + 1)
        except OSError as exc:
            raise ShardMapError("file", f"cannot read {path!r}: {exc.strerror}") from None
        if len(data) > 16 * 1024 * 1024:
            raise ShardMapError("file", f"{path!r} is larger than 16 MiB")
        return cls.from_json(data)

    # -- writing ------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {"version": MAP_VERSION, "epoch": self.epoch, "slots": SLOTS,
                "shards": [s.to_dict() for s in self.shards]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    # -- lookups ------------------------------------------------------------------------

    def owner(self, slot_number: int) -> Shard:
        """The shard owning a slot (0 <= slot < SLOTS)."""
        return self.shards[self._owners[slot_number]]

    def owner_of(self, text: str) -> Shard:
        """The shard owning a canonical key string (or a global table's name)."""
        return self.shards[self._owners[slot(text)]]

    def shard(self, shard_id: str) -> Shard:
        """The shard with this id; KeyError naming it if the map has none."""
        index = self._by_id.get(shard_id)
        if index is None:
            raise KeyError(f"shard map has no shard {shard_id!r} "
                           f"(ids: {', '.join(self._by_id)})")
        return self.shards[index]

    def owned_bitmap(self, shard_id: str) -> bytes:
        """One bit per slot (slot s at byte s >> 3, bit s & 7), set for the slots
        ``shard_id`` owns: what the server tests on the push path."""
        self.shard(shard_id)  # KeyError naming an unknown id
        index = self._by_id[shard_id]
        bits = bytearray(SLOTS // 8)
        for s in range(SLOTS):
            if self._owners[s] == index:
                bits[s >> 3] |= 1 << (s & 7)
        return bytes(bits)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ShardMap) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(self.to_json())

    def __repr__(self) -> str:
        return f"ShardMap(epoch={self.epoch}, shards={[s.id for s in self.shards]})"


def split_slots(n: int) -> list[tuple[int, int]]:
    """``n`` contiguous half-open ranges of near-equal size covering every slot once
    (3 shards: [0, 5462), [5462, 10923), [10923, 16384))."""
    if not 1 <= n <= SLOTS:
        raise ValueError(f"shard count must be in 1..{SLOTS}, got {n}")
    bounds = [-(-i * SLOTS // n) for i in range(n + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(n)]
