"""Register diff (registry.md §8), the transition plan it implies (§9, durability.md §5) and
the response bodies (§12).

The diff compares normalised nodes (registry.payload) of the payload with those of the current
registry. Entries are JSON objects in the reference format; every body is returned with its
keys sorted at every level (the emitted order of §12).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from beava.engine.registry.errors import FORCE_REQUIRED
from beava.engine.registry.payload import group_by_index

__all__ = [
    "DEFAULT_DEDUPE_WINDOW_MS",
    "Diff",
    "Plan",
    "compute_diff",
    "dry_run_body",
    "error_body",
    "force_required_body",
    "json_equal",
    "plan_transition",
    "success_body",
]

DEFAULT_DEDUPE_WINDOW_MS = 86_400_000
_ABSENT = "<absent>"
_MISSING = object()


def json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values: numbers compare numerically (booleans are not numbers),
    object key order is irrelevant, arrays are ordered."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _sorted(value: Any) -> Any:
    """A copy of a JSON value with every object's keys in ascending order."""
    if isinstance(value, dict):
        return _sorted_object(value)
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def _sorted_object(obj: dict[str, Any]) -> dict[str, Any]:
    """``_sorted`` of a JSON object."""
    return {k: _sorted(obj[k]) for k in sorted(obj)}


# Sort key of each entry kind (§8.3): rank, primary, secondary.
def _arrow(e: dict[str, Any]) -> str:
    return f"{e['from']}->{e['to']}"


_ORDER: dict[str, tuple[int, Any, Any]] = {
    "rename": (0, lambda e: e["from"], lambda e: e["to"]),
    "type_change": (1, lambda e: e["field"], _arrow),
    "op_removal": (2, lambda e: e["table"], lambda e: e["agg"]),
    "agg_removal": (3, lambda e: e["table"], lambda e: e["agg"]),
    "window_change": (4, lambda e: e["agg"], _arrow),
    "key_cols_change": (
        5, lambda e: e["table"],
        lambda e: f"{json.dumps(e['from'])}->{json.dumps(e['to'])}",
    ),
    "new_descriptor": (6, lambda e: e["descriptor_kind"], lambda e: e["name"]),
    "new_agg": (7, lambda e: e["table"], lambda e: f"{e['agg']}@{e['source']}"),
    "new_field": (8, lambda e: e["event"], lambda e: f"{e['field']}:{e['type']}"),
    "op_change": (9, lambda e: e["table"], lambda e: e["op"]),
    "upstreams_change": (10, lambda e: e["table"], lambda e: ""),
    "output_kind_change": (11, lambda e: e["table"], lambda e: ""),
    "optionality_change": (12, lambda e: e["field"], lambda e: ""),
    "dedupe_change": (13, lambda e: e["event"], lambda e: ""),
    "retention_change": (14, lambda e: e["event"], lambda e: ""),
    "cold_after_change": (15, lambda e: e["event"], lambda e: ""),
    "default_change": (16, lambda e: e["field"], lambda e: ""),
}


def _entry_key(e: dict[str, Any]) -> tuple[int, str, str]:
    rank, primary, secondary = _ORDER[e["kind"]]
    return rank, primary(e), secondary(e)


# Destructive entries that replace their descriptor under force (§9.2).
_REPLACING = frozenset({
    "type_change", "op_change", "op_removal", "key_cols_change", "upstreams_change",
    "output_kind_change",
})


@dataclass(slots=True)
class _Entries:
    """Entries raised for one descriptor, split by class."""

    additive: list[dict[str, Any]] = field(default_factory=list)
    destructive: list[dict[str, Any]] = field(default_factory=list)

    def add(self, destructive: bool, kind: str, **keys: Any) -> None:
        (self.destructive if destructive else self.additive).append({"kind": kind, **keys})

    def all(self) -> list[dict[str, Any]]:
        return self.additive + self.destructive


@dataclass(slots=True)
class Diff:
    """A computed diff plus the §8.6 summary."""

    additive: list[dict[str, Any]]
    destructive: list[dict[str, Any]]
    already_present: list[str]
    added: list[str]  # new descriptors and rename targets, payload order
    removed: list[str]  # registered names absent from the payload, ascending
    changed: list[dict[str, Any]]  # per same-kind descriptor with entries, payload order
    per_descriptor: dict[str, _Entries]  # entries of each same-kind registered descriptor
    kind_changed: list[str]  # same name, other kind: dropped and installed anew

    @property
    def empty(self) -> bool:
        return not self.additive and not self.destructive

    def body(self) -> dict[str, Any]:
        return {
            "additive": self.additive,
            "already_present": self.already_present,
            "destructive": self.destructive,
        }


