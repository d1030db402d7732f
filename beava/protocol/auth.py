"""Access control: bearer tokens with scopes (docs/wire.md, "Access control").

Opt-in. Each token grants scopes (``read`` < ``write`` < ``admin``, each granting the ones
below it); every command's scope is a column of the command table
(:mod:`beava.protocol.commands`), so nothing here lists commands.

- HTTP data plane: ``Authorization: Bearer <token>`` on every request but ``/health`` and
  ``/ready``; 401 ``unauthenticated`` without a valid token, 403 ``forbidden`` (with the
  ``scope`` needed) outside the token's scopes (:meth:`AccessControl.authorize_http`).
- Framed TCP: the first frame of a connection is OP_AUTH ``{"token": "..."}``, answered
  OP_AUTH ``{"scopes": [...]}``. Any other first frame, or a token that is not valid, is
  answered ``unauthenticated`` and the connection is closed. Each connection has its own
  route table (:class:`TcpGate`): before OP_AUTH it holds OP_AUTH alone; afterwards the
  commands of its scopes, and for the others a handler answering ``forbidden``. A connection
  without ``write`` never reaches the compiled push pass; routing costs what it cost before.
- Admin sidecar: every path but ``/health``, ``/ready`` and the status page ``/`` (which
  holds no server data: its script fetches the rest with the token the reader enters)
  needs ``admin`` (:meth:`AccessControl.admin`).

Tokens are kept only as SHA-256 digests and compared with :func:`hmac.compare_digest`
against every configured token (no early exit); they are never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Iterable, Mapping

import msgspec

from beava._fast.wire.frame_splitter import encode_frame
from beava.catalogue.errors import BeavaError
from beava.protocol.commands import BY_OP, SCOPE_GRANTS
from beava.protocol.dispatch import FrameDispatch, FrameHandler, error_frame
from beava.protocol.http import HttpRequest, Responder, render_response
from beava.protocol.messages import DECODE_ERRORS, encode_json, encode_msgpack
from beava_client.opcodes import CONTENT_TYPES, CT_JSON, CT_MSGPACK, OP_AUTH, OP_PUSH

ALL_SCOPES = SCOPE_GRANTS["admin"]
# RFC 6750 b64token characters; at least MIN_TOKEN_LENGTH of them.
MIN_TOKEN_LENGTH = 16
_TOKEN_TEXT = re.compile(r"[A-Za-z0-9._~+/=-]+")
_SCOPE_SEPARATORS = re.compile(r"[,+]")
OPEN_ADMIN_PATHS = frozenset(("/health", "/ready", "/"))
WWW_AUTHENTICATE = ("WWW-Authenticate", 'Bearer realm="beava"')


class TokenFormatError(ValueError):
    """A token file or BEAVA_AUTH_TOKENS value that does not parse (the message never
    holds a token)."""


def granted(scopes: Iterable[str]) -> frozenset[str]:
    """Every scope the given ones grant (``write`` also grants ``read``, ...)."""
    out: set[str] = set()
    for scope in scopes:
        out |= SCOPE_GRANTS[scope]
    return frozenset(out)


def scope_list(scopes: frozenset[str]) -> list[str]:
    return sorted(scopes)


class TokenTable:
    """The configured tokens, as SHA-256 digests with the scopes each grants."""

    __slots__ = ("_entries",)

    def __init__(self, entries: Iterable[tuple[str, frozenset[str]]]) -> None:
        self._entries = tuple((_digest(token), granted(scopes)) for token, scopes in entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"<TokenTable {len(self._entries)} token(s)>"

    def scopes_for(self, token: str | bytes) -> frozenset[str] | None:
        """The scopes ``token`` grants, None if it is not configured. The cost does not
        depend on which token matches, or how much of it."""
        digest = _digest(token)
        found: frozenset[str] | None = None
        for stored, scopes in self._entries:
            if hmac.compare_digest(digest, stored):
                found = scopes
        return found


def _digest(token: str | bytes) -> bytes:
    data = token.encode("utf-8", "surrogateescape") if isinstance(token, str) else token
    return hashlib.sha256(data).digest()


# -- configuration text --------------------------------------------------------------------


def _entry(token: str, scopes_text: str, where: str) -> tuple[str, frozenset[str]]:
    if len(token) < MIN_TOKEN_LENGTH:
        raise TokenFormatError(f"{where}: a token must be at least {MIN_TOKEN_LENGTH} "
                               "characters long")
    if not _TOKEN_TEXT.fullmatch(token):
        raise TokenFormatError(f"{where}: a token may hold only letters, digits and "
                               "- . _ ~ + / =")
    names = [name.strip().lower() for name in _SCOPE_SEPARATORS.split(scopes_text)]
    if not any(names):
        raise TokenFormatError(f"{where}: no scope given (read, write or admin)")
    for name in names:
        if name not in SCOPE_GRANTS:
            raise TokenFormatError(f"{where}: unknown scope {name!r} (expected read, write "
                                   "or admin)")
    return token, frozenset(names)


def _table(entries: list[tuple[str, frozenset[str]]], source: str) -> TokenTable:
    if not entries:
        raise TokenFormatError(f"{source}: no token defined")
    seen: set[bytes] = set()
    for index, (token, _scopes) in enumerate(entries, 1):
        digest = _digest(token)
        if digest in seen:
            raise TokenFormatError(f"{source}: token #{index} is defined twice")
        seen.add(digest)
    return TokenTable(entries)


def parse_token_file(text: str, source: str) -> TokenTable:
    """A token file: one ``<token> <scope>[,<scope>...]`` per line; blank lines and lines
    starting with ``#`` are ignored."""
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        parts = stripped.split(None, 1)
        where = f"{source} line {number}"
        if len(parts) != 2:
            raise TokenFormatError(f"{where}: expected '<token> <scope>[,<scope>...]'")
        entries.append(_entry(parts[0], "".join(parts[1].split()), where))
    return _table(entries, source)


