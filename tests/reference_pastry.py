"""numpy reference implementations of Pastry's compiled kernels, for the tests that check
the kernels against them (tests/test_pastry_kernels.py): written as the vectorized numpy
the kernels were derived from, so that a kernel and its reference share no code.

The product runs the kernels only (actors/pastry/kernels.py, handler_kernels.py).
"""

from __future__ import annotations

import numpy as np

from actors.pastry import kernels
from actors.pastry.ids import (
    HALF_RING_HI,
    U64,
    closest_key_order,
    cw_dist,
    digit,
    less,
    ring_dist,
    shared_prefix_len,
)

DELIVER = -1
MIX = np.uint64(0x9E3779B97F4A7C15)


# ---- leaf-set and table merges (kernels.group_rows, select_leaves, insert_table, ...) ----
def group_rows_kernel(keys, cand, t=None):
    """``kernels.group_rows`` with :func:`group_rows`'s signature (t optional)."""
    keys = np.ascontiguousarray(keys, np.int64)
    cand = np.ascontiguousarray(cand, np.int64)
    with_t = t is not None
    tt = np.ascontiguousarray(t, np.int64) if with_t else keys
    uk, out, tmax = kernels.group_rows(keys, cand, tt, with_t)
    return uk, out, (tmax if with_t else None)


def group_rows(keys, cand, t=None):
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
    """Per row, column order by (valid first, key ascending). O(B c log c)."""
    return np.lexsort((key_lo, key_hi, ~valid), axis=-1)


def _first_cols(a, k):
    """The first k columns of a, zero-padded when a has fewer."""
    if a.shape[1] >= k:
        return a[:, :k]
    out = np.zeros((a.shape[0], k), a.dtype)
    out[:, :a.shape[1]] = a
    return out


def _valid_sorted(self_ids, cand, exclude):
    """Candidates sorted per row, and which are real (not padding, not the node itself,
    not a repeat, not excluded)."""
    big = np.iinfo(np.int64).max
    c = np.sort(np.where(cand < 0, big, cand), axis=1)
    valid = (c != big) & (c != self_ids[:, None])
    valid[:, 1:] &= c[:, 1:] != c[:, :-1]
    if exclude is not None and exclude.shape[1]:
        ex = np.asarray(exclude, np.int64)
        valid &= ~(c[:, :, None] == np.where(ex < 0, -2, ex)[:, None, :]).any(axis=2)
    return c, valid


def select_leaves(self_ids, cand, ids_hi, ids_lo, half: int, exclude=None) -> np.ndarray:
    """The new leaf sets: from the candidates, the ``half`` nearest smaller and ``half``
    nearest larger ids on the ring (int32[B, 2*half], nearest first, -1 padded).

    ``cand`` int[B, c] (-1 pads; duplicates and the node itself are ignored);
    ``exclude`` int[B, e] ids to leave out. A candidate goes to the smaller side iff its
    counter-clockwise distance is below half the ring. O(B c log(B c)).
    """
    self_ids = np.asarray(self_ids, np.int64)
    cand = np.asarray(cand, np.int64)
    bsz = len(self_ids)
    out = np.full((bsz, 2 * half), -1, np.int32)
    if bsz == 0 or cand.shape[1] == 0:
        return out
    c, valid = _valid_sorted(self_ids, cand, exclude)
    cc = np.where(valid, c, 0)
    s_hi, s_lo = ids_hi[self_ids][:, None], ids_lo[self_ids][:, None]
    c_hi, c_lo = ids_hi[cc], ids_lo[cc]
    ccw_h, ccw_l = cw_dist(c_hi, c_lo, s_hi, s_lo)   # self - c: distance going down
    cw_h, cw_l = cw_dist(s_hi, s_lo, c_hi, c_lo)     # c - self: distance going up
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


