"""The partition writer: runs inside a Spark task, streams the partition's JSON bodies to
its beava server(s), one persistent framed-TCP connection per server.

With OP_PUSH_MANY (spec/wire.md §10) the bodies go out in requests of ``batch_size``
rows (and at most ``max_frame_bytes``), pipelined: at most ``max_in_flight`` rows are
sent and unanswered per connection, so memory stays bounded and the next request is
built while the server works on the previous ones. A server without the extension gets
one OP_PUSH per row (spec/sdk.md §8.4 fallback), pipelined the same way.

A partition whose first ``schema_check_rows`` answered rows were all rejected for a
schema reason (undeclared field, missing or mistyped required field) stops there, in
both ``on_error`` modes: the rest would be rejected the same way.

A connection that fails mid-partition fails the task with PartitionPushError; Spark runs
the partition again from its first row.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

import msgspec

from beava_client import AsyncTcpClient, ServerError, TransportError, parse_url
from beava_client.frames import DEFAULT_MAX_FRAME_BYTES
from beava_client.opcodes import CT_JSON, OP_PUSH_MANY

from .access import Access
from .errors import PartitionPushError
from .progress import ProgressReporter
from .totals import PushTotals, ServerTotals

ROW_TOO_LARGE = "row_too_large"
"""Error code of a row whose body alone exceeds the frame limit (never sent)."""

SCHEMA_CODES = frozenset({"unknown_field_v0", "unknown_field_event_time_v0", "invalid_event"})
"""Rejections that say the row does not fit the event's schema (spec/wire.md §6.2)."""

DEFAULT_SCHEMA_CHECK_ROWS = 1000

Chunk = tuple[int, list[bytes]]
"""``(server index, bodies)``: consecutive rows for one server."""


@dataclass(frozen=True)
class WriterConfig:
    """Everything a partition task needs (pickled into the task closure).

    ``push_many[i]`` says whether ``urls[i]`` has OP_PUSH_MANY (found by the driver's
    check). ``schema_check_rows``: stop a partition whose first that many answered rows
    were all rejected for a schema reason (0: never).
    """

    event: str
    urls: tuple[str, ...]
    push_many: tuple[bool, ...]
    batch_size: int
    max_in_flight: int
    stop_on_rejection: bool
    timeout: float
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    progress_address: tuple[str, int] | None = None
    schema_check_rows: int = DEFAULT_SCHEMA_CHECK_ROWS
    access: Access = Access()  # token and TLS trust


