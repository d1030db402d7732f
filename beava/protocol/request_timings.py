"""Request latency by command: one :class:`Histogram` per command of the command table,
shared by both transports (``beava_request_duration_seconds{op}``).

What is timed (docs/operations.md, metrics): a request other than a framed-TCP push from
its handler's start until its reply is ready; a framed-TCP push as part of its turn, the
work done on one socket read (or one scheduled turn of frames left from an earlier read)
from that read until the turn's replies are written, each push of the turn counted once
with the turn's duration, so the push path reads the clock once per turn, not per push.
Neither includes the wait of a strict-mode acknowledgement for its group commit
(``beava_wal_fsync_duration_seconds`` shows that). A request evaluated in slices (a large
BATCH_GET) is timed until its last slice.
"""

from __future__ import annotations

from time import perf_counter

from beava._fast.timing.histogram import Histogram
from beava.protocol.commands import COMMANDS
from beava.protocol.reply_slots import PendingReply


class RequestTimings:
    """``by_name``: command name -> histogram; ``by_op``: framed-TCP opcode -> the same
    histogram; ``push``: the push command's."""

    __slots__ = ("by_name", "by_op", "push")

    def __init__(self) -> None:
        self.by_name = {command.name: Histogram() for command in COMMANDS}
        self.by_op = {command.op: self.by_name[command.name] for command in COMMANDS
                      if command.op is not None}
        self.push = self.by_name["push"]

    @staticmethod
    def finish(histogram: Histogram, began: float, reply: object) -> None:
        """A request that started at ``began`` (perf_counter) answered ``reply``: observe
        its duration now, or, when it is still evaluated in slices, once it resolves."""
        if type(reply) is PendingReply and reply.holds_all and reply.data is None:
            reply.timing = (histogram, began)
        else:
            histogram.observe(perf_counter() - began)
