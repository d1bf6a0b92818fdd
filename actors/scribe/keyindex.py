"""A growable int64-key -> int32-value map for compiled lookups (no per-key Python work).

Keys are ``prefix * width + suffix`` (Scribe's slots: local node x group; child entries:
slot x child), values the integers 0, 1, 2, ... in the order keys were first inserted;
a key keeps its value for life (callers keep a validity flag per value).

Two structures answer the two questions Scribe asks:
- **point look-ups** (is this (node, group) on the tree? is this child listed?): an
  open-addressing hash table with linear probing, load at most 1/2, Fibonacci hashing:
  O(1) expected, one or two cache lines per key, and no re-sort on insert (sorted
  arrays would pay a binary search per look-up and a re-sort per insert, which at
  100,000 nodes dominates a shard's join phase: benchmarks/bench_scale.py profiles it);
- **prefix ranges** (a node's slots in group order, a slot's children in child order):
  with ``width`` set, every prefix heads a chain of its values, in key order where its
  listings need it. A new key is linked in its place when that is among the chain's first
  :data:`ORDERED_WALK` values, else at the front, and the chain is marked out of order
  (its head stored as ``-2 - first value``); whoever lists the prefix in key order
  (`chain_head`, `ranges_where`) sorts such a chain first. A step along a chain is a cache
  miss, and long chains grow far more often than they are listed (a node gets its slots
  of dozens of trees in the join; only tree repair's ticks list them), while short ones
  (a slot's children) stay in order as they grow and cost no sort when listed.

Every function here is a numba kernel over the index's arrays, which it hands out as one
tuple (``KeyIndex.arrays``) so that Scribe's compiled steps (``kernels.py``) can look keys
up in the same pass as the rest of their work.
"""

from __future__ import annotations

import numba
import numpy as np

from emulator.kernels import stable_order

_EMPTY = np.iinfo(np.int64).min            # a free hash cell (never a key)
_FIB = np.uint64(0x9E3779B97F4A7C15)       # 2^64 / golden ratio: Fibonacci hashing
_NO_FILTER = np.zeros(0, dtype=bool)       # ranges' "keep every value"
ORDERED_WALK = 4                           # chain values an insert passes to keep order


class KeyIndex:
    """int64 key -> int32 value (0, 1, ... by first insertion); with ``width``, the values
    of each prefix ``key // width`` can be listed in key order (`within`)."""

    def __init__(self, width: int | None = None, capacity: int = 1024):
        self.width = None if width is None else int(width)
        if self.width is not None and self.width < 1:
            raise ValueError(f"width must be >= 1, got {width}")
        cap = 1 << max(4, int(2 * capacity - 1).bit_length())
        self._hkeys = np.full(cap, _EMPTY, np.int64)
        self._hvals = np.full(cap, -1, np.int32)
        self._key_of = np.zeros(capacity, np.int64)      # value -> key
        self._next = np.full(capacity if width else 0, -1, np.int32)   # chain links
        self._head = np.full(0, -1, np.int32)            # prefix -> first value
        self.size = 0

    def __len__(self) -> int:
        return self.size

    @property
    def arrays(self) -> tuple:
        """(hash keys, hash values, chain heads, chain links, key of each value): what the
        compiled look-ups take (`key_value`, `ranges_where`); valid until the next insert."""
        return (self._hkeys, self._hvals, self._head, self._next, self._key_of)

    def lookup(self, q) -> np.ndarray:
        """Values of the keys q (int32, -1 where absent). O(q)."""
        return _lookup(self.arrays, np.ascontiguousarray(q, np.int64).reshape(-1))

    def insert(self, q) -> tuple[np.ndarray, np.ndarray]:
        """Give every absent key of q a new value (next integers, in first-occurrence order).

        Returns (values for each q, bool mask of the q entries that were newly created --
        only the first occurrence of a new key is marked). O(q) plus, with ``width``, the
        chain walks; amortized O(1) growth."""
        q = np.ascontiguousarray(q, np.int64).reshape(-1)
        self._reserve(self.size + len(q), q)
        vals = np.empty(len(q), np.int32)
        new = np.zeros(len(q), np.bool_)
        self.size = _insert(self._hkeys, self._hvals, self._key_of, self._head, self._next,
                            self.width or 0, self.size, q, vals, new)
        return vals, new

    def within(self, prefixes, keep=None) -> tuple[np.ndarray, np.ndarray]:
        """(row, value) of every key with prefix ``prefixes[row]`` (whose value v has
        keep[v], when given), by row then key. O(q + output)."""
        if self.width is None:
            raise ValueError("this KeyIndex has no width: it lists no prefixes")
        return ranges_where(self.arrays, np.ascontiguousarray(prefixes, np.int64).reshape(-1),
                            _NO_FILTER if keep is None else keep)

    def make_room(self, more: int, prefixes: int = 0) -> None:
        """Room for ``more`` new keys whose prefixes are below ``prefixes``: what a compiled
        caller does before it inserts with :func:`insert_key` (then it sets :attr:`size`
        to the size that returned). O(1) unless the arrays grow (amortized)."""
        self._room(self.size + int(more), int(prefixes))

    def _reserve(self, n: int, q: np.ndarray) -> None:
        """Room for n values (hash load <= 1/2) and for the prefixes of the keys q."""
        need = 0
        if self.width is not None and len(q):
            lo, hi = int(q.min()), int(q.max())
            if lo < 0:
                raise ValueError(f"key {lo} is negative: a prefixed KeyIndex needs keys >= 0")
            need = hi // self.width + 1
        self._room(n, need)

    def _room(self, n: int, prefixes: int) -> None:
        """Room for n values (hash load <= 1/2) and prefixes 0..prefixes-1."""
        if 2 * n > len(self._hkeys):
            cap = len(self._hkeys)
            while 2 * n > cap:
                cap *= 2
            self._hkeys, self._hvals = _rehash(self._hkeys, self._hvals, cap)
        if n > len(self._key_of):
            cap = max(n, 2 * len(self._key_of))
            self._key_of = _grown(self._key_of, cap, 0)
            if self.width is not None:
                self._next = _grown(self._next, cap, -1)
        if self.width is not None and prefixes > len(self._head):
            self._head = _grown(self._head, max(prefixes, 2 * len(self._head), 64), -1)

    def state(self) -> dict:
        """The keys and their values, sorted by key (and the width), for checkpoints."""
        keys = self._key_of[: self.size].copy()
        order = np.argsort(keys, kind="stable")
        return {"keys": keys[order], "vals": order.astype(np.int32), "size": self.size,
                "width": self.width}

    @classmethod
    def from_state(cls, st: dict, width: int | None = None) -> KeyIndex:
        """The index `state` saved (``width`` for states saved without one)."""
        w = st.get("width", width)
        size = int(st["size"])
        ix = cls(w, capacity=max(size, 1))
        by_value = np.empty(size, np.int64)
        by_value[np.asarray(st["vals"], np.int64)] = st["keys"]
        vals, new = ix.insert(by_value)
        if ix.size != size or not new.all():
            raise ValueError("KeyIndex state: keys repeat or values are not 0..size-1")
        return ix


