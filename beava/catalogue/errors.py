"""Error codes, their HTTP statuses and the error envelopes (spec/wire.md §5).

This table is the one source of truth for which codes exist and which HTTP status each
carries; on framed TCP every error travels as an ERROR_RESPONSE frame.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

HTTP_STATUS: dict[str, int] = {
    "event_not_found": 404,
    "invalid_event": 400,
    "unknown_field_v0": 400,
    "unknown_field_event_time_v0": 400,
    "unknown_field_tolerate_delay_v0": 400,
    "control_character_in_string": 400,
    "invalid_json_body": 400,
    "missing_event_name_in_body": 400,
    "wal_unavailable": 503,
    "wal_sync_timeout": 400,
    "invalid_registration": 400,
    "invalid_expression": 400,
    "unsupported_node_kind": 400,
    "feature_removed_no_joins_v0": 400,
    "feature_removed_no_unions_v0": 400,
    "unbounded_op_in_lifetime_mode": 400,
    "aggregation_on_table_not_supported": 400,
    "aggregation_unknown_field": 400,
    "aggregation_unknown_op": 400,
    "aggregation_invalid_window": 400,
    "aggregation_invalid_where": 400,
    "aggregation_group_key_collides_with_feature": 400,
    "aggregation_feature_name_collision_across_aggregations": 400,
    "aggregation_duplicate_feature_name": 400,
    "window_not_supported": 400,
    "invalid_percentile_q": 400,
    "invalid_top_k_k": 400,
    "invalid_bloom_fpr": 400,
    "force_required": 409,
    "unsupported_media_type": 415,
    "unknown_table": 404,
    "key_parse_failure": 404,
    "feature_not_found": 404,
    "key_not_found": 404,
    "internal_error": 500,
    "unsupported_request_shape": 400,
    "reset_disabled_in_production": 403,
    "test_mode_required": 403,
    "invalid_test_clock": 400,
    "not_found": 404,
    "method_not_allowed": 405,
    "http_protocol_error": 400,
    "unsupported": 501,
    "invalid_push_many": 400,
    "batch_too_large": 400,
    "invalid_scan": 400,  # extension: table scan (docs/wire.md)
    "scan_cursor_expired": 409,
    "unauthenticated": 401,  # extension: access control (docs/wire.md)
    "forbidden": 403,
    "invalid_backfill": 400,  # extension: backfill (docs/wire.md)
    "backfill_upload_not_found": 404,
    "backfill_registry_mismatch": 409,
    "backfill_wal_required": 409,
    "backfill_wal_reclaimed": 409,
    "backfill_tail_unapplicable": 409,
    "backfill_would_drop": 409,
    "backfill_parts_overlap": 409,
    "backfill_too_large": 413,
    "aggregation_field_not_numeric": 400,  # extension: a numeric operator over a str field
    # extensions: connection limits (docs/limits.md)
    "too_many_connections": 503,
    "request_timeout": 408,
    "server_busy": 503,
    # extensions: sharded serving (docs/sharding.md)
    "wrong_shard": 421,
    "shard_fenced": 503,
    "not_sharded": 404,
    "invalid_fence": 400,
}


class BeavaError(Exception):
    """A request failure with a wire code.

    ``fields`` are extra keys of the inner ``error`` object (``path``, ``reason``,
    ``message`` ...); ``top`` are extra top-level keys next to ``error`` (such as
    ``registry_version``). The HTTP status comes from :data:`HTTP_STATUS`.
    """

    def __init__(self, code: str, top: dict[str, Any] | None = None, **fields: Any) -> None:
        super().__init__(code)
        self.code = code
        self.fields = fields
        self.top = top or {}

    @property
    def status(self) -> int:
        return HTTP_STATUS[self.code]

    def body(self) -> dict[str, Any]:
        """The error envelope ``{"error": {...}, **top}``."""
        return {"error": {"code": self.code, **self.fields}, **self.top}


def nearest_names(name: object, names: Iterable[str], limit: int = 3) -> list[str]:
    """The registered ``names`` closest in spelling to ``name`` (at most ``limit``, best
    first); for error hints, computed only when a request has already failed."""
    text = name if isinstance(name, str) else str(name)
    pool = list(names)
    close = difflib.get_close_matches(text, pool, n=limit, cutoff=0.6)
    if not close:  # a case slip ("user" for "User") is closer than difflib thinks
        folded = text.casefold()
        close = [n for n in pool if n.casefold() == folded][:limit]
    return close


def quoted_list(names: Iterable[str], limit: int = 12) -> str:
    """``'a', 'b', 'c'`` (the first ``limit``, then "and N more") for error texts."""
    items = list(names)
    text = ", ".join(repr(n) for n in items[:limit])
    if len(items) > limit:
        text += f" and {len(items) - limit} more"
    return text or "none"


def with_known_names(text: str, name: object, names: Iterable[str]) -> str:
    """``text`` about the unknown ``name``, followed by the ``names`` there are and the
    nearest of them: ``field 'amout' ... (fields: 'card', 'amount'); did you mean
    'amount'?``."""
    known = list(names)
    out = f"{text} (fields: {quoted_list(known)})"
    hint = did_you_mean(nearest_names(name, known))
    return f"{out}; {hint}" if hint else out


def did_you_mean(close: list[str]) -> str | None:
    """``did you mean 'a' or 'b'?`` for a non-empty list of close names, else None."""
    if not close:
        return None
    return "did you mean " + " or ".join(repr(n) for n in close) + "?"
