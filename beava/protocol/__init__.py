"""Bytes to requests and back: the command table, opcodes and content types, frame and HTTP
transports, the admin sidecar. Never touches state."""
