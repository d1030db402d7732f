"""Feature reads: get, batch_get, legacy MGET / GET_MULTI / GET /get/<f>/<k>
(spec/wire.md §7, spec/operators.md §8).

Request bodies arrive decoded (plain Python values); every function validates them in the
order the spec prescribes and raises :class:`BeavaError` for whole-call failures.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from time import perf_counter
from typing import TYPE_CHECKING, Any, Protocol

from beava.catalogue.errors import BeavaError, did_you_mean, nearest_names, quoted_list
from beava.engine.state.keys import keystr

if TYPE_CHECKING:
    from beava.engine.registry import Registry, TableSpec
    from beava.engine.state.tables import TableState

LEGACY_CELL_CAP = 10_000

# name -> its table, None when no table has that name
TableLookup = Callable[[str], "TableState | None"]


def _internal(reason: str) -> BeavaError:
    return BeavaError("internal_error", reason=reason)


def _missing_features(names: Sequence[str]) -> str:
    return "[" + ", ".join(f'"{name}"' for name in names) + "]"


def _feature_hints(missing: Sequence[str], known: Sequence[str], table: str | None
                   ) -> dict[str, Any]:
    """Informative keys of a read naming unknown features (spec/wire.md §5.1): the missing
    names, the nearest known ones, and the features there are."""
    close = [c for name in missing for c in nearest_names(name, known, 2) if c not in missing]
    where = f"table {table!r}" if table is not None else "any table"
    verb = "is not a feature" if len(missing) == 1 else "are not features"
    text = f"{quoted_list(missing)} {verb} of {where}"
    hint = did_you_mean(list(dict.fromkeys(close)))
    text += f"; {hint}" if hint else f"; features: {quoted_list(sorted(known))}"
    out: dict[str, Any] = {"detail": "feature_not_found", "got": list(missing),
                           "expected": sorted(known)[:50], "message": text}
    if hint:
        out["hint"] = hint
    return out


def check_features(features: Any, table_name: str, known: Mapping[str, Any]
                   ) -> list[str] | None:
    """Validate a ``features`` projection; None means the full row."""
    if features is None:
        return None
    if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
        raise _internal("invalid type: features must be an array of strings")
    missing = [name for name in features if name not in known]
    if missing:
        # The code and reason stay as beava 0.0.6 words them (conformance pins them); the
        # informative keys beside them say what to fix.
        raise BeavaError("internal_error",
                         reason=f"feature_not_found: missing={_missing_features(missing)} "
                                f"table={table_name}",
                         **_feature_hints(missing, list(known), table_name))
    return features


def unknown_table_fields(name: str, registry: Registry | None) -> dict[str, Any]:
    """Informative keys of ``unknown_table`` for ``name``: the nearest table names, and what
    the name is when it is an event rather than a table."""
    if registry is None:
        return {"message": f"table {name!r} is not a registered aggregation"}
    tables = sorted(registry.tables)
    close = nearest_names(name, tables)
    text = f"table {name!r} is not a registered aggregation"
    if name in registry.events:
        fed = sorted(t for t, spec in registry.tables.items() if spec.source == name)
        text = (f"{name!r} is an event, not a table: read a table aggregated from it "
                f"({quoted_list(fed)})")
    hint = did_you_mean(close)
    if hint:
        text += f"; {hint}"
    elif name not in registry.events:
        text += f"; tables: {quoted_list(tables)}"
    out: dict[str, Any] = {"got": name, "expected": close or tables[:12], "message": text}
    if hint:
        out["hint"] = hint
    return out


def _escaped(text: str) -> str:
    return text.replace("|", "%7C")


def stored_key(key: Any, spec: TableSpec) -> str:
    """Request ``key`` -> the stored key string of ``spec``'s table (spec/wire.md §7.1)."""
    nkeys = len(spec.keys)
    if isinstance(key, (bool, int)) and not isinstance(key, float):
        key = keystr(key)
    if isinstance(key, str):
        if nkeys == 0:
            if key:
                raise _key_parse_failure(key, spec, 1)
            return ""
        if key.count("|") != nkeys - 1:
            raise _key_parse_failure(key, spec, key.count("|") + 1)
        return key
    if isinstance(key, list):
        parts = []
        for item in key:
            if isinstance(item, float) and not math.isfinite(item):
                raise _internal("invalid key element: non-finite float")
            text = keystr(item) if isinstance(item, (str, int, float, bool)) else None
            if text is None:
                raise _internal("invalid key element type")
            parts.append(text)
        if len(parts) != nkeys:
            raise _key_parse_failure(key, spec, len(parts))
        if nkeys == 1:
            return parts[0]
        return "|".join(_escaped(p) for p in parts)
    raise _internal("invalid type: key must be a string, integer, boolean or array")


