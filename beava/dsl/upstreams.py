"""The one event parameter of ``@bv.event def`` / ``@bv.table`` functions (spec/sdk.md §2.3).

An annotated parameter is resolved at decoration time (the function's globals, its closure
cells, then the locals of up to 32 calling frames). An unannotated one, or one annotated
``bv.Event`` (the stream type, bound by name only), is resolved when the descriptor is
first registered, among the event sources and function-form events of that call; the
descriptor stays *deferred* (``_deferred`` set) until then.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from beava.dsl.chain import Event, EventDerivation, is_event_source, stream_of
from beava.errors import DescriptorError

__all__ = [
    "Deferred",
    "EventParam",
    "bind_upstream",
    "event_parameter",
    "is_event",
    "is_pending",
    "is_table",
    "resolve_deferred",
    "root_of",
]

_FRAME_LIMIT = 32
_DSL_PACKAGE = "beava.dsl"


@dataclass(slots=True)
class Deferred:
    """A descriptor whose function has not run yet. ``hint`` is the upstream named by the
    annotation when that upstream is itself deferred; ``None`` means "match by name".
    ``by_name`` (a parameter annotated ``bv.Event``): only an event of the parameter's name
    matches, never the lone event source of the call."""

    param: str
    hint: Any
    complete: Callable[[Any], None]
    by_name: bool = False


@dataclass(frozen=True, slots=True)
class EventParam:
    """The parameter of a decorated function: its name and the upstream it names (``None``
    when unannotated or annotated ``bv.Event``, which sets ``by_name``)."""

    name: str
    upstream: Any
    by_name: bool = False


def bind_upstream(descriptor: Any, param: EventParam, complete: Callable[[Any], None]) -> None:
    """Run ``complete(upstream)`` now when the parameter names a resolved upstream; otherwise
    leave ``descriptor`` deferred until it is registered."""
    if param.upstream is None or is_pending(param.upstream):
        descriptor._deferred = Deferred(param.name, param.upstream, complete, param.by_name)
    else:
        complete(param.upstream)


def is_event(obj: object) -> bool:
    """An event source class or a function-form event (what may feed a derivation)."""
    return is_event_source(obj) or (
        isinstance(obj, EventDerivation) and obj._is_bv_event_function
    )


def is_table(obj: object) -> bool:
    return getattr(obj, "_kind", None) == "table" and not isinstance(obj, type)


def is_pending(obj: object) -> bool:
    return getattr(obj, "_deferred", None) is not None


def root_of(obj: Any) -> Any:
    """The root event source of a resolved descriptor (an event source is its own root)."""
    if is_event_source(obj):
        return obj
    if is_table(obj):
        return stream_of(obj._parent)._root
    return obj._root


def event_parameter(fn: Callable[..., Any], decorator: str) -> EventParam:
    """Check the signature of a decorated function and resolve its annotation."""
    label = f"@bv.{decorator} function {getattr(fn, '__name__', fn)!r}"
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{label}: cannot read its signature ({exc})") from None
    if not params:
        raise TypeError(f"{label} must take exactly one event parameter")
    events: list[tuple[inspect.Parameter, Any]] = []
    tables: list[inspect.Parameter] = []
    others: list[inspect.Parameter] = []
    caller = _user_frame()
    by_name = False
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            others.append(p)
        elif p.annotation is not p.empty:
            target = _annotation_target(fn, p.annotation, caller)
            if target is Event:  # the stream type: bound by name at register
                by_name = True
                continue
            if is_event(target):
                events.append((p, target))
            elif is_table(target):
                tables.append(p)
            else:
                others.append(p)
    if len(events) >= 2:
        raise DescriptorError(
            code="joins_not_supported",
            path=getattr(fn, "__name__", ""),
            message=(
                f"{label} takes {len(events)} event parameters; joins across event "
                "sources are not supported (one upstream per derivation)"
            ),
        )
    if tables:
        raise DescriptorError(
            code="aggregation_on_table_not_supported",
            path=getattr(fn, "__name__", ""),
            message=f"{label}: parameter {tables[0].name!r} is a table; only events feed "
            "aggregations and derivations",
        )
    if others:
        raise TypeError(
            f"{label}: parameter {others[0].name!r} is not an event "
            "(annotate it with an @bv.event class or function, or leave it unannotated)"
        )
    if len(params) != 1:
        raise TypeError(f"{label} must take exactly one event parameter, got {len(params)}")
    return EventParam(params[0].name, events[0][1] if events else None, by_name)


def _user_frame() -> FrameType | None:
    """The innermost calling frame outside the DSL (where the decorator was applied)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith(_DSL_PACKAGE):
        frame = frame.f_back
    return frame


