"""Tokens and TLS settings shared by every client (docs: "Access control and TLS").

``token``: the bearer token sent to a server with access control (HTTP: an
``Authorization: Bearer`` header on every request; framed TCP: an OP_AUTH frame first on
every connection). Default: the ``BEAVA_TOKEN`` environment variable.

``tls``: True (``https://``, ``tcps://``) verifies the server against ``ca`` (a PEM file;
default: ``BEAVA_CA``, else the system's trust store); an ``ssl.SSLContext`` is used as
given (e.g. with a client certificate for mutual TLS).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping

TOKEN_ENV = "BEAVA_TOKEN"
CA_ENV = "BEAVA_CA"


def resolve_token(token: str | None) -> str | None:
    """``token``, else ``$BEAVA_TOKEN`` (None when neither is set or both are empty)."""
    if token is None:
        token = os.environ.get(TOKEN_ENV)
    if token is not None and not isinstance(token, str):
        raise TypeError(f"token must be a str, got {type(token).__name__}")
    return token or None


def bearer_headers(token: str | None) -> Mapping[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def client_ssl_context(tls: bool | ssl.SSLContext, ca: str | None) -> ssl.SSLContext | None:
    """The context a connection is wrapped in: None without TLS."""
    if isinstance(tls, ssl.SSLContext):
        return tls
    if not tls:
        return None
    cafile = ca if ca is not None else (os.environ.get(CA_ENV) or None)
    try:
        return ssl.create_default_context(cafile=cafile)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot load CA file {cafile!r}: {exc}") from None
