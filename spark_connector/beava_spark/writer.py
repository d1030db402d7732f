"""The partition writer: runs inside a Spark task, streams the partition's JSON bodies to
one beava server over one persistent framed-TCP connection.

With OP_PUSH_MANY (spec/wire.md §10) the bodies go out in requests of ``batch_size``
rows (and at most ``max_frame_bytes``), pipelined: at most ``max_in_flight`` rows are
sent and unanswered at any time, so memory stays bounded and the next request is built
while the server works on the previous ones. A server without the extension gets one
OP_PUSH per row (spec/sdk.md §8.4 fallback), pipelined the same way.

A connection that fails mid-partition fails the task with PartitionPushError; Spark runs
the partition again from its first row.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain, islice
from typing import Any

import msgspec

from beava_client import AsyncTcpClient, ServerError, TransportError, parse_url
from beava_client.frames import DEFAULT_MAX_FRAME_BYTES
from beava_client.opcodes import CT_JSON, OP_PUSH_MANY

from .errors import PartitionPushError
from .progress import ProgressReporter
from .totals import PushTotals

ROW_TOO_LARGE = "row_too_large"
"""Error code of a row whose body alone exceeds the frame limit (never sent)."""


@dataclass(frozen=True)
class WriterConfig:
    """Everything a partition task needs (pickled into the task closure).

    ``push_many[i]`` says whether ``urls[i]`` has OP_PUSH_MANY (found by the driver's
    check); partition ``p`` writes to ``urls[p % len(urls)]``.
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


