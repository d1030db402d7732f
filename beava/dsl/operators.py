"""Operator functions: ``bv.count``, ``bv.sum``, … (spec/sdk.md §6).

Each returns an ``AggDescriptor``. Parameter kinds (integer / number / list), the ranges
and list lengths the server enforces (the bloom_member sizing included), canonical names
(``ema`` → ``ewma``) and output types all come from the operator catalogue
(``beava.catalogue.operators``); only the client-side bounds the server does not check are
stated here (``_CLIENT_BOUNDS``), and they apply on top of the catalogue's.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any, NoReturn

from beava.catalogue.operators import (
    Bounds,
    OperatorSpec,
    ParamKind,
    ParamSpec,
    WindowMode,
    bloom_problem,
    canonical_op,
    lookup,
)
from beava.dsl.durations import check_duration
from beava.dsl.expressions import Expr, columns_of
from beava.errors import RegistrationError

__all__ = [
    "AggDescriptor",
    "WindowIgnoredWarning",
    "age",
    "avg",
    "bloom_member",
    "burst_count",
    "count",
    "count_distinct",
    "decayed_count",
    "decayed_sum",
    "delta_from_prev",
    "distance_from_home",
    "dow_hour_histogram",
    "ema",
    "entropy",
    "event_type_mix",
    "ew_zscore",
    "ewma",
    "ewvar",
    "first",
    "first_n",
    "first_seen",
    "first_seen_in_window",
    "geo_distance",
    "geo_spread",
    "geo_velocity",
    "has_seen",
    "histogram",
    "hour_of_day_histogram",
    "inter_arrival_stats",
    "lag",
    "last",
    "last_n",
    "last_seen",
    "max",
    "max_streak",
    "mean",
    "min",
    "most_recent_n",
    "n_unique",
    "negative_streak",
    "outlier_count",
    "percentile",
    "quantile",
    "rate_of_change",
    "ratio",
    "reservoir_sample",
    "seasonal_deviation",
    "std",
    "stddev",
    "streak",
    "sum",
    "time_since",
    "time_since_last_n",
    "top_k",
    "trend",
    "trend_residual",
    "twa",
    "value_change_count",
    "var",
    "variance",
    "z_score",
]


@dataclass(frozen=True)
class AggDescriptor:
    """One feature definition; ``to_dict()`` is its wire form before the ``params`` split."""

    op: str
    field: str | None = None
    window: str | None = None
    half_life: str | None = None
    extras: dict[str, Any] = dataclass_field(default_factory=dict)
    where: str | None = None
    # The columns ``where`` reads, checked against the aggregated events by @bv.table.
    where_columns: tuple[str, ...] = dataclass_field(default=(), compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """``{"op", "field"?, "window"?, "half_life"?, "where"?, **extras}``."""
        out: dict[str, Any] = {"op": self.op}
        if self.field is not None:
            out["field"] = self.field
        if self.window is not None:
            out["window"] = self.window
        if self.half_life is not None:
            out["half_life"] = self.half_life
        if self.where is not None:
            out["where"] = self.where
        out.update(self.extras)
        return out


# Client-side checks of sdk.md §6.2 on params the catalogue leaves unbounded (the engine
# would fall back to a default). They raise ValueError, so they carry no wire code.
_AT_LEAST_1 = Bounds(1, None, False, False, "")
_POSITIVE = Bounds(0, None, True, False, "")
_CLIENT_BOUNDS: Mapping[tuple[str, str], Bounds] = {
    ("bloom_member", "expected_n"): _AT_LEAST_1,
    ("outlier_count", "sigma"): _POSITIVE,
    ("event_type_mix", "max_categories"): _AT_LEAST_1,
    ("most_recent_n", "n"): _AT_LEAST_1,
    ("reservoir_sample", "samples"): _AT_LEAST_1,
    ("distance_from_home", "samples"): _AT_LEAST_1,
}

_MISSING = object()


class WindowIgnoredWarning(UserWarning):
    """A ``window=`` given to an operator that always aggregates over the entity's whole
    lifetime: the window is sent (as beava 0.0.6 sends it) and the server ignores it.
    Silence it with ``warnings.filterwarnings("ignore", category=bv.WindowIgnoredWarning)``.
    """


def _warn_window_ignored(op: str, window: str) -> None:
    warnings.warn(
        f"bv.{op}() aggregates over the entity's whole lifetime; window={window!r} is sent "
        "to the server and ignored there",
        WindowIgnoredWarning,
        stacklevel=4,
    )


def _spec(op: str) -> OperatorSpec:
    spec = lookup(op)
    if spec is None:  # a programming error: every function below names a catalogue op
        raise LookupError(f"{op!r} is not in the operator catalogue")
    return spec


def _schema_mismatch(op: str, what: str, value: object) -> NoReturn:
    raise RegistrationError(
        code="schema_mismatch",
        path=op,
        message=(
            f"bv.{op}() {what} must be a column name str, got {value!r}; to aggregate a "
            "computed value, derive a column first with .with_columns(name=<expr>) and "
            "pass that column's name"
        ),
    )


def _field(op: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        _schema_mismatch(op, "field", value)
    return value


def _bounds(op: str, param: ParamSpec) -> tuple[Bounds, ...]:
    """The server's range of a param (catalogue), then the client-side one, if any."""
    client = _CLIENT_BOUNDS.get((op, param.name))
    return tuple(b for b in (param.bounds, client) if b is not None)


