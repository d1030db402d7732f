# Welford running moments (count, mean, sum of squared deviations), shared by var/std,
# outlier_count, z_score and geo_spread. Layouts are part of the snapshot formats.
from libc.stdint cimport int64_t

ctypedef struct Moments:
    int64_t n
    double mean
    double m2


cdef inline void welford_step(double x, double n, double* mean, double* m2) noexcept nogil:
    # Fold x, the n-th value, into a running mean and its sum of squared deviations.
    cdef double delta = x - mean[0]
    mean[0] += delta / n
    m2[0] += delta * (x - mean[0])


cdef inline void moments_add(Moments* m, double x) noexcept nogil:
    m.n += 1
    welford_step(x, <double>m.n, &m.mean, &m.m2)
