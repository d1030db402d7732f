# cython: language_level=3, boundscheck=False, wraparound=False
"""Accepted pushes per event of one registry version, in a C array.

An event's index is its position among the registry's events; each of the store's
checker entries carries it, so the intake (beava._fast.intake.intake), which alone counts pushes,
counts one with a C increment on the entry at hand. It reads the counts at scrape time and,
when the registry changes, folds them into its per-name totals before a new
``PushCounts`` takes over.
"""

from libc.stdlib cimport calloc, free


cdef class PushCounts:
    """Counts for the events ``names`` (index ``i``: ``names[i]``), all starting at 0."""

    def __cinit__(self, names):
        self.names = tuple(names)
        self.values = <int64_t*>calloc(len(self.names) or 1, sizeof(int64_t))
        if self.values is NULL:
            raise MemoryError()

    def __dealloc__(self):
        free(self.values)

    def add(self, Py_ssize_t index, int64_t n=1):
        """Count ``n`` accepted pushes of event ``names[index]`` (-1: one taken back, as
        never written)."""
        if not 0 <= index < len(self.names):
            raise IndexError(f"event index {index} out of range")
        self.values[index] += n

    def totals(self):
        """Event name -> accepted pushes, for every event."""
        return {self.names[i]: self.values[i] for i in range(len(self.names))}
