# cython: language_level=3, boundscheck=False, wraparound=False
"""Duration histograms with fixed bucket bounds (request latency, WAL fsyncs, snapshots).

A :class:`Histogram` is a C array of per-bucket counts plus the sum and count of what it
observed; ``observe`` finds the bucket with a short scan and allocates nothing, so it may
run per turn of the push path or on the WAL writer thread (under the GIL: an observation is
never seen half done). The exposition reads it at scrape time (``read``).
"""

from libc.stdint cimport int64_t
from libc.string cimport memcpy

# Upper bounds of the buckets in seconds, 1-2.5-5 in each decade from 50 us to 10 s; one
# more bucket takes everything above the last.
BOUNDS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
          0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

cdef enum:
    FINITE = 17         # len(BOUNDS)
    SLOTS = FINITE + 1

cdef double UPPER[FINITE]
for _i, _bound in enumerate(BOUNDS):
    UPPER[_i] = _bound
assert len(BOUNDS) == FINITE


cdef class Histogram:
    """Counts of durations per bucket of ``BOUNDS`` (the last slot: above the last bound),
    with their sum and count. A duration equal to a bound falls in that bound's bucket."""

    cdef int64_t counts[SLOTS]  # zeroed with the object
    cdef double total
    cdef int64_t observed

    cpdef void observe(self, double seconds, int64_t times=1):
        """Record ``times`` observations of ``seconds`` (a turn of pushes: each push once)."""
        cdef int i = 0
        while i < FINITE and seconds > UPPER[i]:
            i += 1
        self.counts[i] += times
        self.observed += times
        self.total += seconds * times

    def read(self):
        """``(per-bucket counts, sum, count)`` as of one moment (``len(BOUNDS) + 1``
        counts; not cumulative)."""
        cdef int64_t copy[SLOTS]
        memcpy(copy, self.counts, sizeof(copy))
        cdef double total = self.total
        cdef int64_t observed = self.observed
        return [copy[i] for i in range(SLOTS)], total, observed
