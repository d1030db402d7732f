"""beava: a real-time feature server and its Python SDK (``import beava as bv``).

The SDK names are loaded lazily, on first access: ``python -m beava`` (the server) imports
this package, and its start-up must not pay for the SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    # decorators
    "event", "table",
    # expressions
    "col", "lit",
    # clients
    "App", "AsyncApp",
    # operators (54)
    "count", "sum", "mean", "min", "max", "var", "std", "ratio", "n_unique", "quantile", "top_k",
    "bloom_member", "entropy", "first", "last", "first_n", "last_n", "lag", "first_seen",
    "last_seen", "age", "has_seen", "time_since", "time_since_last_n", "streak", "max_streak",
    "negative_streak", "first_seen_in_window", "ewma", "ewvar", "ew_zscore", "decayed_sum",
    "decayed_count", "twa", "rate_of_change", "inter_arrival_stats", "burst_count",
    "delta_from_prev", "trend", "trend_residual", "outlier_count", "value_change_count", "z_score",
    "histogram", "hour_of_day_histogram", "dow_hour_histogram", "seasonal_deviation",
    "event_type_mix", "most_recent_n", "reservoir_sample", "geo_velocity", "geo_distance",
    "geo_spread", "distance_from_home",
    # alias
    "ema",
    # deprecated aliases
    "avg", "variance", "stddev", "count_distinct", "percentile",
    # errors
    "RegistrationError", "ValidationError", "BinaryNotFoundError", "TransportError",
    "DescriptorError",
    # stream types
    "Event", "Table",
    # forbidden-feature stubs
    "session", "union",
    # data
    "demo",
    # compiler
    "compile_register_payload",
]

_OPERATOR_NAMES = frozenset(__all__[__all__.index("count") : __all__.index("RegistrationError")])

# public name -> module that defines it
_MODULES: dict[str, str] = {
    **dict.fromkeys(_OPERATOR_NAMES, "beava.dsl.operators"),
    "event": "beava.dsl.events",
    "Event": "beava.dsl.chain",
    "table": "beava.dsl.tables",
    "Table": "beava.dsl.chain",
    "col": "beava.dsl.expressions",
    "lit": "beava.dsl.expressions",
    "compile_register_payload": "beava.dsl.compiler",
    "session": "beava.dsl.forbidden",
    "union": "beava.dsl.forbidden",
    "App": "beava.app",
    "AsyncApp": "beava.app",
    "RegistrationError": "beava.errors",
    "ValidationError": "beava.errors",
    "BinaryNotFoundError": "beava.errors",
    "TransportError": "beava.errors",
    "DescriptorError": "beava.errors",
    "PushError": "beava.errors",  # module attributes, not in __all__ (docs/sdk.md)
    "ReadError": "beava.errors",
    "FeatureNotFoundError": "beava.errors",
    "VALIDATION_ERROR_KINDS": "beava.errors",  # module attribute, not in __all__
    "WindowIgnoredWarning": "beava.dsl.operators",  # module attribute, not in __all__
    "demo": "beava.demo",
}

if TYPE_CHECKING:
    from beava.app import App, AsyncApp
    from beava.demo import demo
    from beava.dsl.chain import Event, Table
    from beava.dsl.compiler import compile_register_payload
    from beava.dsl.events import event
    from beava.dsl.expressions import col, lit
    from beava.dsl.forbidden import session, union
    from beava.dsl.operators import WindowIgnoredWarning as WindowIgnoredWarning
    from beava.dsl.operators import (
        age,
        avg,
        bloom_member,
        burst_count,
        count,
        count_distinct,
        decayed_count,
        decayed_sum,
        delta_from_prev,
        distance_from_home,
        dow_hour_histogram,
        ema,
        entropy,
        event_type_mix,
        ew_zscore,
        ewma,
        ewvar,
        first,
        first_n,
        first_seen,
        first_seen_in_window,
        geo_distance,
        geo_spread,
        geo_velocity,
        has_seen,
        histogram,
        hour_of_day_histogram,
        inter_arrival_stats,
        lag,
        last,
        last_n,
        last_seen,
        max,
        max_streak,
        mean,
        min,
        most_recent_n,
        n_unique,
        negative_streak,
        outlier_count,
        percentile,
        quantile,
        rate_of_change,
        ratio,
        reservoir_sample,
        seasonal_deviation,
        std,
        stddev,
        streak,
        sum,
        time_since,
        time_since_last_n,
        top_k,
        trend,
        trend_residual,
        twa,
        value_change_count,
        var,
        variance,
        z_score,
    )
    from beava.dsl.tables import table
    from beava.errors import VALIDATION_ERROR_KINDS as VALIDATION_ERROR_KINDS
    from beava.errors import (
        BinaryNotFoundError,
        DescriptorError,
        RegistrationError,
        TransportError,
        ValidationError,
    )
    from beava.errors import FeatureNotFoundError as FeatureNotFoundError
    from beava.errors import PushError as PushError
    from beava.errors import ReadError as ReadError


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'beava' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    """The public names and the module's dunders: not what this module imports for itself
    (``importlib``, ``Any``, ...) nor its private tables."""
    return sorted({*_MODULES, *(name for name in globals() if name.startswith("__"))})
