"""Vectorized state updates: leaf-set selection and routing-table insertion.

Both take, per local node, a padded matrix of candidate node ids (-1 = none), so one call
updates many nodes at once; a node's result depends only on its own row.
"""

from __future__ import annotations

import numpy as np

from . import kernels
from .ids import HALF_RING_HI, cw_dist, digit, shared_prefix_len


def group_rows(keys, cand, t=None):
    """:func:`group_rows_numpy` by the compiled kernel (``kernels.group_rows``)."""
    keys = np.ascontiguousarray(keys, np.int64)
    cand = np.ascontiguousarray(cand, np.int64)
    if cand.ndim != 2 or len(cand) != len(keys):
        raise ValueError("group_rows: cand must be a matrix with one row per key")
    with_t = t is not None
    tt = np.ascontiguousarray(t, np.int64) if with_t else keys
    uk, out, tmax = kernels.group_rows(keys, cand, tt, with_t)
    return uk, out, (tmax if with_t else None)


def group_rows_numpy(keys, cand, t=None):
    """Combine the candidate rows of equal keys (e.g. several messages to one node in a
    batch) into one row each: returns (unique keys, int64[U, k*c] -1 padded, max t per key).
    O(B log B)."""
    keys = np.asarray(keys, np.int64)
    cand = np.asarray(cand, np.int64)
    o = np.argsort(keys, kind="stable")
    uk, start, cnt = np.unique(keys[o], return_index=True, return_counts=True)
    w = cand.shape[1]
    kmax = int(cnt.max()) if len(cnt) else 0
    out = np.full((len(uk), kmax * w), -1, np.int64)
    grp = np.repeat(np.arange(len(uk)), cnt)
    within = np.arange(len(o)) - np.repeat(start, cnt)
    cols = within[:, None] * w + np.arange(w)[None, :]
    out[grp[:, None], cols] = cand[o]
    tmax = None
    if t is not None:
        tmax = np.full(len(uk), np.iinfo(np.int64).min, np.int64)
        np.maximum.at(tmax, grp, np.asarray(t, np.int64)[o])
    return uk, out, tmax


def _rank_rows(key_hi, key_lo, valid):
    """Per row, column order by (valid first, key ascending). One row-wise lexsort
    (2-4x faster than flattening with a row key). O(B c log c)."""
    return np.lexsort((key_lo, key_hi, ~valid), axis=-1)


def _first_cols(a, k):
    """The first k columns of a, zero-padded when a has fewer."""
    if a.shape[1] >= k:
        return a[:, :k]
    out = np.zeros((a.shape[0], k), a.dtype)
    out[:, :a.shape[1]] = a
    return out


def select_leaves(self_ids, cand, ids_hi, ids_lo, half: int, exclude=None) -> np.ndarray:
    """The new leaf sets: from candidates ∪ nothing else, the ``half`` nearest smaller and
    ``half`` nearest larger ids on the ring (int32[B, 2*half], nearest first, -1 padded).

    ``cand`` int[B, c] (-1 pads; duplicates and the node itself are ignored);
    ``exclude`` int[B, e] ids to leave out (nodes known to be dead). A candidate goes
    to the smaller side iff its counter-clockwise distance is below half the ring, so
    the sides never share a node (the oracle's rule). O(B c log(B c)).
    """
    self_ids = np.asarray(self_ids, np.int64)
    cand = np.asarray(cand, np.int64)
    bsz = len(self_ids)
    out = np.full((bsz, 2 * half), -1, np.int32)
    if bsz == 0 or cand.shape[1] == 0:
        return out
    big = np.iinfo(np.int64).max
    c = np.sort(np.where(cand < 0, big, cand), axis=1)
    valid = (c != big) & (c != self_ids[:, None])
    valid[:, 1:] &= c[:, 1:] != c[:, :-1]
    if exclude is not None and exclude.shape[1]:
        ex = np.asarray(exclude, np.int64)
        valid &= ~(c[:, :, None] == np.where(ex < 0, -2, ex)[:, None, :]).any(axis=2)
    cc = np.where(valid, c, 0)
    s_hi, s_lo = ids_hi[self_ids][:, None], ids_lo[self_ids][:, None]
    c_hi, c_lo = ids_hi[cc], ids_lo[cc]
    ccw_h, ccw_l = cw_dist(c_hi, c_lo, s_hi, s_lo)   # self - c: distance going down
    cw_h, cw_l = cw_dist(s_hi, s_lo, c_hi, c_lo)     # c - self: distance going up
    # each candidate belongs to the side of the half ring it lies in, so a node that
    # knows too few nodes on one side keeps that side short (and repairs it) instead of
    # filling it with far nodes of the other side
    down = ccw_h < HALF_RING_HI
    v_small, v_large = valid & down, valid & ~down
    n_small = np.minimum(half, v_small.sum(axis=1))
    n_large = np.minimum(half, v_large.sum(axis=1))
    rows = np.arange(bsz)[:, None]
    j = np.arange(half)[None, :]
    o_small = _first_cols(_rank_rows(ccw_h, ccw_l, v_small), half)
    o_large = _first_cols(_rank_rows(cw_h, cw_l, v_large), half)
    out[:, :half] = np.where(j < n_small[:, None], c[rows, o_small], -1)
    out[:, half:] = np.where(j < n_large[:, None], c[rows, o_large], -1)
    return out


