"""A shard's pending messages: a log-structured set of time-sorted runs.

Each ``push`` sorts the new rows by time into a run; runs of similar size are merged (an
LSM tree), so there are O(log P) runs for P pending messages and each message is merged
O(log P) times. ``pop_before(t)`` cuts the due prefix of every run with a binary search
and leaves the rest as views: no scan of the whole queue per cell, which matters when a
window holds many cells and hundreds of thousands of timers wait far in the future.
"""

from __future__ import annotations

import numpy as np

from .batch import Batch

NEVER = np.iinfo(np.int64).max


class EventQueue:
    def __init__(self):
        self._runs: list[Batch] = []

    def __len__(self) -> int:
        return sum(len(r) for r in self._runs)

    def push(self, batch: Batch) -> None:
        """Add messages in any order; O(n log n) + amortized merges."""
        if not len(batch):
            return
        t = batch.msgs["time"]
        if len(t) > 1 and (t[1:] < t[:-1]).any():
            batch = batch.take(np.argsort(t, kind="stable"))
        self._runs.append(batch)
        # merge while the previous run is not much larger: keeps run sizes geometric
        while len(self._runs) > 1 and len(self._runs[-2]) <= 2 * len(self._runs[-1]):
            b = self._runs.pop()
            a = self._runs.pop()
            self._runs.append(_merge(a, b))

    def next_time(self) -> int:
        """Earliest pending time (NEVER when empty); O(runs)."""
        return min((int(r.msgs["time"][0]) for r in self._runs), default=NEVER)

    def pop_before(self, t: int) -> Batch:
        """Remove and return every message with time < t; O(runs log P + popped)."""
        taken, keep = [], []
        for r in self._runs:
            k = int(np.searchsorted(r.msgs["time"], t, side="left"))
            if k:
                taken.append(Batch(r.msgs[:k], r.payload))
            if k < len(r):
                keep.append(Batch(r.msgs[k:], r.payload) if k else r)
        self._runs = keep
        return Batch.concat(taken)

    def snapshot(self) -> Batch:
        """All pending messages as one batch (for checkpoints); the queue is unchanged."""
        return Batch.concat(self._runs)

    def clear(self) -> None:
        self._runs = []


def _merge(a: Batch, b: Batch) -> Batch:
    both = Batch.concat([a, b])
    # two sorted runs: the stable sort (timsort) merges them in linear time
    order = np.argsort(both.msgs["time"], kind="stable")
    return both.take(order)
