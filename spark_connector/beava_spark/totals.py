"""Totals of a push: per partition task, merged on the driver through a Spark accumulator.

Spark merges the accumulator updates of successful task attempts only, so the totals
describe the attempts that finished; rows sent by a failed attempt are sent again by its
retry.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

MAX_REJECTION_SAMPLES = 20
"""Rejected rows kept (with their error) across the whole job."""
SAMPLE_ROW_CHARS = 1000


@dataclass(frozen=True)
class Rejection:
    """One rejected row: the server's error object, its code, the row's JSON body
    (cut at 1000 characters) and the server's URL."""

    code: str
    error: dict[str, Any]
    row: str
    server: str


@dataclass
class ServerTotals:
    """Counts for one server."""

    sent: int = 0
    acknowledged: int = 0
    rejected: int = 0


@dataclass
class PushTotals:
    """What a push did.

    - ``rows``: rows read from the DataFrame by the partitions that ran to the end
      (a partition stopped by ``on_error="raise"`` counts the rows it read);
    - ``sent``: rows sent to a server; ``acknowledged``: rows the server accepted
      (dedupe replays included); ``rejected``: rows refused, by the server or by the
      connector (``row_too_large``: a body above the server's frame limit, never sent);
    - ``rejected_by_code``: ``{error code: rows}``; ``rejections``: up to 20 samples;
    - ``partitions``: partition tasks that finished; ``stopped_partitions``: those that
      stopped at a rejection (``on_error="raise"``);
    - ``servers``: ``{url: ServerTotals}``; ``seconds``: wall time of the job.
    """

    rows: int = 0
    sent: int = 0
    acknowledged: int = 0
    rejected: int = 0
    rejected_by_code: dict[str, int] = field(default_factory=dict)
    rejections: list[Rejection] = field(default_factory=list)
    partitions: int = 0
    stopped_partitions: int = 0
    servers: dict[str, ServerTotals] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def rows_per_second(self) -> float:
        """Rows sent per second of job wall time."""
        return self.sent / self.seconds if self.seconds > 0 else 0.0

    def server(self, url: str) -> ServerTotals:
        """The counts of ``url`` (created on first use)."""
        entry = self.servers.get(url)
        if entry is None:
            entry = self.servers[url] = ServerTotals()
        return entry

    def reject(self, url: str, error: dict[str, Any], row: bytes | str) -> None:
        """Count one rejected row (``error`` is the server's error object)."""
        code = str(error.get("code") or "unknown")
        self.rejected += 1
        self.server(url).rejected += 1
        self.rejected_by_code[code] = self.rejected_by_code.get(code, 0) + 1
        if len(self.rejections) < MAX_REJECTION_SAMPLES:
            text = row.decode("utf-8", "replace") if isinstance(row, bytes) else row
            self.rejections.append(Rejection(code, dict(error), text[:SAMPLE_ROW_CHARS], url))

    def merge(self, other: PushTotals) -> PushTotals:
        """Add ``other`` into these totals (in place) and return them."""
        self.rows += other.rows
        self.sent += other.sent
        self.acknowledged += other.acknowledged
        self.rejected += other.rejected
        for code, count in other.rejected_by_code.items():
            self.rejected_by_code[code] = self.rejected_by_code.get(code, 0) + count
        room = MAX_REJECTION_SAMPLES - len(self.rejections)
        if room > 0:
            self.rejections.extend(other.rejections[:room])
        self.partitions += other.partitions
        self.stopped_partitions += other.stopped_partitions
        for url, counts in other.servers.items():
            mine = self.server(url)
            mine.sent += counts.sent
            mine.acknowledged += counts.acknowledged
            mine.rejected += counts.rejected
        self.seconds = max(self.seconds, other.seconds)
        return self

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field plus ``rows_per_second``."""
        data = asdict(self)
        data["rows_per_second"] = self.rows_per_second
        return data

    def summary(self) -> str:
        """A few human-readable lines."""
        lines = [
            f"rows {self.rows:,}  sent {self.sent:,}  acknowledged {self.acknowledged:,}  "
            f"rejected {self.rejected:,}",
            f"{self.seconds:.2f} s  {self.rows_per_second:,.0f} rows/s  "
            f"partitions {self.partitions}"
            + (f" ({self.stopped_partitions} stopped at a rejection)"
               if self.stopped_partitions else ""),
        ]
        if self.rejected_by_code:
            codes = ", ".join(f"{c} x{n:,}" for c, n in sorted(self.rejected_by_code.items()))
            lines.append(f"rejected by code: {codes}")
        if len(self.servers) > 1:
            for url, counts in sorted(self.servers.items()):
                lines.append(f"  {url}: sent {counts.sent:,}  acknowledged "
                             f"{counts.acknowledged:,}  rejected {counts.rejected:,}")
        return "\n".join(lines)


class TotalsAccumulatorParam:
    """Spark ``AccumulatorParam`` for PushTotals (duck-typed: it needs no pyspark import,
    so workers unpickle it without loading more than this module)."""

    def zero(self, value: PushTotals) -> PushTotals:
        return PushTotals()

    def addInPlace(self, first: PushTotals, second: PushTotals) -> PushTotals:  # noqa: N802
        return first.merge(second)
