"""beava-spark: push Spark DataFrames into beava feature servers.

``push_dataframe(df, event, url, ...)`` streams each partition over one persistent framed
TCP connection (pipelined OP_PUSH_MANY batches) and returns PushTotals. pyspark is
imported only where Spark is used, so the routing helpers (``server_for_key`` ...) work
without it, e.g. in a service that reads features from sharded servers.
"""

from __future__ import annotations

from .conversion import WIRE_TYPES, ConversionPlan, FieldConversion, plan_conversion
from .driver import push_dataframe
from .errors import (
    BeavaSparkError,
    ConversionError,
    PartitionPushError,
    RowsRejectedError,
    ServerCheckError,
)
from .progress import Progress
from .routing import canonical_key, jump_hash, key_digest, keystr, server_for_key, shard_for_key
from .totals import PushTotals, Rejection, ServerTotals

__version__ = "0.1.0"

__all__ = [
    "WIRE_TYPES",
    "BeavaSparkError",
    "ConversionError",
    "ConversionPlan",
    "FieldConversion",
    "PartitionPushError",
    "Progress",
    "PushTotals",
    "Rejection",
    "RowsRejectedError",
    "ServerCheckError",
    "ServerTotals",
    "__version__",
    "canonical_key",
    "jump_hash",
    "key_digest",
    "keystr",
    "plan_conversion",
    "push_dataframe",
    "server_for_key",
    "shard_for_key",
]