def parse_token_env(text: str, source: str = "BEAVA_AUTH_TOKENS") -> TokenTable:
    """``<token>:<scope>[+<scope>...][;<token>:<scope>...]`` (``,`` also separates scopes)."""
    entries = []
    for number, item in enumerate(text.split(";"), 1):
        stripped = item.strip()
        if not stripped:
            continue
        token, sep, scopes = stripped.partition(":")
        where = f"{source} entry {number}"
        if not sep:
            raise TokenFormatError(f"{where}: expected '<token>:<scope>[+<scope>...]'")
        entries.append(_entry(token.strip(), "".join(scopes.split()), where))
    return _table(entries, source)


# -- errors --------------------------------------------------------------------------------


def unauthenticated(message: str) -> BeavaError:
    return BeavaError("unauthenticated", message=message)


def forbidden(scope: str, command: str) -> BeavaError:
    return BeavaError("forbidden", scope=scope,
                      message=f"{command} needs a token with the {scope!r} scope")


class _AuthRequest(msgspec.Struct):
    token: str


_auth_json = msgspec.json.Decoder(_AuthRequest).decode
_auth_msgpack = msgspec.msgpack.Decoder(_AuthRequest).decode


def auth_token(ct: int, payload: bytes) -> str:
    """The token of an OP_AUTH payload ``{"token": "..."}``."""
    try:
        request = _auth_json(payload) if ct == CT_JSON else _auth_msgpack(payload)
    except DECODE_ERRORS:
        raise unauthenticated('OP_AUTH payload must be {"token": "<token>"}') from None
    return request.token


def auth_reply(ct: int, scopes: frozenset[str]) -> bytes:
    body = {"scopes": scope_list(scopes)}
    return encode_frame(OP_AUTH, ct, encode_msgpack(body) if ct == CT_MSGPACK
                        else encode_json(body))


def open_auth(ct: int, payload: bytes) -> bytes:
    """OP_AUTH on a server without tokens: every scope, whatever the token (a client
    configured with a token works unchanged)."""
    auth_token(ct, payload)
    return auth_reply(ct, ALL_SCOPES)


# -- framed TCP ----------------------------------------------------------------------------

Route = tuple[frozenset[int], FrameHandler]


def _forbidding(scope: str, command: str) -> FrameHandler:
    def refuse(ct: int, payload: bytes) -> bytes:
        raise forbidden(scope, command)
    return refuse


