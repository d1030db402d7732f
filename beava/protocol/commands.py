"""The command table (spec/wire.md §2.4, §3.2): one record per command, every fact the
transports need about it in that one row.

Derived from it: framed-TCP dispatch (:class:`beava.protocol.dispatch.FrameDispatch`),
HTTP routing (:mod:`beava.protocol.http_routes`) and read holding (``STATE_READ_OPS``: a
read behind an unapplied push of its connection waits, spec/wire.md §2.6). Opcode and
content-type numbers are ``beava_client.opcodes``'s own.

The table only names commands; the server supplies what serves each name, checked once at
start (:func:`bind_handlers`). A *simple* command (``takes`` set) is one call of the
server's: the call is given what ``takes`` names, and its value, encoded, is the reply; one
adapter per transport (``simple_frame_handlers`` and ``simple_http_handlers`` in
:mod:`beava.protocol.dispatch`) turns the call into the command's handler. Every other
command has a handler per transport of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import NamedTuple, TypeVar

from beava_client.opcodes import (
    CONTENT_TYPES,
    CT_JSON,
    OP_AUTH,
    OP_BACKFILL,
    OP_BATCH_GET,
    OP_CLUSTER_FENCE,
    OP_CLUSTER_MAP,
    OP_DESCRIBE,
    OP_GET,
    OP_GET_MULTI,
    OP_GET_RESPONSE,
    OP_MGET,
    OP_PING,
    OP_PUSH,
    OP_PUSH_MANY,
    OP_PUSH_SYNC,
    OP_REGISTER,
    OP_RESET,
    OP_SCAN,
    OP_TEST_CLOCK,
)

# What the call of a simple command is given (``Command.takes``).
NOTHING = "nothing"  # call()
BODY = "body"  # call(value): the body decoded per content type; undecodable: internal_error
RAW_BODY = "raw body"  # call(bytes): the body as sent, the call decodes it
ROUTE_PARAMS = "route params"  # call(*params): the HTTP route parameters (HTTP only)

ANY_CONTENT_TYPE = frozenset(range(256))  # PING ignores the content-type byte
JSON_ONLY = frozenset((CT_JSON,))

# Access scopes (docs/limits.md, access control): each grants the ones after it.
ADMIN, WRITE, READ = "admin", "write", "read"
SCOPE_GRANTS: Mapping[str, frozenset[str]] = MappingProxyType({
    ADMIN: frozenset((ADMIN, WRITE, READ)),
    WRITE: frozenset((WRITE, READ)),
    READ: frozenset((READ,)),
})


class Command(NamedTuple):
    """One command. ``op is None``: HTTP only; ``http_method is None``: framed TCP only.
    (A NamedTuple rather than a dataclass: a fraction of the import time at start-up.)"""

    name: str
    op: int | None = None  # framed-TCP request opcode
    reply_op: int | None = None  # framed-TCP opcode of a successful reply
    content_types: frozenset[int] = CONTENT_TYPES  # framed-TCP content types accepted
    implemented: bool = True  # False: the opcode is answered op_not_implemented
    http_method: str | None = None
    http_paths: tuple[str, ...] = ()  # exact routing paths (spec/wire.md §3.1 normalisation)
    http_prefixes: tuple[str, ...] = ()  # paths whose remainder holds the route parameters
    http_params: int = 0  # parameters in that remainder, "/"-separated, the last takes the rest
    reads_state: bool = False  # the answer depends on applied pushes
    scope: str | None = READ  # the access scope a token needs for it; None: always open
    takes: str | None = None  # a simple command: what its call is given; None: not simple
    # a simple command's framed-TCP reply is in the request's content type (else JSON)
    replies_in_kind: bool = False

    @property
    def framed(self) -> bool:
        """Served on framed TCP by a handler."""
        return self.op is not None and self.implemented

    @property
    def routed(self) -> bool:
        """Served on the HTTP data plane."""
        return self.http_method is not None

    @property
    def simple(self) -> bool:
        """Served by one call of the server's through the transports' adapters."""
        return self.takes is not None


COMMANDS: tuple[Command, ...] = (
    Command("ping", op=OP_PING, reply_op=OP_PING, content_types=ANY_CONTENT_TYPE,
            http_method="POST", http_paths=("/ping",)),
    Command("auth", op=OP_AUTH, reply_op=OP_AUTH, scope=None),  # extension (docs/wire.md)
    Command("register", op=OP_REGISTER, reply_op=OP_REGISTER, content_types=JSON_ONLY,
            http_method="POST", http_paths=("/register",), scope=ADMIN),
    Command("push", op=OP_PUSH, reply_op=OP_PUSH, scope=WRITE,
            http_method="POST", http_paths=("/push", "/push-sync")),
    Command("push_event",  # legacy: the event name is the rest of the path
            http_method="POST", http_prefixes=("/push/", "/push-sync/", "/push-batch/"),
            http_params=1, scope=WRITE),
    Command("push_sync", op=OP_PUSH_SYNC, implemented=False, scope=WRITE),
    Command("push_many", op=OP_PUSH_MANY, reply_op=OP_PUSH_MANY, scope=WRITE,
            http_method="POST", http_paths=("/push_many",)),
    Command("get", op=OP_GET, reply_op=OP_GET_RESPONSE, reads_state=True,
            http_method="POST", http_paths=("/get",)),
    Command("mget", op=OP_MGET, reply_op=OP_GET_RESPONSE, reads_state=True,
            takes=BODY, replies_in_kind=True),
    Command("get_multi", op=OP_GET_MULTI, reply_op=OP_GET_RESPONSE, reads_state=True,
            takes=BODY, replies_in_kind=True),
    Command("batch_get", op=OP_BATCH_GET, reply_op=OP_GET_RESPONSE, reads_state=True,
            http_method="POST", http_paths=("/batch_get",)),
    Command("scan", op=OP_SCAN, reply_op=OP_GET_RESPONSE, reads_state=True,
            http_method="POST", http_paths=("/scan",)),  # extension (docs/wire.md)
    Command("describe", op=OP_DESCRIBE, reply_op=OP_GET_RESPONSE,  # extension (docs/wire.md)
            http_method="GET", http_paths=("/describe",), takes=NOTHING),
    Command("legacy_get", reads_state=True,  # GET /get/<feature>/<key>
            http_method="GET", http_prefixes=("/get/",), http_params=2, takes=ROUTE_PARAMS),
    Command("reset", op=OP_RESET, reply_op=OP_GET_RESPONSE, scope=ADMIN,
            http_method="POST", http_paths=("/reset",), takes=NOTHING),
    Command("test_clock", op=OP_TEST_CLOCK, reply_op=OP_TEST_CLOCK, content_types=JSON_ONLY,
            http_method="POST", http_paths=("/test/clock",), scope=ADMIN,  # extension
            takes=RAW_BODY),
    Command("backfill", op=OP_BACKFILL, reply_op=OP_BACKFILL,  # extension (docs/wire.md)
            http_method="POST", http_paths=("/admin/backfill",), scope=ADMIN),
    Command("cluster_map", op=OP_CLUSTER_MAP, reply_op=OP_CLUSTER_MAP,  # extension:
            content_types=ANY_CONTENT_TYPE, http_method="GET",  # sharding (docs/sharding.md)
            http_paths=("/cluster/map",), takes=NOTHING),
    Command("cluster_fence", op=OP_CLUSTER_FENCE, reply_op=OP_CLUSTER_FENCE,  # extension
            content_types=JSON_ONLY, http_method="POST", http_paths=("/cluster/fence",),
            scope=ADMIN, takes=RAW_BODY),
    Command("health", http_method="GET", http_paths=("/health",), scope=None, takes=NOTHING),
    Command("ready", http_method="GET", http_paths=("/ready",), scope=None, takes=NOTHING),
)

BY_OP: Mapping[int, Command] = MappingProxyType({c.op: c for c in COMMANDS if c.op is not None})
FRAMED: tuple[Command, ...] = tuple(c for c in COMMANDS if c.framed)
ROUTED: tuple[Command, ...] = tuple(c for c in COMMANDS if c.routed)
SIMPLE: tuple[Command, ...] = tuple(c for c in COMMANDS if c.simple)

# Request opcodes that wait behind an unapplied push on their connection.
STATE_READ_OPS = frozenset(c.op for c in COMMANDS if c.reads_state and c.op is not None)

_H = TypeVar("_H")


class HandlerTableError(Exception):
    """The handlers given for a transport do not match the commands it serves."""


def bind_handlers(handlers: Mapping[str, _H], commands: Iterable[Command]) -> dict[str, _H]:
    """``handlers`` (command name -> handler) checked against ``commands``: exactly one
    handler for each, none for anything else; raises :class:`HandlerTableError`."""
    names = {command.name for command in commands}
    missing = sorted(names - handlers.keys())
    unknown = sorted(handlers.keys() - names)
    if missing or unknown:
        raise HandlerTableError(f"handlers missing for {missing}, not commands here: {unknown}")
    return dict(handlers)
