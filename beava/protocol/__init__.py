"""Bytes to requests and back: framing, opcodes, content types, errors, transports."""