def leaf_changes(old, new, heard, now):
    """After a leaf-set merge of rows ``old`` into ``new``: (changed bool[B], added
    int32[B, l] -- members of ``new`` not in ``old``, else -1 --, keep-alive clocks
    int64[B, l] that follow their nodes: a member's from its first slot in ``old``, a
    newcomer's ``now``). O(B * l^2)."""
    old, new = np.asarray(old), np.asarray(new)
    match = new[:, :, None] == old[:, None, :]              # [B, l(new), l(old)]
    found = match.any(axis=2)
    src = match.argmax(axis=2)
    rows = np.arange(len(new))[:, None]
    clocks = np.where(found, np.asarray(heard)[rows, src],
                      np.asarray(now, np.int64)[:, None]).astype(np.int64)
    added = np.where(found, -1, new).astype(np.int32)
    return (new != old).any(axis=1), added, clocks


def insert_table(rt, local_idx, self_ids, cand, ids_hi, ids_lo, b, latency) -> int:
    """Offer candidate nodes to routing tables; an entry changes when its slot is empty or
    the candidate is closer by delay (ties: smaller node id). ``latency(a, b)`` is called
    once per (node, candidate) considered for a filled slot; returns the number of such
    probes. O(P log P), P = pairs.
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
    c, valid = _valid_sorted(self_ids, cand, exclude)
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


# ---- next hop (kernels.next_hop) --------------------------------------------------------
def _gather(ids, nodes):
    """ids[nodes] with -1 entries mapped to 0 (masked out by the callers)."""
    return ids[np.where(nodes >= 0, nodes, 0)]


def in_leaf_range(state, local_idx, self_hi, self_lo, key_hi, key_lo, ids_hi, ids_lo):
    """Whether each key is covered by the node's leaf set: each side covers the keys up
    to its farthest member, even when it is short."""
    half = state.half
    leaf = state.leaf[local_idx]
    small, large = leaf[:, :half], leaf[:, half:]
    n_small = (small >= 0).sum(axis=1)
    n_large = (large >= 0).sum(axis=1)
    rows = np.arange(len(leaf))
    lo_node = small[rows, np.maximum(n_small - 1, 0)]
    hi_node = large[rows, np.maximum(n_large - 1, 0)]
    dn_h, dn_l = cw_dist(key_hi, key_lo, self_hi, self_lo)   # self - key
    up_h, up_l = cw_dist(self_hi, self_lo, key_hi, key_lo)   # key - self
    lo_h, lo_l = cw_dist(_gather(ids_hi, lo_node), _gather(ids_lo, lo_node), self_hi, self_lo)
    hi_h, hi_l = cw_dist(self_hi, self_lo, _gather(ids_hi, hi_node), _gather(ids_lo, hi_node))
    cov_dn = (n_small > 0) & ~less(lo_h, lo_l, dn_h, dn_l)
    cov_up = (n_large > 0) & ~less(hi_h, hi_l, up_h, up_l)
    return cov_dn | cov_up


def next_hop(state, local_idx, self_ids, key_hi, key_lo, ids_hi, ids_lo, exclude=None):
    """Next global node for each (local node, key), or -1 to deliver at the local node,
    and the rule used (0 leaf set, 1 prefix, 2 rare case): routing.next_hop's contract.

    ``exclude`` (int64[B], -1 for none): a node each row must route as if it were absent.
    O(B * (l + rows * 2^b + M)) in the worst case (the rare case).
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


# ---- lazy table repair (handler_kernels.ask_rows) ----------------------------------------
def row_helpers(rt, li, row, col, attempt, max_attempts) -> np.ndarray:
    """The helper each slot (``row``, ``col``) of node ``li`` asks next (-1: none): while
    the slot is empty and ``attempt`` < ``max_attempts``, the ``attempt``-th live entry
    (0 the first) of the node's table in slot order from the slot's row on."""
    width = rt.shape[2]
    flat = rt[li].reshape(len(li), rt.shape[1] * width)
    slot = np.arange(flat.shape[1])[None, :]
    ok = (flat >= 0) & (slot >= (row * width)[:, None])
    rank = np.cumsum(ok, axis=1) - 1
    hit = ok & (rank == attempt[:, None])
    still = (rt[li, row, col] < 0) & (attempt < max_attempts) & hit.any(axis=1)
    return np.where(still, flat[np.arange(len(li)), np.argmax(hit, axis=1)], -1)


