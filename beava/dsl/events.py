"""``@bv.event``: event sources (class form) and event derivations (function form),
spec/sdk.md §2."""

from __future__ import annotations

import functools
import inspect
import math
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar, overload

from beava.dsl.chain import CHAIN_METHODS, Aggregation, EventDerivation, stream_of
from beava.dsl.durations import option_ms
from beava.dsl.upstreams import bind_upstream, event_parameter
from beava.errors import DescriptorError

__all__ = ["event", "event_source_node"]

T = TypeVar("T", bound=type)

# annotation -> wire type (sdk.md §2.1)
_WIRE_TYPES: dict[Any, str] = {str: "str", int: "i64", float: "f64", bool: "bool"}
_OPTIONS = ("keep_events_for", "cold_after", "dedupe_key", "dedupe_window")
_FORBIDDEN_OPTIONS = ("tolerate_delay", "event_time_field")


@overload
def event(target: T, /) -> T: ...  # type: ignore[overload-overlap]  # a class is callable


@overload
def event(target: Callable[..., Any], /) -> EventDerivation: ...


@overload
def event(target: None = None, /, **options: Any) -> Callable[[Any], Any]: ...


def event(target: Any = None, /, **options: Any) -> Any:
    """Declare an event source (a class of typed fields) or an event derivation (a
    function of one event returning a chain). Spellings: ``@bv.event``, ``@bv.event()``,
    ``@bv.event(**options)`` (options apply to classes only)."""
    if target is None:
        return lambda obj: _decorate(obj, options)
    return _decorate(target, options)


def _decorate(target: Any, options: dict[str, Any]) -> Any:
    if isinstance(target, type):
        return _event_source(target, options)
    if inspect.isfunction(target):
        if options:
            raise TypeError(
                f"@bv.event options ({', '.join(options)}) apply to event classes, not to "
                f"the event function {target.__name__!r}"
            )
        return _event_function(target)
    raise TypeError(f"@bv.event decorates a class or a function, got {type(target).__name__}")


# -- class form ---------------------------------------------------------------------------


def _event_source(cls: T, options: dict[str, Any]) -> T:
    for name in options:
        if name in _FORBIDDEN_OPTIONS:
            raise TypeError(
                f"@bv.event({name}=...) is not supported: beava uses processing time only"
            )
        if name not in _OPTIONS:
            raise TypeError(
                f"unknown @bv.event option {name!r}; expected one of {', '.join(_OPTIONS)}"
            )
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception as exc:  # unresolvable forward references, bad annotations
        raise TypeError(f"@bv.event class {cls.__name__}: cannot read annotations ({exc})") from exc
    if not hints:
        raise TypeError(f"@bv.event class {cls.__name__} declares no annotated field")
    fields: dict[str, str] = {}
    optional: list[str] = []
    for name, annotation in hints.items():
        if name == "event_time":
            raise TypeError(
                f"@bv.event class {cls.__name__}: a field named 'event_time' is not "
                "supported; beava uses processing time only"
            )
        wire, is_optional = _wire_type(cls, name, annotation)
        fields[name] = wire
        if is_optional:
            optional.append(name)
    defaults = _class_defaults(cls, hints)

    keep_events_for = options.get("keep_events_for")
    cold_after = options.get("cold_after")
    dedupe_key = options.get("dedupe_key")
    dedupe_window = options.get("dedupe_window")
    keep_ms = option_ms(keep_events_for, "keep_events_for", allow_forever=True)
    cold_ms = option_ms(cold_after, "cold_after", allow_forever=True)
    if dedupe_key is not None:
        if not isinstance(dedupe_key, str):
            raise TypeError(f"dedupe_key must be a str, got {type(dedupe_key).__name__}")
        if dedupe_key not in fields:
            raise ValueError(f"dedupe_key {dedupe_key!r} is not a field of {cls.__name__}")
    dedupe_ms = option_ms(dedupe_window, "dedupe_window", allow_forever=False)
    if dedupe_window is not None and dedupe_key is None:
        raise ValueError("dedupe_window requires dedupe_key")

    # The descriptor is the user's class itself: beava's attributes are set on it at run
    # time, so the checker sees the class through an untyped name here.
    source: Any = cls
    source._name = cls.__name__
    source._schema = dict(hints)
    source._defaults = defaults
    source._chain = []
    source._keep_events_for = keep_events_for
    source._cold_after = cold_after
    source._dedupe_key = dedupe_key
    source._dedupe_window = dedupe_window
    source._kind = "event_source"
    source._bv_fields = fields
    source._bv_optional = optional
    source._bv_options = {
        "keep_events_for_ms": keep_ms,
        "cold_after_ms": cold_ms,
        "dedupe_key": dedupe_key,
        "dedupe_window_ms": dedupe_ms,
    }
    stream = EventDerivation(cls, (), dict(fields), cls.__name__)
    source._bv_stream = stream
    for method in CHAIN_METHODS:
        setattr(cls, method, staticmethod(getattr(stream, method)))
    return cls


