"""``python -m bench soak`` for three rounds: pushes, reads, registers and snapshots on a
strict-WAL server SIGKILLed and restarted, the full WAL disk in the middle round (where
this machine lets the test mount a tmpfs), and every acknowledged push found after each
restart (spec/durability.md §1 G1-G5, G12, G14)."""

from __future__ import annotations

import os
import random
from pathlib import Path

from bench.soak import Options, Soak


def test_soak_rounds_lose_and_invent_nothing(tmp_path: Path) -> None:
    seed = int(os.environ.get("BEAVA_SOAK_SEED", random.randrange(1 << 31)))
    opts = Options(minutes=5.0, rounds=3, seed=seed, keys=256, kill_min=0.3, kill_max=0.8,
                   data_dir=str(tmp_path / "data"))
    summary = Soak(opts, print).run()
    assert summary["problems"] == [], summary
    assert (summary["rounds"], summary["lost"], summary["invented"]) == (3, 0, 0), summary
    assert summary["mismatched_keys"] == 0 and summary["reads_not_durable"] == 0, summary
    assert summary["ok"]
    # the load really ran: acknowledged pushes, all of them applied, reads, a register
    assert 0 < summary["pushes_acked"] <= summary["pushes_applied"] <= summary["pushes_sent"]
    assert summary["batch_gets"] > 0 and summary["features_added"] >= 1, summary
    assert len(summary["rss_mib"]["peak_per_round"]) == 3
    disk = summary["disk_full"]
    if disk["outcome"] == "skipped":
        print("disk-full episode skipped:", disk["reason"])
    else:
        assert disk["outcome"] == "ok" and disk["round"] == 1, disk
        assert disk["probe_refused_with"] == "wal_unavailable" and disk["probe_n"] == 1, disk