def _key_parse_failure(key: Any, spec: TableSpec, arrived: int) -> BeavaError:
    """``key_parse_failure``: ``key`` holds ``arrived`` values where the table takes one per
    key field. Says the key fields (``expected``), what arrived (``got``) and how to send it
    (``hint``)."""
    fields = list(spec.keys)
    if not fields:
        text = f"table {spec.name!r} is global (it has no key fields); got the key {key!r}"
        hint = "read a global table with the key '' (in the SDK: leave the key out)"
    else:
        count = f"{len(fields)} value" + ("s" if len(fields) > 1 else "")
        text = (f"table {spec.name!r} is keyed by {quoted_list(fields)} ({count}); the key "
                f"{key!r} holds {arrived}")
        hint = (f"send the {count} in key order as a list, or as one string joined with '|'"
                if len(fields) > 1 else
                "send the one key value; a value holding '|' goes in a list ([value])")
    return BeavaError("key_parse_failure", expected=fields, got=key, hint=hint,
                      message=f"{text}: {hint}")


def _request_fields(body: Any, *, legacy_shape_check: bool) -> tuple[str, Any, Any]:
    if not isinstance(body, dict):
        raise _internal("invalid type: expected a map {table, key, features?}")
    if legacy_shape_check and "table" not in body and ("keys" in body or "feature" in body):
        raise BeavaError(
            "unsupported_request_shape",
            message="OP_GET expects {table, key, features?}; received legacy {keys, features} "
                    "or {feature, key} shape; use OP_MGET / OP_GET_MULTI for those")
    if "table" not in body:
        raise _internal("missing field `table`")
    if "key" not in body:
        raise _internal("missing field `key`")
    table = body["table"]
    if not isinstance(table, str):
        raise _internal("invalid type: `table` must be a string")
    return table, body["key"], body.get("features")


# A GET's table, the stored key and the features asked (None: all); None when it asks for
# no feature at all (answered with an empty row).
GetTarget = tuple["TableState", str, "list[str] | None"]
EMPTY_MAP_MSGPACK = b"\x80"


def _get_target(tables: TableLookup, body: Any, legacy_shape_check: bool,
                registry: Registry | None) -> GetTarget | None:
    name, key, features = _request_fields(body, legacy_shape_check=legacy_shape_check)
    table = tables(name)
    if table is None:
        raise BeavaError("unknown_table", **unknown_table_fields(name, registry))
    projection = check_features(features, name, table.spec.features)
    skey = stored_key(key, table.spec)
    if projection is not None and not projection:
        return None
    return table, skey, projection


def get(tables: TableLookup, body: Any, now: int, *, legacy_shape_check: bool = True,
        registry: Registry | None = None) -> dict[str, Any]:
    """POST /get, OP_GET in JSON: body -> flat feature row (``{}`` for a cold entity), for
    the JSON encoder (TableState.row_json). ``registry`` only words errors (the nearest
    names of an unknown one)."""
    target = _get_target(tables, body, legacy_shape_check, registry)
    if target is None:
        return {}
    table, skey, projection = target
    row = table.row_json(skey, now, projection)
    return {} if row is None else row


