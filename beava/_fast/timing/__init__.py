"""Clocks read in C and duration histograms."""
