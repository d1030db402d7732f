"""Error codes `register` emits and the exception that carries one to the response.

Only the code strings live here; their HTTP statuses are in beava/catalogue/errors.py (every
code below is a 400 there except FORCE_REQUIRED, 409).
"""

from __future__ import annotations

INVALID_REGISTRATION = "invalid_registration"
INVALID_EXPRESSION = "invalid_expression"
FORCE_REQUIRED = "force_required"
# prelude (registry.md §5)
FEATURE_REMOVED_NO_JOINS = "feature_removed_no_joins_v0"
FEATURE_REMOVED_NO_UNIONS = "feature_removed_no_unions_v0"
UNKNOWN_FIELD_EVENT_TIME = "unknown_field_event_time_v0"
UNKNOWN_FIELD_TOLERATE_DELAY = "unknown_field_tolerate_delay_v0"
UNSUPPORTED_NODE_KIND = "unsupported_node_kind"
UNBOUNDED_OP_IN_LIFETIME_MODE = "unbounded_op_in_lifetime_mode"
# aggregation rules (registry.md §7.3, §14)
AGGREGATION_ON_TABLE_NOT_SUPPORTED = "aggregation_on_table_not_supported"
AGGREGATION_UNKNOWN_FIELD = "aggregation_unknown_field"
AGGREGATION_UNKNOWN_OP = "aggregation_unknown_op"
AGGREGATION_GROUP_KEY_COLLIDES_WITH_FEATURE = "aggregation_group_key_collides_with_feature"
AGGREGATION_INVALID_WINDOW = "aggregation_invalid_window"
AGGREGATION_INVALID_WHERE = "aggregation_invalid_where"
AGGREGATION_FEATURE_NAME_COLLISION = "aggregation_feature_name_collision_across_aggregations"
AGGREGATION_FIELD_NOT_NUMERIC = "aggregation_field_not_numeric"  # extension (docs/wire.md)
WINDOW_NOT_SUPPORTED = "window_not_supported"
INVALID_BLOOM_FPR = "invalid_bloom_fpr"
INVALID_PERCENTILE_Q = "invalid_percentile_q"
INVALID_TOP_K_K = "invalid_top_k_k"

BODY_PATH = "<body>"


class RegisterError(Exception):
    """A register request rejected with a 400 body `{"error":{code,path,reason,detail?}}`."""

    def __init__(self, code: str, path: str, reason: str, detail: str | None = None) -> None:
        super().__init__(f"{code} at {path}: {reason}")
        self.code = code
        self.path = path
        self.reason = reason
        self.detail = detail

    def error_object(self) -> dict[str, str]:
        """The `error` object of the response body, keys in sorted order."""
        err = {"code": self.code}
        if self.detail is not None:
            err["detail"] = self.detail
        err["path"] = self.path
        err["reason"] = self.reason
        return err
