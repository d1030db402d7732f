"""Key routing across several beava servers: jump consistent hashing of a 64-bit BLAKE2b
digest of the canonical key string (spec/wire.md §7.1).

Each entity always lands on the same server, and growing the server list from n to n + 1
moves only about 1/(n + 1) of the keys (all of them to the new server). Readers use the
same functions to find the server that owns a key. Nothing here needs Spark.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

_U64 = (1 << 64) - 1
_JUMP_MULTIPLIER = 2862933555777941757
_TWO_POW_31 = float(1 << 31)


def keystr(value: Any) -> str:
    """The canonical text of one key value (spec/operators.md §1): strings as is, integers
    in decimal, booleans ``true``/``false``, floats in Rust ``{:?}`` form (``42.0``,
    ``1e16``); ``None`` gives ``""``."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _fmt_f64_debug(value)
    raise TypeError(f"key values must be str, int, bool, float or None, got {type(value).__name__}")


def _fmt_f64_debug(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    text = repr(x)
    if "e" in text:
        mantissa, exponent = text.split("e")
        return f"{mantissa}e{int(exponent)}"
    return text


def canonical_key(values: Sequence[Any]) -> str:
    """The stored key of an entity whose key columns hold ``values`` (spec/wire.md §7.1):
    one column → its key string unescaped; several → each key string with ``|`` written
    as ``%7C``, joined with ``|``."""
    if len(values) == 1:
        return keystr(values[0])
    return "|".join(keystr(v).replace("|", "%7C") for v in values)


def key_digest(key: str) -> int:
    """The 8-byte BLAKE2b digest of the key's UTF-8 bytes (no key, no salt) read as an
    unsigned big-endian integer."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


def jump_hash(digest: int, buckets: int) -> int:
    """Jump consistent hash (Lamping & Veach, 2014) of a 64-bit ``digest`` into
    ``[0, buckets)``."""
    if buckets < 1:
        raise ValueError("buckets must be >= 1")
    key = digest & _U64
    b = -1
    j = 0
    while j < buckets:
        b = j
        key = (key * _JUMP_MULTIPLIER + 1) & _U64
        j = int((b + 1) * (_TWO_POW_31 / float((key >> 33) + 1)))
    return b


def shard_for_key(key: str, servers: int) -> int:
    """The index of the server (out of ``servers``) that owns the canonical ``key``."""
    return jump_hash(key_digest(key), servers)


def server_for_key(key: Any, urls: Sequence[str]) -> str:
    """The URL in ``urls`` that owns ``key``: a canonical key string, a single key value
    (int, bool, float), or a sequence of key values for a composite key."""
    if not urls:
        raise ValueError("urls must not be empty")
    if isinstance(key, str):
        text = key
    elif isinstance(key, (list, tuple)):
        text = canonical_key(key)
    else:
        text = keystr(key)
    return urls[shard_for_key(text, len(urls))]


class LineRouter:
    """Routes JSON body lines (one event body per line) to Spark partitions so that each
    partition holds the keys of exactly one server: partition ``p`` belongs to server
    ``p % servers``. A key's partition among its server's ``partitions_per_server`` comes
    from the same digest, so all rows of one entity stay in one partition.

    The key values are read back from the JSON line, so they are exactly the values the
    server groups by. A missing (null) key value counts as ``""``.
    """

    def __init__(self, key_fields: Sequence[str], servers: int, partitions_per_server: int = 1
                 ) -> None:
        if not key_fields:
            raise ValueError("key_fields must name at least one field")
        if servers < 1 or partitions_per_server < 1:
            raise ValueError("servers and partitions_per_server must be >= 1")
        self.key_fields = tuple(key_fields)
        self.servers = servers
        self.partitions_per_server = partitions_per_server
        self._decode: Any = None

    @property
    def partitions(self) -> int:
        """The number of partitions rows are routed to."""
        return self.servers * self.partitions_per_server

    def __getstate__(self) -> dict[str, Any]:
        # The decoder holds a dynamically built Struct type: rebuilt where it is used.
        return {"key_fields": self.key_fields, "servers": self.servers,
                "partitions_per_server": self.partitions_per_server}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._decode = None

    def _build_decoder(self) -> Any:
        import msgspec

        names = [f"k{i}" for i in range(len(self.key_fields))]
        key_type = msgspec.defstruct(
            "RoutingKey", [(n, Any, None) for n in names],
            rename=dict(zip(names, self.key_fields, strict=True)), array_like=False,
        )
        decoder = msgspec.json.Decoder(key_type)
        astuple = msgspec.structs.astuple
        return lambda line: astuple(decoder.decode(line))

    def key_of(self, line: bytes | str) -> str:
        """The canonical key of the body ``line``."""
        if self._decode is None:
            self._decode = self._build_decoder()
        return canonical_key(self._decode(line))

    def partition_of(self, line: bytes | str) -> int:
        """The partition index of the body ``line``."""
        digest = key_digest(self.key_of(line))
        shard = jump_hash(digest, self.servers)
        return shard + self.servers * (digest % self.partitions_per_server)

    def __call__(self, line: bytes) -> tuple[int, bytes]:
        return self.partition_of(line), line
