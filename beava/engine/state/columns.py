"""Operator name -> state column class, over every operator family (DESIGN.md §3)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Protocol

from beava._fast.ops import (
    ops_bloom_member,
    ops_buffer,
    ops_core,
    ops_decay,
    ops_entropy,
    ops_geo,
    ops_n_unique,
    ops_point,
    ops_quantile,
    ops_recency,
    ops_top_k,
    ops_velocity,
    sketch_base,
)
from beava._fast.ops.column import Column
from beava.engine.registry import FeatureSpec

__all__ = ["COLUMNS", "column_class", "family_counters", "make_column"]


class _Family(Protocol):
    """An op family module."""

    @property
    def COLUMNS(self) -> Mapping[str, type[Column]]: ...


class _Counting(Protocol):
    """A kernel module that keeps process-wide metric counters."""

    def counters(self) -> dict[str, int]: ...


_FAMILIES: tuple[_Family, ...] = (
    ops_core, ops_n_unique, ops_quantile, ops_top_k, ops_entropy, ops_bloom_member, ops_point,
    ops_recency, ops_buffer, ops_decay, ops_velocity, ops_geo,
)
# ops_core's windowed buckets and sketch_base's bucket lists both count reclaims.
_COUNTING: tuple[_Counting, ...] = (ops_core, sketch_base, ops_entropy)


def _merge(*tables: Mapping[str, type[Column]]) -> Mapping[str, type[Column]]:
    merged: dict[str, type[Column]] = {}
    for table in tables:
        for op, cls in table.items():
            if op in merged:
                raise RuntimeError(f"op {op!r} defined by two families")
            merged[op] = cls
    return MappingProxyType(merged)


COLUMNS: Mapping[str, type[Column]] = _merge(*(family.COLUMNS for family in _FAMILIES))


def column_class(op: str) -> type[Column]:
    """The Column subclass of a canonical op name (KeyError if no family implements it)."""
    return COLUMNS[op]


def make_column(
    feature: FeatureSpec, where: Callable[[Mapping[str, Any]], bool] | None
) -> Column:
    """A new, empty state column for ``feature``; ``where`` is its compiled predicate."""
    params = dict(feature.params)
    return COLUMNS[feature.op](
        feature.name, params.get("field"), where, params, feature.window_ms
    )


def family_counters() -> dict[str, int]:
    """Process-wide metric counters of the op kernels, summed by Prometheus metric name."""
    totals: dict[str, int] = {}
    for module in _COUNTING:
        for name, value in module.counters().items():
            totals[name] = totals.get(name, 0) + value
    return totals
