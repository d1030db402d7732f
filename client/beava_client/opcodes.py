"""Opcodes and content types of the framed TCP protocol (spec/wire.md §2.3, §2.4).

The one source of these numbers: the server's command table (``beava.protocol.commands``)
imports them from here, so client and server cannot disagree on them. Importing this
module loads nothing else of the client.
"""

from __future__ import annotations

OP_PING = 0x0000
OP_REGISTER = 0x0001
OP_AUTH = 0x0002  # extension: authenticate the connection with a token (docs/wire.md)
OP_PUSH = 0x0010
OP_PUSH_SYNC = 0x0011
OP_PUSH_MANY = 0x0012
OP_GET = 0x0020
OP_MGET = 0x0021
OP_GET_MULTI = 0x0022
OP_GET_RESPONSE = 0x0023
OP_BATCH_GET = 0x0024
OP_SCAN = 0x0025  # extension: one page of a table scan
OP_DESCRIBE = 0x0026  # extension: what the registry holds (every node)
OP_RESET = 0x0040
OP_TEST_CLOCK = 0x0041  # extension: pin the clock of a test-mode server
OP_BACKFILL = 0x0042  # extension: admin, stage and install a table's backfilled state
OP_CLUSTER_MAP = 0x0043  # extension: the shard map of a sharded server (docs/sharding.md)
OP_CLUSTER_FENCE = 0x0044  # extension: admin, fence or unfence a shard's writes
OP_ERROR = 0xFFFF

CT_JSON = 0x01
CT_MSGPACK = 0x02
CONTENT_TYPES = frozenset((CT_JSON, CT_MSGPACK))

# The success reply opcode is not uniform: writes echo their op, reads and RESET answer 0x0023.
REPLY_OP: dict[int, int] = {
    OP_PING: OP_PING,
    OP_REGISTER: OP_REGISTER,
    OP_AUTH: OP_AUTH,
    OP_PUSH: OP_PUSH,
    OP_PUSH_MANY: OP_PUSH_MANY,
    OP_GET: OP_GET_RESPONSE,
    OP_MGET: OP_GET_RESPONSE,
    OP_GET_MULTI: OP_GET_RESPONSE,
    OP_BATCH_GET: OP_GET_RESPONSE,
    OP_SCAN: OP_GET_RESPONSE,
    OP_DESCRIBE: OP_GET_RESPONSE,
    OP_RESET: OP_GET_RESPONSE,
    OP_TEST_CLOCK: OP_TEST_CLOCK,
    OP_BACKFILL: OP_BACKFILL,
    OP_CLUSTER_MAP: OP_CLUSTER_MAP,
    OP_CLUSTER_FENCE: OP_CLUSTER_FENCE,
}

DEFAULT_REPLY_OP = -1
"""``expect_op`` default of the TCP ``request`` methods: the reply opcode of REPLY_OP."""


def expected_reply_op(op: int, expect_op: int | None) -> int | None:
    """The success reply opcode for request ``op``: ``expect_op``, or REPLY_OP's when it is
    DEFAULT_REPLY_OP (None, there or given: any opcode but 0xFFFF)."""
    return REPLY_OP.get(op) if expect_op == DEFAULT_REPLY_OP else expect_op


OP_NAMES: dict[int, str] = {
    OP_PING: "ping",
    OP_REGISTER: "register",
    OP_AUTH: "auth",
    OP_PUSH: "push",
    OP_PUSH_SYNC: "push_sync",
    OP_PUSH_MANY: "push_many",
    OP_GET: "get",
    OP_MGET: "mget",
    OP_GET_MULTI: "get_multi",
    OP_GET_RESPONSE: "get_response",
    OP_BATCH_GET: "batch_get",
    OP_SCAN: "scan",
    OP_DESCRIBE: "describe",
    OP_RESET: "reset",
    OP_TEST_CLOCK: "test_clock",
    OP_BACKFILL: "backfill",
    OP_CLUSTER_MAP: "cluster_map",
    OP_CLUSTER_FENCE: "cluster_fence",
    OP_ERROR: "error_response",
}

_CT_BY_NAME = {"json": CT_JSON, "msgpack": CT_MSGPACK}


def content_type_code(ct: int | str) -> int:
    """Return the content-type byte for ``"json"``, ``"msgpack"``, 1 or 2."""
    if isinstance(ct, str):
        try:
            return _CT_BY_NAME[ct.lower()]
        except KeyError:
            raise ValueError(
                f"unknown content type {ct!r} (expected 'json' or 'msgpack')"
            ) from None
    if ct in CONTENT_TYPES:
        return ct
    raise ValueError(f"unknown content type {ct!r} (expected 0x01 or 0x02)")