def get_msgpack(tables: TableLookup, body: Any, now: int, *,
                registry: Registry | None = None) -> bytes:
    """OP_GET answered in MessagePack: ``get``'s row as the bytes its reply carries, written
    from the table's columns without building the row (the read fast path). A MessagePack
    body cannot carry the legacy shapes: it fails on `table` instead."""
    target = _get_target(tables, body, False, registry)
    if target is None:
        return EMPTY_MAP_MSGPACK
    table, skey, projection = target
    row = table.row_msgpack(skey, now, projection)
    return EMPTY_MAP_MSGPACK if row is None else row


def batch_requests(body: Any) -> list[Any]:
    """The ``requests`` of a decoded BATCH_GET body."""
    if not isinstance(body, dict) or not isinstance(body.get("requests"), list):
        raise _internal("missing field `requests` (expected an array)")
    requests: list[Any] = body["requests"]
    return requests


# Entries between two clock reads of a sliced batch; rows encoded by one encoder call.
_CHECK_EVERY = 64
_ENCODE_ROWS = 512
_NONES = [None] * _ENCODE_ROWS


class EncodedEntries(Protocol):
    """The entries of a BATCH_GET body still encoded, decoded a few at a time."""

    def take(self, count: int) -> list[Any] | None:
        """The next ``count`` entries decoded (fewer at the end), None once all were."""

    def restarted(self) -> EncodedEntries:
        """The same entries from the first."""


