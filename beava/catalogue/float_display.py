"""How a float is spelled where the reference writes it with Rust's `{}` (histogram bucket
edges, `cast(x, str)`): read by the expression runtime and the operator kernels alike."""

from __future__ import annotations

import decimal
import math


def fmt_f64_display(x: float) -> str:
    """Rust `{}` formatting of a float: positional, shortest round-trip digits."""
    if x != x:
        return "NaN"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    text = format(decimal.Decimal(repr(x)), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text
