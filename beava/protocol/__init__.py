"""Bytes to requests and back: the command table and its dispatch on each transport, frame
and HTTP transports, deferred replies, the per-server connection state, the admin sidecar.
Opcode numbers come from ``beava_client.opcodes``. Never touches engine state."""
