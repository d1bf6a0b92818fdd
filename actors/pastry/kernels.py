"""Compiled Pastry kernels: the per-message loops of the hot handlers (numba, cached).

Plain ``@numba.njit(cache=True)`` functions over numpy arrays, one job each, called by the
handlers (docs/ARCHITECTURE.md, "Compiled kernels"). They are the product's only
implementation; tests/reference_pastry.py holds numpy references that
tests/test_pastry_kernels.py checks them against value for value (same ties, same quirks),
and ``tests/test_protocol_digest.py`` checks a whole protocol run. Ids are 128-bit (hi, lo)
uint64 pairs as in :mod:`.ids`; latencies are the engine's rule,
``emulator.kernels.host_delay``.
"""

from __future__ import annotations

import numba
import numpy as np
from numba.cpython.unsafe.numbers import leading_zeros  # LLVM ctlz intrinsic

from emulator.kernels import (
    PREFETCH_MIN_ROWS,
    host_delay,
    prefetch,
    prefetch_delay,
    stable_order,
    unique_first,
)

_HALF_HI = np.uint64(1 << 63)
_I64_MAX = np.iinfo(np.int64).max


@numba.njit(cache=True)
def _clz(x):
    """Leading zero bits of a uint64 (64 for 0): LLVM's ctlz, one instruction."""
    return np.int64(leading_zeros(x))


@numba.njit(cache=True)
def _spl(ahi, alo, bhi, blo, b):
    xh = ahi ^ bhi
    if xh != 0:
        return _clz(xh) // b
    return (64 + _clz(alo ^ blo)) // b


@numba.njit(cache=True)
def _digit(hi, lo, pos, b):
    per_word = 64 // b
    mask = np.uint64((1 << b) - 1)
    if pos < per_word:
        sh = 64 - b * (pos + 1)
        sh = 0 if sh < 0 else (63 if sh > 63 else sh)
        return np.int64((hi >> np.uint64(sh)) & mask)
    sh = 128 - b * (pos + 1)
    sh = 0 if sh < 0 else (63 if sh > 63 else sh)
    return np.int64((lo >> np.uint64(sh)) & mask)


@numba.njit(cache=True)
def _sub(ahi, alo, bhi, blo):
    """(a - b) mod 2^128 as (hi, lo)."""
    lo = alo - blo
    borrow = np.uint64(1) if alo < blo else np.uint64(0)
    return ahi - bhi - borrow, lo


@numba.njit(cache=True)
def _less(ahi, alo, bhi, blo):
    return ahi < bhi or (ahi == bhi and alo < blo)


@numba.njit(cache=True)
def _ring(ahi, alo, bhi, blo):
    d1h, d1l = _sub(ahi, alo, bhi, blo)
    d2h, d2l = _sub(bhi, blo, ahi, alo)
    if _less(d1h, d1l, d2h, d2l):
        return d1h, d1l
    return d2h, d2l


@numba.njit(cache=True)
def _excluded(exclude, i, c):
    """Whether id c is one of row i's ids to leave out (``exclude[i]``, -1 = none): a
    node's presumed-failed ids, kept out of its tables. O(memory)."""
    for e in range(exclude.shape[1]):
        if exclude[i, e] >= 0 and exclude[i, e] == c:
            return True
    return False


@numba.njit(cache=True)
def _any_excluded(exclude, i):
    """Whether row i has any id to leave out (most rows have none: then a candidate needs
    no :func:`_excluded` scan). O(memory)."""
    for e in range(exclude.shape[1]):
        if exclude[i, e] >= 0:
            return True
    return False


@numba.njit(cache=True)
def on_smaller_side(s_hi, s_lo, c_hi, c_lo):
    """The leaf-set side rule, the one place it is written: whether id c belongs to the
    smaller side of node s's leaf set -- its counter-clockwise distance (s - c) mod 2^128
    is below half the ring -- and that distance (hi, lo). So the sides never share a node,
    and a node that knows too few nodes on one side keeps that side short (and repairs
    it) instead of filling it with far nodes of the other side. O(1)."""
    dh, dl = _sub(s_hi, s_lo, c_hi, c_lo)
    return dh < _HALF_HI, dh, dl


@numba.njit(cache=True)
def smaller_side(ids_hi, ids_lo, me, cand):
    """:func:`on_smaller_side` of each node ``me[i]`` and candidate ``cand[i, j]`` (bool[n,
    k]). O(n * k)."""
    out = np.empty(cand.shape, np.bool_)
    for i in range(cand.shape[0]):
        s = me[i]
        for j in range(cand.shape[1]):
            c = cand[i, j]
            out[i, j] = on_smaller_side(ids_hi[s], ids_lo[s], ids_hi[c], ids_lo[c])[0]
    return out


@numba.njit(cache=True)
def side_farthest(members, x, lo, hi):
    """The (member count, farthest member) of the leaf-set side ``members[x, lo:hi]``. A
    side fills nearest first, so its farthest member is its last filled slot; an empty
    side gives its first slot's value (-1). O(l)."""
    n_ok = 0
    for c in range(lo, hi):
        if members[x, c] >= 0:
            n_ok += 1
    return n_ok, np.int64(members[x, lo + max(n_ok - 1, 0)])


@numba.njit(cache=True, inline="always")
def _prefetch_offer(rt, li, global_ids, cand, i, hr, rdist):
    """:func:`insert_table`'s next row, named to the caches before its turn: node ``li``'s
    table rows and the delays from it to the candidates ``cand[i]`` (most are in the
    table already and need no delay; a wasted line costs less than a wait). O(rows + C)."""
    rows, width = rt.shape[1], rt.shape[2]
    for r in range(rows):
        prefetch(rt, (li * rows + r) * width)
    me = global_ids[li]
    for j in range(cand.shape[1]):
        c = cand[i, j]
        if c >= 0:
            prefetch_delay(hr, rdist, me, c)