def _event_fields(node: Mapping[str, Any]) -> dict[str, tuple[str, bool]]:
    """name -> (type, required); untyped optional names are typed json."""
    schema = node["schema"]
    optional = set(schema["optional_fields"])
    out = {name: (typ, name not in optional) for name, typ in schema["fields"].items()}
    for name in schema["optional_fields"]:
        out.setdefault(name, ("json", False))
    return out


def _diff_event(name: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> _Entries:
    out = _Entries()
    old_fields, new_fields = _event_fields(old), _event_fields(new)
    old_defaults, new_defaults = old["schema"]["defaults"], new["schema"]["defaults"]
    for f, (typ, _) in old_fields.items():
        if f not in new_fields:
            out.add(True, "type_change", field=f"{name}.{f}", **{"from": typ, "to": _ABSENT})
    for f, (typ, required) in new_fields.items():
        default = new_defaults.get(f, _MISSING)
        if f not in old_fields:
            keys: dict[str, Any] = {"event": name, "field": f, "type": typ, "required": required}
            if default is not _MISSING:
                keys["default"] = default
            out.add(required and default is _MISSING, "new_field", **keys)
            continue
        old_typ, old_required = old_fields[f]
        if old_typ != typ:
            widening = old_typ == "i64" and typ == "f64"
            out.add(not widening, "type_change", field=f"{name}.{f}",
                    **{"from": old_typ, "to": typ})
        if old_required != required:
            out.add(required and default is _MISSING, "optionality_change", field=f"{name}.{f}",
                    **{"from": "required" if old_required else "optional",
                       "to": "required" if required else "optional"})
        old_default = old_defaults.get(f, _MISSING)
        if (old_default is _MISSING) != (default is _MISSING) or (
            default is not _MISSING and not json_equal(old_default, default)
        ):
            out.add(required and default is _MISSING, "default_change", field=f"{name}.{f}",
                    **{"from": None if old_default is _MISSING else old_default,
                       "to": None if default is _MISSING else default})
    old_dedupe = _dedupe(old)
    new_dedupe = _dedupe(new)
    if old_dedupe["dedupe_key"] != new_dedupe["dedupe_key"] or (
        new_dedupe["dedupe_key"] is not None
        and old_dedupe["dedupe_window_ms"] != new_dedupe["dedupe_window_ms"]
    ):
        out.add(True, "dedupe_change", event=name, **{"from": old_dedupe, "to": new_dedupe})
    old_keep, new_keep = old["keep_events_for_ms"], new["keep_events_for_ms"]
    if old_keep != new_keep:
        shrinks = new_keep is not None and (old_keep is None or new_keep < old_keep)
        out.add(shrinks, "retention_change", event=name, **{"from": old_keep, "to": new_keep})
    if old["cold_after_ms"] != new["cold_after_ms"]:
        out.add(False, "cold_after_change", event=name,
                **{"from": old["cold_after_ms"], "to": new["cold_after_ms"]})
    return out


def _dedupe(node: Mapping[str, Any]) -> dict[str, Any]:
    window = node["dedupe_window_ms"]
    return {
        "dedupe_key": node["dedupe_key"],
        "dedupe_window_ms": DEFAULT_DEDUPE_WINDOW_MS if window is None else window,
    }


def _split(node: Mapping[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """(prefix ops, group_by op or None) of a normalised derivation."""
    gb = group_by_index(node)
    if gb is None:
        return node["ops"], None
    return node["ops"][:gb], node["ops"][gb]


def _window(spec: Mapping[str, Any]) -> str:
    window = spec["params"].get("window")
    return window if isinstance(window, str) else ""


def _without_window(spec: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    return spec["op"], {k: v for k, v in spec["params"].items() if k != "window"}


def _diff_derivation(name: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> _Entries:
    out = _Entries()
    if old["upstreams"] != new["upstreams"]:
        out.add(True, "upstreams_change", table=name,
                **{"from": old["upstreams"], "to": new["upstreams"]})
    if old["output_kind"] != new["output_kind"]:
        out.add(True, "output_kind_change", table=name,
                **{"from": old["output_kind"], "to": new["output_kind"]})
    old_prefix, old_gb = _split(old)
    new_prefix, new_gb = _split(new)
    for idx in range(max(len(old_prefix), len(new_prefix))):
        if idx >= len(new_prefix):
            out.add(True, "op_removal", table=name, agg=f"{old_prefix[idx]['op']}[{idx}]")
        elif idx >= len(old_prefix) or not json_equal(old_prefix[idx], new_prefix[idx]):
            out.add(True, "op_change", table=name, op=f"{new_prefix[idx]['op']}[{idx}]")
    if old_gb is None or new_gb is None:
        return out
    if old_gb["keys"] != new_gb["keys"]:
        out.add(True, "key_cols_change", table=name,
                **{"from": old_gb["keys"], "to": new_gb["keys"]})
    old_agg, new_agg = old_gb["agg"], new_gb["agg"]
    for feature in old_agg:
        if feature not in new_agg:
            out.add(True, "agg_removal", table=name, agg=feature)
    for feature, spec in new_agg.items():
        if feature not in old_agg:
            out.add(False, "new_agg", table=name, agg=feature, source=spec["op"])
            continue
        before = old_agg[feature]
        if _window(before) != _window(spec):
            out.add(True, "window_change", agg=f"{name}.{feature}",
                    **{"from": _window(before), "to": _window(spec)})
        old_op, old_params = _without_window(before)
        new_op, new_params = _without_window(spec)
        if old_op != new_op or not json_equal(old_params, new_params):
            out.add(True, "agg_removal", table=name, agg=feature)
            out.add(False, "new_agg", table=name, agg=feature, source=spec["op"])
    return out


def _summary(
    name: str, entries: list[dict[str, Any]], old: Mapping[str, Any], new: Mapping[str, Any]
) -> dict[str, Any]:
    """The §8.6 `changed` object of one descriptor."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        by_kind.setdefault(e["kind"], []).append(e)
    out: dict[str, Any] = {"name": name}

    def field_name(e: dict[str, Any]) -> str:  # "Desc.field" -> "field"
        field: str = e["field"]
        return field[len(name) + 1:]

    if new["kind"] == "event":
        added = [
            {k: e[k] for k in ("type", "required", "default") if k in e} | {"name": e["field"]}
            for e in by_kind.get("new_field", ())
        ]
        type_changes = by_kind.get("type_change", ())
        removed = [(field_name(e), e["from"]) for e in type_changes if e["to"] == _ABSENT]
        if len(removed) == 1 and len(added) == 1 and removed[0][1] == added[0]["type"]:
            out["renamed_fields"] = [{"from": removed[0][0], "to": added[0]["name"]}]
        else:
            out["added_fields"] = sorted(added, key=lambda a: a["name"])
            out["removed_fields"] = sorted(f for f, _ in removed)
        out["changed_fields"] = sorted(
            ({"name": field_name(e), "from": e["from"], "to": e["to"]}
             for e in type_changes if e["to"] != _ABSENT),
            key=lambda c: c["name"],
        )
        out["optionality_changed"] = sorted(
            ({"name": field_name(e), "from": e["from"], "to": e["to"]}
             for e in by_kind.get("optionality_change", ())),
            key=lambda c: c["name"],
        )
        out["changed_defaults"] = sorted(
            ({"name": field_name(e), "from": e["from"], "to": e["to"]}
             for e in by_kind.get("default_change", ())),
            key=lambda c: c["name"],
        )
        for kind, key in (("dedupe_change", "dedupe"), ("retention_change", "keep_events_for_ms"),
                          ("cold_after_change", "cold_after_ms")):
            for e in by_kind.get(kind, ()):
                out[key] = {"from": e["from"], "to": e["to"]}
    else:
        removals = {e["agg"] for e in by_kind.get("agg_removal", ()) if e["agg"]}
        additions = {e["agg"] for e in by_kind.get("new_agg", ())}
        respecified = removals & additions
        rewindowed = {e["agg"][len(name) + 1:] for e in by_kind.get("window_change", ())}
        out["added_features"] = sorted(additions - respecified)
        out["removed_features"] = sorted(removals - respecified)
        old_gb, new_gb = _split(old)[1], _split(new)[1]
        if old_gb is not None and new_gb is not None:
            out["changed_features"] = [
                {"name": f,
                 "from": {"op": old_gb["agg"][f]["op"], "params": old_gb["agg"][f]["params"]},
                 "to": {"op": new_gb["agg"][f]["op"], "params": new_gb["agg"][f]["params"]}}
                for f in sorted(respecified | rewindowed)
            ]
        for e in by_kind.get("key_cols_change", ()):
            out["key"] = {"from": e["from"], "to": e["to"]}
        out["ops_changed"] = sorted(
            [e["op"] for e in by_kind.get("op_change", ())]
            + [e["agg"] for e in by_kind.get("op_removal", ())]
        )
        for kind, key in (("upstreams_change", "upstreams"), ("output_kind_change", "output_kind")):
            for e in by_kind.get(kind, ()):
                out[key] = {"from": e["from"], "to": e["to"]}
    return {k: v for k, v in out.items() if v or k == "name"}


def compute_diff(old: Mapping[str, dict[str, Any]], new: Sequence[dict[str, Any]]) -> Diff:
    """P5: the diff of the normalised payload `new` against the registered nodes `old`."""
    new_by_name: dict[str, dict[str, Any]] = {}
    for node in new:
        new_by_name.setdefault(node["name"], node)
    additive: list[dict[str, Any]] = []
    destructive: list[dict[str, Any]] = []
    removed = sorted(name for name in old if name not in new_by_name)
    fresh = [name for name in new_by_name if name not in old]
    rename_targets: set[str] = set()
    for gone in removed:
        kind = old[gone]["kind"]
        target = next(
            (n for n in fresh if n not in rename_targets and new_by_name[n]["kind"] == kind), None
        )
        if target is None:
            destructive.append({"kind": "agg_removal", "table": gone, "agg": ""})
        else:
            rename_targets.add(target)
            destructive.append({"kind": "rename", "from": gone, "to": target})
    new_descriptors = [n for n in fresh if n not in rename_targets]
    already_present: list[str] = []
    changed: list[dict[str, Any]] = []
    per_descriptor: dict[str, _Entries] = {}
    kind_changed: list[str] = []
    for name, node in new_by_name.items():
        before = old.get(name)
        if before is None:
            continue
        if before["kind"] != node["kind"]:
            destructive.append({"kind": "agg_removal", "table": name, "agg": ""})
            new_descriptors.append(name)
            kind_changed.append(name)
            continue
        diff = _diff_event if node["kind"] == "event" else _diff_derivation
        entries = diff(name, before, node)
        if not entries.additive and not entries.destructive:
            already_present.append(name)
            continue
        additive += entries.additive
        destructive += entries.destructive
        per_descriptor[name] = entries
        changed.append(_summary(name, entries.all(), before, node))
    new_set = set(new_descriptors)
    for name, node in new_by_name.items():
        if name in new_set:
            additive.append(
                {"kind": "new_descriptor", "descriptor_kind": node["kind"], "name": name}
            )
    added = [n for n in new_by_name if n in new_set or n in rename_targets]
    return Diff(
        additive=[_sorted_object(e) for e in sorted(additive, key=_entry_key)],
        destructive=[_sorted_object(e) for e in sorted(destructive, key=_entry_key)],
        already_present=sorted(already_present),
        added=added,
        removed=removed,
        changed=[_sorted_object(c) for c in changed],
        per_descriptor=per_descriptor,
        kind_changed=kind_changed,
    )


@dataclass(frozen=True, slots=True)
class Plan:
    """The transition a register executes (§9), in the WAL record's shape (durability.md §5)."""

    drop: list[str]  # registered names removed with all their state, ascending
    replace: list[str]  # payload names installed anew with empty state, payload order
    remove_features: list[list[str]]  # [table, feature] dropped from in-place tables
    reset_features: list[list[str]]  # [table, feature] reset to empty for every entity
    clear_dedupe: list[str]  # events whose dedupe entries are cleared, ascending

    def record(self) -> dict[str, Any]:
        return {
            "clear_dedupe": self.clear_dedupe,
            "drop": self.drop,
            "remove_features": self.remove_features,
            "replace": self.replace,
            "reset_features": self.reset_features,
        }


def plan_transition(
    diff: Diff, old: Mapping[str, dict[str, Any]], new: Sequence[dict[str, Any]]
) -> Plan:
    """The effects of applying `diff` (§9.1, §9.2), including the downstream cascade."""
    replace: set[str] = set(diff.kind_changed)
    for name, found in diff.per_descriptor.items():
        if any(e["kind"] in _REPLACING for e in found.destructive):
            replace.add(name)
    affected = set(diff.removed) | replace
    for node in new:  # payload order: upstreams come first (R8)
        name = node["name"]
        if (
            node["kind"] == "derivation" and name in old and name not in replace
            and any(up in affected for up in node["upstreams"])
        ):
            replace.add(name)
            affected.add(name)
    remove_features: list[list[str]] = []
    reset_features: list[list[str]] = []
    clear_dedupe = {
        name for name in affected if name in old and old[name]["kind"] == "event"
    }
    for node in new:
        name = node["name"]
        descriptor = diff.per_descriptor.get(name)
        if descriptor is None or name in replace:
            continue
        entries = descriptor.all()
        removals = {e["agg"] for e in entries if e["kind"] == "agg_removal"}
        additions = {e["agg"] for e in entries if e["kind"] == "new_agg"}
        rewindowed = {e["agg"][len(name) + 1:] for e in entries if e["kind"] == "window_change"}
        remove_features += [[name, f] for f in sorted(removals - additions)]
        reset_features += [[name, f] for f in sorted((removals & additions) | rewindowed)]
        if any(e["kind"] == "dedupe_change" for e in entries):
            clear_dedupe.add(name)
    seen: set[str] = set()
    replace_order = []
    for node in new:
        if node["name"] in replace and node["name"] not in seen:
            seen.add(node["name"])
            replace_order.append(node["name"])
    return Plan(
        drop=list(diff.removed),
        replace=replace_order,
        remove_features=remove_features,
        reset_features=reset_features,
        clear_dedupe=sorted(clear_dedupe),
    )


# ---------------------------------------------------------------------------------------------
# Response bodies (§12)


def success_body(
    *, added: list[str], already_present: list[str], changed: list[dict[str, Any]],
    registered: list[str], version: int, removed: list[str],
) -> dict[str, Any]:
    """§12.1 / §12.2."""
    return _sorted_object({
        "added": added,
        "already_present": already_present,
        "changed": changed,
        "registered_descriptors": registered,
        "registry_version": version,
        "removed": removed,
        "status": "ok",
    })


def dry_run_body(diff: Diff | None, version: int) -> dict[str, Any]:
    """§12.3; `diff` None is the empty diff of `nodes: []`."""
    if diff is None:
        return _sorted_object({
            "added": [], "changed": [],
            "diff": {"additive": [], "already_present": [], "destructive": []},
            "registry_version": version, "removed": [], "status": "ok", "would_apply": False,
        })
    return _sorted_object({
        "added": diff.added, "changed": diff.changed, "diff": diff.body(),
        "registry_version": version, "removed": diff.removed, "status": "ok",
        "would_apply": False,
    })


_DESCRIBED = 6  # destructive entries spelled out in the force_required reason


def _destructive_text(e: dict[str, Any]) -> str:
    """One destructive diff entry in words."""
    kind = e["kind"]
    if kind == "rename":  # the diff pairs a removed descriptor with a new one of its kind
        return (f"removes {e['from']!r} and its state (adds {e['to']!r}; the diff lists the "
                "pair as a rename)")
    if kind == "agg_removal" and not e.get("agg"):
        return f"removes {e['table']!r}"
    if kind == "agg_removal":
        return f"removes feature {e['table']}.{e['agg']}"
    if kind == "type_change":
        return f"changes the type of {e['field']} from {e['from']} to {e['to']}"
    if kind == "window_change":
        old = e["from"] or "lifetime"
        new = e["to"] or "lifetime"
        return f"changes the window of {e['agg']} from {old} to {new}"
    if kind == "key_cols_change":
        return f"changes the keys of {e['table']!r} from {e['from']} to {e['to']}"
    subject = e.get("table") or e.get("event") or e.get("field") or ""
    return f"{kind.replace('_', ' ')} of {subject!r}" if subject else kind.replace("_", " ")


def force_required_reason(diff: Diff) -> str:
    """The force_required reason: what would be lost, and the two ways on."""
    items = [_destructive_text(e) for e in diff.destructive[:_DESCRIBED]]
    more = len(diff.destructive) - _DESCRIBED
    if more > 0:
        items.append(f"and {more} more")
    text = "Destructive registry change requires force=true: " + "; ".join(items) + "."
    if diff.removed:
        text += (" register replaces the whole registry: include every descriptor still in "
                 "use, or pass force=True to drop the others and their state.")
    else:
        text += " Pass force=True to apply it (the affected state restarts empty)."
    return text + " The full diff is in error.diff."


def force_required_body(diff: Diff, version: int) -> dict[str, Any]:
    """§12.4."""
    return _sorted_object({
        "added": diff.added,
        "changed": diff.changed,
        "error": {
            "code": FORCE_REQUIRED,
            "diff": diff.body(),
            "reason": force_required_reason(diff),
        },
        "registry_version": version,
        "removed": diff.removed,
        "status": "conflict",
    })


def error_body(error: dict[str, str], version: int) -> dict[str, Any]:
    """§12.5: a 400 body."""
    return {"error": error, "registry_version": version}
