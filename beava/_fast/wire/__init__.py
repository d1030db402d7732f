"""Bytes in and out of the wire: frames, msgpack and JSON replies, number text."""