def _wire_type(cls: type, name: str, annotation: Any) -> tuple[str, bool]:
    wire = _WIRE_TYPES.get(annotation)
    if wire is not None:
        return wire, False
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(annotation)) == 2 and args[0] in _WIRE_TYPES:
            return _WIRE_TYPES[args[0]], True
    raise TypeError(
        f"@bv.event class {cls.__name__}: field {name!r} has unsupported type "
        f"{annotation!r}; use str, int, float, bool or one of them | None"
    )


def _class_defaults(cls: type, hints: dict[str, Any]) -> dict[str, Any]:
    defaults: dict[str, Any] = {}
    for name, annotation in hints.items():
        value = _class_attribute(cls, name)
        if value is None:
            continue
        base = annotation
        if base not in _WIRE_TYPES:
            base = next(a for a in typing.get_args(annotation) if a is not type(None))
        if not _default_ok(base, value):
            raise TypeError(
                f"@bv.event class {cls.__name__}: default {value!r} of field {name!r} does "
                f"not match its type {base.__name__}"
            )
        defaults[name] = value
    return defaults


def _class_attribute(cls: type, name: str) -> Any:
    for klass in cls.__mro__:
        if klass is object:
            break
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None


def _default_ok(base: type, value: Any) -> bool:
    if base is bool:
        return isinstance(value, bool)
    if base is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if base is float:
        return (
            isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value)
        )
    return isinstance(value, str)


def event_source_node(cls: Any) -> dict[str, Any]:
    """The register node of an event source class (sdk.md §7.2)."""
    schema: dict[str, Any] = {
        "fields": dict(cls._bv_fields),
        "optional_fields": list(cls._bv_optional),
    }
    if cls._defaults:
        schema["defaults"] = dict(cls._defaults)
    node: dict[str, Any] = {"kind": "event", "name": cls._name, "schema": schema}
    for key, value in cls._bv_options.items():
        if value is not None:
            node[key] = value
    return node


# -- function form ------------------------------------------------------------------------


def _event_function(fn: Callable[..., Any]) -> EventDerivation:
    param = event_parameter(fn, "event")
    obj = EventDerivation(None, (), {}, fn.__name__, is_event_function=True)
    bind_upstream(obj, param, functools.partial(_complete, obj, fn))
    return obj


def _complete(obj: EventDerivation, fn: Callable[..., Any], upstream: Any) -> None:
    stream = stream_of(upstream)
    result = fn(upstream)
    name = fn.__name__
    if isinstance(result, Aggregation):
        _bad_return(name, "returns an aggregation; declare aggregations with @bv.table")
    if (
        not isinstance(result, EventDerivation)
        or result._deferred is not None
        or not result._built_from(stream)
    ):
        _bad_return(
            name,
            f"must return a chain built from its parameter (e.g. {fn.__code__.co_varnames[0]}"
            f".filter(...)), got {result!r}",
        )
    if len(result._steps) == len(stream._steps):
        _bad_return(name, "returns its upstream unchanged; add at least one chain step")
    obj._root = result._root
    obj._steps = result._steps
    obj._columns = result._columns
    obj._deferred = None


def _bad_return(name: str, message: str) -> typing.NoReturn:
    raise DescriptorError(code="bad_return_type", path=name, message=f"{name}: {message}")
