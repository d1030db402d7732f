"""Start a ``beava`` server for a benchmark and find its ports from the bind lines."""

from __future__ import annotations

from beava.launcher import ServerProcess, installed_server_command, split_addr

START_TIMEOUT_S = 60.0


class BenchServer:
    """The installed server (inherited ``BEAVA_*`` variables dropped) on OS-assigned ports,
    started and ready (``server.ready``) when the constructor returns."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.server = ServerProcess(args, command=installed_server_command(), env=env,
                                    inherit_beava=False, keep_output=False)
        self.server.start()
        self.proc = self.server.proc
        self.server.wait_ready(START_TIMEOUT_S)
        self.addrs = self.server.addrs
        bound_at = self.server.bound_at
        assert bound_at is not None  # ready comes after both bind lines
        self.bound_after_s = bound_at - self.server.started_at

    def tcp(self) -> tuple[str, int]:
        return split_addr(self.addrs["tcp"])

    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        self.server.stop(10)
