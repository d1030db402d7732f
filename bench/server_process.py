"""Start a ``beava`` server for a benchmark and find its ports from the bind lines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time


class BenchServer:
    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("BEAVA_")}
        full_env.update({"BEAVA_LISTEN_ADDR": "127.0.0.1:0", "BEAVA_TCP_PORT": "0",
                         "BEAVA_ADMIN_ADDR": "127.0.0.1:0"})
        full_env.update(env or {})
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "beava", "--config", "/dev/null", *args],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
            env=full_env)
        self.addrs: dict[str, str] = {}
        self.bound_after_s = 0.0
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            kind = line.get("kind", "")
            if kind.endswith("_bound"):
                self.addrs[kind.split(".")[1].removesuffix("_bound")] = line["addr"]
                if "http" in self.addrs and "tcp" in self.addrs and not self.bound_after_s:
                    self.bound_after_s = time.perf_counter() - self.t0
            if kind == "server.ready":
                break
        # Keep draining stdout so the server never blocks on a full pipe.
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def tcp(self) -> tuple[str, int]:
        host, _, port = self.addrs["tcp"].rpartition(":")
        return host.strip("[]"), int(port)

    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(10)
