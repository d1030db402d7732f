"""A child process bound to its parent's life: Linux's ``prctl(PR_SET_PDEATHSIG)``.

Used where an orphaned child would do harm: a snapshot child renaming a snapshot after a
new server has started on its directory (bound with SIGKILL), and the shards of
``beava cluster up``, which must not keep serving once the command that owns them is
gone (bound with SIGTERM: a shard shuts down as on any SIGTERM, its WAL flushed).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


def parent_death_signal(signum: int, parent: int | None = None
                        ) -> Callable[[], None] | None:
    """A function for a freshly forked child to call first (e.g. as ``preexec_fn``): from
    then on the kernel sends the child ``signum`` when its parent dies, and the child sends
    it to itself at once if ``parent`` (default: the caller, when it is the parent) died
    before the call. Looked up in the caller, so a child given it only makes the call.
    None where the kernel offers no such request (not Linux, or no C library to ask)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    if parent is None:
        parent = os.getpid()

    def bind() -> None:
        prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
        if os.getppid() != parent:  # the parent is already gone: nothing will signal us
            os.kill(os.getpid(), signum)

    return bind
