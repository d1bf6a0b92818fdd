"""Vectorized Pastry next-hop selection (SPEC 2) for a batch of (local node, key).

Pure function of the state arrays and the global id columns. For each row:

1. leaf-set rule: if the key lies in the ring range [farthest smaller leaf, farthest
   larger leaf] (a short or empty side covers only up to its farthest member), the next
   hop is the numerically closest of leaf set ∪ self (self: deliver here);
2. prefix rule: row = shared prefix length p of self and key, column = digit p of the key;
   take that table entry if it is set;
3. rare case: any known node (leaf set, table, neighbourhood) sharing at least p digits
   with the key and numerically closer to it than self (the closest such one); none:
   deliver here.

Each step goes to a node that shares a longer prefix with the key, or as long a prefix
and is numerically closer, so a route cannot loop.
"""

from __future__ import annotations

import numpy as np

from . import kernels
from .ids import (
    U64,
    closest_key_order,
    cw_dist,
    digit,
    less,
    ring_dist,
    shared_prefix_len,
)
from .state import PastryState

DELIVER = -1


def _gather(ids, nodes):
    """ids[nodes] with -1 entries mapped to 0 (masked out by the callers)."""
    return ids[np.where(nodes >= 0, nodes, 0)]


def in_leaf_range(state: PastryState, local_idx, self_hi, self_lo, key_hi, key_lo, ids_hi,
                  ids_lo) -> np.ndarray:
    """Whether each key is covered by the node's leaf set (see the module docstring)."""
    half = state.half
    leaf = state.leaf[local_idx]
    small, large = leaf[:, :half], leaf[:, half:]
    n_small = (small >= 0).sum(axis=1)
    n_large = (large >= 0).sum(axis=1)
    # farthest entry of each side (slots fill nearest first, so the last filled slot)
    rows = np.arange(len(leaf))
    lo_node = small[rows, np.maximum(n_small - 1, 0)]
    hi_node = large[rows, np.maximum(n_large - 1, 0)]
    dn_h, dn_l = cw_dist(key_hi, key_lo, self_hi, self_lo)   # self - key
    up_h, up_l = cw_dist(self_hi, self_lo, key_hi, key_lo)   # key - self
    lo_h, lo_l = cw_dist(_gather(ids_hi, lo_node), _gather(ids_lo, lo_node), self_hi, self_lo)
    hi_h, hi_l = cw_dist(self_hi, self_lo, _gather(ids_hi, hi_node), _gather(ids_lo, hi_node))
    # A side covers the keys up to its farthest member, even when it is short: a short
    # side does not prove the node knows every node of that half ring (a node that joined
    # a moment ago from a neighbour's incomplete leaf set has short sides too), and a node
    # claiming a whole half ring on that belief delivers far joiners' JOINs to itself and
    # hands them a wrong leaf set. Keys beyond go by prefix / rare-case routing, which
    # delivers here when no known node is closer (so a network of <= l nodes still works).
    cov_dn = (n_small > 0) & ~less(lo_h, lo_l, dn_h, dn_l)
    cov_up = (n_large > 0) & ~less(hi_h, hi_l, up_h, up_l)
    return cov_dn | cov_up


def next_hop(state: PastryState, local_idx, self_ids, key_hi, key_lo, ids_hi, ids_lo,
             exclude=None):
    """Next global node for each (local node, key), or -1 to deliver at the local node:
    :func:`next_hop_numpy`'s result from the compiled kernel (``kernels.next_hop``).
    O(B * l) on the common paths."""
    local_idx = np.ascontiguousarray(local_idx, np.int64)
    nb = len(local_idx)
    if nb == 0:
        return np.full(0, DELIVER, np.int64), np.zeros(0, np.int8)
    ex = np.full(nb, -1, np.int64) if exclude is None else _column(exclude, np.int64, nb)
    return kernels.next_hop(state.rt, state.leaf, state.nbr, local_idx,
                            _column(self_ids, np.int64, nb), _column(key_hi, U64, nb),
                            _column(key_lo, U64, nb), np.asarray(ids_hi, U64),
                            np.asarray(ids_lo, U64), int(state.b), ex)


