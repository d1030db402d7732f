"""Framed-TCP opcodes and content types (spec/wire.md §2.3-§2.4)."""

OP_PING = 0x0000
OP_REGISTER = 0x0001
OP_PUSH = 0x0010
OP_PUSH_SYNC = 0x0011
OP_PUSH_MANY = 0x0012
OP_GET = 0x0020
OP_MGET = 0x0021
OP_GET_MULTI = 0x0022
OP_GET_RESPONSE = 0x0023
OP_BATCH_GET = 0x0024
OP_RESET = 0x0040
OP_ERROR = 0xFFFF

CT_JSON = 0x01
CT_MSGPACK = 0x02
CONTENT_TYPES = frozenset((CT_JSON, CT_MSGPACK))

# Reply opcode of each request opcode on success. PING, REGISTER and the pushes echo
# their own opcode; reads and RESET answer GET_RESPONSE.
SUCCESS_REPLY_OP = {
    OP_PING: OP_PING,
    OP_REGISTER: OP_REGISTER,
    OP_PUSH: OP_PUSH,
    OP_PUSH_MANY: OP_PUSH_MANY,
    OP_GET: OP_GET_RESPONSE,
    OP_MGET: OP_GET_RESPONSE,
    OP_GET_MULTI: OP_GET_RESPONSE,
    OP_BATCH_GET: OP_GET_RESPONSE,
    OP_RESET: OP_GET_RESPONSE,
}

# Requests whose answer depends on applied state: on a connection with an unapplied push
# they wait until it is applied (spec/wire.md §2.6).
STATE_READ_OPS = frozenset((OP_GET, OP_MGET, OP_GET_MULTI, OP_BATCH_GET))
