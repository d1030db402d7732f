"""SDK exceptions (spec/sdk.md §10).

``TransportError`` is the wire client's own class (a ``ConnectionError``): the App lets it
propagate unchanged, so ``except bv.TransportError`` also catches its subclasses (closed
connection, framing error, and ``Timeout``, which is also a ``TimeoutError``). It is loaded
on first access: importing the wire client costs tens of milliseconds that code using only
the DSL should not pay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from beava_client.errors import TransportError

__all__ = [
    "VALIDATION_ERROR_KINDS",
    "BinaryNotFoundError",
    "DescriptorError",
    "RegistrationError",
    "TransportError",
    "ValidationError",
]

VALIDATION_ERROR_KINDS: frozenset[str] = frozenset({
    "cycle",
    "missing_upstream",
    "schema_mismatch",
    "bad_return_type",
    "unknown_field_type",
    "table_key_invalid",
    "registration_conflict",
    "duplicate_name",
})


@dataclass(frozen=True)
class ValidationError:
    """One structured validation finding (kept for compatibility; never raised)."""

    kind: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"[{self.kind}] {self.path}: {self.message}"


class RegistrationError(Exception):
    """An error the server reported (any method), or a client-side check with a wire code.

    ``details`` is the whole decoded error body for server errors (``{}`` otherwise).
    """

    def __init__(
        self,
        *,
        code: str,
        path: str = "",
        message: str = "",
        errors: list[ValidationError] | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        self.code = code
        self.path = path
        self.message = message
        self.errors: list[ValidationError] = [] if errors is None else list(errors)
        self.details: dict[str, Any] = {} if details is None else details
        super().__init__(self._text())

    def _text(self) -> str:
        if self.path:
            return f"[{self.code}] {self.path}: {self.message}"
        return f"[{self.code}] {self.message}"

    def __str__(self) -> str:
        return self._text()

    def __reduce__(self) -> tuple[Any, ...]:
        # The constructor is keyword-only, so the default (args-based) pickling cannot work.
        return (
            _rebuild,
            (type(self), self.code, self.path, self.message, self.errors, self.details),
        )


def _rebuild(
    cls: type[RegistrationError],
    code: str,
    path: str,
    message: str,
    errors: list[ValidationError],
    details: dict[str, Any],
) -> RegistrationError:
    return cls(code=code, path=path, message=message, errors=errors, details=details)


class DescriptorError(RegistrationError, TypeError):
    """A structural error found while decorating (seed codes such as ``bad_return_type``);
    also a ``TypeError``, as beava 0.0.6 raised for these cases."""


class BinaryNotFoundError(Exception):
    """Embed mode could not find the server executable to start."""


def __getattr__(name: str) -> Any:
    if name == "TransportError":
        from beava_client.errors import TransportError

        return TransportError
    raise AttributeError(f"module 'beava.errors' has no attribute {name!r}")
