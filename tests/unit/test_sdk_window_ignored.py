"""Operators that always aggregate over the whole lifetime warn when given `window=`; the
wire payload keeps the window, as beava 0.0.6 sends it."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import Any

import pytest

import beava as bv
from beava.catalogue.operators import CATALOGUE, WindowMode

LIFETIME_WITH_WINDOW: dict[str, Callable[[], Any]] = {
    "rate_of_change": lambda: bv.rate_of_change("amount", window="1h"),
    "inter_arrival_stats": lambda: bv.inter_arrival_stats(window="1h"),
    "burst_count": lambda: bv.burst_count(window="1h", sub_window="1m"),
    "twa": lambda: bv.twa("amount", window="1h"),
    "trend": lambda: bv.trend("amount", window="1h"),
    "trend_residual": lambda: bv.trend_residual("amount", window="1h"),
    "outlier_count": lambda: bv.outlier_count("amount", window="1h"),
    "value_change_count": lambda: bv.value_change_count("amount", window="1h"),
}


def test_every_ignored_window_op_taking_window_is_covered() -> None:
    takes_window = {
        name for name, spec in CATALOGUE.items()
        if spec.window is WindowMode.IGNORED
        and "window" in inspect.signature(getattr(bv, name)).parameters
    }
    assert takes_window == set(LIFETIME_WITH_WINDOW)


@pytest.mark.parametrize("op", sorted(LIFETIME_WITH_WINDOW))
def test_warns_and_keeps_the_window_on_the_wire(op: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agg = LIFETIME_WITH_WINDOW[op]()
    assert [w.category for w in caught] == [bv.WindowIgnoredWarning]
    message = str(caught[0].message)
    assert f"bv.{op}()" in message and "lifetime" in message and "'1h'" in message
    assert caught[0].filename == __file__  # points at the caller's line
    assert agg.to_dict()["window"] == "1h"


def test_windowed_ops_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bv.count(window="1h")
        bv.quantile("amount", q=0.5, window="24h")
        bv.first_seen_in_window(window="1h")


def test_burst_count_docstring_says_what_it_returns() -> None:
    doc = inspect.getdoc(bv.burst_count) or ""
    assert "most matching events" in doc and "sub_window" in doc
    assert "number of bursts" not in doc.lower()