class PartitionWriter:
    """Pushes one partition's bodies (JSON objects as bytes, one per row) to one server."""

    def __init__(self, config: WriterConfig, server: int, attempt: str = "") -> None:
        self.config = config
        self.url = config.urls[server]
        self.push_many = config.push_many[server]
        self.totals = PushTotals()
        self.counts = self.totals.server(self.url)
        self.stopped = False
        self._rows = 0
        self._reporter = (ProgressReporter(config.progress_address, attempt)
                          if config.progress_address else None)
        self._head = b'{"event":' + msgspec.json.encode(config.event) + b',"bodies":['
        # Payload bytes around the bodies: envelope, brackets, one comma per extra row.
        self._overhead = len(self._head) + 2

    def run(self, lines: Iterable[bytes]) -> PushTotals:
        """Push every line; return this partition's totals. Raises PartitionPushError."""
        iterator = iter(lines)
        first = next(iterator, None)
        try:
            if first is not None:  # an empty partition opens no connection
                asyncio.run(self._push(chain((first,), iterator)))
        finally:
            if self._reporter is not None:
                self._report(flush=True)
                self._reporter.close()
        totals = self.totals
        totals.rows = self._rows
        totals.partitions = 1
        totals.stopped_partitions = int(self.stopped)
        return totals

    # -- connection ------------------------------------------------------------------------

    async def _push(self, lines: Iterator[bytes]) -> None:
        endpoint = parse_url(self.url)
        client = AsyncTcpClient(endpoint.host, endpoint.port, timeout=self.config.timeout,
                                max_in_flight=self.config.max_in_flight,
                                max_frame_bytes=self.config.max_frame_bytes)
        try:
            await client.connect()
            if self.push_many:
                await self._push_many(client, lines)
            else:
                await self._push_each(client, lines)
        except TransportError as exc:
            if exc.code == "connect_failed":
                raise PartitionPushError(
                    f"cannot connect to {self.url} ({exc}); the task fails so that Spark "
                    f"retries the partition") from exc
            raise PartitionPushError(
                f"connection to {self.url} lost after {self.counts.sent} row(s) sent, "
                f"{self.counts.acknowledged} acknowledged, {self.counts.rejected} rejected "
                f"({exc}); the task fails so that Spark retries the partition (rows "
                f"already applied are applied again unless the event has a dedupe_key)"
            ) from exc
        finally:
            await client.close()

    # -- OP_PUSH_MANY ------------------------------------------------------------------------

    async def _push_many(self, client: AsyncTcpClient, lines: Iterator[bytes]) -> None:
        window = max(1, self.config.max_in_flight // self.config.batch_size)
        pending: deque[tuple[asyncio.Future[Any], list[bytes]]] = deque()
        head = self._head
        try:
            for chunk in self._chunks(lines):
                if self.stopped:
                    break
                body = head + b",".join(chunk) + b"]}"
                pending.append((asyncio.ensure_future(
                    client.request(OP_PUSH_MANY, body, ct=CT_JSON)), chunk))
                await asyncio.sleep(0)  # let the new request go out now
                self.counts.sent += len(chunk)
                self.totals.sent += len(chunk)
                if len(pending) >= window:
                    await self._settle(*pending.popleft())
            while pending:
                await self._settle(*pending.popleft())
        finally:
            if pending:  # failing: the connection is dropped, forget the other requests
                for future, _ in pending:
                    future.cancel()
                await asyncio.gather(*(f for f, _ in pending), return_exceptions=True)

    async def _settle(self, future: asyncio.Future[Any], chunk: list[bytes]) -> None:
        try:
            reply = await future
        except ServerError as exc:
            raise PartitionPushError(
                f"{self.url} refused a push_many request of {len(chunk)} row(s) as a whole: "
                f"{exc} ({self.counts.acknowledged} row(s) acknowledged before it)"
            ) from exc
        acks = reply.get("acks", 0)
        self.counts.acknowledged += acks
        self.totals.acknowledged += acks
        errors = reply.get("errors")
        if errors:
            for entry in errors:
                self.totals.reject(self.url, entry.get("error") or {}, chunk[entry["index"]])
            if self.config.stop_on_rejection:
                self.stopped = True
        self._report()

    def _chunks(self, lines: Iterator[bytes]) -> Iterator[list[bytes]]:
        """Consecutive rows in lists of at most ``batch_size`` rows whose request payload
        fits in ``max_frame_bytes``; a row too large on its own is rejected here."""
        size = self.config.batch_size
        limit = self.config.max_frame_bytes - self._overhead
        while not self.stopped:
            chunk = list(islice(lines, size))
            if not chunk:
                return
            self._rows += len(chunk)
            if sum(map(len, chunk)) + len(chunk) - 1 <= limit:
                yield chunk
            else:
                yield from self._split(chunk, limit)

    def _split(self, chunk: list[bytes], limit: int) -> Iterator[list[bytes]]:
        part: list[bytes] = []
        used = -1  # no comma before the first row
        for line in chunk:
            if len(line) > limit:
                self._too_large(line)
                continue
            if used + 1 + len(line) > limit:
                yield part
                part, used = [], -1
            part.append(line)
            used += 1 + len(line)
        if part:
            yield part

    def _too_large(self, line: bytes) -> None:
        self.totals.reject(self.url, {"code": ROW_TOO_LARGE, "message": (
            f"the row's body is {len(line)} bytes: too large for one request of at most "
            f"{self.config.max_frame_bytes} bytes")}, line)
        if self.config.stop_on_rejection:
            self.stopped = True

    # -- OP_PUSH fallback ------------------------------------------------------------------

    async def _push_each(self, client: AsyncTcpClient, lines: Iterator[bytes]) -> None:
        """One OP_PUSH per row, pipelined in groups of ``max_in_flight`` rows (the group is
        kept to name rejected rows)."""
        encoder = client.push_encoder(self.config.event, CT_JSON)
        limit = self.config.max_frame_bytes - self._overhead
        raw = msgspec.Raw
        while not self.stopped:
            group = list(islice(lines, self.config.max_in_flight))
            if not group:
                return
            self._rows += len(group)
            if max(map(len, group)) > limit:
                for line in group:
                    if len(line) > limit:
                        self._too_large(line)
                group = [line for line in group if len(line) <= limit]
            self.counts.sent += len(group)
            self.totals.sent += len(group)
            result = await client.push_frames(
                encoder.batches(map(raw, group), self.config.batch_size))
            self.counts.acknowledged += result["acks"]
            self.totals.acknowledged += result["acks"]
            for entry in result["errors"]:
                self.totals.reject(self.url, entry["error"], group[entry["index"]])
            if result["errors"] and self.config.stop_on_rejection:
                self.stopped = True
            self._report()

    # -- progress ------------------------------------------------------------------------------

    def _report(self, flush: bool = False) -> None:
        if self._reporter is not None:
            t = self.totals
            self._reporter.update(t.sent, t.acknowledged, t.rejected, flush=flush)


def write_partition(config: WriterConfig, accumulator: Any, lines: Iterable[bytes]) -> None:
    """The ``foreachPartition`` function: push the partition's bodies to the server of
    this partition and add its totals to ``accumulator``."""
    from pyspark import TaskContext

    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    attempt = (f"{context.stageId()}:{partition}:{context.attemptNumber()}"
               if context is not None else "0:0:0")
    writer = PartitionWriter(config, partition % len(config.urls), attempt)
    accumulator.add(writer.run(lines))
