"""A growable int64-key -> int32-value map for vectorized lookups (no per-key Python work).

Keys live in a large sorted ``main`` array plus a small sorted ``delta`` that absorbs
inserts; the delta is merged into main when it exceeds a fraction of main, so an insert
costs O(|delta| + k log k) and the amortized cost per key is O(1) plus the sort. Lookups
are binary searches: O(q log n). Values are never removed (callers keep a validity flag
per value and revive it on re-insert), so a key keeps its value for life.

`lookup` and `ranges` are compiled loops (numba): Scribe's handlers ask them a few dozen
keys at a time, where the dozen small numpy calls each used to make cost more than the
searches themselves (they were ~11 % of a shard's time in `churn`).
"""

from __future__ import annotations

import numba
import numpy as np

_EMPTY_K = np.zeros(0, dtype=np.int64)
_EMPTY_V = np.zeros(0, dtype=np.int32)
_EVERY = np.zeros(0, dtype=bool)   # ranges_where's "no filter"


class KeyIndex:
    def __init__(self, merge_fraction: float = 0.125, min_delta: int = 4096):
        self.keys, self.vals = _EMPTY_K, _EMPTY_V
        self.dkeys, self.dvals = _EMPTY_K, _EMPTY_V
        self.size = 0
        self._merge_fraction = merge_fraction
        self._min_delta = min_delta

    def __len__(self) -> int:
        return self.size

    def lookup(self, q) -> np.ndarray:
        """Values of the keys q (int32, -1 where absent). O(q log n)."""
        return _lookup(self.keys, self.vals, self.dkeys, self.dvals,
                       np.ascontiguousarray(q, dtype=np.int64).reshape(-1))

    def insert(self, q) -> tuple[np.ndarray, np.ndarray]:
        """Give every absent key of q a new value (next integers, in first-occurrence order).

        Returns (values for each q, bool mask of the q entries that were newly created —
        only the first occurrence of a new key is marked)."""
        q = np.asarray(q, dtype=np.int64)
        vals = self.lookup(q)
        absent = np.flatnonzero(vals < 0)
        new_mask = np.zeros(len(q), dtype=bool)
        if len(absent):
            uniq, first = np.unique(q[absent], return_index=True)
            order = np.argsort(first, kind="stable")  # first-occurrence order
            new_vals = np.empty(len(uniq), dtype=np.int32)
            new_vals[order] = np.arange(self.size, self.size + len(uniq), dtype=np.int32)
            self.size += len(uniq)
            new_mask[absent[first]] = True
            dk = np.concatenate([self.dkeys, uniq])
            dv = np.concatenate([self.dvals, new_vals])
            o = np.argsort(dk, kind="stable")
            self.dkeys, self.dvals = dk[o], dv[o]
            if len(self.dkeys) > max(self._min_delta, self._merge_fraction * len(self.keys)):
                self._merge()
            vals[absent] = self.lookup(q[absent])
        return vals, new_mask

    def _merge(self):
        k = np.concatenate([self.keys, self.dkeys])
        v = np.concatenate([self.vals, self.dvals])
        o = np.argsort(k, kind="stable")
        self.keys, self.vals = k[o], v[o]
        self.dkeys, self.dvals = _EMPTY_K, _EMPTY_V

    def ranges(self, lo, hi) -> tuple[np.ndarray, np.ndarray]:
        """All values whose key is in [lo[i], hi[i]) for each query i.

        Returns (query index, value) pairs ordered by query then key. O(q log n + output)."""
        return ranges_where(self.keys, self.vals, self.dkeys, self.dvals,
                            np.ascontiguousarray(lo, dtype=np.int64).reshape(-1),
                            np.ascontiguousarray(hi, dtype=np.int64).reshape(-1), _EVERY)

    def state(self) -> dict:
        self._merge()
        return {"keys": self.keys.copy(), "vals": self.vals.copy(), "size": self.size}

    @classmethod
    def from_state(cls, st: dict) -> KeyIndex:
        ix = cls()
        ix.keys, ix.vals, ix.size = st["keys"], st["vals"], int(st["size"])
        return ix


@numba.njit(cache=True)
def key_value(keys, vals, dkeys, dvals, k):
    """The value of key k in (keys, vals), else in (dkeys, dvals), else -1. O(log n)."""
    p = np.searchsorted(keys, k)
    if p < len(keys) and keys[p] == k:
        return vals[p]
    p = np.searchsorted(dkeys, k)
    if p < len(dkeys) and dkeys[p] == k:
        return dvals[p]
    return -1


@numba.njit(cache=True)
def _lookup(keys, vals, dkeys, dvals, q):
    out = np.empty(len(q), np.int32)
    for i in range(len(q)):
        out[i] = key_value(keys, vals, dkeys, dvals, q[i])
    return out


@numba.njit(cache=True)
def ranges_where(keys, vals, dkeys, dvals, lo, hi, keep):
    """(query index, value) of every key in [lo[i], hi[i]) whose value v has keep[v]
    (`keep` empty: every value), by query then key: the two sorted runs merged (a key is
    in one run only). O(q log n + output)."""
    nq = len(lo)
    a = np.searchsorted(keys, lo)
    b = np.searchsorted(keys, hi)
    da = np.searchsorted(dkeys, lo)
    db = np.searchsorted(dkeys, hi)
    total = 0
    for i in range(nq):
        total += max(b[i] - a[i], 0) + max(db[i] - da[i], 0)
    qi = np.empty(total, np.int64)
    out = np.empty(total, np.int32)
    every = len(keep) == 0
    j = 0
    for i in range(nq):
        p, pe, d, de = a[i], b[i], da[i], db[i]
        while p < pe or d < de:
            if d >= de or (p < pe and keys[p] < dkeys[d]):
                v = vals[p]
                p += 1
            else:
                v = dvals[d]
                d += 1
            if every or keep[v]:
                out[j] = v
                qi[j] = i
                j += 1
    return qi[:j], out[:j]
