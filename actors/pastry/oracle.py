"""Oracle bootstrap: exact Pastry state with proximity neighbour selection (PNS).

Every shard calls :func:`oracle_state` for its own slice of nodes with the same shared
read-only inputs (ids of all nodes, ``host_router``, the router distance matrix in us,
``lan_us``); the result for a node does not depend on the slice it is computed in.

Proximity is the host-to-host delay ``lan + router_dist[R(x), R(y)] + lan``. With one LAN
delay for every host (the SPEC's model) ranking candidates by delay is ranking them by
router distance, so all hosts on one router share their answers: the work is done per
(querier router, candidate router), never per host pair. Ties between equally distant
candidates go to the smallest global node index (shard-independent).
"""

from __future__ import annotations

import numpy as np

from . import kernels
from .ids import digit, shared_prefix_len, sorted_order
from .kernels import nearest_column, table_row_from_group
from .state import PastryState, check_params

# groups of nodes sharing a prefix larger than this use the dense per-router method,
# smaller ones the all-pairs method (cost ~ N * size, one compiled loop over all groups)
DENSE_GROUP = 48
ROW_CHUNK = 2048


def uniform_lan(lan_us) -> int:
    """The single LAN delay (us); a per-host array must be constant (the SPEC's model)."""
    lan = np.asarray(lan_us)
    if lan.ndim and lan.size:
        if (lan != lan.flat[0]).any():
            raise ValueError("oracle: per-host LAN delays that differ are not supported")
        return int(lan.flat[0])
    return int(lan) if lan.size else 0


def _best_per_router(hosts: np.ndarray, router: np.ndarray):
    """Candidate routers and, for each, its smallest host; columns ordered by that host.

    Ordering columns by host index makes ``argmin`` over a row (first minimum) pick the
    smallest host among equally distant candidates.
    """
    o = np.argsort(hosts, kind="stable")
    r_sorted = router[hosts[o]]
    u, first = np.unique(r_sorted, return_index=True)
    best = hosts[o][first]
    co = np.argsort(best, kind="stable")
    return u[co], best[co]


def _leaf_sets(order: np.ndarray, qpos: np.ndarray, l: int, ids_hi, ids_lo) -> np.ndarray:
    """Leaf sets of the nodes at sorted positions ``qpos``. O(len(qpos) * l).

    Side rule (``kernels.on_smaller_side``, as ``kernels.merge_leaf_sets`` applies it): a
    node is on the smaller side when its counter-clockwise distance is below half the
    ring, otherwise on the larger side; each side keeps its ``l/2`` nearest. On a ring of
    more than ~l nodes this is the plain l/2 predecessors and l/2 successors; on a tiny
    ring a side may stay short (then the node knows every node of that half ring).
    """
    n = len(order)
    half = l // 2
    out = np.full((len(qpos), l), -1, np.int32)
    k = min(half, n - 1)
    if k <= 0:
        return out
    j = np.arange(1, k + 1)
    me = order[qpos]
    pred = order[(qpos[:, None] - j[None, :]) % n]
    succ = order[(qpos[:, None] + j[None, :]) % n]
    # the side rule (kernels.on_smaller_side); distances grow with j, so each filter
    # keeps a prefix and slots stay nearest first
    me = np.ascontiguousarray(me, np.int64)
    hi, lo = np.asarray(ids_hi, np.uint64), np.asarray(ids_lo, np.uint64)
    out[:, :k] = np.where(kernels.smaller_side(hi, lo, me, np.ascontiguousarray(pred)), pred, -1)
    out[:, half:half + k] = np.where(
        kernels.smaller_side(hi, lo, me, np.ascontiguousarray(succ)), -1, succ)
    return out


def _neighbourhood(nodes, present_hosts, host_router, router_dist, m) -> np.ndarray:
    """The m present hosts nearest by delay to each node (self excluded), nearest first.

    Per querier router: the m+1 nearest candidate routers (plus ties) hold enough hosts;
    their hosts are ranked by (router distance, host id). O(R_q * R_c + R_q * m log m).
    """
    out = np.full((len(nodes), m), -1, np.int32)
    if m == 0 or len(present_hosts) == 0:
        return out
    hr = host_router[present_hosts]
    o = np.lexsort((present_hosts, hr))
    hosts_by_router = present_hosts[o]
    cand_r, starts = np.unique(hr[o], return_index=True)
    ends = np.r_[starts[1:], len(hosts_by_router)]
    q_r, q_inv = np.unique(host_router[nodes], return_inverse=True)
    k = min(m + 1, len(cand_r))
    for c0 in range(0, len(q_r), ROW_CHUNK):
        rows = q_r[c0:c0 + ROW_CHUNK]
        d = router_dist[np.ix_(rows, cand_r)]
        kth = np.partition(d, k - 1, axis=1)[:, k - 1]
        for i in range(len(rows)):
            cols = np.flatnonzero(d[i] <= kth[i])
            lens = ends[cols] - starts[cols]
            idx = np.repeat(starts[cols] - np.cumsum(np.r_[0, lens[:-1]]), lens) + \
                np.arange(lens.sum())
            h = hosts_by_router[idx]
            dh = np.repeat(d[i, cols], lens)
            ranked = h[np.lexsort((h, dh))][:m + 1]
            who = np.flatnonzero(q_inv == c0 + i)
            keep = ranked[None, :] != nodes[who][:, None]
            pick = np.argsort(~keep, axis=1, kind="stable")[:, :m]
            got = np.take_along_axis(np.broadcast_to(ranked, keep.shape), pick, axis=1)
            ok = np.take_along_axis(keep, pick, axis=1)
            out[who, :got.shape[1]] = np.where(ok, got, -1)
    return out