class BatchGet:
    """One BATCH_GET (POST /batch_get, OP_BATCH_GET) served in slices: ``run(deadline)``
    works until ``deadline`` (perf_counter; None = to the end) and returns True once
    ``reply`` holds the encoded answer ``{"results": [...]}``.

    ``requests`` are the entries, decoded, or still encoded (the first pass decodes them,
    so a large body costs no one long call). The passes keep the order of checks of an
    unsliced batch: every entry decoded, every entry's shape, every entry's table and
    features, then the rows, then the answer encoded in pieces with ``encode`` (a
    request-level error raised by a later slice still answers the whole request). Each pass
    lets go of what it consumed, so a big batch is freed in slices too. ``aliases``: the
    tables of entries that used ``entity_id``. The caller starts over if the registry
    changes between slices."""

    __slots__ = ("_tables", "_requests", "_encoded", "_encode", "_now", "_registry", "_pass",
                 "_index", "_decoded", "_entries", "_resolved", "_results", "_pieces",
                 "reply", "aliases")

    def __init__(self, tables: TableLookup, requests: list[Any] | EncodedEntries, now: int,
                 registry: Registry | None, encode: Callable[[Any], bytes]) -> None:
        self._tables = tables
        self._registry = registry  # names the nearest tables of an unknown one
        self._requests = requests
        self._encoded = None if isinstance(requests, list) else requests
        self._encode = encode
        self._now = now
        self._pass = 0 if self._encoded is not None else 1
        self._index = 0
        self._decoded: list[Any] = requests if isinstance(requests, list) else []
        self._entries: list[tuple[str, Any, Any]] = []
        self._resolved: list[tuple[str, Any, TableState | None, list[str] | None]] = []
        self._results: list[Any] = []
        self._pieces: list[bytes] = []
        self.reply = b""
        self.aliases: list[str] = []

    def run(self, deadline: float | None) -> bool:
        done = 0  # entries done in this call: a batch of a few never waits for a next one
        encoded = self._encoded
        while self._pass == 0 and encoded is not None:
            entries = encoded.take(_CHECK_EVERY)
            if entries is None:
                self._pass = 1
                break
            self._decoded.extend(entries)
            done += len(entries)
            if deadline is not None and perf_counter() > deadline:
                return False
        steps = (self._shape, self._resolve, self._row)
        while self._pass < 5:
            if self._pass == 4:  # the answer, _ENCODE_ROWS rows per encoder call
                items, step, every, per_check = (self._results, self._encode_rows,
                                                 _ENCODE_ROWS, _ENCODE_ROWS)
            else:
                items = (self._decoded, self._entries, self._resolved)[self._pass - 1]
                step, every, per_check = steps[self._pass - 1], 1, _CHECK_EVERY
            index, count = self._index, len(items)
            while index < count:
                stop = count if deadline is None else min(count, index + per_check)
                done += stop - index
                while index < stop:
                    step(items, index)
                    index += every
                if deadline is not None and index < count and perf_counter() > deadline:
                    self._index = index
                    return False
            self._pass += 1
            self._index = 0
            if self._pass == 5:
                self.reply = b'{"results":[' + b",".join(self._pieces) + b"]}"
            elif deadline is not None and done >= _CHECK_EVERY and perf_counter() > deadline:
                return False
        return True

    def restarted(self, now: int, registry: Registry | None) -> BatchGet:
        """The same request from the start (the registry changed between slices)."""
        requests = self._requests
        return BatchGet(self._tables, requests if isinstance(requests, list)
                        else requests.restarted(), now, registry, self._encode)

    def _encode_rows(self, items: list[Any], index: int) -> None:
        rows = items[index:index + _ENCODE_ROWS]
        self._pieces.append(self._encode(rows)[1:-1])
        items[index:index + len(rows)] = _NONES[:len(rows)]  # freed here, not all at the end

    def _shape(self, items: list[Any], index: int) -> None:
        entry = items[index]
        if self._encoded is not None:  # decoded here (else the caller's, kept for a restart)
            items[index] = None
        if not isinstance(entry, dict) or not isinstance(entry.get("table"), str):
            raise _internal("invalid batch_get entry: expected {table, key, features?}")
        has_key, has_alias = "key" in entry, "entity_id" in entry
        if has_key == has_alias:
            raise _internal("batch_get entry needs exactly one of `key` and `entity_id`")
        if has_alias:
            self.aliases.append(entry["table"])
        self._entries.append((entry["table"], entry["key"] if has_key else entry["entity_id"],
                              entry.get("features")))

    def _resolve(self, items: list[Any], index: int) -> None:  # (table, key, features)
        name, key, features = items[index]
        items[index] = None
        table = self._tables(name)
        projection = None if table is None else check_features(features, name,
                                                               table.spec.features)
        self._resolved.append((name, key, table, projection))

    def _row(self, items: list[Any], index: int) -> None:
        name, key, table, projection = items[index]  # projection: features asked, or None
        items[index] = None
        results = self._results
        if table is None:
            results.append({"error": {"code": "unknown_table",
                                      **unknown_table_fields(name, self._registry)}})
            return
        try:
            skey = stored_key(key, table.spec)
        except BeavaError as err:
            if err.code != "key_parse_failure":
                raise
            # An entry error holds the code and message alone (beava 0.0.6's shape).
            results.append({"error": {"code": "key_parse_failure",
                                      "message": err.fields["message"]}})
            return
        if projection is not None and not projection:
            results.append({})
            return
        try:
            row = table.row_json(skey, self._now, projection)
        except BeavaError as err:
            if err.code != "wrong_shard":
                raise
            results.append(err.body())  # this entry's owner is another shard
            return
        results.append({} if row is None else row)


def _feature_tables(registry: Registry) -> dict[str, str]:
    return {feature: name for name, spec in registry.tables.items() for feature in spec.features}


def _legacy_keys(body: dict[str, Any]) -> list[Any]:
    keys = body.get("keys")
    if not isinstance(keys, list):
        raise _internal("missing field `keys` (expected an array)")
    return keys


def _legacy_cells(keys: list[Any], nfeatures: int) -> None:
    cells = len(keys) * nfeatures
    if cells > LEGACY_CELL_CAP:
        raise _internal(f"batch_too_large: cells={cells} cap={LEGACY_CELL_CAP}")


