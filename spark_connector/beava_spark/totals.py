"""Totals of a push: per partition task, merged on the driver through a Spark accumulator.

Spark merges the accumulator updates of successful task attempts only, so the totals
describe the attempts that finished; rows sent by a failed attempt are sent again by its
retry.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
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
    replays: int = 0


@dataclass
class PushTotals:
    """What a push did.

    - ``rows``: rows read from the DataFrame by the partitions that ran to the end
      (a partition stopped by ``on_error="raise"`` counts the rows it read);
    - ``sent``: rows sent to a server; ``acknowledged``: rows the server accepted as new
      pushes; ``replays``: rows answered as dedupe replays (accepted, not applied again:
      the event has a ``dedupe_key`` and the row was pushed before); ``rejected``: rows
      refused, by the server or by the connector (``row_too_large``: a body above the
      server's frame limit, never sent);
    - ``replays_reported``: False when some server did not say which acknowledged rows
      were replays (then ``acknowledged`` includes them and ``replays`` is 0 for it);
    - ``rejected_by_code``: ``{error code: rows}``; ``rejections``: up to 20 samples;
    - ``partitions``: partition tasks that finished; ``stopped_partitions``: those that
      stopped at a rejection (``on_error="raise"``); ``schema_stopped_partitions``: those
      that stopped because their first rows were all rejected for a schema reason;
    - ``servers``: ``{url: ServerTotals}``; ``seconds``: wall time of the job.
    """

    rows: int = 0
    sent: int = 0
    acknowledged: int = 0
    rejected: int = 0
    replays: int = 0
    replays_reported: bool = True
    rejected_by_code: dict[str, int] = field(default_factory=dict)
    rejections: list[Rejection] = field(default_factory=list)
    partitions: int = 0
    stopped_partitions: int = 0
    schema_stopped_partitions: int = 0
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
        self.replays += other.replays
        self.replays_reported = self.replays_reported and other.replays_reported
        for code, count in other.rejected_by_code.items():
            self.rejected_by_code[code] = self.rejected_by_code.get(code, 0) + count
        room = MAX_REJECTION_SAMPLES - len(self.rejections)
        if room > 0:
            self.rejections.extend(other.rejections[:room])
        self.partitions += other.partitions
        self.stopped_partitions += other.stopped_partitions
        self.schema_stopped_partitions += other.schema_stopped_partitions
        for url, counts in other.servers.items():
            mine = self.server(url)
            mine.sent += counts.sent
            mine.acknowledged += counts.acknowledged
            mine.rejected += counts.rejected
            mine.replays += counts.replays
        self.seconds = max(self.seconds, other.seconds)
        return self

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field plus ``rows_per_second``."""
        data = asdict(self)
        data["rows_per_second"] = self.rows_per_second
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PushTotals:
        """The totals of an ``as_dict()`` result (e.g. read back from JSON)."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["rejections"] = [Rejection(**r) for r in data.get("rejections", ())]
        values["servers"] = {url: ServerTotals(**c) for url, c in data.get("servers", {}).items()}
        values["rejected_by_code"] = dict(data.get("rejected_by_code", {}))
        return cls(**values)

    def counts_line(self) -> str:
        """``sent … acknowledged … replays … rejected …``: the counts as the progress
        lines and the summary show them."""
        return counts_line(self.sent, self.acknowledged, self.replays, self.rejected,
                           self.replays_reported)

    def summary(self) -> str:
        """A few human-readable lines."""
        stopped = []
        if self.stopped_partitions:
            stopped.append(f"{self.stopped_partitions} stopped at a rejection")
        if self.schema_stopped_partitions:
            stopped.append(f"{self.schema_stopped_partitions} stopped: schema mismatch")
        lines = [
            f"rows {self.rows:,}  {self.counts_line()}",
            f"{self.seconds:.2f} s  {self.rows_per_second:,.0f} rows/s  "
            f"partitions {self.partitions}" + (f" ({', '.join(stopped)})" if stopped else ""),
        ]
        if self.rejected_by_code:
            codes = ", ".join(f"{c} x{n:,}" for c, n in sorted(self.rejected_by_code.items()))
            lines.append(f"rejected by code: {codes}")
        if not self.replays_reported:
            lines.append("(the server does not report dedupe replays: acknowledged includes "
                         "them)")
        elif self.replays and self.replays == self.sent - self.rejected:
            lines.append("(every acknowledged row was a dedupe replay: these rows were "
                         "already pushed; nothing was applied again)")
        if len(self.servers) > 1:
            for url, counts in sorted(self.servers.items()):
                lines.append(f"  {url}: sent {counts.sent:,}  acknowledged "
                             f"{counts.acknowledged:,}  replays {counts.replays:,}  "
                             f"rejected {counts.rejected:,}")
        return "\n".join(lines)


def counts_line(sent: int, acknowledged: int, replays: int, rejected: int,
                replays_reported: bool = True) -> str:
    """The counts of a push in the words of the progress lines and the summary."""
    replay_text = f"replays {replays:,}" if replays_reported else "replays ?"
    return (f"sent {sent:,}  acknowledged {acknowledged:,}  {replay_text}  "
            f"rejected {rejected:,}")


class TotalsAccumulatorParam:
    """Spark ``AccumulatorParam`` for PushTotals (duck-typed: it needs no pyspark import,
    so workers unpickle it without loading more than this module)."""

    def zero(self, value: PushTotals) -> PushTotals:
        return PushTotals()

    def addInPlace(self, first: PushTotals, second: PushTotals) -> PushTotals:  # noqa: N802
        return first.merge(second)