def insert_table(rt, local_idx, self_ids, cand, ids_hi, ids_lo, b, latency) -> int:
    """Offer candidate nodes to routing tables; an entry changes when its slot is empty or
    the candidate is closer by delay (ties: smaller node id). Proximity neighbour selection
    by probing: ``latency(a, b)`` is called once per (node, candidate) considered for a
    filled slot and the number of such probes is returned. O(P log P), P = pairs.
    """
    local_idx = np.asarray(local_idx, np.int64)
    cand = np.asarray(cand, np.int64)
    x = np.repeat(np.arange(len(local_idx)), cand.shape[1])
    c = cand.ravel()
    me = np.asarray(self_ids, np.int64)[x]
    ok = (c >= 0) & (c != me)
    x, c, me = x[ok], c[ok], me[ok]
    if not len(c):
        return 0
    r = shared_prefix_len(ids_hi[me], ids_lo[me], ids_hi[c], ids_lo[c], b)
    ok = r < rt.shape[1]
    x, c, me, r = x[ok], c[ok], me[ok], r[ok]
    col = digit(ids_hi[c], ids_lo[c], r, b)
    li = local_idx[x]
    cur = rt[li, r, col].astype(np.int64)
    d_new = np.asarray(latency(me, c), np.int64)
    filled = (cur >= 0) & (cur != c)
    d_cur = np.full(len(c), np.iinfo(np.int64).max, np.int64)
    if filled.any():
        d_cur[filled] = np.asarray(latency(me[filled], cur[filled]), np.int64)
    better = (cur < 0) | ((cur != c) & ((d_new < d_cur) | ((d_new == d_cur) & (c < cur))))
    li, r, col, c, d_new = li[better], r[better], col[better], c[better], d_new[better]
    if len(c) == 0:
        return int(filled.sum())
    o = np.lexsort((c, d_new, col, r, li))
    li, r, col, c = li[o], r[o], col[o], c[o]
    first = np.r_[True, (li[1:] != li[:-1]) | (r[1:] != r[:-1]) | (col[1:] != col[:-1])]
    rt[li[first], r[first], col[first]] = c[first]
    return int(filled.sum())


def select_nearest(self_ids, cand, m: int, latency, exclude=None) -> np.ndarray:
    """The m candidates nearest by delay (ties: smaller id), nearest first, -1 padded."""
    self_ids = np.asarray(self_ids, np.int64)
    cand = np.asarray(cand, np.int64)
    bsz = len(self_ids)
    out = np.full((bsz, m), -1, np.int32)
    if bsz == 0 or m == 0 or cand.shape[1] == 0:
        return out
    big = np.iinfo(np.int64).max
    c = np.sort(np.where(cand < 0, big, cand), axis=1)
    valid = (c != big) & (c != self_ids[:, None])
    valid[:, 1:] &= c[:, 1:] != c[:, :-1]
    if exclude is not None and exclude.shape[1]:
        valid &= ~(c[:, :, None] == np.where(exclude < 0, -2, exclude)[:, None, :]).any(axis=2)
    cc = np.where(valid, c, 0)
    d = np.asarray(latency(np.broadcast_to(self_ids[:, None], cc.shape).ravel(), cc.ravel()),
                   np.int64).reshape(cc.shape)
    d = np.where(valid, d, big)
    o = np.lexsort((c, d), axis=-1)
    take = min(m, c.shape[1])
    rows = np.arange(bsz)[:, None]
    sel = c[rows, o[:, :take]]
    ok = valid[rows, o[:, :take]]
    out[:, :take] = np.where(ok, sel, -1)
    return out