def presume_failed(rt, leaf, heard, failed, failed_next, nbr, li, dead):
    """Nodes ``li`` presume ``dead`` failed, in place on the state arrays: one presumption
    per (node, dead id), its first, none of a death the node knows; into the failed memory
    (every presumption of a node at the slot its memory was at before the call: the last
    one written stays), out of the leaf set (each side then sorted stably on "is a hole",
    the keep-alive clocks along), the neighbourhood set and the routing table. Returns
    (the presumptions kept as (node, dead) index arrays, the (i, row, col) of the table
    slots that held their dead ids, the nodes whose leaf set lost a member, sorted)."""
    key = li * (1 << 32) + dead
    _, first = np.unique(key, return_index=True)
    first.sort()
    li, dead = li[first], dead[first]
    keep = ~(failed[li] == dead[:, None]).any(axis=1)
    li, dead = li[keep], dead[keep]
    in_leaf = (leaf[li] == dead[:, None]).any(axis=1)
    slots = np.nonzero(rt[li] == dead[:, None, None])
    cols = failed_next[li] % failed.shape[1]
    failed[li, cols] = dead
    np.add.at(failed_next, li, 1)
    r, c = np.nonzero(leaf[li] == dead[:, None])
    leaf[li[r], c] = -1
    half = leaf.shape[1] // 2
    ul = np.unique(li)
    for side in (slice(0, half), slice(half, leaf.shape[1])):
        part = leaf[ul, side]
        o = np.argsort(part < 0, axis=1, kind="stable")
        leaf[ul, side] = np.take_along_axis(part, o, axis=1)
        heard[ul, side] = np.take_along_axis(heard[ul, side], o, axis=1)
    r, c = np.nonzero(nbr[li] == dead[:, None])
    nbr[li[r], c] = -1
    flat = rt.reshape(len(rt), -1)
    r, c = np.nonzero(flat[li] == dead[:, None])
    flat[li[r], c] = -1
    return (li, dead), slots, np.unique(li[in_leaf])


# ---- hop acknowledgements (kernels.hop_key, acked_pending) -------------------------------
def hop_hash(src, dst, origin, type_, hops, key_hi, key_lo) -> np.ndarray:
    """64-bit identity of a routed hop: h = 0, then per field h = (h ^ field) * MIX,
    h ^= h >> 29 (wrapping uint64)."""
    h = np.zeros(len(np.atleast_1d(src)), np.uint64)
    with np.errstate(over="ignore"):
        for v in (src, dst, origin, type_, hops, key_hi, key_lo):
            h = (h ^ np.asarray(v).astype(np.int64).view(np.uint64)) * MIX
            h ^= h >> np.uint64(29)
    return h


def acked_pending(identity, acks) -> np.ndarray:
    """The mask of pending hops to keep when k acks of one identity clear its k earliest
    pending copies. O((P + n) log P)."""
    uh, cnt = np.unique(acks, return_counts=True)
    o = np.argsort(identity, kind="stable")
    ph = identity[o]
    pos = np.searchsorted(uh, ph)
    posc = np.minimum(pos, len(uh) - 1)
    allowed = np.where(uh[posc] == ph, cnt[posc], 0)
    drop = np.zeros(len(ph), bool)
    drop[o] = _rank_in_runs(ph) < allowed
    return ~drop


def _rank_in_runs(sorted_keys) -> np.ndarray:
    """Position of each element within its run of equal (sorted) keys."""
    n = len(sorted_keys)
    if n == 0:
        return np.zeros(0, np.int64)
    start = np.r_[True, sorted_keys[1:] != sorted_keys[:-1]]
    idx = np.arange(n)
    return idx - np.maximum.accumulate(np.where(start, idx, 0))
