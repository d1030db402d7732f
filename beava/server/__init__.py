"""The running process: configuration, start-up and shutdown, the service that turns
requests into engine calls, durability wiring, metrics and log lines (spec/server.md)."""