class PartitionWriter:
    """Pushes one partition's bodies (JSON objects as bytes, one per row)."""

    def __init__(self, config: WriterConfig, attempt: str = "") -> None:
        self.config = config
        self.totals = PushTotals()
        self.stopped = False
        self.schema_stopped = False
        self._rows = 0
        self._answered = 0
        self._schema_rejected = 0
        self._schema_decided = config.schema_check_rows <= 0
        self._reporter = (ProgressReporter(config.progress_address, attempt)
                          if config.progress_address else None)
        head = b'{"event":' + msgspec.json.encode(config.event) + b',"bodies":['
        self._head = head
        # Payload bytes around the bodies: envelope, brackets, one comma per extra row.
        self._limit = config.max_frame_bytes - (len(head) + 2)

    def run(self, lines: Iterable[bytes], server: int = 0) -> PushTotals:
        """Push every line to ``urls[server]``; return the totals. Raises
        PartitionPushError."""
        return self.run_chunks(self._batches(iter(lines), server))

    def run_chunks(self, chunks: Iterable[Chunk]) -> PushTotals:
        """Push ``(server, bodies)`` chunks (each at most ``batch_size`` rows), opening a
        connection to a server on its first chunk; return the totals. Raises
        PartitionPushError."""
        try:
            asyncio.run(self._drive(iter(chunks)))
        finally:
            if self._reporter is not None:
                self._report(flush=True)
                self._reporter.close()
        totals = self.totals
        totals.rows = self._rows
        totals.partitions = 1
        totals.stopped_partitions = int(self.stopped and not self.schema_stopped)
        totals.schema_stopped_partitions = int(self.schema_stopped)
        return totals

    def _batches(self, lines: Iterator[bytes], server: int) -> Iterator[Chunk]:
        size = self.config.batch_size
        while not self.stopped:
            chunk = list(islice(lines, size))
            if not chunk:
                return
            yield server, chunk

    async def _drive(self, chunks: Iterator[Chunk]) -> None:
        streams: dict[int, ServerStream] = {}
        try:
            for server, chunk in chunks:
                self._rows += len(chunk)
                stream = streams.get(server)
                if stream is None:
                    stream = streams[server] = ServerStream(self, server)
                    await stream.open()
                for part in self._fit(chunk, stream.url):
                    await stream.send(part)
                    if self.stopped:
                        break
                if self.stopped:
                    break
            for stream in streams.values():
                await stream.finish()
        finally:
            for stream in streams.values():
                await stream.close()

    def _fit(self, chunk: list[bytes], url: str) -> Iterator[list[bytes]]:
        """``chunk`` in parts whose request payload fits in ``max_frame_bytes``; a row
        too large on its own is rejected here."""
        limit = self._limit
        if sum(map(len, chunk)) + len(chunk) - 1 <= limit:
            yield chunk
            return
        part: list[bytes] = []
        used = -1  # no comma before the first row
        for line in chunk:
            if len(line) > limit:
                self.totals.reject(url, {"code": ROW_TOO_LARGE, "message": (
                    f"the row's body is {len(line)} bytes: too large for one request of at "
                    f"most {self.config.max_frame_bytes} bytes")}, line)
                if self.config.stop_on_rejection:
                    self.stopped = True
                continue
            if used + 1 + len(line) > limit:
                yield part
                part, used = [], -1
            part.append(line)
            used += 1 + len(line)
        if part:
            yield part

    # -- accounting ------------------------------------------------------------------------

    def sent(self, counts: ServerTotals, rows: int) -> None:
        counts.sent += rows
        self.totals.sent += rows

    def answered(self, url: str, counts: ServerTotals, acks: int, replays: int | None,
                 errors: list[dict[str, Any]], rows: list[bytes]) -> None:
        """Account for the server's answer to ``rows``: ``acks`` accepted (of which
        ``replays`` were dedupe replays; None: the server does not say), and ``errors``
        (``{"index", "error"}`` entries)."""
        totals = self.totals
        if replays is None:
            totals.replays_reported = False
            replays = 0
        counts.acknowledged += acks - replays
        counts.replays += replays
        totals.acknowledged += acks - replays
        totals.replays += replays
        for entry in errors:
            totals.reject(url, entry.get("error") or {}, rows[entry["index"]])
        if errors and self.config.stop_on_rejection:
            self.stopped = True
        if not self._schema_decided:
            self._check_schema(acks, errors)
        self._report()

    def _check_schema(self, acks: int, errors: list[dict[str, Any]]) -> None:
        self._answered += acks + len(errors)
        self._schema_rejected += sum(
            1 for e in errors if (e.get("error") or {}).get("code") in SCHEMA_CODES)
        if acks or self._schema_rejected < self._answered:
            self._schema_decided = True  # rows fit, or a rejection of another kind
        elif self._answered >= self.config.schema_check_rows:
            self._schema_decided = True
            self.stopped = self.schema_stopped = True

    def _report(self, flush: bool = False) -> None:
        if self._reporter is not None:
            t = self.totals
            self._reporter.update(t.sent, t.acknowledged, t.rejected, t.replays,
                                  t.replays_reported, flush=flush)


