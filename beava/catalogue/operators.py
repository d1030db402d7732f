"""The aggregation operator catalogue: one table describing all 54 operators and `ema`.

Pure data (spec/operators.md §2, §5, §9 and registry.md §3.4, §7.3, §13): validation, the
engine and the SDK read it; nothing here imports the engine. A feature's wire params are
first *normalised* op-independently (`normalise_params`: recognised keys only, aliases folded,
values of the wrong JSON type dropped) and later *resolved* per op (`resolve_params`: the op's
own params with defaults filled and durations converted to milliseconds).
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = [
    "ALIASES",
    "BLOOM_MAX_BITS",
    "BLOOM_MAX_EXPECTED_N",
    "BLOOM_MAX_HASHES",
    "CATALOGUE",
    "FOREVER",
    "LIMIT_CODE",
    "MAX_BUFFER",
    "MAX_BUCKET_EDGES",
    "MAX_CATEGORIES",
    "MAX_DURATION_MS",
    "MAX_SIGMA",
    "NUMERIC_FIELD_OPS",
    "OPERATOR_NAMES",
    "RECOGNISED_PARAMS",
    "Bounds",
    "FieldUse",
    "MemoryClass",
    "OperatorSpec",
    "ParamKind",
    "ParamSpec",
    "ParamProblem",
    "WindowMode",
    "bloom_geometry",
    "bloom_problem",
    "canonical_op",
    "lookup",
    "normalise_params",
    "optional_param_problem",
    "param_value_ok",
    "parse_duration",
    "resolve_params",
    "shown",
]

FOREVER = "forever"
MAX_DURATION_MS = (1 << 63) - 1

# Ranges this server adds to the spec's (docs/limits.md, "operator parameters"): every
# numeric param is bounded so that the state of one feature of one entity, and the work of
# one update, stay bounded. Out of range answers `invalid_registration` at the param's path
# unless the spec names a code for that param (then that code, e.g. invalid_bloom_fpr).
LIMIT_CODE = "invalid_registration"
MAX_BUFFER = 4096  # most_recent_n.n, reservoir_sample.samples, distance_from_home.samples
MAX_CATEGORIES = 4096  # event_type_mix: max_categories, and entries of `categories`
MAX_BUCKET_EDGES = 4096  # histogram: entries of `buckets` (cells = edges + 1)
MAX_SIGMA = 1e6  # outlier_count.sigma in [-MAX_SIGMA, MAX_SIGMA]: a finite double
BLOOM_MAX_EXPECTED_N = 1 << 32
BLOOM_MAX_BITS = 1 << 23  # 1 MiB of filter per entity
BLOOM_MAX_HASHES = 32  # bit probes per value: target_fpr >= 2**-32
_DURATION_RE = re.compile(r"([0-9]+)(ms|s|m|h|d)", re.ASCII)
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration(text: str) -> int | None:
    """Parse a duration (registry.md §3.6): milliseconds, or None for `forever`.

    Raises ValueError for anything else, including a zero value or more than 2**63-1 ms.
    """
    if text == FOREVER:
        return None
    m = _DURATION_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"invalid duration {text!r}; expected <digits>(ms|s|m|h|d) or 'forever'")
    ms = int(m.group(1)) * _UNIT_MS[m.group(2)]
    if ms == 0 or ms > MAX_DURATION_MS:
        raise ValueError(f"invalid duration {text!r}; must be > 0 and at most 2^63-1 ms")
    return ms


class ParamKind(enum.Enum):
    """The JSON type a param is read as (operators.md §2); other types count as absent."""

    STRING = "string"
    DURATION = "duration"  # a string, parsed with parse_duration when resolved
    UINT = "uint"  # a non-negative JSON integer (booleans are not integers)
    NUMBER = "number"  # a JSON integer or number (booleans are not numbers)
    NUMBERS = "numbers"  # an array; numeric entries kept, others dropped
    STRINGS = "strings"  # an array; string entries kept, others dropped


def param_value_ok(kind: ParamKind, value: Any) -> bool:
    """Whether a JSON value has the type `kind` reads (arrays: any array)."""
    if kind is ParamKind.STRING or kind is ParamKind.DURATION:
        return isinstance(value, str)
    if kind is ParamKind.UINT:
        return type(value) is int and value >= 0
    if kind is ParamKind.NUMBER:
        return type(value) is int or type(value) is float
    return isinstance(value, list)


# Every recognised param key (registry.md §3.4), in that order; everything else is ignored.
RECOGNISED_PARAMS: Mapping[str, ParamKind] = MappingProxyType({
    "field": ParamKind.STRING,
    "window": ParamKind.STRING,
    "where": ParamKind.STRING,
    "n": ParamKind.UINT,
    "half_life": ParamKind.DURATION,
    "sub_window": ParamKind.DURATION,
    "sigma": ParamKind.NUMBER,
    "q": ParamKind.NUMBER,
    "k": ParamKind.UINT,
    "expected_n": ParamKind.UINT,
    "target_fpr": ParamKind.NUMBER,
    "buckets": ParamKind.NUMBERS,
    "precision": ParamKind.UINT,
    "lat_field": ParamKind.STRING,
    "lon_field": ParamKind.STRING,
    "samples": ParamKind.UINT,
    "categories": ParamKind.STRINGS,
    "max_categories": ParamKind.UINT,
})

# Op-independent aliases (alias -> primary); the primary wins when both are present.
ALIASES: Mapping[str, str] = MappingProxyType({
    "capacity": "expected_n",
    "fpr": "target_fpr",
    "lat": "lat_field",
    "lon": "lon_field",
})


def _clean(kind: ParamKind, value: Any) -> Any:
    if kind is ParamKind.NUMBERS:
        return [v for v in value if type(v) is int or type(v) is float]
    if kind is ParamKind.STRINGS:
        return [v for v in value if isinstance(v, str)]
    return value


def normalise_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Normalised form of a feature's params (registry.md §3.7): recognised keys only, aliases
    folded into their primary key, wrong-typed values dropped (they count as absent), array
    entries of the wrong type dropped. Key order follows the payload."""
    out: dict[str, Any] = {}
    if not params:
        return out
    for key, value in params.items():
        primary = ALIASES.get(key, key)
        kind = RECOGNISED_PARAMS.get(primary)
        if kind is None or not param_value_ok(kind, value):
            continue
        if primary != key and primary in params and param_value_ok(kind, params[primary]):
            continue  # the primary key is present with a usable value: it wins
        out[primary] = _clean(kind, value)
    return out


