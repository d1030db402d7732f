"""Cython kernels."""