def _table_row_dense(r, g_lo, g_hi, qpos, dig, order, host_router, router_dist, rt, q_local,
                     base):
    """Row r for the queriers ``qpos`` of one large group [g_lo, g_hi) (sorted positions)."""
    q_r, q_inv = np.unique(host_router[order[qpos]], return_inverse=True)
    gd = dig[g_lo:g_hi]
    bounds = np.searchsorted(gd, np.arange(base + 1))  # digit r is sorted inside the group
    qd = dig[qpos]
    for d in range(base):
        lo_, hi_ = g_lo + bounds[d], g_lo + bounds[d + 1]
        if hi_ <= lo_:
            continue
        cols_r, cols_h = _best_per_router(order[lo_:hi_], host_router)
        best = cols_h[nearest_column(router_dist, q_r, cols_r)]
        need = qd != d
        rt[q_local[need], r, d] = best[q_inv[need]]


def oracle_state(nodes, ids_hi, ids_lo, host_router, router_dist, lan_us=1000, *, b=4, l=16,
                 m=32, present=None, n_nodes=None) -> PastryState:
    """Exact PNS state for the global nodes ``nodes`` (one shard's slice).

    ``present`` (bool[N], default all) restricts candidates to live/joined nodes; the
    state of a node that is not present is still computed (as if it were). Complexity:
    O(N log N) sort + per row r: O(R_q * R_c) for groups larger than DENSE_GROUP and
    O(N * N/2^(b*r)) pair ranking for the rest; the neighbourhood set O(R_q * R).
    """
    check_params(b, l, m)
    uniform_lan(lan_us)  # validates; the uniform LAN delay does not change any ranking
    nodes = np.asarray(nodes, np.int64)
    ids_hi = np.asarray(ids_hi, np.uint64)
    ids_lo = np.asarray(ids_lo, np.uint64)
    host_router = np.asarray(host_router, np.int64)
    n_all = len(ids_hi)
    if len(ids_lo) != n_all or len(host_router) != n_all:
        raise ValueError("oracle: ids_hi, ids_lo and host_router must have one entry per node")
    if len(nodes) and (nodes.min() < 0 or nodes.max() >= n_all):
        raise ValueError("oracle: node index out of range")
    if router_dist.ndim != 2 or router_dist.shape[0] != router_dist.shape[1]:
        raise ValueError("oracle: router_dist must be a square matrix")
    if n_all and host_router.max() >= router_dist.shape[0]:
        raise ValueError("oracle: host_router names a router outside router_dist")
    present = np.ones(n_all, bool) if present is None else np.asarray(present, bool).copy()
    present[nodes] = True  # a node's own position is needed; it never lists itself
    state = PastryState.empty(len(nodes), n_nodes or n_all, b, l, m)
    if not len(nodes):
        return state

    members = np.flatnonzero(present)
    order = members[sorted_order(ids_hi[members], ids_lo[members])]
    pos_of = np.full(n_all, -1, np.int64)
    pos_of[order] = np.arange(len(order))
    qpos = pos_of[nodes]
    state.leaf[:] = _leaf_sets(order, qpos, l, ids_hi, ids_lo)
    state.nbr[:] = _neighbourhood(nodes, members, host_router, router_dist, m)

    s_hi, s_lo = ids_hi[order], ids_lo[order]
    spl_adj = np.r_[-1, shared_prefix_len(s_hi[:-1], s_lo[:-1], s_hi[1:], s_lo[1:], b)]
    q_local = np.arange(len(nodes))
    base = 1 << b
    for r in range(state.rows):
        start = spl_adj < r  # a new group of nodes sharing r digits starts here
        grp = np.cumsum(start) - 1
        gstart = np.flatnonzero(start)
        gsize = np.diff(np.r_[gstart, len(order)])
        dig = digit(s_hi, s_lo, r, b)
        qs = gsize[grp[qpos]]
        small = (qs > 1) & (qs <= DENSE_GROUP)
        if small.any():
            g = grp[qpos[small]]
            table_row_from_group(r, qpos[small], gstart[g], gsize[g], dig, order, host_router,
                                 router_dist, state.rt, q_local[small], base)
        big = np.flatnonzero(qs > DENSE_GROUP)
        if len(big):
            qg = grp[qpos[big]]
            o = np.argsort(qg, kind="stable")
            ug, ustart = np.unique(qg[o], return_index=True)
            uend = np.r_[ustart[1:], len(o)]
            for g, a, z in zip(ug, ustart, uend, strict=True):
                sel = big[o[a:z]]
                _table_row_dense(r, gstart[g], gstart[g] + gsize[g], qpos[sel], dig, order,
                                 host_router, router_dist, state.rt, q_local[sel], base)
    return state