def _grown(a: np.ndarray, cap: int, fill) -> np.ndarray:
    out = np.full(cap, fill, a.dtype)
    out[: len(a)] = a
    return out


@numba.njit(cache=True, inline="always")
def _cell(k, mask):
    return np.int64((np.uint64(k) * _FIB) >> np.uint64(32)) & mask


@numba.njit(cache=True)
def key_value(ix, k):
    """The value of key k in index arrays ix (`KeyIndex.arrays`), else -1. O(1) expected."""
    hkeys, hvals = ix[0], ix[1]
    mask = len(hkeys) - 1
    c = _cell(k, mask)
    while True:
        x = hkeys[c]
        if x == k:
            return hvals[c]
        if x == _EMPTY:
            return np.int32(-1)
        c = (c + 1) & mask


@numba.njit(cache=True)
def _lookup(ix, q):
    # (the whole tuple, as the compiled callers pass it: one compile of key_value)
    out = np.empty(len(q), np.int32)
    for i in range(len(q)):
        out[i] = key_value(ix, q[i])
    return out


@numba.njit(cache=True)
def insert_key(ix, width, size, k):
    """Look up key k in index arrays ix (`KeyIndex.arrays`, ``width`` its width or 0),
    adding it with value ``size`` if absent (with a width, into its prefix's chain: the
    module docstring). Returns (value, whether it was added, the new size). The caller has
    made room (`KeyIndex.make_room`). O(1) expected, O(ORDERED_WALK) along the chain."""
    hkeys, hvals, head, nxt, key_of = ix
    if k == _EMPTY:
        raise ValueError("KeyIndex: the smallest int64 is reserved")
    mask = len(hkeys) - 1
    c = _cell(k, mask)
    while hkeys[c] != _EMPTY and hkeys[c] != k:
        c = (c + 1) & mask
    if hkeys[c] == k:
        return hvals[c], False, size
    v = np.int32(size)
    hkeys[c] = k
    hvals[c] = v
    key_of[v] = k
    if width > 0:
        p = k // width
        first = head[p]
        in_order = first >= -1
        prev = -1
        cur = first
        for _ in range(ORDERED_WALK):
            if cur < 0 or key_of[cur] > k:
                break
            prev = cur
            cur = nxt[cur]
        if in_order and (cur < 0 or key_of[cur] > k):    # its place: after prev
            nxt[v] = cur
            if prev < 0:
                head[p] = v
            else:
                nxt[prev] = v
        else:                                            # at the front, out of order
            nxt[v] = chain_first(head, p)
            head[p] = -2 - v
    return v, True, size + 1


