"""The event's schema on the connector's side: which fields an event declares, of which
beava type, which are optional or have a default. It comes from the caller, an SDK event
class (``@bv.event class Txn``) or an explicit mapping (``{"user_id": "str", "amount":
"f64", "coupon": "str?"}``, ``?`` = optional), or else from the server, whose describe
request lists the registered events (:meth:`EventSchema.of_describe`). With it, the
DataFrame's columns are checked before any row is sent. The second line of defence, for
what no schema says (or a token that may not read the registry): a run whose first rows
are all rejected for a schema reason stops early (``writer.SCHEMA_CODES``) and
``schema_hint`` explains the rejections from the sample rows.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from .conversion import ConversionPlan
from .totals import PushTotals

FIELD_TYPES = ("str", "i64", "f64", "bool", "datetime", "bytes", "json")
"""Field types of an event schema (spec/registry.md)."""

EVENT_TIME_FIELDS = ("event_time", "event_time_ms")

# Field type -> the connector's wire types whose values the server accepts for it
# (spec/wire.md §6.3); bytes, datetime and json take any non-null value.
_ACCEPTS: dict[str, tuple[str, ...]] = {
    "str": ("str", "datetime"),  # the datetime wire type is text
    "i64": ("i64", "f64"),
    "f64": ("i64", "f64"),
    "bool": ("bool",),
}

_CAST_HINT = {"str": "'string'", "i64": "'long'", "f64": "'double'", "bool": "'boolean'"}


@dataclass(frozen=True)
class EventSchema:
    """``fields``: ``{name: field type}``; ``optional``: fields that may be absent or null
    (and are not type-checked by the server); ``defaults``: fields the server fills when
    absent; ``dedupe_key``: the field replays are recognised by, if known."""

    name: str
    fields: dict[str, str]
    optional: frozenset[str] = field(default_factory=frozenset)
    defaults: frozenset[str] = field(default_factory=frozenset)
    dedupe_key: str | None = None

    @classmethod
    def parse(cls, name: str, spec: Mapping[str, str] | str) -> EventSchema:
        """From ``{"field": "type"}`` or the text ``"field:type, field:type?"``
        (``?`` marks an optional field). Raises ValueError."""
        if isinstance(spec, str):
            pairs = []
            for item in spec.split(","):
                if not item.strip():
                    continue
                fname, sep, ftype = item.partition(":")
                if not sep:
                    raise ValueError(f"event schema: expected field:type, got {item.strip()!r}")
                pairs.append((fname.strip(), ftype.strip()))
        else:
            pairs = list(spec.items())
        fields: dict[str, str] = {}
        optional = set()
        for fname, ftype in pairs:
            if ftype.endswith("?"):
                ftype = ftype[:-1]
                optional.add(fname)
            if ftype not in FIELD_TYPES:
                raise ValueError(f"event schema: field {fname!r} has type {ftype!r}; "
                                 f"types are {', '.join(FIELD_TYPES)}")
            fields[fname] = ftype
        if not fields:
            raise ValueError("event schema: name at least one field")
        return cls(name, fields, frozenset(optional))

    @classmethod
    def of_class(cls, event: Any) -> EventSchema:
        """The schema of an SDK event class (``@bv.event``)."""
        defaults = getattr(event, "_defaults", None) or {}
        return cls(str(event._name), dict(event._bv_fields),
                   frozenset(getattr(event, "_bv_optional", ()) or ()),
                   frozenset(defaults), getattr(event, "_dedupe_key", None))

    @classmethod
    def of_describe(cls, doc: Mapping[str, Any], event: str) -> EventSchema | None:
        """The schema of ``event`` in a describe reply (docs/wire.md "Describe the
        registry"); None when the reply does not list it as an event."""
        for node in doc.get("nodes") or ():
            if node.get("kind") == "event" and node.get("name") == event:
                return cls(event, {str(k): str(v) for k, v in node["fields"].items()},
                           frozenset(node.get("optional_fields") or ()),
                           frozenset(node.get("defaults") or ()))
        return None

    def conversion_targets(self, families: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
        """Wire types matching the declared field types, for the columns (``{column:
        allowed wire types}``) that can be sent that way: e.g. a date column feeding a
        ``str`` field is sent as ``YYYY-MM-DD`` instead of epoch ms."""
        targets = {}
        for column, allowed in families.items():
            ftype = self.fields.get(column)
            if ftype in ("str", "i64", "f64", "bool") and ftype in allowed:
                targets[column] = ftype
        return targets

    def problems(self, plan: ConversionPlan) -> list[str]:
        """Why rows of ``plan``'s columns would be rejected, one message per column or
        missing field (empty: they fit)."""
        problems = []
        declared = ", ".join(self.fields)
        for conv in plan.fields:
            ftype = self.fields.get(conv.name)
            if ftype is None:
                code = ("unknown_field_event_time_v0" if conv.name in EVENT_TIME_FIELDS
                        else "unknown_field_v0")
                near = difflib.get_close_matches(conv.name, list(self.fields), n=1)
                meant = (f"did you mean field {near[0]!r}, declared {self.fields[near[0]]}? "
                         if near else "")
                problems.append(
                    f"column {conv.name!r} is not a field of event {self.name} "
                    f"({conv.spark_type} column; {meant}fields: {declared}); every row would "
                    f"be rejected ({code}): rename or drop the column, or select the event's "
                    f"fields")
                continue
            accepted = _ACCEPTS.get(ftype)
            if conv.name in self.optional or accepted is None or conv.wire_type in accepted:
                continue
            cast = _CAST_HINT.get(ftype, "")
            problems.append(
                f"column {conv.name!r} ({conv.spark_type}, sent as {conv.wire_type}) does not "
                f"fit field {conv.name!r} of event {self.name}, declared {ftype}: every row "
                f"would be rejected (invalid_event); convert it in Spark, e.g. "
                f"col({conv.name!r}).cast({cast})")
        columns = set(plan.names)
        for fname in self.fields:
            if fname not in columns and fname not in self.optional and fname not in self.defaults:
                problems.append(
                    f"field {fname!r} of event {self.name} is required and the DataFrame has "
                    f"no such column; every row would be rejected (invalid_event)")
        return problems


def schema_hint(totals: PushTotals, columns: Sequence[str], event: str) -> str:
    """Why rows were rejected for a schema reason, from the rejection codes and sample
    rows (empty when no rejection has a schema code)."""
    codes = totals.rejected_by_code
    hints = []
    if codes.get("unknown_field_event_time_v0"):
        names = [c for c in columns if c in EVENT_TIME_FIELDS]
        hints.append(f"column {' and '.join(map(repr, names)) or 'event_time'} is refused by "
                     f"beava (it uses processing time only): drop it")
    if codes.get("unknown_field_v0"):
        hints.append(f"a column is not a field of event {event} (columns: "
                     f"{', '.join(columns)}): select only the event's fields")
    if codes.get("invalid_event"):
        samples = [r.row for r in totals.rejections if r.code == "invalid_event"]
        hints.extend(_invalid_event_hints(samples, columns, event))
    if not hints:
        return ""
    return ("; ".join(hints) + ". Pass the event's schema (an SDK event class as event=, or "
            "the event_schema option) to have the columns checked before anything is sent")


def _invalid_event_hints(samples: list[str], columns: Sequence[str], event: str) -> list[str]:
    """Columns whose values look wrong in every rejected sample row: text holding numbers
    or booleans (a str column feeding a numeric or bool field), or absent (null)."""
    rows = []
    for text in samples:
        try:
            row = msgspec.json.decode(text)
        except msgspec.DecodeError:
            continue  # a cut sample
        if isinstance(row, dict):
            rows.append(row)
    if not rows:
        return [f"rows do not fit event {event}: a required field is missing, null or of "
                f"another type"]
    hints = []
    for column in columns:
        values = [row.get(column) for row in rows]
        if all(v is None for v in values):
            hints.append(f"column {column!r} is null in the rejected rows (a required field "
                         f"refuses null)")
        elif all(isinstance(v, str) and _looks_typed(v) for v in values):
            hints.append(f"column {column!r} holds text such as {values[0]!r} in the rejected "
                         f"rows: if event {event} declares it i64, f64 or bool, cast the "
                         f"column in Spark")
    if not hints:
        hints.append(f"rows do not fit event {event}: a required field is missing, null or "
                     f"of another type (e.g. {rows[0]})")
    return hints


def _looks_typed(text: str) -> bool:
    if text in ("true", "false"):
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True