_NOT_FOUND = object()


def _annotation_target(fn: Callable[..., Any], annotation: Any, caller: FrameType | None) -> Any:
    """The object an annotation names; string annotations (``from __future__ import
    annotations``) are looked up by dotted name."""
    if not isinstance(annotation, str):
        return annotation
    head, *rest = annotation.strip().split(".")
    value = _lookup(fn, head, caller)
    for attr in rest:
        if value is _NOT_FOUND:
            break
        value = getattr(value, attr, _NOT_FOUND)
    return None if value is _NOT_FOUND else value


def _lookup(fn: Callable[..., Any], name: str, caller: FrameType | None) -> Any:
    fn_globals = getattr(fn, "__globals__", {})
    if name in fn_globals:
        return fn_globals[name]
    code = getattr(fn, "__code__", None)
    closure = getattr(fn, "__closure__", None) or ()
    if code is not None:
        for free, cell in zip(code.co_freevars, closure, strict=False):
            if free == name:
                try:
                    return cell.cell_contents
                except ValueError:  # empty cell
                    break
    frame = caller
    for _ in range(_FRAME_LIMIT):
        if frame is None:
            break
        if name in frame.f_locals:
            return frame.f_locals[name]
        frame = frame.f_back
    return _NOT_FOUND


# -- register-time resolution -------------------------------------------------------------


def _normal(name: str) -> str:
    text = name.lower().replace("_", "")
    return text[:-1] if text.endswith("s") else text


def resolve_deferred(descriptors: Iterable[Any]) -> None:
    """Resolve every deferred descriptor among ``descriptors`` (sdk.md §2.3): the
    candidates are the event sources and function-form events of the call plus the root
    sources of its resolved descriptors."""
    items = list(descriptors)
    if not any(is_pending(d) for d in items):
        return
    candidates: list[Any] = []
    seen: set[int] = set()

    def add(obj: Any) -> None:
        if id(obj) not in seen:
            seen.add(id(obj))
            candidates.append(obj)

    for d in items:
        if is_event(d):
            add(d)
    for d in items:
        if (is_event(d) or is_table(d)) and not is_pending(d):
            add(root_of(d))
    for d in items:
        _resolve(d, candidates, [])


def _resolve(obj: Any, candidates: list[Any], stack: list[Any]) -> None:
    deferred: Deferred | None = getattr(obj, "_deferred", None)
    if deferred is None:
        return
    if any(o is obj for o in stack):
        names = " -> ".join(str(o._name) for o in (*stack, obj))
        raise TypeError(f"cannot resolve the upstreams of {obj._name!r}: cycle {names}")
    upstream = deferred.hint if deferred.hint is not None else _match(obj, deferred, candidates)
    _resolve(upstream, candidates, [*stack, obj])
    deferred.complete(upstream)


def _match(obj: Any, deferred: Deferred, candidates: list[Any]) -> Any:
    others = [c for c in candidates if c is not obj]
    wanted = _normal(deferred.param)
    named = [c for c in others if _normal(str(c._name)) == wanted]
    if len(named) == 1:
        return named[0]
    sources = [c for c in others if is_event_source(c)]
    if len(sources) == 1 and not deferred.by_name:
        return sources[0]
    listed = ", ".join(str(c._name) for c in others) or "(none)"
    if deferred.by_name:
        raise TypeError(
            f"cannot resolve the parameter {deferred.param!r} of {obj._name!r}: annotated "
            f"bv.Event, it is bound to the event of its name, and no event in this register "
            f"call is named so (candidates: {listed}); pass that event in the same call"
        )
    raise TypeError(
        f"cannot resolve the unannotated parameter {deferred.param!r} of {obj._name!r}: "
        f"candidates in this register call: {listed}; annotate the parameter "
        f"(def {obj._name}({deferred.param}: <Event>)) or pass its upstream"
    )