@numba.njit(cache=True)
def insert_table(rt, local_idx, global_ids, cand, ids_hi, ids_lo, b, hr, rdist, lan_us, failed):
    """Offer ``cand[i, :]`` to the routing table of local node ``local_idx[i]`` (global id
    ``global_ids[local_idx[i]]``), leaving out the ids of its row of ``failed`` (-1: none);
    returns the probe count: each pair is judged against the table as it was before the
    call (empty slot, or closer by delay, ties to the smaller id), and of the pairs better
    than that the nearest (ties: smaller id) takes the slot. O(B * C)."""
    nb, nc = cand.shape
    rows = rt.shape[1]
    k = 0
    probes = 0
    many = len(rt) >= PREFETCH_MIN_ROWS
    for i in range(nb):  # pass 1: every pair against the table before the call
        li = local_idx[i]
        me = np.int64(global_ids[li])
        if i + 1 < nb and many:
            _prefetch_offer(rt, local_idx[i + 1], global_ids, cand, i + 1, hr, rdist)
        any_dead = _any_excluded(failed, li)
        for j in range(nc):
            c = cand[i, j]
            if c < 0 or c == me:
                continue
            if any_dead and _excluded(failed, li, c):
                continue
            r = _spl(ids_hi[me], ids_lo[me], ids_hi[c], ids_lo[c], b)
            if r >= rows:
                continue
            col = _digit(ids_hi[c], ids_lo[c], r, b)
            cur = np.int64(rt[li, r, col])
            if cur == c:
                continue        # already there (most offers: leaf sets overlap tables)
            d_new = host_delay(hr, rdist, lan_us, me, c)
            if cur >= 0:
                probes += 1
                d_cur = host_delay(hr, rdist, lan_us, me, cur)
                better = d_new < d_cur or (d_new == d_cur and c < cur)
            else:
                better = cur < 0
            if better:
                if k == 0:
                    # the better pairs, one row each: (local node, row, column, candidate,
                    # its delay, the slot's entry before the call, the node's id); made at
                    # the first one, as most calls have none (an array is an allocation)
                    pend = np.empty((nb * nc, 7), np.int64)
                pend[k, 0], pend[k, 1], pend[k, 2] = li, r, col
                pend[k, 3], pend[k, 4], pend[k, 5], pend[k, 6] = c, d_new, cur, me
                k += 1
    for q in range(k):  # pass 2: the nearest better candidate per slot wins
        li, r, col = pend[q, 0], pend[q, 1], pend[q, 2]
        c, d_c = pend[q, 3], pend[q, 4]
        v = np.int64(rt[li, r, col])
        if v == pend[q, 5]:
            rt[li, r, col] = c
        else:  # taken earlier in this call by another better candidate
            dv = host_delay(hr, rdist, lan_us, pend[q, 6], v)
            if d_c < dv or (d_c == dv and c < v):
                rt[li, r, col] = c
    return probes


@numba.njit(cache=True)
def _select_row(out, i, dist, half, row, me, ids_hi, ids_lo, exclude, xr):
    """Row i of ``out`` (-1 filled) becomes the leaf set of node ``me`` selected from the
    ids of ``row``: the ``half`` nearest smaller ids in columns 0..half-1 and the ``half``
    nearest larger in half.., nearest first (:func:`on_smaller_side`); -1, duplicates,
    ``me`` itself and the ids of row ``xr`` of ``exclude`` are left out. ``dist``: scratch
    (4, half) for each side's distances (hi, lo), rows 0-1 the smaller side's. One call per
    row, the candidates in its loop: a call per candidate would take a reference to each
    array it is passed. O(len(row) * half)."""
    s_hi, s_lo = ids_hi[me], ids_lo[me]
    ns = 0
    nl = 0
    any_dead = _any_excluded(exclude, xr)
    # Candidates in any order: each side keeps its `half` smallest distances, and an id
    # has one distance per side, so a duplicate meets its twin at its own position (a
    # twin pushed out by nearer ids stays out too); the result is that of the sorted,
    # de-duplicated candidates.
    for j in range(len(row)):
        c = np.int64(row[j])
        if c < 0 or c == me:
            continue
        if any_dead and _excluded(exclude, xr, c):
            continue
        down, dh, dl = on_smaller_side(s_hi, s_lo, ids_hi[c], ids_lo[c])
        if not down:
            dh, dl = _sub(ids_hi[c], ids_lo[c], s_hi, s_lo)  # c - self: going up
        # its side: distance rows r, r + 1 of dist, columns col.. of out, n members so far;
        # kept sorted by (dh, dl), distinct ids, no ties
        r, col, n = (0, 0, ns) if down else (2, half, nl)
        pos = n
        while pos > 0 and _less(dh, dl, dist[r, pos - 1], dist[r + 1, pos - 1]):
            pos -= 1
        if pos > 0 and dist[r, pos - 1] == dh and dist[r + 1, pos - 1] == dl:
            continue                # already there
        if pos < half:
            last = n if n < half else half - 1
            for q in range(last, pos, -1):
                dist[r, q], dist[r + 1, q] = dist[r, q - 1], dist[r + 1, q - 1]
                out[i, col + q] = out[i, col + q - 1]
            dist[r, pos], dist[r + 1, pos] = dh, dl
            out[i, col + pos] = c
            if n < half:
                if down:
                    ns += 1
                else:
                    nl += 1