def _check_range(op: str, name: str, value: float, bounds: tuple[Bounds, ...]) -> None:
    for b in bounds:
        if not b.contains(value):
            raise ValueError(f"bv.{op}(): {name}={value!r} is out of range {b.describe()}")


def _check_items(op: str, param: ParamSpec, items: list[Any]) -> None:
    if param.max_items is not None and len(items) > param.max_items:
        raise ValueError(
            f"bv.{op}(): {param.name} has {len(items)} entries; at most {param.max_items}"
        )


def _param(op: str, spec: OperatorSpec, name: str, value: Any) -> Any:
    """Validate one op-specific parameter by its catalogue kind; returns the wire value."""
    param = spec.param(name)
    if param is None:
        raise LookupError(f"{name!r} is not a parameter of {op!r} in the operator catalogue")
    kind = param.kind
    if kind is ParamKind.UINT:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"bv.{op}(): {name} must be an int, got {type(value).__name__}")
        _check_range(op, name, value, _bounds(op, param))
        return int(value)
    if kind is ParamKind.NUMBER:
        if value is None:
            raise ValueError(f"bv.{op}(): {name} is required")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"bv.{op}(): {name} must be a number, got {type(value).__name__}")
        if not math.isfinite(value):
            raise ValueError(f"bv.{op}(): {name} must be finite, got {value!r}")
        _check_range(op, name, value, _bounds(op, param))
        return value
    if kind is ParamKind.NUMBERS:
        buckets = _buckets(op, name, value)
        _check_items(op, param, buckets)
        return buckets
    if kind is ParamKind.STRINGS:
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"bv.{op}(): {name} must be None or a list of str, got {value!r}")
        _check_items(op, param, list(value))
        return list(value)
    if kind is ParamKind.DURATION:
        return check_duration(value, name, allow_forever=False, required=param.required)
    # ParamKind.STRING: lat_field / lon_field name columns
    if not isinstance(value, str) or not value:
        _schema_mismatch(op, name.removesuffix("_field"), value)
    return value


def _buckets(op: str, name: str, value: object) -> list[int | float]:
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"bv.{op}(): {name} must be a non-empty list of numbers")
    out: list[int | float] = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
            raise ValueError(f"bv.{op}(): {name} entries must be numbers (not NaN), got {v!r}")
        if out and not v > out[-1]:
            raise ValueError(f"bv.{op}(): {name} must be strictly increasing, got {value!r}")
        out.append(v)
    return out


