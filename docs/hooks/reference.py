"""Reference pages generated from the code, never kept by hand.

`operators_page()` renders the operator reference from the operator catalogue
(`beava.catalogue.operators`: parameters, kinds, defaults, limits, window support, memory
class, output type) and the SDK functions (`bv.<op>`: signature and docstring). The empty
value and the example of each operator are the only facts kept here; the tests check both
against a live server. `commands_page()` renders the command table of
`beava.protocol.commands`.

Both pages are committed as docs/operators.md and docs/commands.md, so a repository browser
shows them too; after changing the catalogue, the SDK functions or the command table, run
`python docs/hooks/reference.py` to write them again (a unit test fails until then).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import beava as bv
from beava.catalogue.operators import (
    CATALOGUE,
    FieldUse,
    MemoryClass,
    OperatorSpec,
    ParamKind,
    ParamSpec,
    WindowMode,
)

FAMILIES = {
    "A": "Core scalar",
    "B": "Sketches",
    "C": "Point and ordinal",
    "D": "Recency and streaks",
    "E": "Decay",
    "F": "Velocity and anomaly",
    "G": "Buffers and distributions",
    "H": "Geo",
}

# The event every example aggregates (`Txn`, grouped by `user_id`).
EXAMPLE_EVENT = '''\
@bv.event
class Txn(bv.Event):
    user_id: str
    amount: float
    merchant: str
    country: str
    status: str
    lat: float
    lon: float
'''

# One feature per operator: `name=bv.<op>(...)`, valid inside `.agg(...)` over Txn.
EXAMPLES: dict[str, str] = {
    "count": 'txns_1h=bv.count(window="1h")',
    "sum": 'spend_24h=bv.sum("amount", window="24h")',
    "mean": 'avg_amount_7d=bv.mean("amount", window="7d")',
    "min": 'min_amount_1h=bv.min("amount", window="1h")',
    "max": 'max_amount_1h=bv.max("amount", window="1h")',
    "var": 'amount_var_24h=bv.var("amount", window="24h")',
    "std": 'amount_std_24h=bv.std("amount", window="24h")',
    "ratio": 'declined_share_1h=bv.ratio(window="1h", where=bv.col("status") == "declined")',
    "n_unique": 'merchants_24h=bv.n_unique("merchant", window="24h")',
    "quantile": 'p90_amount_7d=bv.quantile("amount", q=0.9, window="7d")',
    "top_k": 'top_merchants_7d=bv.top_k("merchant", k=3, window="7d")',
    "bloom_member": 'merchant_seen_before=bv.bloom_member("merchant", expected_n=10_000)',
    "entropy": 'merchant_entropy_24h=bv.entropy("merchant", window="24h")',
    "first": 'first_country=bv.first("country")',
    "last": 'last_country=bv.last("country")',
    "first_n": 'first_3_merchants=bv.first_n("merchant", n=3)',
    "last_n": 'last_5_amounts=bv.last_n("amount", n=5)',
    "lag": 'previous_amount=bv.lag("amount", n=1)',
    "first_seen": "first_txn_at=bv.first_seen()",
    "last_seen": "last_txn_at=bv.last_seen()",
    "age": "account_age_ms=bv.age()",
    "has_seen": 'ever_declined=bv.has_seen(where=bv.col("status") == "declined")',
    "time_since": "ms_since_last_txn=bv.time_since()",
    "time_since_last_n": "ms_since_5th_last=bv.time_since_last_n(n=5)",
    "streak": 'declines_in_a_row=bv.streak(where=bv.col("status") == "declined")',
    "max_streak": 'most_declines_in_a_row=bv.max_streak(where=bv.col("status") == "declined")',
    "negative_streak": (
        'txns_since_decline=bv.negative_streak(where=bv.col("status") == "declined")'
    ),
    "first_seen_in_window": 'active_last_hour=bv.first_seen_in_window(window="1h")',
    "ewma": 'amount_ewma=bv.ewma("amount", half_life="1h")',
    "ewvar": 'amount_ewvar=bv.ewvar("amount", half_life="1h")',
    "ew_zscore": 'amount_ew_z=bv.ew_zscore("amount", half_life="1d")',
    "decayed_sum": 'spend_decayed=bv.decayed_sum("amount", half_life="6h")',
    "decayed_count": 'txns_decayed=bv.decayed_count(half_life="6h")',
    "twa": 'amount_twa=bv.twa("amount", window="forever")',
    "rate_of_change": 'amount_rate=bv.rate_of_change("amount", window="forever")',
    "inter_arrival_stats": 'mean_gap_ms=bv.inter_arrival_stats(window="forever")',
    "burst_count": 'max_txns_per_minute=bv.burst_count(window="forever", sub_window="1m")',
    "delta_from_prev": 'amount_delta=bv.delta_from_prev("amount")',
    "trend": 'amount_trend=bv.trend("amount", window="forever")',
    "trend_residual": 'amount_residual=bv.trend_residual("amount", window="forever")',
    "outlier_count": 'amount_outliers=bv.outlier_count("amount", window="forever", sigma=3.0)',
    "value_change_count": 'country_changes=bv.value_change_count("country", window="forever")',
    "z_score": 'amount_z=bv.z_score("amount", baseline_window="forever")',
    "histogram": 'amount_buckets=bv.histogram("amount", buckets=[10, 100, 1000])',
    "hour_of_day_histogram": "txns_by_hour=bv.hour_of_day_histogram()",
    "dow_hour_histogram": "txns_by_weekday_hour=bv.dow_hour_histogram()",
    "seasonal_deviation": 'amount_vs_hour=bv.seasonal_deviation("amount")',
    "event_type_mix": 'status_mix=bv.event_type_mix("status", categories=["ok", "declined"])',
    "most_recent_n": 'recent_merchants=bv.most_recent_n("merchant", n=5)',
    "reservoir_sample": 'sampled_amounts=bv.reservoir_sample("amount", samples=20)',
    "geo_velocity": 'max_kmh=bv.geo_velocity(lat="lat", lon="lon")',
    "geo_distance": 'km_travelled=bv.geo_distance(lat="lat", lon="lon")',
    "geo_spread": 'km_spread=bv.geo_spread(lat="lat", lon="lon")',
    "distance_from_home": 'km_from_home=bv.distance_from_home(lat="lat", lon="lon", samples=50)',
}

# What a feature reads while its row exists but the operator has seen nothing yet.
EMPTY: dict[str, Any] = {
    "count": 0, "sum": None, "mean": None, "min": None, "max": None, "var": None,
    "std": None, "ratio": None, "n_unique": 0, "quantile": None, "top_k": [],
    "bloom_member": False, "entropy": 0.0, "first": None, "last": None, "first_n": [],
    "last_n": [], "lag": None, "first_seen": None, "last_seen": None, "age": None,
    "has_seen": False, "time_since": None, "time_since_last_n": None, "streak": 0,
    "max_streak": 0, "negative_streak": 0, "first_seen_in_window": False, "ewma": None,
    "ewvar": None, "ew_zscore": None, "decayed_sum": None, "decayed_count": None, "twa": None,
    "rate_of_change": None, "inter_arrival_stats": None, "burst_count": 0,
    "delta_from_prev": None, "trend": None, "trend_residual": None, "outlier_count": 0,
    "value_change_count": 0, "z_score": None, "histogram": "every bucket 0",
    "hour_of_day_histogram": "24 zeros", "dow_hour_histogram": "168 zeros",
    "seasonal_deviation": None, "event_type_mix": {}, "most_recent_n": [],
    "reservoir_sample": [], "geo_velocity": None, "geo_distance": 0.0, "geo_spread": None,
    "distance_from_home": None,
}

_KIND = {
    ParamKind.STRING: "string",
    ParamKind.DURATION: "duration (`500ms`, `30s`, `5m`, `1h`, `7d`)",
    ParamKind.UINT: "non-negative integer",
    ParamKind.NUMBER: "number",
    ParamKind.NUMBERS: "list of numbers",
    ParamKind.STRINGS: "list of strings",
}

_OUTPUT = {
    "i64": "integer",
    "f64": "float",
    "bool": "boolean",
    "epoch_ms": "integer: epoch milliseconds",
    "inherits": "the field's own type (an integer stays an integer, a string a string)",
    "list": "list of the field's values",
    "map": "object of string keys",
    "top_k": 'list of `{"count": c, "value": v}`, most frequent first',
    "i64_list": "list of integers",
}

_WINDOW = {
    WindowMode.WINDOWED: "sliding window: `window=\"1h\"` (a duration) aggregates the last "
    "window, `forever` or none the whole lifetime",
    WindowMode.IGNORED: "lifetime only: a `window` is checked, sent and ignored by the "
    "server (the SDK warns)",
    WindowMode.LIFETIME_ONLY: "lifetime only: any `window` is refused at register "
    "(`aggregation_invalid_window`)",
    WindowMode.REQUIRED: "`window` required: the span the read looks back over",
    WindowMode.UNSUPPORTED: "lifetime only: any `window` is refused at register "
    "(`window_not_supported`)",
}

_MEMORY = {
    MemoryClass.O1: "constant per entity",
    MemoryClass.BOUNDED_SKETCH: "a bounded sketch per entity",
    MemoryClass.BOUNDED_BY_CONFIG: "bounded by `{p}` (default {d})",
    MemoryClass.BOUNDED_BY_PARAM: "bounded by `{p}`, which a lifetime feature must set",
}

_FIELD = {
    FieldUse.NONE: "none (the operator counts events)",
    FieldUse.UNCHECKED: "`field` is read at push time; its name is not checked at register",
    FieldUse.CHECKED: "`field`, checked at register against the event's schema",
    FieldUse.REQUIRED: "`field` required, checked at register against the event's schema",
}

# SDK argument names that differ from the wire param.
_SDK_NAME = {"lat_field": "lat", "lon_field": "lon"}


def _value(value: Any) -> str:
    if value is None:
        return "`null` (`None`)"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    text = repr(value).replace("'", '"')
    return f"`{text}`"


def _limit(p: ParamSpec) -> str:
    parts = []
    if p.bounds is not None:
        parts.append(f"in {p.bounds.describe()} (else `{p.bounds.code}`)")
    if p.max_items is not None:
        parts.append(f"at most {p.max_items:,} entries")
    if p.alias is not None:
        parts.append(f"also read from `{p.alias}`")
    return "; ".join(parts) or "—"


def _default(p: ParamSpec) -> str:
    if p.required:
        return "required"
    if p.default is None:
        return "—"
    if isinstance(p.default, tuple):
        return f"`{list(p.default)}`"
    return f"`{p.default!r}`".replace("'", '"')


def _summary(name: str) -> str:
    doc = inspect.getdoc(getattr(bv, name)) or ""
    return " ".join(doc.split("\n\n")[0].split()).replace("``", "`")


def _signature(name: str) -> str:
    sig = inspect.signature(getattr(bv, name))
    params = []
    star = False
    for p in sig.parameters.values():
        if p.kind is inspect.Parameter.KEYWORD_ONLY and not star:
            params.append("*")
            star = True
        text = p.name
        if p.default is not inspect.Parameter.empty:
            text += f"={p.default!r}"
        params.append(text)
    return f"bv.{name}({', '.join(params)})"


def _operator(spec: OperatorSpec) -> list[str]:
    name = spec.name
    alias = " (alias `ema`)" if name == "ewma" else ""
    memory = _MEMORY[spec.memory].format(p=spec.memory_param, d=spec.memory_default)
    out = [
        f"### {name}",
        "",
        f"{_summary(name)}{alias}",
        "",
        "```text",
        _signature(name),
        "```",
        "",
        "| | |",
        "|---|---|",
        f"| field | {_FIELD[spec.field]} |",
        f"| window | {_WINDOW[spec.window]} |",
        f"| returns | {_OUTPUT[spec.output]} |",
        f"| empty value | {_value(EMPTY[name])} |",
        f"| memory | {memory} |",
        "",
    ]
    params = [p for p in spec.params if p.name not in ("field", "where")]
    if params:
        out += [
            "| parameter | SDK argument | type | default | limits |",
            "|---|---|---|---|---|",
        ]
        for p in params:
            out.append(
                f"| `{p.name}` | `{_SDK_NAME.get(p.name, p.name)}` | {_KIND[p.kind]} | "
                f"{_default(p)} | {_limit(p)} |"
            )
        out.append("")
    out += ["```python", EXAMPLES[name], "```", ""]
    return out


def operators_page() -> str:
    """The operator reference, one section per operator of the catalogue."""
    lines = [
        "# Operator reference",
        "",
        "Generated from the operator catalogue (`beava/catalogue/operators.py`) and the SDK",
        "functions by `docs/hooks/reference.py`, so it lists exactly what the server and",
        "`import beava as bv` accept. Every operator also takes `where=` (an expression",
        "over the event's columns: only matching events update the feature; some",
        "operators, such as `ratio` and `streak`, also count the events that do not match).",
        "",
        "The examples are features of one table over this event; the tests register them",
        "all on a live server:",
        "",
        "```python",
        "import beava as bv",
        "",
        EXAMPLE_EVENT.rstrip(),
        "",
        "@bv.table(key=\"user_id\")",
        "def UserFeatures(txn: Txn) -> bv.Table:",
        "    return txn.group_by(\"user_id\").agg(",
        "        txns_1h=bv.count(window=\"1h\"),   # ... any of the examples below",
        "    )",
        "```",
        "",
        "Parameters are listed by their name in the register payload (the wire); the SDK",
        "argument is the keyword of the `bv.` function. Out-of-range values are refused when",
        "the SDK function is called (`ValueError`) and again by the server at register (the",
        "code in the limits column). Durations are `<digits><unit>`, unit `ms`, `s`, `m`, `h`",
        "or `d`.",
        "",
        "| family | operators |",
        "|---|---|",
    ]
    by_family: dict[str, list[OperatorSpec]] = {}
    for spec in CATALOGUE.values():
        by_family.setdefault(spec.family, []).append(spec)
    for family, specs in by_family.items():
        names = ", ".join(f"[{s.name}](#{s.name})" for s in specs)
        lines.append(f"| {FAMILIES[family]} | {names} |")
    lines.append("")
    for family, specs in by_family.items():
        lines += [f"## {FAMILIES[family]}", ""]
        for spec in specs:
            lines += _operator(spec)
    lines += [
        "## Deprecated names",
        "",
        "`bv.avg`, `bv.variance`, `bv.stddev`, `bv.count_distinct` and `bv.percentile(p=)`",
        "still work and warn (`DeprecationWarning`); use `bv.mean`, `bv.var`, `bv.std`,",
        "`bv.n_unique` and `bv.quantile(q=)`.",
        "",
    ]
    return "\n".join(lines)


def _hex(op: int | None) -> str:
    return "—" if op is None else f"`0x{op:04X}`"


def commands_page() -> str:
    """The command table: every request, its opcode and HTTP route."""
    from beava.protocol.commands import COMMANDS
    from beava_client.opcodes import CT_JSON, CT_MSGPACK

    def cts(command: Any) -> str:
        if command.op is None:
            return "—"
        if len(command.content_types) > 2:
            return "ignored"
        names = {CT_JSON: "JSON", CT_MSGPACK: "MessagePack"}
        return ", ".join(names[c] for c in sorted(command.content_types))

    lines = [
        "# Command table",
        "",
        "Generated by `docs/hooks/reference.py` from the server's command table",
        "(`beava/protocol/commands.py`), from which framed-TCP dispatch and HTTP routing are",
        "derived. Failures of any framed request answer opcode `0xFFFF` with a JSON error",
        "body. A command whose answer reads applied state waits, on its connection, behind",
        "that connection's earlier pushes (read-your-writes).",
        "",
        "| command | request op | reply op | content types | HTTP | reads state |",
        "|---|---|---|---|---|---|",
    ]
    for c in COMMANDS:
        if c.op is not None and not c.implemented:
            reply = "`0xFFFF` `op_not_implemented`"
        else:
            reply = _hex(c.reply_op)
        routes = [f"`{p}`" for p in c.http_paths]
        routes += [f"`{p}…`" for p in c.http_prefixes]
        http = f"{c.http_method} {', '.join(routes)}" if c.http_method else "—"
        lines.append(
            f"| {c.name} | {_hex(c.op)} | {reply} | {cts(c)} | {http} | "
            f"{'yes' if c.reads_state else 'no'} |"
        )
    lines.append("")
    return "\n".join(lines)


DOCS = Path(__file__).resolve().parents[1]
# docs/<name> -> its generator
PAGES: dict[str, Callable[[], str]] = {"operators.md": operators_page,
                                       "commands.md": commands_page}
NOTE = "<!-- Generated by docs/hooks/reference.py: edit the code it reads, not this file. -->\n"


def page_text(name: str) -> str:
    """The whole committed file ``docs/<name>``."""
    return NOTE + PAGES[name]() + "\n"


def main() -> None:
    for name in PAGES:
        (DOCS / name).write_text(page_text(name), encoding="utf-8")


if __name__ == "__main__":
    main()