@numba.njit(cache=True)
def group_rows(keys, cand, t, with_t):
    """Rows of equal keys side by side: (unique keys, int64[U, kmax*w] -1 padded, max t
    per key), rows of one key in their input order.
    O(B log B + B * w)."""
    n = len(keys)
    w = cand.shape[1]
    # the order, then the unique keys and each one's max t: one allocation
    columns = np.empty((3, n), np.int64)
    o = columns[0]
    stable_order(keys, o)
    nu = 0
    kmax = 0
    run = 0
    for q in range(n):
        if q == 0 or keys[o[q]] != keys[o[q - 1]]:
            nu += 1
            run = 0
        run += 1
        if run > kmax:
            kmax = run
    uk = columns[1][:nu]
    out = np.full((nu, kmax * w), -1, np.int64)
    tmax = columns[2][:nu]
    tmax[:] = np.iinfo(np.int64).min
    u = -1
    within = 0
    for q in range(n):
        src = o[q]
        if q == 0 or keys[src] != keys[o[q - 1]]:
            u += 1
            uk[u] = keys[src]
            within = 0
        for j in range(w):
            out[u, within * w + j] = cand[src, j]
        if with_t and t[src] > tmax[u]:
            tmax[u] = t[src]
        within += 1
    return uk, out, tmax


