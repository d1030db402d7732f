"""Type stub of reply_values.pyx."""

from typing import Any

# ``value`` with every non-finite float (at any depth) as None; ``value`` itself when it
# holds none.
def finite_or_none(value: Any) -> Any: ...
