"""Token and TLS trust of a job (options ``token`` and ``ca``; defaults ``$BEAVA_TOKEN``
and ``$BEAVA_CA``), resolved once on the driver and shipped to the tasks with the rest of
their configuration: the CA file is read on the driver and its PEM text travels, so the
executors need neither the variables nor the file."""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from typing import Any

from beava_client.urls import parse_url


@dataclass(frozen=True)
class Access:
    token: str = ""  # "" : no token
    ca_pem: str | None = None  # PEM text of the CA that signed the servers' certificates

    @classmethod
    def resolve(cls, token: str | None = None, ca: str | None = None) -> Access:
        """``token`` / ``ca`` (a PEM file), else ``$BEAVA_TOKEN`` / ``$BEAVA_CA``."""
        if token is None:
            token = os.environ.get("BEAVA_TOKEN", "")
        if ca is None:
            ca = os.environ.get("BEAVA_CA") or None
        pem = None
        if ca is not None:
            try:
                with open(ca, encoding="ascii") as fh:
                    pem = fh.read()
            except (OSError, UnicodeDecodeError) as exc:
                raise ValueError(f"ca: cannot read {ca!r}: {exc}") from None
        return cls(token, pem)

    def __repr__(self) -> str:  # never shows the token
        return f"Access(token={'set' if self.token else 'none'}, ca={self.ca_pem is not None})"

    def client_kwargs(self, url: str) -> dict[str, Any]:
        """The ``token`` / ``tls`` arguments of a client for ``url``."""
        kwargs: dict[str, Any] = {"token": self.token}
        if parse_url(url).tls:
            kwargs["tls"] = (ssl.create_default_context(cadata=self.ca_pem)
                             if self.ca_pem is not None else True)
        return kwargs