# (inlined: a call that passes arrays costs their reference counts, per prefix listed)
@numba.njit(cache=True, inline="always")
def chain_first(head, p):
    """The first value of prefix ``p``'s chain (chain heads ``head``), in whatever order
    the chain is; -1 if it has none. O(1)."""
    if p < 0 or p >= len(head):
        return np.int32(-1)
    first = head[p]
    return first if first >= -1 else np.int32(-2 - first)


@numba.njit(cache=True, inline="always")
def chain_head(head, nxt, key_of, p):
    """The first value of prefix ``p``'s chain in key order (an index's chain heads,
    links and keys: `KeyIndex.arrays` 2 to 4), -1 if it has none: a chain out of order is
    sorted first. O(1), or for a chain of c values out of order O(c log c)
    (``stable_order``)."""
    if p < 0 or p >= len(head):
        return np.int32(-1)
    if head[p] < -1:
        _sort_chain(head, nxt, key_of, p)
    return head[p]


@numba.njit(cache=True)
def _sort_chain(head, nxt, key_of, p):
    """Relink prefix ``p``'s chain (out of order) in key order; its keys are distinct.
    O(c log c)."""
    first = chain_first(head, p)
    c = 0
    cur = first
    while cur >= 0:
        c += 1
        cur = nxt[cur]
    vals = np.empty(c, np.int32)
    keys = np.empty((2, c), np.int64)    # the keys, then their order
    cur = first
    for i in range(c):
        vals[i] = cur
        keys[0, i] = key_of[cur]
        cur = nxt[cur]
    order = keys[1]
    stable_order(keys[0], order)
    head[p] = vals[order[0]]
    for i in range(c - 1):
        nxt[vals[order[i]]] = vals[order[i + 1]]
    nxt[vals[order[c - 1]]] = -1


@numba.njit(cache=True)
def has_room(ix, size, more, prefixes):
    """Whether the arrays ix of an index with a width (`KeyIndex.arrays`, ``size`` keys)
    take ``more`` keys by
    :func:`insert_key` without growing, their prefixes below ``prefixes``: what
    `KeyIndex.make_room` would leave unchanged. O(1)."""
    hkeys, head, nxt, key_of = ix[0], ix[2], ix[3], ix[4]
    n = size + more
    return 2 * n <= len(hkeys) and n <= len(key_of) and n <= len(nxt) \
        and prefixes <= len(head)


@numba.njit(cache=True)
def any_within(ix, p, keep):
    """Whether prefix ``p`` has a value v with keep[v] (`ranges_where` for one prefix,
    stopping at the first; in any order). O(the prefix's chain)."""
    head, nxt = ix[2], ix[3]
    cur = chain_first(head, p)
    while cur >= 0:
        if keep[cur]:
            return True
        cur = nxt[cur]
    return False


@numba.njit(cache=True)
def _insert(hkeys, hvals, key_of, head, nxt, width, size, q, vals, new):
    """Look up or add every key of q (in order); returns the new size. The caller has
    made room (`KeyIndex._reserve`)."""
    ix = (hkeys, hvals, head, nxt, key_of)
    for i in range(len(q)):
        vals[i], new[i], size = insert_key(ix, width, size, q[i])
    return size


@numba.njit(cache=True)
def _rehash(hkeys, hvals, cap):
    """The table's entries in a new table of `cap` cells (a power of two). O(cap)."""
    nk = np.full(cap, _EMPTY, np.int64)
    nv = np.full(cap, -1, np.int32)
    mask = cap - 1
    for j in range(len(hkeys)):
        k = hkeys[j]
        if k != _EMPTY:
            c = _cell(k, mask)
            while nk[c] != _EMPTY:
                c = (c + 1) & mask
            nk[c] = k
            nv[c] = hvals[j]
    return nk, nv


@numba.njit(cache=True)
def ranges_where(ix, prefixes, keep):
    """(query index, value) of every key with prefix ``prefixes[i]`` whose value v has
    keep[v] (`keep` empty: every value), by query then key. O(q + output), plus the sort
    of each chain out of key order (`chain_head`)."""
    head, nxt, key_of = ix[2], ix[3], ix[4]
    every = len(keep) == 0
    total = 0
    for i in range(len(prefixes)):
        cur = chain_head(head, nxt, key_of, prefixes[i])
        while cur >= 0:
            if every or keep[cur]:
                total += 1
            cur = nxt[cur]
    qi = np.empty(total, np.int64)
    out = np.empty(total, np.int32)
    j = 0
    for i in range(len(prefixes)):
        cur = chain_first(head, prefixes[i])    # (in key order since the count)
        while cur >= 0:
            if every or keep[cur]:
                qi[j] = i
                out[j] = cur
                j += 1
            cur = nxt[cur]
    return qi, out
