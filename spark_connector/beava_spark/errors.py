"""Errors raised by the connector (on the driver, or inside a partition task)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .totals import PushTotals


class BeavaSparkError(Exception):
    """Base of every error the connector raises itself."""


class ConversionError(BeavaSparkError, ValueError):
    """The DataFrame cannot be converted to event bodies; raised before any row is sent.
    ``problems`` lists one message per offending column or option."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"cannot convert the DataFrame to event bodies (nothing was sent):\n"
                         f"{lines}")


class ServerCheckError(BeavaSparkError):
    """A server failed the check made before the job starts (unreachable, or the event is
    not registered there); nothing was sent."""


class PartitionPushError(BeavaSparkError):
    """A partition task could not finish its pushes (connection lost, request refused as a
    whole). The task fails with this error so that Spark can retry it; rows sent before
    the failure may have been applied (a ``dedupe_key`` on the event makes the retry
    harmless)."""


class RowsRejectedError(BeavaSparkError):
    """Raised by ``push_dataframe(on_error="raise")`` once the job is over when the server
    rejected rows; ``totals`` holds the counts, error codes and sample rows."""

    def __init__(self, totals: PushTotals) -> None:
        self.totals = totals
        codes = ", ".join(f"{code} x{n}" for code, n in sorted(totals.rejected_by_code.items()))
        first = ""
        if totals.rejections:
            sample = totals.rejections[0]
            first = f"; first: [{sample.code}] {sample.row}"
        super().__init__(
            f"{totals.rejected} row(s) rejected ({codes}); {totals.acknowledged} acknowledged"
            f"{first}"
        )
