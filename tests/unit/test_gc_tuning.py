"""The serving process's GC thresholds (beava.server.process.tune_gc)."""

from __future__ import annotations

import gc

from beava.server.process import GC_YOUNG_THRESHOLD, tune_gc


def test_tune_gc_raises_only_the_young_threshold():
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 7, 9)
        tune_gc()
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, 7, 9)
        assert GC_YOUNG_THRESHOLD > 700
    finally:
        gc.set_threshold(*before)