def _legacy_row(table: TableState, key: Any, now: int, features: list[str]
                ) -> dict[str, Any] | None:
    try:
        skey = stored_key(key, table.spec)
    except BeavaError as err:
        if err.code == "key_parse_failure":
            return None
        raise
    return table.row(skey, now, features)


# Reply keys of MGET / GET_MULTI are the request keys as text (keystr); an array key, which
# addresses a row of a one-key table too, has no keystr and is answered under None.
LegacyReply = dict[str | None, Any]


def mget(tables: TableLookup, registry: Registry, body: Any, now: int) -> LegacyReply:
    """OP_MGET ``{"feature": f, "keys": [...]}`` -> ``{key: {f: value}}`` for keys with a row."""
    if not isinstance(body, dict) or not isinstance(body.get("feature"), str):
        raise _internal("missing field `feature`")
    feature = body["feature"]
    keys = _legacy_keys(body)
    owners = _feature_tables(registry)
    owner = owners.get(feature)
    if owner is None:
        raise BeavaError("internal_error",
                         reason=f"feature_not_found: missing={_missing_features([feature])}",
                         **_feature_hints([feature], list(owners), None))
    _legacy_cells(keys, 1)
    table = tables(owner)
    assert table is not None  # the registry and the engine's tables are installed together
    out: LegacyReply = {}
    for key in keys:
        row = _legacy_row(table, key, now, [feature])
        if row is not None:
            out[keystr(key) if not isinstance(key, str) else key] = row
    return out


def get_multi(tables: TableLookup, registry: Registry, body: Any, now: int) -> LegacyReply:
    """OP_GET_MULTI ``{"keys": [...], "features": [...]}`` merged over tables."""
    if not isinstance(body, dict):
        raise _internal("invalid type: expected a map {keys, features}")
    keys = _legacy_keys(body)
    features = body.get("features")
    if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
        raise _internal("missing field `features` (expected an array of strings)")
    owners = _feature_tables(registry)
    missing = [f for f in features if f not in owners]
    if missing:
        raise BeavaError("internal_error",
                         reason=f"feature_not_found: missing={_missing_features(missing)}",
                         **_feature_hints(missing, list(owners), None))
    _legacy_cells(keys, len(features))
    by_table: dict[str, list[str]] = {}
    for feature in features:
        by_table.setdefault(owners[feature], []).append(feature)
    out: LegacyReply = {}
    for key in keys:
        merged: dict[str, Any] = {}
        found = False
        for name, names in by_table.items():
            table = tables(name)
            assert table is not None  # as in mget
            row = _legacy_row(table, key, now, names)
            if row is not None:
                found = True
                merged.update(row)
        if found:
            out[keystr(key) if not isinstance(key, str) else key] = dict(sorted(merged.items()))
    return out


def legacy_get(tables: TableLookup, registry: Registry, feature: str, key: str, now: int
               ) -> dict[str, Any]:
    """GET /get/<feature>/<key>: one feature's value, or a whole table row."""
    owner = _feature_tables(registry).get(feature)
    if owner is not None:
        table, projection = tables(owner), [feature]
        assert table is not None  # as in mget
    else:
        table, projection = tables(feature), None
        if table is None:
            names = sorted([*registry.tables, *_feature_tables(registry)])
            hint = did_you_mean(nearest_names(feature, names))
            text = f"{feature!r} is neither a feature nor a table"
            extra: dict[str, Any] = {"got": feature,
                                     "message": f"{text}; {hint}" if hint else text}
            if hint:
                extra["hint"] = hint
            raise BeavaError("feature_not_found", **extra)
    row = table.row(stored_key(key, table.spec), now, projection)
    if row is None:
        raise BeavaError("key_not_found")
    return {"value": row[feature]} if projection is not None else row