@numba.njit(cache=True)
def next_hop(rt, leaf, nbr, local_idx, self_ids, key_hi, key_lo, ids_hi, ids_lo, b, exclude):
    """Next global node for each (local node, key), -1 to deliver here, and the rule used
    (0 leaf set, 1 prefix, 2 rare case), by the rules of :mod:`.routing`'s docstring.
    O(B * l) on the common paths, O(B * (l + rows * 2^b + M)) rare."""
    nb = len(local_idx)
    rows = rt.shape[1]
    width = rt.shape[2]
    nl = leaf.shape[1]
    half = nl // 2
    nm = nbr.shape[1]
    out = np.full(nb, -1, np.int64)
    rule = np.zeros(nb, np.int8)
    many = len(rt) >= PREFETCH_MIN_ROWS
    for i in range(nb):
        li = local_idx[i]
        me = self_ids[i]
        kh, kl = key_hi[i], key_lo[i]
        ex = exclude[i]
        if i + 1 < nb and many:   # the next message's leaf set and table row, loading meanwhile
            nxt = local_idx[i + 1]
            prefetch(leaf, nxt * nl)
            pn = _spl(ids_hi[self_ids[i + 1]], ids_lo[self_ids[i + 1]], key_hi[i + 1],
                      key_lo[i + 1], b)
            prefetch(rt, (nxt * rows + min(pn, rows - 1)) * width)
        s_hi, s_lo = ids_hi[me], ids_lo[me]
        # ---- leaf-set range ----
        # A side covers the keys up to its farthest member, even when it is short: a
        # short side does not prove the node knows every node of that half ring (a node
        # that joined a moment ago from a neighbour's incomplete leaf set has short sides
        # too), and a node claiming a whole half ring on that belief delivers far joiners'
        # JOINs to itself and hands them a wrong leaf set. Keys beyond go by prefix /
        # rare-case routing, which delivers here when no known node is closer (so a
        # network of <= l nodes still works).
        n_small, lo_node = side_farthest(leaf, li, np.int64(0), half)
        n_large, hi_node = side_farthest(leaf, li, half, nl)
        if lo_node < 0:
            lo_node = 0
        if hi_node < 0:
            hi_node = 0
        dn_h, dn_l = _sub(s_hi, s_lo, kh, kl)                      # self - key
        up_h, up_l = _sub(kh, kl, s_hi, s_lo)                      # key - self
        lo_h, lo_l = _sub(s_hi, s_lo, ids_hi[lo_node], ids_lo[lo_node])
        hi_h, hi_l = _sub(ids_hi[hi_node], ids_lo[hi_node], s_hi, s_lo)
        cov = (n_small > 0 and not _less(lo_h, lo_l, dn_h, dn_l)) or \
            (n_large > 0 and not _less(hi_h, hi_l, up_h, up_l))
        if cov:
            best = -2  # column of cand = [self] + leaf
            bdh = np.uint64(0)
            bdl = np.uint64(0)
            bch = np.uint64(0)
            bcl = np.uint64(0)
            for j in range(nl + 1):
                c = me if j == 0 else np.int64(leaf[li, j - 1])
                if c < 0 or c == ex:
                    continue
                dh, dl = _ring(ids_hi[c], ids_lo[c], kh, kl)
                ch, cl = ids_hi[c], ids_lo[c]
                if best == -2 or _less(dh, dl, bdh, bdl) or (
                        dh == bdh and dl == bdl and _less(ch, cl, bch, bcl)):
                    best, bdh, bdl, bch, bcl = j, dh, dl, ch, cl
            if best == -2:  # no valid candidate: the last leaf column (never in practice:
                #                 the node itself is always valid)
                chosen = np.int64(leaf[li, nl - 1])
            else:
                chosen = me if best == 0 else np.int64(leaf[li, best - 1])
            out[i] = -1 if chosen == me else chosen
            continue
        # ---- prefix rule ----
        p = _spl(s_hi, s_lo, kh, kl, b)
        pr = p if p < rows else rows - 1
        entry = np.int64(-1)
        if p < rows:
            entry = np.int64(rt[li, pr, _digit(kh, kl, pr, b)])
        if entry == ex:
            entry = -1
        if entry >= 0:
            out[i] = entry
            rule[i] = 1
            continue
        # ---- rare case: any known node with as long a prefix, numerically closer ----
        rule[i] = 2
        me_h, me_l = _ring(s_hi, s_lo, kh, kl)
        found = False
        bdh = np.uint64(0)
        bdl = np.uint64(0)
        bch = np.uint64(0)
        bcl = np.uint64(0)
        pick = np.int64(-1)
        total = nl + rows * width + nm
        for j in range(total):
            if j < nl:
                c = np.int64(leaf[li, j])
            elif j < nl + rows * width:
                q = j - nl
                c = np.int64(rt[li, q // width, q % width])
            else:
                c = np.int64(nbr[li, j - nl - rows * width])
            if c < 0 or c == ex:
                continue
            ch, cl = ids_hi[c], ids_lo[c]
            if _spl(ch, cl, kh, kl, b) < p:
                continue
            dh, dl = _ring(ch, cl, kh, kl)
            if not _less(dh, dl, me_h, me_l):
                continue
            if not found or _less(dh, dl, bdh, bdl) or (
                    dh == bdh and dl == bdl and _less(ch, cl, bch, bcl)):
                found, bdh, bdl, bch, bcl, pick = True, dh, dl, ch, cl, c
        out[i] = pick if found else -1
    return out, rule


@numba.njit(cache=True)
def _nearest_key(c, me, exclude, i, hr, rdist, lan_us):
    """The sort key (delay << 31 | id; delays and ids are < 2^31) of candidate c for node
    me, or -1 for a candidate left out: -1, me itself, an id of ``exclude[i]``."""
    if c < 0 or c == me:
        return -1
    if _excluded(exclude, i, c):
        return -1
    return (host_delay(hr, rdist, lan_us, me, c) << 31) | c


@numba.njit(cache=True)
def _write_nearest(srt, ids, keys):
    """The first len(ids) distinct sorted keys into ``ids`` (and ``keys`` if not empty; a
    duplicate id has the same key); returns how many were written."""
    got = 0
    for q in range(len(srt)):
        if got == len(ids):
            break
        if q > 0 and srt[q] == srt[q - 1]:
            continue
        ids[got] = srt[q] & 0x7FFFFFFF
        if len(keys):
            keys[got] = srt[q]
        got += 1
    return got


@numba.njit(cache=True)
def nearest_column(router_dist, rows, cols):
    """For each router in ``rows``, the index into ``cols`` of its nearest router by
    ``router_dist`` (the first one among equals), i.e. ``argmin(router_dist[ix_(rows,
    cols)], axis=1)`` without building the len(rows) x len(cols) matrix. O(rows * cols)."""
    out = np.empty(len(rows), np.int64)
    for i in range(len(rows)):
        r = rows[i]
        best = 0
        bd = router_dist[r, cols[0]]
        for j in range(1, len(cols)):
            d = router_dist[r, cols[j]]
            if d < bd:
                bd = d
                best = j
        out[i] = best
    return out


@numba.njit(cache=True)
def table_row_from_group(r, qpos, gstart_q, gsize_q, dig, order, host_router, router_dist, rt,
                         q_local, base):
    """Row ``r`` of the routing tables of the queriers at sorted positions ``qpos``, each
    from the members of its own prefix group (sorted positions ``gstart_q[i]`` ..
    ``+ gsize_q[i]``): per digit other than the querier's, the member nearest by router
    distance, ties to the smaller node index -- the oracle's all-pairs method for small
    groups, written into ``rt[q_local[i], r, digit]``. O(queriers * group size)."""
    best_d = np.empty(base, np.int64)
    best_y = np.empty(base, np.int64)
    for i in range(len(qpos)):
        qp = qpos[i]
        qd = dig[qp]
        rq = host_router[order[qp]]
        for d in range(base):
            best_y[d] = -1
        for k in range(gsize_q[i]):
            yp = gstart_q[i] + k
            dy = dig[yp]
            if dy == qd:
                continue
            y = np.int64(order[yp])
            dist = np.int64(router_dist[rq, host_router[y]])
            if best_y[dy] < 0 or dist < best_d[dy] or (dist == best_d[dy] and y < best_y[dy]):
                best_d[dy] = dist
                best_y[dy] = y
        for d in range(base):
            if best_y[d] >= 0:
                rt[q_local[i], r, d] = best_y[d]


@numba.njit(cache=True)
def table_rows(rt, local_idx, my_ids, their_ids, ids_hi, ids_lo, b):
    """Rows 0..min(spl(me, them), rows - 1) of each node's table as a matrix of
    rows * 2^b entries of the table's dtype (that of the other rows a node sends: one
    compile of the packing kernels), later entries -1 (``RoutingTable.rows_for``).
    O(B * rows * 2^b)."""
    n = len(local_idx)
    nrows, width = rt.shape[1], rt.shape[2]
    out = np.full((n, nrows * width), -1, rt.dtype)
    for i in range(n):
        a, c = my_ids[i], their_ids[i]
        last = min(_spl(ids_hi[a], ids_lo[a], ids_hi[c], ids_lo[c], b), nrows - 1)
        li = local_idx[i]
        for r in range(last + 1):
            for d in range(width):
                out[i, r * width + d] = rt[li, r, d]
    return out


@numba.njit(cache=True)
def known_count(leaf, rt, li):
    """How many non-empty entries node ``li``'s leaf set and routing table hold (the
    nodes :func:`random_known` draws from). O(l + rows * 2^b)."""
    count = 0
    for j in range(leaf.shape[1]):
        count += leaf[li, j] >= 0
    for r in range(rt.shape[1]):
        for d in range(rt.shape[2]):
            count += rt[li, r, d] >= 0
    return count


@numba.njit(cache=True)
def random_known(leaf, rt, local_idx, u):
    """Per node, the entry of its leaf set then routing table (in that order, row-major)
    at valid position floor(u * count) among the non-empty ones; -1 when it knows nobody
    (``Router._random_known``). O(B * (l + rows * 2^b))."""
    n = len(local_idx)
    nl = leaf.shape[1]
    nrows, width = rt.shape[1], rt.shape[2]
    out = np.full(n, -1, np.int64)
    for i in range(n):
        li = local_idx[i]
        count = known_count(leaf, rt, li)
        if count == 0:
            continue
        pick = np.int64(np.floor(u[i] * count))
        seen = 0
        found = False
        for j in range(nl):
            if leaf[li, j] >= 0:
                if seen == pick:
                    out[i] = leaf[li, j]
                    found = True
                    break
                seen += 1
        if not found:
            for r in range(nrows):
                for d in range(width):
                    if rt[li, r, d] >= 0:
                        if seen == pick:
                            out[i] = rt[li, r, d]
                            found = True
                            break
                        seen += 1
                if found:
                    break
    return out


@numba.njit(cache=True, inline="always")
def _prefetch_nearest(members, keys, row, global_ids, cand, i, hr, rdist):
    """:func:`merge_nearest`'s next row, named to the caches before its turn
    (:func:`_prefetch_offer`). O(M + C)."""
    m = members.shape[1]
    prefetch(members, row * m)
    for q in range(0, m, 8):            # (8 keys a cache line)
        prefetch(keys, row * m + q)
    me = global_ids[row]
    for j in range(cand.shape[1]):
        c = cand[i, j]
        if c >= 0:
            prefetch_delay(hr, rdist, me, c)


@numba.njit(cache=True)
def merge_nearest(members, keys, known, local_idx, global_ids, cand, failed, hr, rdist,
                  lan_us):
    """Neighbourhood-set merge in place: row ``local_idx[i]`` of ``members`` becomes the m
    nearest by delay (ties: smaller id), nearest first, of its members and ``cand[i]``,
    leaving out -1, the node itself (``global_ids[local_idx[i]]``) and the ids of its row
    of ``failed``: the m nearest selected from the members and candidates side by side
    (one sort of their keys).

    ``keys[r]`` holds the (delay << 31 | id) key of each member of row r, ascending, -1
    beyond them, where ``known[r]``: then no member needs its delay looked up again and
    each candidate costs one delay and an insertion, O(m); a row not known yet is selected
    from scratch (O(C log C)) and becomes known. Exact because a known row is the sorted
    top m of what it was selected from and its members are never excluded ids (a node
    presumed failed is dropped from the set, which forgets the row's keys).
    Rows must be distinct (:func:`group_rows`)."""
    nb, nc = cand.shape
    m = members.shape[1]
    scratch = np.empty(m + nc, np.int64)
    many = len(members) >= PREFETCH_MIN_ROWS
    for i in range(nb):
        row = local_idx[i]
        me = np.int64(global_ids[row])
        if i + 1 < nb and many:   # the next row's set, keys and delays, loading meanwhile
            _prefetch_nearest(members, keys, local_idx[i + 1], global_ids, cand, i + 1, hr,
                              rdist)
        if not known[row]:
            k = 0
            for j in range(m + nc):
                c = np.int64(members[row, j]) if j < m else np.int64(cand[i, j - m])
                key = _nearest_key(c, me, failed, row, hr, rdist, lan_us)
                if key >= 0:
                    scratch[k] = key
                    k += 1
            got = _write_nearest(np.sort(scratch[:k]), members[row], keys[row])
            for q in range(got, m):
                keys[row, q] = -1
                members[row, q] = -1
            known[row] = True
            continue
        cnt = 0
        while cnt < m and keys[row, cnt] >= 0:
            cnt += 1
        for j in range(nc):
            key = _nearest_key(np.int64(cand[i, j]), me, failed, row, hr, rdist,
                               lan_us)
            if key < 0:
                continue
            c = key & 0x7FFFFFFF
            if cnt == m and key >= keys[row, m - 1]:
                continue                 # no nearer than the farthest (or it is that one)
            pos = cnt
            while pos > 0 and keys[row, pos - 1] > key:
                pos -= 1
            if pos > 0 and keys[row, pos - 1] == key:
                continue                 # a member already
            last = cnt if cnt < m else m - 1
            for q in range(last, pos, -1):
                keys[row, q] = keys[row, q - 1]
                members[row, q] = members[row, q - 1]
            keys[row, pos] = key
            members[row, pos] = c
            if cnt < m:
                cnt += 1
    return members


@numba.njit(cache=True, inline="always")
def _prefetch_leaf_row(members, r, cand, i, ids_hi, ids_lo):
    """:func:`merge_leaf_sets`' next row, named to the caches before its turn
    (:func:`_prefetch_offer`): leaf set ``members[r]`` and the ids of the candidates
    ``cand[i]``. O(C)."""
    prefetch(members, r * members.shape[1])
    for j in range(cand.shape[1]):
        c = cand[i, j]
        if c >= 0:
            prefetch(ids_hi, c)
            prefetch(ids_lo, c)


@numba.njit(cache=True)
def merge_leaf_sets(members, heard, local_idx, cand, now, global_ids, ids_hi, ids_lo, half,
                    failed):
    """The leaf-set merge of :func:`learn`, in place: row ``local_idx[i]`` (distinct) of
    ``members`` becomes the leaf set :func:`_select_row` selects from the row's members and
    ``cand[i]``, the ids of the node's row of ``failed`` left out. Its keep-alive clocks
    follow their nodes (a member's from its first slot in the old row), a newcomer's at
    ``now[i]`` -- every row's when any row changed, none otherwise (an empty slot's clock
    then takes the first empty slot's; it is never read). Returns (changed bool[B], added
    int32[B, l]: the members of each new row not in its old one, else -1 -- or no rows
    at all when no row could change, so none changed).
    O(B * (l + C) * half + B * l^2)."""
    nb = len(local_idx)
    nl = members.shape[1]
    nc = cand.shape[1]
    changed = np.zeros(nb, np.bool_)
    # the first row that can gain (most merges have none: then nothing more is made, as
    # each array is an allocation, and ``added`` has no rows)
    many = len(members) >= PREFETCH_MIN_ROWS
    i0 = 0
    while i0 < nb:
        if i0 + 1 < nb and many:
            _prefetch_leaf_row(members, local_idx[i0 + 1], cand, i0 + 1, ids_hi, ids_lo)
        if _row_gains(members, local_idx[i0], cand, i0, np.int64(global_ids[local_idx[i0]]),
                      ids_hi, ids_lo, half, failed):
            break
        i0 += 1
    if i0 == nb:
        return changed, members[:0]
    rows = np.full((2, nb, nl), -1, np.int32)     # the selections and what they add
    new, added = rows[0], rows[1]
    dist = np.empty((4, half), np.uint64)
    # a row's old members, then its candidates; then a row's new clocks
    ints = np.empty(2 * nl + nc, np.int64)
    both, clocks = ints[:nl + nc], ints[nl + nc:]
    any_changed = False
    for i in range(i0, nb):
        r = local_idx[i]
        me = np.int64(global_ids[r])
        if i + 1 < nb and many:
            _prefetch_leaf_row(members, local_idx[i + 1], cand, i + 1, ids_hi, ids_lo)
        if i > i0 and not _row_gains(members, r, cand, i, me, ids_hi, ids_lo, half, failed):
            continue    # (most merges: the row is its own selection; ``new[i]`` unread)
        for j in range(nl):
            both[j] = members[r, j]
        for j in range(nc):
            both[nl + j] = cand[i, j]
        _select_row(new, i, dist, half, both, me, ids_hi, ids_lo, failed, r)
        for j in range(nl):
            if new[i, j] != members[r, j]:
                changed[i] = True
                any_changed = True
                break
        if not changed[i]:
            continue    # (most merges: then nothing is added)
        for j in range(nl):
            x = new[i, j]
            known = False
            for q in range(nl):
                if members[r, q] == x:
                    known = True
                    break
            if not known:
                added[i, j] = x
    if any_changed:
        for i in range(nb):
            r = local_idx[i]
            if not changed[i]:
                # its members keep their clocks (they are distinct), its empty slots take
                # the first empty slot's
                first = 0
                while first < nl and members[r, first] >= 0:
                    first += 1
                for j in range(first + 1, nl):
                    if members[r, j] < 0:
                        heard[r, j] = heard[r, first]
                continue
            for j in range(nl):     # from the old row, before it is written
                src = -1
                for q in range(nl):
                    if members[r, q] == new[i, j]:
                        src = q
                        break
                clocks[j] = now[i] if src < 0 else heard[r, src]
            for j in range(nl):
                members[r, j] = new[i, j]
                heard[r, j] = clocks[j]
    return changed, added


@numba.njit(cache=True)
def _row_gains(members, r, cand, i, me, ids_hi, ids_lo, half, failed):
    """Whether :func:`_select_row` could make leaf set ``members[r]`` (of node ``me``)
    anything but itself from it and the candidates ``cand[i]``: False when none of its
    ids is one to leave out (row r of ``failed``) and no candidate that is not a member
    goes on a side with room or is nearer than that side's farthest member. A leaf set is
    always in the form the selection gives (each side its nearest ids, nearest first, then
    its holes; a failure closes the holes up), so it is then its own selection. Loads the
    ids of the candidates that are not members and of the sides' farthest members only.
    O(C * l)."""
    nl = members.shape[1]
    if _any_excluded(failed, r):
        return True
    s_hi, s_lo = ids_hi[me], ids_lo[me]
    ns = 0
    while ns < half and members[r, ns] >= 0:
        ns += 1
    nu = 0
    while nu < half and members[r, half + nu] >= 0:
        nu += 1
    far_dh = far_dl = far_uh = far_ul = np.uint64(0)
    if ns == half:
        f = np.int64(members[r, half - 1])
        _, far_dh, far_dl = on_smaller_side(s_hi, s_lo, ids_hi[f], ids_lo[f])
    if nu == half:
        f = np.int64(members[r, nl - 1])
        far_uh, far_ul = _sub(ids_hi[f], ids_lo[f], s_hi, s_lo)
    for j in range(cand.shape[1]):
        c = np.int64(cand[i, j])
        if c < 0 or c == me:
            continue
        member = False
        for q in range(nl):
            if members[r, q] == c:
                member = True
                break
        if member:
            continue
        down, dh, dl = on_smaller_side(s_hi, s_lo, ids_hi[c], ids_lo[c])
        if down:
            if ns < half or _less(dh, dl, far_dh, far_dl):
                return True
        else:
            uh, ul = _sub(ids_hi[c], ids_lo[c], s_hi, s_lo)
            if nu < half or _less(uh, ul, far_uh, far_ul):
                return True
    return False


@numba.njit(cache=True)
def forget_failed(ids, local_idx, senders):
    """Empty every slot of row ``local_idx[i]`` of ``ids`` holding ``senders[i]``
    (``FailedNodes.forget``: a node heard from directly is alive). O(B * memory)."""
    m = ids.shape[1]
    for i in range(len(local_idx)):
        r = local_idx[i]
        s = senders[i]
        for j in range(m):
            if ids[r, j] == s:
                ids[r, j] = -1


@numba.njit(cache=True)
def keepalive_heard(members, heard, li, src, time):
    """Keep-alives from ``src`` at local nodes ``li``: every leaf-set slot holding the
    sender has ``heard`` raised to the message's time (the largest time where rows repeat,
    as ``np.maximum.at``); returns the mask of rows whose sender is in no slot of the
    receiver (a stranger). O(n * l)."""
    n, w = len(li), members.shape[1]
    stranger = np.ones(n, np.bool_)
    for i in range(n):
        x = li[i]
        for c in range(w):
            if members[x, c] == src[i]:
                stranger[i] = False
                if time[i] > heard[x, c]:
                    heard[x, c] = time[i]
    return stranger


# what a routing step does with each message (route_step's kinds)
HERE_OWN, HERE_APP, ON_OWN, ON_APP = 0, 1, 2, 3


@numba.njit(cache=True)
def route_step(m, li, rt, leaf, nbr, ids_hi, ids_lo, b, lookup_type, own_lo, own_hi):
    """One routing step for routed records ``m`` at their local nodes ``li``: (next hop
    int64[n] -- -1 to deliver here --, kind int8[n], count of each kind int64[4]). Kinds:
    HERE_OWN / HERE_APP (deliver, Pastry's own type in own_lo..own_hi or the
    application's), ON_OWN / ON_APP (forward). A ``lookup_type`` message routes as if its
    origin were absent (:func:`next_hop`'s ``exclude``). O(n * l) on the common paths."""
    n = len(m)
    ints = np.empty((2, n), np.int64)      # (the int64 columns, then the uint64 ones)
    keys = np.empty((2, n), np.uint64)
    self_ids, exclude = ints[0], ints[1]
    key_hi, key_lo = keys[0], keys[1]
    for i in range(n):
        self_ids[i] = m[i]["dst"]
        key_hi[i] = m[i]["key_hi"]
        key_lo[i] = m[i]["key_lo"]
        exclude[i] = m[i]["origin"] if m[i]["type"] == lookup_type else -1
    nxt, _rule = next_hop(rt, leaf, nbr, li, self_ids, key_hi, key_lo, ids_hi, ids_lo, b,
                          exclude)
    kind = np.empty(n, np.int8)
    counts = np.zeros(4, np.int64)
    for i in range(n):
        own = own_lo <= m[i]["type"] <= own_hi
        k = (HERE_OWN if own else HERE_APP) if nxt[i] < 0 else (ON_OWN if own else ON_APP)
        kind[i] = k
        counts[k] += 1
    return nxt, kind, counts


# the `route` log's record: one row per routed message delivered at its key's node
ROUTE_LOG_DTYPE = np.dtype([("origin", np.int32), ("root", np.int32), ("type", np.int16),
                            ("start", np.int64), ("end", np.int64), ("hops", np.int16),
                            ("path_us", np.int64)])


@numba.njit(cache=True)
def route_log(m, kind, out):
    """The `route` log's rows of the routed records ``m`` delivered here (``kind`` <=
    HERE_APP), written in one pass into ``out`` (``ROUTE_LOG_DTYPE``, one row per such
    record): origin, root = dst, type, start = end - path_us, end = time, hops, path_us.
    O(n)."""
    j = 0
    for i in range(len(m)):
        if kind[i] > HERE_APP:
            continue
        r = m[i]
        out[j]["origin"] = r["origin"]
        out[j]["root"] = r["dst"]
        out[j]["type"] = r["type"]
        out[j]["end"] = r["time"]
        out[j]["path_us"] = r["path_us"]
        out[j]["start"] = r["time"] - r["path_us"]
        out[j]["hops"] = r["hops"]
        j += 1


@numba.njit(cache=True)
def hop_on(out, hop, nh, host_router, router_dist, lan_us):
    """Routed records ``out`` (the router's copy, at out.dst) sent one hop on to ``nh``;
    ``hop`` is a copy of ``out`` made by the caller (numpy copies whole records, a compiled
    record copy goes field by field). ``out`` advances in place (src = the node it is at,
    dst = nh, hops + 1, path_us + latency) and ``hop`` becomes the hop as sent: the same,
    with sent = the arrival time at this node, time = sent + latency, seq / pay_off /
    pay_len 0. Returns the latencies (int64, ``host_delay``). O(n)."""
    n = len(out)
    lat = np.empty(n, np.int64)
    for i in range(n):
        a = np.int64(out[i]["dst"])
        b = nh[i]
        d = host_delay(host_router, router_dist, lan_us, a, b)
        for r in (out[i], hop[i]):
            r["src"] = a
            r["dst"] = b
            r["hops"] += 1
            r["path_us"] += d
        hop[i]["sent"] = out[i]["time"]
        hop[i]["time"] = out[i]["time"] + d
        hop[i]["seq"] = 0
        hop[i]["pay_off"] = 0
        hop[i]["pay_len"] = 0
        lat[i] = d
    return lat


@numba.njit(cache=True)
def _mix(h, v):
    """One field into a hop identity: (h ^ uint64(int64(v))) * MIX, then h ^= h >> 29."""
    h = (h ^ np.uint64(np.int64(v))) * np.uint64(0x9E3779B97F4A7C15)
    return h ^ (h >> np.uint64(29))


@numba.njit(cache=True)
def hop_key(src, dst, origin, type_, hops, key_hi, key_lo):
    """The 64-bit identity of one routed hop, from its fields as int64 (the fields both
    ends see: a collision would need two hops of one sender to one receiver with different
    keys to hash equal, ~2^-64): h = 0, then each field in this order mixed in by
    :func:`_mix` (wrapping uint64). O(1)."""
    h = _mix(np.uint64(0), src)
    h = _mix(h, dst)
    h = _mix(h, origin)
    h = _mix(h, type_)
    h = _mix(h, hops)
    h = _mix(h, key_hi)
    return _mix(h, key_lo)


@numba.njit(cache=True)
def hops_due(pending, deadline, m):
    """ACK_TIMER records ``m`` against the pending hops: hop i is due when a timer row of
    its sender has a time at or past its deadline (``deadline <= t_of[sender]``, t_of the
    latest timer time of each node, as ``HopAcks.on_timer`` computed it). Returns (due mask,
    count). O(len(pending) x len(m)): a few timer rows a cell, no per-node array."""
    n = len(pending)
    due = np.zeros(n, np.bool_)
    k = 0
    for i in range(n):
        src = pending[i]["src"]
        for j in range(len(m)):
            if m[j]["dst"] == src and deadline[i] <= m[j]["time"]:
                due[i] = True
                k += 1
                break
    return due, k


@numba.njit(cache=True)
def acked_pending(identity, acks):
    """Which pending hops the acknowledgements clear, as a multiset: k acks of one
    identity clear its k earliest pending copies (in pending order). Returns the mask of
    pending hops to keep. O(len(acks) x len(identity)): a handful of acks a cell against
    the hops in flight."""
    keep = np.ones(len(identity), np.bool_)
    for a in range(len(acks)):
        h = acks[a]
        for p in range(len(identity)):
            if keep[p] and identity[p] == h:
                keep[p] = False
                break
    return keep


@numba.njit(cache=True)
def row_contains(members, li, ids):
    """Whether ``ids[i]`` is in row ``li[i]`` of ``members`` (bool[n]): ``(members[li] ==
    ids[:, None]).any(axis=1)`` without the row copies. O(n * width)."""
    n = len(li)
    out = np.zeros(n, np.bool_)
    w = members.shape[1]
    for i in range(n):
        x = ids[i]
        r = li[i]
        for j in range(w):
            if members[r, j] == x:
                out[i] = True
                break
    return out


@numba.njit(cache=True)
def learn(rt, members, heard, failed, nbr, nbr_keys, nbr_known, global_ids, li, cand, now,
          ids_hi, ids_lo, b, half, hr, rdist, lan_us, senders, forget, nbrs):
    """``PastryNodes.learn`` in one compiled call: what the parts' kernels do one after the
    other, without the array glue between them (a handler learns of a few nodes per call,
    where that glue cost more than the work):

    1. ``forget``: each node ``li[i]`` heard from ``senders[i]`` directly, out of its
       failed memory (:func:`forget_failed`);
    2. candidates ``cand[i]`` offered to the routing table of ``li[i]`` (:func:`insert_table`,
       the node's failed ids left out);
    3. the rows of equal ``li`` combined (:func:`group_rows`) and merged into the leaf sets
       (:func:`merge_leaf_sets`, clocks at the latest ``now`` of the node's rows);
    4. ``nbrs``: and into the neighbourhood sets (:func:`merge_nearest` with the set's
       cached keys ``nbr_keys`` / ``nbr_known``).

    Returns (probes, distinct sorted li, changed bool[U], added int32[U, l] -- no rows
    when no row could change --, latest ``now`` of each one's rows int64[U]).
    O(B * C * (memory + half + M) + B log B)."""
    if forget:
        forget_failed(failed, li, senders)
    probes = insert_table(rt, li, global_ids, cand, ids_hi, ids_lo, b, hr, rdist, lan_us, failed)
    if _increasing(li):
        # rows of distinct nodes, in order (most calls: one row): grouping would return
        # them as they are, so they are used as they are (no copies to allocate)
        uli, grouped, tmax = li, cand, now
    else:
        uli, grouped, tmax = group_rows(li, cand, now, True)
    changed, added = merge_leaf_sets(members, heard, uli, grouped, tmax, global_ids, ids_hi,
                                     ids_lo, half, failed)
    if nbrs:
        merge_nearest(nbr, nbr_keys, nbr_known, uli, global_ids, grouped, failed, hr, rdist,
                      lan_us)
    return probes, uli, changed, added, tmax


@numba.njit(cache=True)
def _increasing(keys):
    """Whether ``keys`` is strictly increasing (distinct and sorted). O(n)."""
    for i in range(1, len(keys)):
        if keys[i] <= keys[i - 1]:
            return False
    return True


@numba.njit(cache=True)
def sender_and_payload(m, payload):
    """Each record's payload ids as a row of an int64 matrix, -1 padded to the longest
    segment, with its sender appended as one more column (``messages.sender_and_payload``:
    the candidates a receiver offers its tables). O(rows * longest)."""
    n = len(m)
    width = 0
    for i in range(n):
        if m[i]["pay_len"] > width:
            width = m[i]["pay_len"]
    out = np.full((n, width + 1), -1, np.int64)
    for i in range(n):
        o = m[i]["pay_off"]
        if len(payload):   # (no payload at all: -1 rows of the longest segment's width)
            for j in range(m[i]["pay_len"]):
                out[i, j] = payload[o + j]
        out[i, width] = m[i]["src"]
    return out


@numba.njit(cache=True)
def rows_and(table, li, last):
    """Row ``li[i]`` of ``table`` with ``last[i]`` appended, as a new int32 matrix (a
    LEAF_REPLY's payload: the leaf set and the sender). O(len(li) * width)."""
    n, w = len(li), table.shape[1]
    out = np.empty((n, w + 1), np.int32)
    for i in range(n):
        for j in range(w):
            out[i, j] = table[li[i], j]
        out[i, w] = last[i]
    return out


@numba.njit(cache=True)
def newly_joined(li, t, joined, nbrs_got, rows_expected, rows_got):
    """The distinct nodes among ``li`` that have every join piece in and were not joined:
    marked joined in place and returned as (sorted local indices int64, the ``t`` of each
    one's first row int64). O(n log n)."""
    u, first = unique_first(li)
    out_li = np.empty(len(u), np.int64)
    out_t = np.empty(len(u), np.int64)
    k = 0
    for q in range(len(u)):
        x = u[q]
        if (not joined[x]) and nbrs_got[x] and rows_expected[x] >= 0 and \
                rows_got[x] >= rows_expected[x]:
            out_li[k] = x
            out_t[k] = t[first[q]]
            k += 1
    for q in range(k):
        joined[out_li[q]] = True
    return out_li[:k], out_t[:k]