def _where(op: str, where: object) -> Expr | None:
    if where is None:
        return None
    if not isinstance(where, Expr):
        raise TypeError(
            f"bv.{op}(): where must be an expression (bv.col(...) ...), got {type(where).__name__}"
        )
    return where


def _agg(
    op: str,
    *,
    field: object = _MISSING,
    extras: tuple[tuple[str, Any], ...] = (),
    window: object = None,
    window_required: bool = False,
    window_forever: bool = True,
    half_life: object = _MISSING,
    baseline_window: object = _MISSING,
    where: object = None,
) -> AggDescriptor:
    """Validate in the order of sdk.md §6.1 and build the descriptor. ``op`` is the name
    the user called (messages); the wire op is its canonical catalogue name. ``_MISSING``
    marks parameters the function does not have."""
    spec = _spec(op)
    checked_field = None if field is _MISSING else _field(op, field)
    checked = {name: _param(op, spec, name, value) for name, value in extras}
    checked_window = check_duration(
        window, "window", allow_forever=window_forever, required=window_required
    )
    if checked_window is not None and spec.window is WindowMode.IGNORED:
        _warn_window_ignored(op, checked_window)
    checked_half_life = None
    if half_life is not _MISSING:
        checked_half_life = check_duration(
            half_life, "half_life", allow_forever=False, required=True
        )
    if baseline_window is not _MISSING:
        # z_score's baseline: not a catalogue param (the server ignores it), window grammar
        checked["baseline_window"] = check_duration(
            baseline_window, "baseline_window", allow_forever=True, required=True
        )
    checked_where = _where(op, where)
    return AggDescriptor(
        op=canonical_op(op),
        field=checked_field,
        window=checked_window,
        half_life=checked_half_life,
        extras=checked,
        where=None if checked_where is None else checked_where.to_expr_string(),
        where_columns=() if checked_where is None else columns_of(checked_where),
    )


# -- A: core scalar ------------------------------------------------------------------------


def count(*, window: str | None = None, where: Expr | None = None) -> AggDescriptor:
    """Number of events that match ``where`` (all events without it). Empty: ``0``."""
    return _agg("count", window=window, where=where)


def sum(field: str, *, window: str | None = None, where: Expr | None = None) -> AggDescriptor:
    """Sum of the numeric values of ``field`` (a float); other values are skipped. Empty:
    ``None``.
    """
    return _agg("sum", field=field, window=window, where=where)


def mean(field: str, *, window: str | None = None, where: Expr | None = None) -> AggDescriptor:
    """Arithmetic mean of the numeric values of ``field``. Empty: ``None``."""
    return _agg("mean", field=field, window=window, where=where)


def min(field: str, *, window: str | None = None, where: Expr | None = None) -> AggDescriptor:
    """Smallest value of ``field``, read back with its own type. Empty: ``None``."""
    return _agg("min", field=field, window=window, where=where)


def max(field: str, *, window: str | None = None, where: Expr | None = None) -> AggDescriptor:
    """Largest value of ``field``, read back with its own type. Empty: ``None``."""
    return _agg("max", field=field, window=window, where=where)


def var(field: str, *, window: str | None = None, where: Expr | None = None) -> AggDescriptor:
    """Sample variance of the numeric values of ``field``; ``None`` below two values."""
    return _agg("var", field=field, window=window, where=where)


def std(field: str, *, window: str | None = None, where: Expr | None = None) -> AggDescriptor:
    """Sample standard deviation of the numeric values of ``field``; ``None`` below two values."""
    return _agg("std", field=field, window=window, where=where)


def ratio(*, window: str | None = None, where: Expr | None = None) -> AggDescriptor:
    """Fraction of the events reaching the feature that match ``where`` (``1.0`` without it).
    Empty: ``None``.
    """
    return _agg("ratio", window=window, where=where)


# -- B: sketches -----------------------------------------------------------------------------


def n_unique(
    field: str, *, window: str | None = None, where: Expr | None = None
) -> AggDescriptor:
    """Number of distinct values of ``field`` (exact while small, then an HLL sketch). Empty:
    ``0``.
    """
    return _agg("n_unique", field=field, window=window, where=where)


