"""Requests to state: the registry (payload, checks, diff), the expression language, per-entity
state (tables, columns, reads) and the store that ties them to a durability log. Knows no
sockets and imports nothing from ``beava.protocol``."""
