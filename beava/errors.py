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
    "FeatureNotFoundError",
    "PushError",
    "ReadError",
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


class _ServerErrorKeys(RegistrationError):
    """The informative keys a server may add to an error object (wire.md §5.1), read from
    ``details["error"]``: ``field``, ``expected``, ``got``, ``hint`` (None when absent)."""

    def _key(self, name: str) -> Any:
        error = self.details.get("error")
        return error.get(name) if isinstance(error, dict) else None

    @property
    def field(self) -> Any:
        return self._key("field")

    @property
    def expected(self) -> Any:
        return self._key("expected")

    @property
    def got(self) -> Any:
        return self._key("got")

    @property
    def hint(self) -> str | None:
        hint = self._key("hint")
        return hint if isinstance(hint, str) else None


class PushError(_ServerErrorKeys):
    """A push the server refused for its data (``invalid_event``, ``unknown_field_v0``,
    ``event_not_found``, ...): ``field``, ``expected`` and ``got`` say what to fix. A
    ``RegistrationError``, as beava 0.0.6 raised, so existing ``except`` clauses still
    catch it."""


class ReadError(_ServerErrorKeys, LookupError):
    """A read naming something the registry does not hold (``unknown_table``,
    ``key_parse_failure``, an unknown feature); ``expected`` lists the nearest registered
    names. Also a ``RegistrationError`` (beava 0.0.6) and a ``LookupError``."""


class FeatureNotFoundError(ReadError):
    """``get``/``batch_get`` named a feature the table does not have. ``code`` stays the wire
    code (``internal_error``, kept for beava 0.0.6 clients); ``missing`` holds the unknown
    names and ``hint`` the nearest known ones."""

    @property
    def missing(self) -> list[str]:
        got = self._key("got")
        return list(got) if isinstance(got, list) else []


class BinaryNotFoundError(Exception):
    """Embed mode could not find the server executable to start."""


def __getattr__(name: str) -> Any:
    if name == "TransportError":
        from beava_client.errors import TransportError

        return TransportError
    raise AttributeError(f"module 'beava.errors' has no attribute {name!r}")
