"""Cython kernels, one sub-package per concern: ``wire`` (bytes in and out of the protocol),
``intake`` (a push checked and taken in C), ``wal`` (log records and their writer thread),
``ops`` (the table kernel and the operators' state columns), ``timing`` (clocks and duration
histograms)."""