@dataclass(frozen=True, slots=True)
class Bounds:
    """Register-time range check of a numeric param (registry.md §7.3, R11.8 / 11.12-11.14)."""

    lo: float
    hi: float | None  # None: no upper bound
    lo_open: bool
    hi_open: bool
    code: str  # error code when the value is out of range

    def contains(self, value: float) -> bool:
        if value < self.lo or (self.lo_open and value == self.lo):
            return False
        if self.hi is None:
            return True
        return value < self.hi or (not self.hi_open and value == self.hi)

    def describe(self) -> str:
        hi = "inf" if self.hi is None else _bound_text(self.hi)
        lo = _bound_text(self.lo)
        return f"{'(' if self.lo_open else '['}{lo}, {hi}{')' if self.hi_open else ']'}"


def _bound_text(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


@dataclass(frozen=True, slots=True)
class ParamSpec:
    """One param an operator reads. `default` is used when the param is absent (after the
    wrong-type rule); `required` params have no default and fail validation when absent.
    `bounds` is the range of a numeric param; `max_items` caps the entries an array param
    keeps after normalisation (LIMIT_CODE when exceeded)."""

    name: str
    kind: ParamKind
    default: Any = None
    required: bool = False
    bounds: Bounds | None = None
    alias: str | None = None  # op-specific alias, e.g. reservoir_sample reads `k` for `samples`
    max_items: int | None = None


@dataclass(frozen=True, slots=True)
class ParamProblem:
    """Why a feature's param is refused: the error code, the param key as it appears in
    the normalised params (an op-specific alias when the value came from it), a reason."""

    code: str
    param: str
    reason: str


def shown(value: Any, limit: int = 40) -> str:
    """`repr(value)` cut to `limit` characters, for error reasons."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 3]}..."


class WindowMode(enum.Enum):
    """How an operator treats `window` (operators.md §5)."""

    WINDOWED = "windowed"  # a duration selects bucketed mode; `forever` / absent = lifetime
    IGNORED = "ignored"  # grammar-checked, then ignored: always lifetime
    LIFETIME_ONLY = "lifetime_only"  # any window string => aggregation_invalid_window
    REQUIRED = "required"  # first_seen_in_window: a lifetime param W, `forever` = 0
    UNSUPPORTED = "unsupported"  # bloom_member: any window string => window_not_supported


class FieldUse(enum.Enum):
    """How an operator uses `params.field` at register time (registry.md §7.3, R11.7)."""

    NONE = "none"  # fieldless
    UNCHECKED = "unchecked"  # read at runtime, never validated
    CHECKED = "checked"  # if given, must exist in the post-prefix schema (11.7b)
    REQUIRED = "required"  # must be given (11.7a) and exist (11.7b)


class MemoryClass(enum.Enum):
    """Per-entity lifetime memory class (registry.md §13)."""

    O1 = "O1"
    BOUNDED_SKETCH = "BoundedSketch"
    BOUNDED_BY_CONFIG = "BoundedByConfig"  # bounded by the default of `memory_param`
    BOUNDED_BY_PARAM = "BoundedByParam"  # `memory_param` must be given in lifetime mode


@dataclass(frozen=True, slots=True)
class OperatorSpec:
    """One operator of the catalogue (operators.md §9)."""

    name: str
    family: str  # "A".."H" (operators.md §10-§17)
    params: tuple[ParamSpec, ...]  # every param the op reads, `window` excluded
    field: FieldUse
    window: WindowMode
    output: str  # value read back: i64 f64 bool epoch_ms inherits list map top_k i64_list
    wire_type: str | None  # schema type the SDK declares (sdk.md §7.4); None = the field's
    memory: MemoryClass
    memory_param: str | None = None
    memory_default: int | None = None

    def param(self, name: str) -> ParamSpec | None:
        for p in self.params:
            if p.name == name:
                return p
        return None

    def lifetime_bound(self) -> ParamSpec | None:
        """The param a windowless feature must set (MemoryClass.BOUNDED_BY_PARAM), or None."""
        if self.memory is not MemoryClass.BOUNDED_BY_PARAM or self.memory_param is None:
            return None
        return self.param(self.memory_param)


_FIELD = ParamSpec("field", ParamKind.STRING)
_WHERE = ParamSpec("where", ParamKind.STRING)
_HALF_LIFE = ParamSpec("half_life", ParamKind.DURATION, required=True)
_N_1024 = ParamSpec(
    "n", ParamKind.UINT, required=True,
    bounds=Bounds(1, 1024, False, False, "aggregation_unknown_field"),
)
_BUFFER = Bounds(0, MAX_BUFFER, False, False, LIMIT_CODE)
_LAT = ParamSpec("lat_field", ParamKind.STRING, default="lat")
_LON = ParamSpec("lon_field", ParamKind.STRING, default="lon")

_W = WindowMode
_F = FieldUse
_M = MemoryClass


def _op(
    name: str,
    family: str,
    params: tuple[ParamSpec, ...],
    field: FieldUse,
    window: WindowMode,
    output: str,
    wire_type: str | None,
    memory: MemoryClass = MemoryClass.O1,
    memory_param: str | None = None,
    memory_default: int | None = None,
) -> OperatorSpec:
    return OperatorSpec(
        name, family, params, field, window, output, wire_type, memory, memory_param,
        memory_default,
    )


_OPS: tuple[OperatorSpec, ...] = (
    # A: core scalar
    _op("count", "A", (_WHERE,), _F.NONE, _W.WINDOWED, "i64", "i64"),
    _op("sum", "A", (_FIELD, _WHERE), _F.CHECKED, _W.WINDOWED, "f64", "f64"),
    _op("mean", "A", (_FIELD, _WHERE), _F.CHECKED, _W.WINDOWED, "f64", "f64"),
    _op("min", "A", (_FIELD, _WHERE), _F.CHECKED, _W.WINDOWED, "inherits", None),
    _op("max", "A", (_FIELD, _WHERE), _F.CHECKED, _W.WINDOWED, "inherits", None),
    _op("var", "A", (_FIELD, _WHERE), _F.CHECKED, _W.WINDOWED, "f64", "f64"),
    _op("std", "A", (_FIELD, _WHERE), _F.CHECKED, _W.WINDOWED, "f64", "f64"),
    _op("ratio", "A", (_WHERE,), _F.NONE, _W.WINDOWED, "f64", "f64"),
    # B: sketches
    _op("n_unique", "B", (_FIELD, _WHERE), _F.CHECKED, _W.WINDOWED, "i64", "i64",
        _M.BOUNDED_SKETCH),
    _op("quantile", "B",
        (_FIELD, ParamSpec("q", ParamKind.NUMBER, default=0.5,
                           bounds=Bounds(0, 1, True, True, "invalid_percentile_q")), _WHERE),
        _F.CHECKED, _W.WINDOWED, "f64", "f64", _M.BOUNDED_SKETCH),
    _op("top_k", "B",
        (_FIELD, ParamSpec("k", ParamKind.UINT, default=10,
                           bounds=Bounds(1, 1024, False, False, "invalid_top_k_k")), _WHERE),
        _F.CHECKED, _W.WINDOWED, "top_k", "str", _M.BOUNDED_BY_CONFIG, "k", 10),
    _op("bloom_member", "B",
        (_FIELD, ParamSpec("expected_n", ParamKind.UINT, default=1024,
                           bounds=Bounds(0, BLOOM_MAX_EXPECTED_N, False, False, LIMIT_CODE)),
         ParamSpec("target_fpr", ParamKind.NUMBER, default=0.01,
                   bounds=Bounds(0, 1, True, True, "invalid_bloom_fpr")), _WHERE),
        _F.CHECKED, _W.UNSUPPORTED, "bool", "bool", _M.BOUNDED_SKETCH),
    # entropy caps itself at 1024 categories and ignores max_categories (operators.md §11.5)
    _op("entropy", "B", (_FIELD, _WHERE), _F.CHECKED, _W.WINDOWED, "f64", "f64",
        _M.BOUNDED_BY_CONFIG, "max_categories", 256),
    # C: point / ordinal
    _op("first", "C", (_FIELD, _WHERE), _F.REQUIRED, _W.LIFETIME_ONLY, "inherits", None),
    _op("last", "C", (_FIELD, _WHERE), _F.REQUIRED, _W.LIFETIME_ONLY, "inherits", None),
    _op("first_n", "C", (_FIELD, _N_1024, _WHERE), _F.REQUIRED, _W.LIFETIME_ONLY, "list",
        "str", _M.BOUNDED_BY_PARAM, "n"),
    _op("last_n", "C", (_FIELD, _N_1024, _WHERE), _F.REQUIRED, _W.LIFETIME_ONLY, "list",
        "str", _M.BOUNDED_BY_PARAM, "n"),
    _op("lag", "C", (_FIELD, _N_1024, _WHERE), _F.REQUIRED, _W.LIFETIME_ONLY, "inherits",
        None, _M.BOUNDED_BY_PARAM, "n"),
    # D: recency and streaks
    _op("first_seen", "D", (_WHERE,), _F.NONE, _W.LIFETIME_ONLY, "epoch_ms", "i64"),
    _op("last_seen", "D", (_WHERE,), _F.NONE, _W.LIFETIME_ONLY, "epoch_ms", "i64"),
    _op("age", "D", (_WHERE,), _F.NONE, _W.LIFETIME_ONLY, "i64", "i64"),
    _op("has_seen", "D", (_WHERE,), _F.NONE, _W.LIFETIME_ONLY, "bool", "bool"),
    _op("time_since", "D", (_WHERE,), _F.NONE, _W.LIFETIME_ONLY, "i64", "i64"),
    _op("time_since_last_n", "D", (_N_1024, _WHERE), _F.NONE, _W.LIFETIME_ONLY, "i64", "i64",
        _M.BOUNDED_BY_PARAM, "n"),
    _op("streak", "D", (_WHERE,), _F.NONE, _W.LIFETIME_ONLY, "i64", "i64"),
    _op("max_streak", "D", (_WHERE,), _F.NONE, _W.LIFETIME_ONLY, "i64", "i64"),
    _op("negative_streak", "D", (_WHERE,), _F.NONE, _W.LIFETIME_ONLY, "i64", "i64"),
    _op("first_seen_in_window", "D", (_WHERE,), _F.NONE, _W.REQUIRED, "bool", "bool"),
    # E: decay (window accepted and ignored)
    _op("ewma", "E", (_FIELD, _HALF_LIFE, _WHERE), _F.CHECKED, _W.IGNORED, "f64", "f64"),
    _op("ewvar", "E", (_FIELD, _HALF_LIFE, _WHERE), _F.CHECKED, _W.IGNORED, "f64", "f64"),
    _op("ew_zscore", "E", (_FIELD, _HALF_LIFE, _WHERE), _F.CHECKED, _W.IGNORED, "f64", "f64"),
    _op("decayed_sum", "E", (_FIELD, _HALF_LIFE, _WHERE), _F.CHECKED, _W.IGNORED, "f64",
        "f64"),
    _op("decayed_count", "E", (_HALF_LIFE, _WHERE), _F.NONE, _W.IGNORED, "f64", "f64"),
    _op("twa", "E", (_FIELD, _WHERE), _F.CHECKED, _W.IGNORED, "f64", "f64"),
    # F: velocity and anomaly (window accepted and ignored)
    _op("rate_of_change", "F", (_FIELD, _WHERE), _F.CHECKED, _W.IGNORED, "f64", "f64"),
    _op("inter_arrival_stats", "F", (_WHERE,), _F.NONE, _W.IGNORED, "f64", "f64"),
    _op("burst_count", "F", (ParamSpec("sub_window", ParamKind.DURATION, required=True),
                              _WHERE), _F.NONE, _W.IGNORED, "i64", "i64"),
    _op("delta_from_prev", "F", (_FIELD, _WHERE), _F.CHECKED, _W.IGNORED, "f64", None),
    _op("trend", "F", (_FIELD, _WHERE), _F.CHECKED, _W.IGNORED, "f64", "f64"),
    _op("trend_residual", "F", (_FIELD, _WHERE), _F.CHECKED, _W.IGNORED, "f64", "f64"),
    _op("outlier_count", "F",
        (_FIELD, ParamSpec("sigma", ParamKind.NUMBER, default=3.0,
                           bounds=Bounds(-MAX_SIGMA, MAX_SIGMA, False, False, LIMIT_CODE)),
         _WHERE),
        _F.CHECKED, _W.IGNORED, "i64", "i64"),
    _op("value_change_count", "F", (_FIELD, _WHERE), _F.CHECKED, _W.IGNORED, "i64", "i64"),
    _op("z_score", "F", (_FIELD, _WHERE), _F.CHECKED, _W.IGNORED, "f64", "f64"),
    # G: buffers and distributions
    _op("histogram", "G",
        (_FIELD, ParamSpec("buckets", ParamKind.NUMBERS, default=(),
                           max_items=MAX_BUCKET_EDGES), _WHERE),
        _F.UNCHECKED, _W.LIFETIME_ONLY, "map", "str", _M.BOUNDED_BY_PARAM, "buckets"),
    _op("hour_of_day_histogram", "G", (_WHERE,), _F.NONE, _W.LIFETIME_ONLY, "i64_list",
        "str"),
    _op("dow_hour_histogram", "G", (_WHERE,), _F.NONE, _W.LIFETIME_ONLY, "map", "str"),
    _op("seasonal_deviation", "G", (_FIELD, _WHERE), _F.UNCHECKED, _W.LIFETIME_ONLY, "f64",
        "f64"),
    _op("event_type_mix", "G",
        (_FIELD, ParamSpec("max_categories", ParamKind.UINT, default=256,
                           bounds=Bounds(0, MAX_CATEGORIES, False, False, LIMIT_CODE)),
         ParamSpec("categories", ParamKind.STRINGS, max_items=MAX_CATEGORIES), _WHERE),
        _F.UNCHECKED, _W.LIFETIME_ONLY, "map", "str", _M.BOUNDED_BY_CONFIG, "max_categories",
        256),
    _op("most_recent_n", "G",
        (_FIELD, ParamSpec("n", ParamKind.UINT, default=10, bounds=_BUFFER), _WHERE),
        _F.UNCHECKED, _W.LIFETIME_ONLY, "list", "str", _M.BOUNDED_BY_PARAM, "n"),
    _op("reservoir_sample", "G",
        (_FIELD, ParamSpec("samples", ParamKind.UINT, default=10, alias="k", bounds=_BUFFER),
         _WHERE),
        _F.UNCHECKED, _W.LIFETIME_ONLY, "list", "str", _M.BOUNDED_BY_PARAM, "samples"),
    # H: geo
    _op("geo_velocity", "H", (_LAT, _LON, _WHERE), _F.NONE, _W.LIFETIME_ONLY, "f64", "f64"),
    _op("geo_distance", "H", (_LAT, _LON, _WHERE), _F.NONE, _W.LIFETIME_ONLY, "f64", "f64"),
    _op("geo_spread", "H", (_LAT, _LON, _WHERE), _F.NONE, _W.LIFETIME_ONLY, "f64", "f64"),
    _op("distance_from_home", "H",
        (_LAT, _LON, ParamSpec("samples", ParamKind.UINT, default=100, bounds=_BUFFER), _WHERE),
        _F.NONE, _W.LIFETIME_ONLY, "f64", "f64", _M.BOUNDED_BY_CONFIG, "samples", 100),
)

CATALOGUE: Mapping[str, OperatorSpec] = MappingProxyType({op.name: op for op in _OPS})
OPERATOR_NAMES: tuple[str, ...] = tuple(op.name for op in _OPS)
_OP_ALIASES: Mapping[str, str] = MappingProxyType({"ema": "ewma"})


def canonical_op(name: str) -> str:
    """The canonical name of an op string (`ema` -> `ewma`); unknown names pass through."""
    return _OP_ALIASES.get(name, name)


def lookup(name: str) -> OperatorSpec | None:
    """The operator an op string names (`ema` included), or None if it is not an operator."""
    return CATALOGUE.get(_OP_ALIASES.get(name, name))


def resolve_params(spec: OperatorSpec, params: Mapping[str, Any]) -> dict[str, Any]:
    """The engine-facing params of a feature from its normalised params: every param of the
    op, in catalogue order, with defaults filled (None where there is none); durations in ms,
    arrays as tuples. For a WindowMode.REQUIRED op, `window` is the lifetime param W in ms
    (`forever` = 0). Assumes the params passed validation."""
    out: dict[str, Any] = {}
    for p in spec.params:
        value = params.get(p.name)
        if value is None and p.alias is not None:
            value = params.get(p.alias)
        if value is None:
            value = p.default
        elif p.kind is ParamKind.DURATION:
            value = parse_duration(value)
        elif isinstance(value, list):
            value = tuple(value)
        out[p.name] = value
    if spec.window is WindowMode.REQUIRED:
        window = params.get("window")
        out["window"] = (parse_duration(window) or 0) if isinstance(window, str) else 0
    return out


def bloom_geometry(expected_n: int, target_fpr: float) -> tuple[int, int]:
    """`(m, k)` of a bloom_member filter (operators.md §11.4): bits, rounded up to a
    multiple of 64, and hashes per value; `expected_n` 0 counts as 1. Same arithmetic as the
    engine's kernel (beava._fast.ops.ops_bloom_member.bloom_geometry)."""
    n = float(max(expected_n, 1))
    m_f = -n * math.log(target_fpr) / (math.log(2) ** 2)
    m = (math.ceil(m_f) + 63) // 64 * 64
    k = max(1, math.ceil(m_f / n * math.log(2)))
    return m, k


def bloom_problem(expected_n: int, target_fpr: float) -> ParamProblem | None:
    """Whether a bloom_member sizing (both values in range) needs more than
    BLOOM_MAX_HASHES hashes per value (`invalid_bloom_fpr`, param target_fpr) or more than
    BLOOM_MAX_BITS bits per entity (LIMIT_CODE, param expected_n)."""
    m, k = bloom_geometry(expected_n, target_fpr)
    if k > BLOOM_MAX_HASHES:
        return ParamProblem(
            "invalid_bloom_fpr", "target_fpr",
            f"bloom_member target_fpr {target_fpr!r} needs {k} hashes per value; at most "
            f"{BLOOM_MAX_HASHES} (target_fpr >= 2^-{BLOOM_MAX_HASHES}, about "
            f"{2.0 ** -BLOOM_MAX_HASHES:.3g})",
        )
    if m > BLOOM_MAX_BITS:
        return ParamProblem(
            LIMIT_CODE, "expected_n",
            f"bloom_member expected_n {expected_n} with target_fpr {target_fpr!r} needs a "
            f"filter of {m} bits per entity; at most {BLOOM_MAX_BITS} (lower expected_n or "
            "raise target_fpr)",
        )
    return None


def optional_param_problem(spec: OperatorSpec, params: Mapping[str, Any]) -> ParamProblem | None:
    """The first out-of-range optional param of a feature (registry.md §7.3 R11.12-11.14
    and the limits above), params in catalogue order, then the bloom_member sizing; None
    when every present param is in range. `params` are normalised (wrong types dropped)."""
    for p in spec.params:
        if p.required:
            continue  # R11.8 checks required params, earlier
        key = p.name
        value = params.get(key)
        if value is None and p.alias is not None:
            key = p.alias
            value = params.get(key)
        if value is None:
            continue
        if p.bounds is not None and not p.bounds.contains(value):
            return ParamProblem(
                p.bounds.code, key,
                f"{spec.name} {key} must be in {p.bounds.describe()}; got {shown(value)}",
            )
        if p.max_items is not None and len(value) > p.max_items:
            return ParamProblem(
                LIMIT_CODE, key,
                f"{spec.name} {key} has {len(value)} entries; at most {p.max_items}",
            )
    if spec.name == "bloom_member":
        expected_n = params.get("expected_n")
        target_fpr = params.get("target_fpr")
        return bloom_problem(
            1024 if expected_n is None else expected_n,
            0.01 if target_fpr is None else target_fpr,
        )
    return None


# Operators whose `field` is read as a number: over a `str` field every value would be
# skipped and the feature would read its empty value forever, so register refuses it
# (`aggregation_field_not_numeric`, docs/wire.md).
NUMERIC_FIELD_OPS: frozenset[str] = frozenset({
    "sum", "mean", "var", "std", "quantile", "ewma", "ewvar", "ew_zscore", "decayed_sum",
    "twa", "rate_of_change", "delta_from_prev", "trend", "trend_residual", "outlier_count",
    "z_score", "seasonal_deviation",
})
