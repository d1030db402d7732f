"""``assert_features_eq``: compare feature rows with a float tolerance."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["assert_features_eq"]


def _real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def assert_features_eq(
    got: Mapping[str, Any],
    want: Mapping[str, Any],
    *,
    rel_tol: float = 1e-9,
    abs_tol: float = 1e-12,
) -> None:
    """Assert two feature rows are equal: same keys; floats compared with
    ``math.isclose(got, want, rel_tol=rel_tol, abs_tol=abs_tol)``, everything else with
    ``==``. Raises ``AssertionError`` naming the keys or the feature and both values."""
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    if missing or extra:
        raise AssertionError(f"feature keys differ: missing {missing}, extra {extra}")
    for name, expected in want.items():
        actual = got[name]
        if isinstance(actual, float) or isinstance(expected, float):
            ok = (
                _real(actual) and _real(expected)
                and math.isclose(actual, expected, rel_tol=rel_tol, abs_tol=abs_tol)
            )
        else:
            ok = actual == expected
        if not ok:
            raise AssertionError(f"feature {name!r}: got {actual!r}, want {expected!r}")
