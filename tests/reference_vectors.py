"""Reading the recorded conformance vectors (tests/conformance/vectors, copies of the shared
set; format in its README).

Shared by the offline register replay and the live error-code tests: where the recorded
reference behaviour is, and how to read the reference's exact text that a vector keeps in a
`{"$comment": "reference: ..."}` matcher (register error paths are normative,
spec/registry.md §12.5, but the runner only checks their type).
"""

from __future__ import annotations

import json
from typing import Any

from tests.support import CONFORMANCE_VECTORS

REFERENCE_PREFIX = "reference: "


def load_scenarios(file_name: str) -> list[dict[str, Any]]:
    """The scenarios of one vector file (a missing file raises: missing data never skips)."""
    scenarios: list[dict[str, Any]] = json.loads(
        (CONFORMANCE_VECTORS / file_name).read_text())["scenarios"]
    return scenarios


def is_matcher(x: Any) -> bool:
    """True for a matcher object: every key starts with `$` (or is the `rel`/`abs` modifier)."""
    return (
        isinstance(x, dict) and bool(x) and any(k.startswith("$") for k in x)
        and all(k.startswith("$") or k in ("rel", "abs") for k in x)
    )


def reference_text(expected: Any) -> str | None:
    """The reference's exact text recorded in a matcher's `$comment`, if there is one."""
    if not is_matcher(expected):
        return None
    comment = str(expected.get("$comment", ""))
    if not comment.startswith(REFERENCE_PREFIX):
        return None
    return comment[len(REFERENCE_PREFIX):]
