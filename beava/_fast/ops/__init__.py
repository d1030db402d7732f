"""The table kernel (key -> slot, the row update) and the operators' state columns."""