def quantile(
    field: str, *, q: float, window: str | None = None, where: Expr | None = None
) -> AggDescriptor:
    """The ``q``-quantile of the numeric values of ``field`` (``0 < q < 1``; a relative-error
    sketch past 256 values). Empty: ``None``.
    """
    return _agg("quantile", field=field, extras=(("q", q),), window=window, where=where)


def top_k(
    field: str, *, k: int, window: str | None = None, where: Expr | None = None
) -> AggDescriptor:
    """The ``k`` most frequent values of ``field`` (``1 <= k <= 1024``), as ``[{"count",
    "value"}]`` by count. Empty: ``[]``.
    """
    return _agg("top_k", field=field, extras=(("k", k),), window=window, where=where)


def bloom_member(
    field: str,
    *,
    expected_n: int | None = None,
    target_fpr: float | None = None,
    where: Expr | None = None,
) -> AggDescriptor:
    """Whether the latest matching value of ``field`` had (probably) been seen before, by a Bloom
    filter; lifetime only. Empty: ``False``.
    """
    extras: list[tuple[str, Any]] = []
    if expected_n is not None:
        extras.append(("expected_n", expected_n))
    if target_fpr is not None:
        extras.append(("target_fpr", target_fpr))
    agg = _agg("bloom_member", field=field, extras=tuple(extras), where=where)
    problem = bloom_problem(
        1024 if expected_n is None else expected_n, 0.01 if target_fpr is None else target_fpr
    )
    if problem is not None:  # the filter the server would refuse to size
        raise ValueError(f"bv.bloom_member(): {problem.reason}")
    return agg


def entropy(
    field: str, *, window: str | None = None, where: Expr | None = None
) -> AggDescriptor:
    """Shannon entropy (bits) of the values of ``field`` (at most 1024 categories). Empty:
    ``0.0``.
    """
    return _agg("entropy", field=field, window=window, where=where)


# -- C: point / ordinal ----------------------------------------------------------------------


def first(field: str, *, where: Expr | None = None) -> AggDescriptor:
    """The first value of ``field``. Empty: ``None``."""
    return _agg("first", field=field, where=where)


def last(field: str, *, where: Expr | None = None) -> AggDescriptor:
    """The latest value of ``field``. Empty: ``None``."""
    return _agg("last", field=field, where=where)


def first_n(field: str, *, n: int, where: Expr | None = None) -> AggDescriptor:
    """The first ``n`` values of ``field`` in arrival order (``1 <= n <= 1024``). Empty: ``[]``."""
    return _agg("first_n", field=field, extras=(("n", n),), where=where)


def last_n(field: str, *, n: int, where: Expr | None = None) -> AggDescriptor:
    """The latest ``n`` values of ``field``, oldest first (``1 <= n <= 1024``). Empty: ``[]``."""
    return _agg("last_n", field=field, extras=(("n", n),), where=where)


def lag(field: str, *, n: int, where: Expr | None = None) -> AggDescriptor:
    """The value of ``field`` ``n`` qualifying events before the latest (``1 <= n <= 1024``);
    ``None`` until there are ``n + 1``.
    """
    return _agg("lag", field=field, extras=(("n", n),), where=where)


# -- D: recency and streaks ------------------------------------------------------------------


def first_seen(*, where: Expr | None = None) -> AggDescriptor:
    """Time (epoch ms) of the first matching event. Empty: ``None``."""
    return _agg("first_seen", where=where)


def last_seen(*, where: Expr | None = None) -> AggDescriptor:
    """Time (epoch ms) of the latest matching event. Empty: ``None``."""
    return _agg("last_seen", where=where)


def age(*, where: Expr | None = None) -> AggDescriptor:
    """Milliseconds from the first matching event to the read. Empty: ``None``."""
    return _agg("age", where=where)


def has_seen(*, where: Expr | None = None) -> AggDescriptor:
    """Whether any matching event was seen. Empty: ``False``."""
    return _agg("has_seen", where=where)