class ServerStream:
    """One persistent connection from a partition task to one server."""

    def __init__(self, writer: PartitionWriter, server: int) -> None:
        config = writer.config
        self.writer = writer
        self.url = config.urls[server]
        self.push_many = config.push_many[server]
        self.counts = writer.totals.server(self.url)
        endpoint = parse_url(self.url)
        self.client = AsyncTcpClient(endpoint.host, endpoint.port, timeout=config.timeout,
                                     max_in_flight=config.max_in_flight,
                                     max_frame_bytes=config.max_frame_bytes,
                                     **config.access.client_kwargs(self.url))
        self._window = max(1, config.max_in_flight // config.batch_size)
        self._pending: deque[tuple[asyncio.Future[Any], list[bytes]]] = deque()
        self._group: list[bytes] = []  # OP_PUSH fallback: rows waiting for one pipeline
        self._encoder: Any = None

    async def open(self) -> None:
        try:
            await self.client.connect()
        except TransportError as exc:
            raise self._lost(exc) from exc
        if not self.push_many:
            self._encoder = self.client.push_encoder(self.writer.config.event, CT_JSON)

    async def send(self, rows: list[bytes]) -> None:
        """Send ``rows`` (they fit in one request), settling the oldest request once the
        in-flight window is full."""
        try:
            if not self.push_many:
                self._group += rows
                if len(self._group) + self.writer.config.batch_size > \
                        self.writer.config.max_in_flight:
                    await self._push_group()
                return
            body = self.writer._head + b",".join(rows) + b"]}"
            self._pending.append((asyncio.ensure_future(
                self.client.request(OP_PUSH_MANY, body, ct=CT_JSON)), rows))
            await asyncio.sleep(0)  # let the new request go out now
            self.writer.sent(self.counts, len(rows))
            if len(self._pending) >= self._window:
                await self._settle(*self._pending.popleft())
        except TransportError as exc:
            raise self._lost(exc) from exc

    async def finish(self) -> None:
        """Wait for every reply still due."""
        try:
            if self._group:
                await self._push_group()
            while self._pending:
                await self._settle(*self._pending.popleft())
        except TransportError as exc:
            raise self._lost(exc) from exc

    async def close(self) -> None:
        if self._pending:  # failing: the connection is dropped, forget the other requests
            futures = [f for f, _ in self._pending]
            self._pending.clear()
            for future in futures:
                future.cancel()
            await asyncio.gather(*futures, return_exceptions=True)
        await self.client.close()

    async def _settle(self, future: asyncio.Future[Any], rows: list[bytes]) -> None:
        try:
            reply = await future
        except ServerError as exc:
            raise PartitionPushError(
                f"{self.url} refused a push_many request of {len(rows)} row(s) as a whole: "
                f"{exc} ({self.counts.acknowledged} row(s) acknowledged before it)"
            ) from exc
        replays = reply.get("replays")
        self.writer.answered(self.url, self.counts, reply.get("acks", 0),
                             replays if isinstance(replays, int) else None,
                             reply.get("errors") or [], rows)

    async def _push_group(self) -> None:
        """OP_PUSH fallback: one pipelined OP_PUSH per row of the group."""
        group, self._group = self._group, []
        self.writer.sent(self.counts, len(group))
        result = await self.client.push_frames(
            self._encoder.batches(map(msgspec.Raw, group), self.writer.config.batch_size))
        # Single-push acks are counted, not decoded: replays are not told apart here.
        self.writer.answered(self.url, self.counts, result["acks"], None,
                             result["errors"], group)

    def _lost(self, exc: TransportError) -> PartitionPushError:
        if exc.code == "connect_failed":
            return PartitionPushError(
                f"cannot connect to {self.url} ({exc}); the task fails so that Spark "
                f"retries the partition")
        return PartitionPushError(
            f"connection to {self.url} lost after {self.counts.sent} row(s) sent, "
            f"{self.counts.acknowledged + self.counts.replays} acknowledged, "
            f"{self.counts.rejected} rejected ({exc}); the task fails so that Spark retries "
            f"the partition (rows already applied are applied again unless the event has a "
            f"dedupe_key)")


def write_partition(config: WriterConfig, accumulator: Any, lines: Iterable[bytes]) -> None:
    """The ``foreachPartition`` function: push the partition's bodies to the server of
    this partition (partition ``p`` writes to ``urls[p % len(urls)]``) and add its totals
    to ``accumulator``."""
    partition, attempt = task_attempt()
    writer = PartitionWriter(config, attempt)
    accumulator.add(writer.run(lines, partition % len(config.urls)))


def task_attempt() -> tuple[int, str]:
    """``(partition id, "stage:partition:attempt")`` of the running Spark task."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return 0, "0:0:0"
    partition = context.partitionId()
    return partition, f"{context.stageId()}:{partition}:{context.attemptNumber()}"
