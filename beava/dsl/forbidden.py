"""Stubs for features the DSL deliberately lacks (spec/sdk.md §12): calling them raises a
``RegistrationError`` with the seed's code instead of an ``AttributeError``."""

from __future__ import annotations

from typing import Any, NoReturn

from beava.errors import RegistrationError

__all__ = ["session", "union"]


def session(*args: Any, **kwargs: Any) -> NoReturn:
    """Session windows are not supported: always raises ``RegistrationError``."""
    raise RegistrationError(
        code="session_windows_not_supported_in_v0",
        message="session windows are not supported; use a sliding window such as window='30m'",
    )


def union(*events: Any) -> NoReturn:
    """Unions of event streams are not supported: always raises ``RegistrationError``."""
    raise RegistrationError(
        code="unions_not_supported_in_v0",
        message="unions are not supported; push each kind of event to its own event source",
    )
