"""A shard's pending messages: a log-structured set of time-sorted runs.

Each ``push`` sorts the new rows by time into a run; runs of similar size are merged (an
LSM tree), so there are O(log P) runs for P pending messages and each message is copied
O(log P) times. Every run keeps its times in a contiguous int64 array beside the rows, so
``pop_cell`` cuts the due prefix of each run with a binary search and leaves the rest as
views: no scan of the queue per cell, which matters when a window holds many cells and
hundreds of thousands of timers wait far in the future. (A calendar of per-cell buckets
was measured 4x slower: one send batch spreads over ~150 cells of latency, so it made
hundreds of tiny chunks per send.)
"""

from __future__ import annotations

import numpy as np

from . import kernels
from .batch import ENGINE_DTYPE, Batch

NEVER = np.iinfo(np.int64).max


class _Run:
    __slots__ = ("batch", "times")

    def __init__(self, batch: Batch, times: np.ndarray):
        self.batch, self.times = batch, times

    def __len__(self):
        return len(self.times)


class EventQueue:
    def __init__(self, delta_us: int, message_dtype=ENGINE_DTYPE):
        self.delta = int(delta_us)
        self.dtype = message_dtype       # the record of every batch it holds (and returns)
        self._runs: list[_Run] = []
        # batches pushed since the last look at the queue: handlers send many small
        # batches per cell, and sorting them in one go costs one merge instead of one each
        self._staged: list[Batch] = []

    def __len__(self) -> int:
        self._settle()
        return sum(len(r) for r in self._runs)

    def push(self, batch: Batch) -> None:
        """Add messages in any order; O(1) now, O(n log n) + amortized merges when the
        queue is next read. Pops do not depend on how pushes were grouped: they return
        every message due, and the engine orders a cell by its own key."""
        if len(batch):
            self._staged.append(batch)

    def _settle(self) -> None:
        if not self._staged:
            return
        batch = Batch.concat(self._staged, self.dtype)
        self._staged = []
        self._insert(batch)

    def _insert(self, batch: Batch) -> None:
        t = batch.msgs["time"]
        if len(t) > 1 and (t[1:] < t[:-1]).any():
            batch = batch.take(np.argsort(t, kind="stable"))
        self._runs.append(_Run(batch, np.ascontiguousarray(batch.msgs["time"])))
        # merge while the previous run is not much larger: keeps run sizes geometric
        while len(self._runs) > 1 and len(self._runs[-2]) <= 2 * len(self._runs[-1]):
            b = self._runs.pop()
            a = self._runs.pop()
            self._runs.append(_merge(a, b))

    def next_time(self) -> int:
        """Earliest pending time (NEVER when empty); O(runs)."""
        self._settle()
        return min((int(r.times[0]) for r in self._runs), default=NEVER)

    def next_cell(self) -> int:
        t = self.next_time()
        return NEVER if t == NEVER else t // self.delta

    def pop_cell(self, cell: int) -> Batch:
        """Remove and return every message due before the end of `cell`."""
        return self.pop_before((cell + 1) * self.delta)

    def pop_before(self, t: int) -> Batch:
        """Remove and return every message with time < t; O(runs log P + popped)."""
        self._settle()
        taken, keep = [], []
        for r in self._runs:
            k = int(np.searchsorted(r.times, t, side="left"))
            if k:
                taken.append(Batch(r.batch.msgs[:k], r.batch.payload))
            if k == 0:
                keep.append(r)
            elif k < len(r):
                keep.append(_Run(Batch(r.batch.msgs[k:], r.batch.payload), r.times[k:]))
        self._runs = keep
        return Batch.concat(taken, self.dtype)

    def snapshot(self) -> Batch:
        """All pending messages as one batch (for checkpoints); the queue is unchanged."""
        self._settle()
        return Batch.concat([r.batch for r in self._runs], self.dtype)

    def clear(self) -> None:
        self._runs = []
        self._staged = []


def _merge(a: _Run, b: _Run) -> _Run:
    both = Batch.concat([a.batch, b.batch])
    merged = both.take(kernels.merge_order(a.times, b.times))  # = stable argsort of both
    return _Run(merged, np.ascontiguousarray(merged.msgs["time"]))