def _column(values, dtype, n):
    """``values`` as a contiguous 1-d array of n entries (scalars are repeated)."""
    a = np.asarray(values, dtype)
    if a.shape != (n,):
        a = np.broadcast_to(a, (n,))
    return np.ascontiguousarray(a)


def next_hop_numpy(state: PastryState, local_idx, self_ids, key_hi, key_lo, ids_hi, ids_lo,
                   exclude=None):
    """The reference numpy implementation of :func:`next_hop` (kept for the kernel tests).

    Next global node for each (local node, key), or -1 to deliver at the local node.

    ``exclude`` (int64[B], -1 for none): a node each row must route as if it were absent
    (a node's lookup of its own id must reach its neighbours, not itself).

    ``local_idx`` indexes the state arrays, ``self_ids`` are the same nodes' global ids,
    ``ids_hi/ids_lo`` the id columns of all N nodes. Returns (next int64[B], rule int8[B])
    with rule 0 = leaf set, 1 = prefix, 2 = rare case. O(B * (l + rows * 2^b + M)) in
    the worst case (the rare case); the common path is O(B * l).
    """
    local_idx = np.asarray(local_idx, np.int64)
    self_ids = np.asarray(self_ids, np.int64)
    key_hi = np.asarray(key_hi, U64)
    key_lo = np.asarray(key_lo, U64)
    nb = len(local_idx)
    out = np.full(nb, DELIVER, np.int64)
    rule = np.zeros(nb, np.int8)
    if nb == 0:
        return out, rule
    s_hi, s_lo = ids_hi[self_ids], ids_lo[self_ids]
    ex = None if exclude is None else np.asarray(exclude, np.int64)
    if ex is not None and not (ex >= 0).any():
        ex = None

    leafy = in_leaf_range(state, local_idx, s_hi, s_lo, key_hi, key_lo, ids_hi, ids_lo)
    li = np.flatnonzero(leafy)
    if len(li):
        cand = np.concatenate([self_ids[li, None], state.leaf[local_idx[li]]], axis=1)
        ok = cand >= 0
        if ex is not None:
            ok &= cand != ex[li, None]
        pick = closest_key_order(_gather(ids_hi, cand), _gather(ids_lo, cand), key_hi[li],
                                 key_lo[li], valid=ok)
        chosen = cand[np.arange(len(li)), pick]
        out[li] = np.where(chosen == self_ids[li], DELIVER, chosen)

    pi = np.flatnonzero(~leafy)
    if not len(pi):
        return out, rule
    p = shared_prefix_len(s_hi[pi], s_lo[pi], key_hi[pi], key_lo[pi], state.b)
    ok_row = p < state.rows
    col = digit(key_hi[pi], key_lo[pi], np.minimum(p, state.rows - 1), state.b)
    entry = np.where(ok_row, state.rt[local_idx[pi], np.minimum(p, state.rows - 1), col], -1)
    if ex is not None:
        entry = np.where(entry == ex[pi], -1, entry)
    got = entry >= 0
    out[pi[got]] = entry[got]
    rule[pi[got]] = 1

    ri = pi[~got]
    if len(ri):
        rule[ri] = 2
        pr = p[~got]
        cand = state.known(local_idx[ri])
        c_hi, c_lo = _gather(ids_hi, cand), _gather(ids_lo, cand)
        kh, kl = key_hi[ri, None], key_lo[ri, None]
        c_p = shared_prefix_len(c_hi, c_lo, kh, kl, state.b)
        d_hi, d_lo = ring_dist(c_hi, c_lo, kh, kl)
        me_hi, me_lo = ring_dist(s_hi[ri], s_lo[ri], key_hi[ri], key_lo[ri])
        closer = less(d_hi, d_lo, me_hi[:, None], me_lo[:, None])
        valid = (cand >= 0) & (c_p >= pr[:, None]) & closer
        if ex is not None:
            valid &= cand != ex[ri, None]
        pick = closest_key_order(c_hi, c_lo, key_hi[ri], key_lo[ri], valid=valid)
        out[ri] = np.where(pick >= 0, cand[np.arange(len(ri)), np.maximum(pick, 0)], DELIVER)
    return out, rule