def time_since(*, where: Expr | None = None) -> AggDescriptor:
    """Milliseconds from the latest matching event to the read. Empty: ``None``."""
    return _agg("time_since", where=where)


def time_since_last_n(*, n: int, where: Expr | None = None) -> AggDescriptor:
    """Milliseconds from the ``n``-th latest matching event to the read (``1 <= n <= 1024``);
    ``None`` until ``n`` events.
    """
    return _agg("time_since_last_n", extras=(("n", n),), where=where)


def streak(*, where: Expr | None = None) -> AggDescriptor:
    """Current run of consecutive matching events (reset by a non-matching one). Empty: ``0``."""
    return _agg("streak", where=where)


def max_streak(*, where: Expr | None = None) -> AggDescriptor:
    """Longest run of consecutive matching events so far. Empty: ``0``."""
    return _agg("max_streak", where=where)


def negative_streak(*, where: Expr | None = None) -> AggDescriptor:
    """Current run of consecutive non-matching events. Empty: ``0``."""
    return _agg("negative_streak", where=where)


def first_seen_in_window(*, window: str, where: Expr | None = None) -> AggDescriptor:
    """Whether the latest matching event falls within the last ``window`` (finite) at read time.
    Empty: ``False``.
    """
    return _agg(
        "first_seen_in_window", window=window, window_required=True, window_forever=False,
        where=where,
    )


# -- E: decay --------------------------------------------------------------------------------


def ewma(field: str, *, half_life: str, where: Expr | None = None) -> AggDescriptor:
    """Exponentially weighted moving average of ``field`` (weights halve every ``half_life``).
    Empty: ``None``.
    """
    return _agg("ewma", field=field, half_life=half_life, where=where)


def ema(field: str, *, half_life: str, where: Expr | None = None) -> AggDescriptor:
    """Alias of ``ewma`` (the wire carries ``ewma``)."""
    return _agg("ema", field=field, half_life=half_life, where=where)


def ewvar(field: str, *, half_life: str, where: Expr | None = None) -> AggDescriptor:
    """Exponentially weighted variance of ``field``. Empty: ``None``."""
    return _agg("ewvar", field=field, half_life=half_life, where=where)


def ew_zscore(field: str, *, half_life: str, where: Expr | None = None) -> AggDescriptor:
    """z-score of the latest value of ``field`` against its exponentially weighted mean and
    variance. Empty: ``None``.
    """
    return _agg("ew_zscore", field=field, half_life=half_life, where=where)


def decayed_sum(field: str, *, half_life: str, where: Expr | None = None) -> AggDescriptor:
    """Sum of ``field`` where each value decays by half every ``half_life``. Empty: ``None``."""
    return _agg(
        "decayed_sum", field=field, half_life=half_life, where=where
    )


def decayed_count(*, half_life: str, where: Expr | None = None) -> AggDescriptor:
    """Event count where each event decays by half every ``half_life``. Empty: ``None``."""
    return _agg("decayed_count", half_life=half_life, where=where)


def twa(field: str, *, window: str, where: Expr | None = None) -> AggDescriptor:
    """Time-weighted average of ``field`` up to the latest event, over the entity's lifetime
    (``window`` is required, sent, and ignored by the server). Empty: ``None``.
    """
    return _agg("twa", field=field, window=window, window_required=True, where=where)


# -- F: velocity and anomaly -------------------------------------------------------------------


def rate_of_change(field: str, *, window: str, where: Expr | None = None) -> AggDescriptor:
    """Change of ``field`` per millisecond between the two latest events that are apart in time,
    over the entity's lifetime (``window`` is required, sent, and ignored by the server: a
    warning says so). Empty: ``None``.
    """
    return _agg("rate_of_change", field=field, window=window, window_required=True, where=where)


def inter_arrival_stats(*, window: str, where: Expr | None = None) -> AggDescriptor:
    """Mean gap in milliseconds between consecutive matching events, over the entity's lifetime
    (``window`` is required, sent, and ignored by the server: a warning says so); ``None`` until
    two events.
    """
    return _agg("inter_arrival_stats", window=window, window_required=True, where=where)


