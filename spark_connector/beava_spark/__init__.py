"""beava-spark: push Spark DataFrames into beava feature servers.

``push_dataframe(df, event, url, ...)`` streams each partition over one persistent framed
TCP connection (pipelined OP_PUSH_MANY batches) and returns PushTotals.
``historical_features(spine, events, registry)`` computes point-in-time feature values over
history with the server's own engine inside Spark tasks; ``backfill(events, registry, url)``
installs the state history gives into a running server's tables. pyspark is
imported only where Spark is used, so the routing helpers (``server_for_key`` ...) work
without it, e.g. in a service that reads features from sharded servers.
"""

from __future__ import annotations

from typing import Any

from .backfill import BackfillError, BackfillTotals, TableBackfill, backfill
from .conversion import WIRE_TYPES, ConversionPlan, FieldConversion, plan_conversion
from .driver import push_dataframe
from .errors import (
    BeavaSparkError,
    ConversionError,
    PartitionPushError,
    PushFailedError,
    RowsRejectedError,
    SchemaMismatchError,
    ServerCheckError,
)
from .event_schema import EventSchema
from .historical import HistoricalReplayError, historical_features
from .progress import Progress
from .routing import canonical_key, jump_hash, key_digest, keystr, server_for_key, shard_for_key
from .totals import PushTotals, Rejection, ServerTotals

__version__ = "0.1.0"


def register(spark: Any) -> None:
    """Make ``df.write.format("beava")`` and ``df.writeStream.format("beava")`` available
    in ``spark`` (pyspark >= 4.1 and pyarrow; see ``beava_spark.datasource``)."""
    from .datasource import register as register_source

    register_source(spark)


def last_write() -> Any:
    """The latest ``format("beava")`` write (or micro-batch) committed or aborted in this
    process since ``register``: a ``WriteResult`` (``.totals``, ``.batch_id``,
    ``.failed``), or None."""
    from .datasource import last_write as latest

    return latest()


__all__ = [
    "WIRE_TYPES",
    "BackfillError",
    "BackfillTotals",
    "BeavaSparkError",
    "ConversionError",
    "ConversionPlan",
    "EventSchema",
    "FieldConversion",
    "HistoricalReplayError",
    "PartitionPushError",
    "Progress",
    "PushFailedError",
    "PushTotals",
    "Rejection",
    "RowsRejectedError",
    "SchemaMismatchError",
    "ServerCheckError",
    "ServerTotals",
    "TableBackfill",
    "__version__",
    "backfill",
    "canonical_key",
    "historical_features",
    "jump_hash",
    "key_digest",
    "keystr",
    "last_write",
    "plan_conversion",
    "push_dataframe",
    "register",
    "server_for_key",
    "shard_for_key",
]
