"""Requests to state: registry, expressions, chain ops, tables, persistence."""