def burst_count(
    *, window: str, sub_window: str, where: Expr | None = None
) -> AggDescriptor:
    """The most matching events ever seen inside one ``sub_window`` (aligned to the epoch), over
    the entity's lifetime (``window`` is required, sent, and ignored by the server: a warning
    says so). Empty: ``0``.
    """
    return _agg(
        "burst_count", extras=(("sub_window", sub_window),), window=window,
        window_required=True, where=where,
    )


def delta_from_prev(field: str, *, where: Expr | None = None) -> AggDescriptor:
    """Latest value of ``field`` minus the previous one (a float); ``None`` until two values."""
    return _agg("delta_from_prev", field=field, where=where)


def trend(field: str, *, window: str, where: Expr | None = None) -> AggDescriptor:
    """Least-squares slope of ``field`` per millisecond since the entity's first value, over its
    lifetime (``window`` is required, sent, and ignored by the server). Empty: ``None``.
    """
    return _agg("trend", field=field, window=window, window_required=True, where=where)


def trend_residual(field: str, *, window: str, where: Expr | None = None) -> AggDescriptor:
    """Residual of the latest value of ``field`` against the lifetime trend line (``window`` is
    required, sent, and ignored by the server). Empty: ``None``.
    """
    return _agg("trend_residual", field=field, window=window, window_required=True, where=where)


def outlier_count(
    field: str, *, window: str, sigma: float = 3.0, where: Expr | None = None
) -> AggDescriptor:
    """Number of values of ``field`` more than ``sigma`` standard deviations from the mean of the
    values before them (checked from the sixth value on), over the entity's lifetime (``window``
    is required, sent, and ignored by the server). Empty: ``0``.
    """
    return _agg(
        "outlier_count", field=field, extras=(("sigma", sigma),), window=window,
        window_required=True, where=where,
    )


def value_change_count(field: str, *, window: str, where: Expr | None = None) -> AggDescriptor:
    """Number of times the value of ``field`` differed from the previous one, over the entity's
    lifetime (``window`` is required, sent, and ignored by the server). Empty: ``0``.
    """
    return _agg(
        "value_change_count", field=field, window=window, window_required=True, where=where
    )


def z_score(field: str, *, baseline_window: str, where: Expr | None = None) -> AggDescriptor:
    """z-score of the latest value of ``field`` against the mean and sample deviation of all its
    values (``baseline_window`` is sent and not used). Empty: ``None``.
    """
    return _agg("z_score", field=field, baseline_window=baseline_window, where=where)


# -- G: buffers and distributions --------------------------------------------------------------


def histogram(
    field: str, *, buckets: list[float] | tuple[float, ...], where: Expr | None = None
) -> AggDescriptor:
    """Counts of the values of ``field`` per bucket between the ``buckets`` edges (strictly
    increasing), labelled ``"<b0"``, ``"b0-b1"``, …, ``">=bn"``; all zero when empty.
    """
    return _agg("histogram", field=field, extras=(("buckets", buckets),), where=where)


def hour_of_day_histogram(*, where: Expr | None = None) -> AggDescriptor:
    """Event counts per UTC hour of the day: a list of 24 integers (all zero when empty)."""
    return _agg("hour_of_day_histogram", where=where)


def dow_hour_histogram(*, where: Expr | None = None) -> AggDescriptor:
    """Event counts per UTC day of week and hour: 168 keys ``"Mon-00"`` … ``"Sun-23"`` (all zero
    when empty).
    """
    return _agg("dow_hour_histogram", where=where)


def seasonal_deviation(field: str, *, where: Expr | None = None) -> AggDescriptor:
    """z-score of the latest value of ``field`` against the values seen in the same UTC hour of
    day. Empty: ``None``.
    """
    return _agg("seasonal_deviation", field=field, where=where)


