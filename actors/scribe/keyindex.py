"""A growable int64-key -> int32-value map for vectorized lookups (no per-key Python work).

Keys live in a large sorted ``main`` array plus a small sorted ``delta`` that absorbs
inserts; the delta is merged into main when it exceeds a fraction of main, so an insert
costs O(|delta| + k log k) and the amortized cost per key is O(1) plus the sort. Lookups
are two ``searchsorted`` calls: O(q log n). Values are never removed (callers keep a
validity flag per value and revive it on re-insert), so a key keeps its value for life.
"""

from __future__ import annotations

import numpy as np

_EMPTY_K = np.zeros(0, dtype=np.int64)
_EMPTY_V = np.zeros(0, dtype=np.int32)


class KeyIndex:
    def __init__(self, merge_fraction: float = 0.125, min_delta: int = 4096):
        self.keys, self.vals = _EMPTY_K, _EMPTY_V
        self.dkeys, self.dvals = _EMPTY_K, _EMPTY_V
        self.size = 0
        self._merge_fraction = merge_fraction
        self._min_delta = min_delta

    def __len__(self) -> int:
        return self.size

    @staticmethod
    def _find(keys, vals, q):
        pos = np.searchsorted(keys, q)
        pos_c = np.minimum(pos, max(len(keys) - 1, 0))
        hit = (pos < len(keys)) & (keys[pos_c] == q) if len(keys) else np.zeros(len(q), bool)
        out = np.full(len(q), -1, dtype=np.int32)
        if len(keys):
            out[hit] = vals[pos_c[hit]]
        return out

    def lookup(self, q) -> np.ndarray:
        """Values of the keys q (int32, -1 where absent). O(q log n)."""
        q = np.asarray(q, dtype=np.int64)
        out = self._find(self.keys, self.vals, q)
        miss = out < 0
        if miss.any() and len(self.dkeys):
            out[miss] = self._find(self.dkeys, self.dvals, q[miss])
        return out

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
        lo = np.asarray(lo, dtype=np.int64)
        hi = np.asarray(hi, dtype=np.int64)
        parts_q, parts_k, parts_v = [], [], []
        for keys, vals in ((self.keys, self.vals), (self.dkeys, self.dvals)):
            if not len(keys):
                continue
            a = np.searchsorted(keys, lo)
            b = np.searchsorted(keys, hi)
            cnt = b - a
            tot = int(cnt.sum())
            if not tot:
                continue
            qi = np.repeat(np.arange(len(lo)), cnt)
            starts = np.repeat(a - np.r_[0, np.cumsum(cnt)[:-1]], cnt)
            pos = starts + np.arange(tot)
            parts_q.append(qi)
            parts_k.append(keys[pos])
            parts_v.append(vals[pos])
        if not parts_q:
            return np.zeros(0, np.int64), _EMPTY_V
        qi = np.concatenate(parts_q)
        kk = np.concatenate(parts_k)
        vv = np.concatenate(parts_v)
        if len(parts_q) > 1:
            o = np.lexsort((kk, qi))
            qi, vv = qi[o], vv[o]
        return qi, vv

    def state(self) -> dict:
        self._merge()
        return {"keys": self.keys.copy(), "vals": self.vals.copy(), "size": self.size}

    @classmethod
    def from_state(cls, st: dict) -> KeyIndex:
        ix = cls()
        ix.keys, ix.vals, ix.size = st["keys"], st["vals"], int(st["size"])
        return ix
