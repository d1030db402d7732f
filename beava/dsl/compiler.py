"""The register payload compiler (spec/sdk.md §7): descriptors -> ``{"nodes": [...]}``."""

from __future__ import annotations

import copy
from typing import Any

from beava.dsl.chain import EventDerivation, is_event_source
from beava.dsl.events import event_source_node
from beava.dsl.tables import TableDescriptor
from beava.dsl.upstreams import resolve_deferred
from beava.errors import RegistrationError

__all__ = ["compile_register_payload"]


def compile_register_payload(
    *descriptors: Any, force: bool = False, dry_run: bool = False
) -> dict[str, Any]:
    """The body ``App.register`` sends: nodes in argument order, each root event source
    emitted before its first dependent (added when not passed), each descriptor once;
    plain dicts are emitted unchanged. ``"force"`` / ``"dry_run"`` appear only when true.
    """
    for i, obj in enumerate(descriptors):
        if isinstance(obj, EventDerivation):
            if not obj._is_bv_event_function:
                raise RegistrationError(
                    code="invalid_descriptor",
                    path=f"descriptors[{i}]",
                    message=(
                        "an undecorated chain cannot be registered; wrap it in an "
                        "@bv.event function (or aggregate it in an @bv.table)"
                    ),
                )
        elif not (is_event_source(obj) or isinstance(obj, (TableDescriptor, dict))):
            raise TypeError(
                f"descriptors[{i}] is not a beava descriptor (an @bv.event class or function, "
                f"an @bv.table function, or a node dict): {obj!r}"
            )
    resolve_deferred(descriptors)

    nodes: list[Any] = []
    emitted: set[int] = set()

    def emit_source(cls: Any) -> None:
        if id(cls) not in emitted:
            emitted.add(id(cls))
            nodes.append(event_source_node(cls))

    for obj in descriptors:
        if isinstance(obj, dict):
            nodes.append(obj)
        elif id(obj) in emitted:
            continue
        elif is_event_source(obj):
            emit_source(obj)
        elif isinstance(obj, TableDescriptor):
            node = obj.node()
            emit_source(obj.root_source())
            emitted.add(id(obj))
            nodes.append(node)
        else:
            emit_source(obj._root)
            emitted.add(id(obj))
            nodes.append(_event_derivation_node(obj))

    payload: dict[str, Any] = {"nodes": nodes}
    if force:
        payload["force"] = True
    if dry_run:
        payload["dry_run"] = True
    return payload


def _event_derivation_node(obj: EventDerivation) -> dict[str, Any]:
    """A function-form event (sdk.md §7.3), flattened to its root source."""
    return {
        "kind": "derivation",
        "name": obj._name,
        "output_kind": "event",
        "upstreams": [obj._root._name],
        "ops": copy.deepcopy(list(obj._steps)),
        "schema": {"fields": dict(obj._columns), "optional_fields": []},
    }