class TcpGate(FrameDispatch):
    """One connection's route table (see the module docstring). The connection reads
    ``routes`` and ``push_run`` like a :class:`FrameDispatch`'s; OP_AUTH replaces their
    content in place, and the connection reads both again after it, so frames after it in
    the same read see the new routes. A refused OP_AUTH ends the connection: it handles
    nothing after it."""

    __slots__ = ("_access", "_end", "_authenticated")

    def __init__(self, access: AccessControl) -> None:  # routes built here, not bound
        self._access = access
        self._end: Callable[[], None] | None = None
        self._authenticated = False
        self.push_run = None
        self.routes: dict[int, Route] = {OP_AUTH: (CONTENT_TYPES, self.authenticate)}

    def bind(self, end: Callable[[], None]) -> None:
        """``end``: the connection's close-after-the-queued-replies."""
        self._end = end

    def authenticate(self, ct: int, payload: bytes) -> bytes:
        try:
            scopes = self._access.tokens.scopes_for(auth_token(ct, payload))
            if scopes is None:
                raise unauthenticated("invalid token")
        except BeavaError:
            self._end_connection()
            raise
        routes = self.routes
        routes.clear()
        routes.update(self._access.tcp_routes[scopes])
        routes[OP_AUTH] = (CONTENT_TYPES, self.authenticate)
        self.push_run = self._access.push_run if self._access.may_push(scopes) else None
        self._authenticated = True
        return auth_reply(ct, scopes)

    def refuse(self, op: int, ct: int) -> bytes:  # type: ignore[override]
        if self._authenticated:
            return FrameDispatch.refuse(op, ct)
        self._end_connection()
        return error_frame(unauthenticated(
            "authenticate first: the first frame on a connection must be OP_AUTH (0x0002)"))

    def _end_connection(self) -> None:
        self.routes.clear()
        self.push_run = None
        if self._end is not None:
            self._end()


# -- the server's face ---------------------------------------------------------------------


class AccessControl:
    """The configured tokens and what each scope set may reach on each listener."""

    def __init__(self, tokens: TokenTable, frames: FrameDispatch) -> None:
        self.tokens = tokens
        self.push_run = frames.push_run
        scope_sets = {granted((name,)) for name in SCOPE_GRANTS}
        self.tcp_routes: Mapping[frozenset[str], dict[int, Route]] = {
            scopes: self._routes(frames.routes, scopes) for scopes in scope_sets}

    @staticmethod
    def _routes(base: Mapping[int, Route], scopes: frozenset[str]) -> dict[int, Route]:
        routes: dict[int, Route] = {}
        for op, (content_types, handler) in base.items():
            command = BY_OP[op]
            scope = command.scope
            if scope is None or scope in scopes:
                routes[op] = (content_types, handler)
            else:
                routes[op] = (content_types, _forbidding(scope, command.name))
        return routes

    @staticmethod
    def may_push(scopes: frozenset[str]) -> bool:
        return BY_OP[OP_PUSH].scope in scopes  # the push pass serves OP_PUSH

    def tcp_gate(self) -> TcpGate:
        return TcpGate(self)

    def _bearer(self, headers: Mapping[str, str]) -> frozenset[str]:
        header = headers.get("authorization")
        if header is None:
            raise unauthenticated("missing 'Authorization: Bearer <token>' header")
        scheme, _, token = header.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise unauthenticated("expected 'Authorization: Bearer <token>'")
        scopes = self.tokens.scopes_for(token)
        if scopes is None:
            raise unauthenticated("invalid token")
        return scopes

    def authorize_http(self, request: HttpRequest, scope: str, command: str) -> None:
        """Raise ``unauthenticated`` / ``forbidden`` unless ``request`` may run a command
        needing ``scope``."""
        if scope not in self._bearer(request.headers):
            raise forbidden(scope, command)

    def admin(self, respond: Callable[[HttpRequest], bytes]) -> Responder:
        """The admin sidecar's responder behind the ``admin`` scope (``/health``, ``/ready``
        and the status page ``/`` open)."""

        def gated(request: HttpRequest) -> bytes:
            path = request.target.split("?", 1)[0].rstrip("/") or "/"
            if path not in OPEN_ADMIN_PATHS:
                try:
                    self.authorize_http(request, "admin", f"admin {path}")
                except BeavaError as err:
                    return error_response(err, request.keep_alive)
            return respond(request)

        return gated


def error_response(err: BeavaError, keep_alive: bool) -> bytes:
    """An HTTP JSON error response; 401 carries ``WWW-Authenticate``."""
    headers: tuple[tuple[str, str], ...] = (("Content-Type", "application/json"),)
    if err.code == "unauthenticated":
        headers += (WWW_AUTHENTICATE,)
    return render_response(err.status, encode_json(err.body()), headers, keep_alive)
