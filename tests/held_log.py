"""A strict-mode durability log for tests that call the store directly: accepted pushes
wait in the pending batch (the store and the push pass append to it as to the real log's)
until ``release`` applies them, waiters after their pushes."""

from __future__ import annotations

from beava._fast.intake.intake import STRICT
from beava.durability.group_commit import Applying, Batch, Callback, apply_part
from beava.engine.store import FeatureStore


class HeldLog:
    mode = STRICT
    writable = True

    def __init__(self, store: FeatureStore) -> None:
        self.store = store
        self.batch = Batch()
        self.buf = bytearray()

    def accepted(self) -> None:
        pass

    def after_pending(self, callback: Callback) -> bool:
        if not (self.batch.events or self.batch.waiters):
            return True
        self.batch.waiters.append((len(self.batch.events), callback))
        return False

    def barrier(self) -> None:
        self.release()

    def release(self) -> None:
        batch, self.batch = self.batch, Batch()
        batch.data, self.buf = self.buf, bytearray()
        apply_part(Applying(batch), self.store.apply_batch)
