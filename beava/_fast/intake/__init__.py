"""The push path in C: the event checks, the intake (LSNs, counts, durability), the push pass."""
