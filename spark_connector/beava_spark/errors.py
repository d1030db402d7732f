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

    def __init__(self, problems: list[str],
                 what: str = "cannot convert the DataFrame to event bodies") -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{what} (nothing was sent):\n{lines}")


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

    def __init__(self, totals: PushTotals, hint: str = "") -> None:
        self.totals = totals
        codes = ", ".join(f"{code} x{n}" for code, n in sorted(totals.rejected_by_code.items()))
        first = ""
        if totals.rejections:
            sample = totals.rejections[0]
            first = f"; first: [{sample.code}] {sample.row}"
        super().__init__(
            f"{totals.rejected} row(s) rejected ({codes}); {totals.acknowledged} acknowledged"
            f"{first}" + (f". {hint}" if hint else "")
        )


class SchemaMismatchError(BeavaSparkError):
    """The rows do not fit the event: the first rows a partition sent were all rejected for
    a schema reason (undeclared field, required field missing, null or of another type),
    so the partitions stopped early. ``totals`` holds the counts and sample rows."""

    def __init__(self, message: str, totals: PushTotals) -> None:
        self.totals = totals
        super().__init__(message)


class PushFailedError(BeavaSparkError):
    """The Spark job failed (e.g. a server went away and the task retries ran out).
    ``reason`` is the one-line cause; ``totals`` the counts the tasks reported until then
    (every attempt, failed ones included: rows a retried partition sent twice count
    twice)."""

    def __init__(self, reason: str, totals: PushTotals) -> None:
        self.reason = reason
        self.totals = totals
        super().__init__(f"the push failed: {reason}")


def spark_failure_reason(exc: BaseException) -> str:
    """The telling line of a (usually very long) Spark error: the connector's own error
    message when a task raised one, else the last ``Name: message`` line of the Python
    traceback, else the first line."""
    text = str(exc)
    lines = [line.strip() for line in text.splitlines()]
    for line in lines:
        for name in ("PartitionPushError: ", "RowsRejectedError: ", "SchemaMismatchError: ",
                     "BeavaSparkError: "):
            at = line.find(name)
            if at >= 0:
                return line[at + len(name):].strip()
    for line in reversed(lines):
        head, sep, rest = line.partition(": ")
        if sep and rest and head.rsplit(".", 1)[-1].endswith(("Error", "Exception")) \
                and " " not in head:
            return line
    return lines[0] if lines and lines[0] else type(exc).__name__
