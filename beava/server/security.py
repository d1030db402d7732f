"""Access-control and TLS settings (docs/limits.md, "Access control and TLS").

Resolved with the rest of the configuration (command line > environment > YAML):

- tokens: ``--auth-token-file PATH`` / ``BEAVA_AUTH_TOKEN_FILE`` / YAML ``auth.token_file``
  (one ``<token> <scope>[,<scope>...]`` per line), or inline ``BEAVA_AUTH_TOKENS``
  (``<token>:<scope>[+<scope>...];...``). Giving both a file and the inline variable is an
  error; so is a file that does not parse. Without either, access control is off.
- TLS: ``--tls-cert``/``--tls-key`` (PEM; ``BEAVA_TLS_CERT``/``BEAVA_TLS_KEY``, YAML
  ``tls.cert``/``tls.key``) serve all three listeners over TLS; ``--tls-client-ca``
  (``BEAVA_TLS_CLIENT_CA``, ``tls.client_ca``) also requires a client certificate signed
  by that CA (mutual TLS).

Errors raise :class:`SecurityConfigError` (the server exits with the config error code);
no message ever holds a token.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from beava.protocol.auth import TokenFormatError, TokenTable, parse_token_env, parse_token_file

if TYPE_CHECKING:  # ssl is imported only when TLS is configured
    import ssl

YAML_SCHEMA: dict[str, Any] = {
    "auth": {"token_file": str},
    "tls": {"cert": str, "key": str, "client_ca": str},
}


class SecurityConfigError(ValueError):
    """Invalid access-control or TLS settings."""


@dataclass
class SecurityConfig:
    tokens: TokenTable | None = None
    token_source: str | None = None  # where the tokens came from (a path or the variable)
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    ssl_context: ssl.SSLContext | None = None

    @property
    def auth_enabled(self) -> bool:
        return self.tokens is not None


def _pick(cli: str | None, env: Mapping[str, str], var: str, yaml: Mapping[str, Any],
          key: str) -> str | None:
    if cli is not None:
        return cli
    if var in env:
        return env[var]
    value = yaml.get(key)
    return value if isinstance(value, str) else None


def resolve_security(doc: Mapping[str, Any], env: Mapping[str, str], *,
                     token_file: str | None = None, tls_cert: str | None = None,
                     tls_key: str | None = None,
                     tls_client_ca: str | None = None) -> SecurityConfig:
    """The settings from the YAML document ``doc``, the environment and the command-line
    values given (None: not on the command line); the token file is read and the TLS
    files loaded here, so a bad one stops the start."""
    auth_doc = doc.get("auth") or {}
    tls_doc = doc.get("tls") or {}
    sec = SecurityConfig()
    path = _pick(token_file, env, "BEAVA_AUTH_TOKEN_FILE", auth_doc, "token_file")
    inline = env.get("BEAVA_AUTH_TOKENS")
    if path is not None and inline is not None:
        raise SecurityConfigError("tokens given both in a file and in BEAVA_AUTH_TOKENS: "
                                  "use one")
    try:
        if path is not None:
            sec.tokens = parse_token_file(_read(path, "auth token file"), path)
            sec.token_source = path
        elif inline is not None:
            sec.tokens = parse_token_env(inline)
            sec.token_source = "BEAVA_AUTH_TOKENS"
    except TokenFormatError as exc:
        raise SecurityConfigError(f"invalid auth tokens: {exc}") from None
    sec.tls_cert = _pick(tls_cert, env, "BEAVA_TLS_CERT", tls_doc, "cert")
    sec.tls_key = _pick(tls_key, env, "BEAVA_TLS_KEY", tls_doc, "key")
    sec.tls_client_ca = _pick(tls_client_ca, env, "BEAVA_TLS_CLIENT_CA", tls_doc, "client_ca")
    if (sec.tls_cert is None) != (sec.tls_key is None):
        raise SecurityConfigError("TLS needs both a certificate (--tls-cert) and its key "
                                  "(--tls-key)")
    if sec.tls_client_ca is not None and sec.tls_cert is None:
        raise SecurityConfigError("--tls-client-ca needs --tls-cert and --tls-key")
    if sec.tls_cert is not None and sec.tls_key is not None:
        sec.ssl_context = server_ssl_context(sec.tls_cert, sec.tls_key, sec.tls_client_ca)
    return sec


def _read(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        raise SecurityConfigError(f"{what} not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SecurityConfigError(f"{what} unreadable: {path}: {exc}") from None


def server_ssl_context(cert: str, key: str, client_ca: str | None) -> ssl.SSLContext:
    """A server context (TLS 1.2 or later) with ``cert``/``key``; with ``client_ca``, a
    client certificate signed by it is required."""
    import ssl

    for path, what in ((cert, "TLS certificate"), (key, "TLS key"),
                       (client_ca, "TLS client CA")):
        if path is not None and not os.path.isfile(path):
            raise SecurityConfigError(f"{what} not found: {path}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        raise SecurityConfigError(f"cannot load TLS certificate {cert} with key {key}: "
                                  f"{exc}") from None
    if client_ca is not None:
        try:
            context.load_verify_locations(cafile=client_ca)
        except (ssl.SSLError, OSError) as exc:
            raise SecurityConfigError(f"cannot load TLS client CA {client_ca}: {exc}") from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