def event_type_mix(
    field: str,
    *,
    categories: list[str] | None = None,
    max_categories: int = 256,
    where: Expr | None = None,
) -> AggDescriptor:
    """Share of each value of ``field`` among the events (``{value: fraction}``; at most
    ``max_categories``, or only ``categories`` when given). Empty: ``{}``.
    """
    extras: list[tuple[str, Any]] = [("max_categories", max_categories)]
    if categories is not None:
        extras.append(("categories", categories))
    return _agg("event_type_mix", field=field, extras=tuple(extras), where=where)


def most_recent_n(field: str, *, n: int, where: Expr | None = None) -> AggDescriptor:
    """The ``n`` latest values of ``field``, oldest first. Empty: ``[]``."""
    return _agg("most_recent_n", field=field, extras=(("n", n),), where=where)


def reservoir_sample(field: str, *, samples: int, where: Expr | None = None) -> AggDescriptor:
    """A uniform sample of ``samples`` values of ``field`` (deterministic reservoir). Empty:
    ``[]``.
    """
    return _agg("reservoir_sample", field=field, extras=(("samples", samples),), where=where)


# -- H: geo ------------------------------------------------------------------------------------


def geo_velocity(*, lat: str, lon: str, where: Expr | None = None) -> AggDescriptor:
    """Highest speed (km/h) seen between consecutive positions (``lat``/``lon`` name the fields);
    ``0.0`` after one position, ``None`` before.
    """
    return _agg("geo_velocity", extras=(("lat_field", lat), ("lon_field", lon)), where=where)


def geo_distance(*, lat: str, lon: str, where: Expr | None = None) -> AggDescriptor:
    """Total distance (km) travelled between consecutive positions. Empty: ``0.0``."""
    return _agg("geo_distance", extras=(("lat_field", lat), ("lon_field", lon)), where=where)


def geo_spread(*, lat: str, lon: str, where: Expr | None = None) -> AggDescriptor:
    """Spread (km) of the positions seen (standard deviation of latitude and longitude, in km);
    ``None`` below two positions.
    """
    return _agg("geo_spread", extras=(("lat_field", lat), ("lon_field", lon)), where=where)


def distance_from_home(
    *, lat: str, lon: str, samples: int = 100, where: Expr | None = None
) -> AggDescriptor:
    """Distance (km) of the latest position from the mean of the last ``samples`` positions.
    Empty: ``None``.
    """
    return _agg(
        "distance_from_home",
        extras=(("lat_field", lat), ("lon_field", lon), ("samples", samples)),
        where=where,
    )


# -- deprecated aliases (sdk.md §6.3) ----------------------------------------------------------


def avg(field: str, **kw: Any) -> AggDescriptor:
    """Deprecated: ``bv.mean``."""
    warnings.warn("bv.avg is deprecated; use bv.mean", DeprecationWarning, stacklevel=2)
    return mean(field, **kw)


def variance(field: str, **kw: Any) -> AggDescriptor:
    """Deprecated: ``bv.var``."""
    warnings.warn("bv.variance is deprecated; use bv.var", DeprecationWarning, stacklevel=2)
    return var(field, **kw)


def stddev(field: str, **kw: Any) -> AggDescriptor:
    """Deprecated: ``bv.std``."""
    warnings.warn("bv.stddev is deprecated; use bv.std", DeprecationWarning, stacklevel=2)
    return std(field, **kw)


def count_distinct(field: str, **kw: Any) -> AggDescriptor:
    """Deprecated: ``bv.n_unique``."""
    warnings.warn(
        "bv.count_distinct is deprecated; use bv.n_unique", DeprecationWarning, stacklevel=2
    )
    return n_unique(field, **kw)


def percentile(field: str, *, p: float, **kw: Any) -> AggDescriptor:
    """Deprecated: ``bv.quantile(q=p)`` (``p`` in (0, 1), not 0-100)."""
    warnings.warn(
        "bv.percentile is deprecated; use bv.quantile(q=...)", DeprecationWarning, stacklevel=2
    )
    return quantile(field, q=p, **kw)
