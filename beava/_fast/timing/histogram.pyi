"""Type stub of histogram.pyx (duration histograms with fixed buckets)."""

BOUNDS: tuple[float, ...]

class Histogram:
    def observe(self, seconds: float, times: int = 1) -> None: ...
    # (per-bucket counts, len(BOUNDS) + 1 of them, not cumulative; sum; count)
    def read(self) -> tuple[list[int], float, int]: ...
