"""Compiled tree-state look-ups (numba, cached): what Scribe's handlers ask of
:class:`~.tree.TreeState` for a few dozen messages at a time.

Each is the exact equivalent of the numpy sequence it replaced in ``TreeState`` -- same
values, same order, the same row written last where rows repeat -- in one call instead of
5-15 small numpy calls (docs/ARCHITECTURE.md, "Compiled kernels"). Slots are found by the
key ``local_idx * n_groups + group``, child entries by ``slot * n_nodes + child``, in
:class:`~.keyindex.KeyIndex` arrays.
"""

from __future__ import annotations

import numba
import numpy as np

from .keyindex import key_value, ranges_where


@numba.njit(cache=True)
def find_slots(ix, local_idx, groups, n_groups, active, only_active):
    """Slot of each (local node, group) (int32), -1 where the node has none (or, with
    ``only_active``, none that is active); ix: the slot index's arrays. O(q)."""
    out = np.empty(len(local_idx), np.int32)
    for i in range(len(local_idx)):
        s = key_value(ix, np.int64(local_idx[i]) * n_groups + np.int64(groups[i]))
        if only_active and s >= 0 and not active[s]:
            s = -1
        out[i] = s
    return out


@numba.njit(cache=True)
def all_set(flags, idx):
    """Whether flags[i] holds for every i of idx (``flags[idx].all()`` without the
    temporary); False where an index is negative (a node not on this shard: the caller's
    general path reports it). O(len(idx))."""
    for i in idx:
        if i < 0 or not flags[i]:
            return False
    return True


@numba.njit(cache=True)
def heard_from_parent(ix, local_idx, groups, n_groups, active, parent, senders, times,
                      last_heard):
    """Rows whose sender is the parent of the receiving node's active slot for the group;
    their time becomes the slot's ``last_heard`` (in row order: the last row wins).
    O(q)."""
    ok = np.zeros(len(local_idx), np.bool_)
    for i in range(len(local_idx)):
        s = key_value(ix, np.int64(local_idx[i]) * n_groups + np.int64(groups[i]))
        if s >= 0 and active[s] and parent[s] == senders[i]:
            ok[i] = True
            last_heard[s] = times[i]
    return ok


@numba.njit(cache=True)
def tick_plan(six, eix, local_idx, times, n_groups, n_nodes, active, root, parent, last_heard,
              last_sent, valid, refresh, period, silent_after, stale_after):
    """A cell's TICKs in the common case, in one pass: no parent silent for longer than
    ``silent_after`` and no child entry older than ``stale_after`` (else nothing is written
    and ``ok`` is False: the caller takes the general path, which re-joins and expires).

    Returns (ok, nodes, now_n, qi, s, refresh_rows, hb_rows, hb_entries): the ticking local
    nodes (sorted, as np.unique) and the time of each one's first TICK row; their active
    slots (row qi into nodes, slot s, in group order, as ``TreeState.slots_of_nodes``); the
    slot rows that refresh their entry at the parent; the (slot row, child entry) pairs
    that get a heartbeat (no data sent to them within ``period``). Written, as
    ``TreeRepair`` did in numpy: a slot's unset ``last_heard`` becomes its tick time, and
    ``last_sent`` the tick time of every slot that sends heartbeats. O(q + children).
    """
    n = len(local_idx)
    order = np.argsort(local_idx, kind="mergesort")
    nodes = np.empty(n, np.int64)
    now_n = np.empty(n, np.int64)
    k = 0
    for j in range(n):
        i = order[j]
        if k == 0 or local_idx[i] != nodes[k - 1]:
            nodes[k] = local_idx[i]
            now_n[k] = times[i]
            k += 1
    nodes, now_n = nodes[:k], now_n[:k]
    qi, s = ranges_where(six, nodes, active)
    m = len(s)
    ci, e = ranges_where(eix, s.astype(np.int64), valid)
    empty = np.empty(0, np.int64)
    for r in range(m):
        lh = last_heard[s[r]]
        if lh >= 0 and not root[s[r]] and now_n[qi[r]] - lh > silent_after:
            return False, nodes, now_n, qi, s, empty, empty, e[:0]
    for j in range(len(e)):
        if now_n[qi[ci[j]]] - refresh[e[j]] > stale_after:
            return False, nodes, now_n, qi, s, empty, empty, e[:0]
    ref = np.empty(m, np.int64)
    nr = 0
    for r in range(m):
        sr = s[r]
        if last_heard[sr] < 0:
            last_heard[sr] = now_n[qi[r]]
        if not root[sr] and parent[sr] >= 0:
            ref[nr] = r
            nr += 1
    quiet = np.empty(len(e), np.bool_)
    nh = 0
    for j in range(len(e)):
        r = ci[j]
        quiet[j] = now_n[qi[r]] - last_sent[s[r]] >= period
        nh += quiet[j]
    hb_rows = np.empty(nh, np.int64)
    hb_entries = np.empty(nh, e.dtype)
    h = 0
    for j in range(len(e)):
        if quiet[j]:
            hb_rows[h] = ci[j]
            hb_entries[h] = e[j]
            h += 1
    for j in range(nh):
        r = hb_rows[j]
        last_sent[s[r]] = now_n[qi[r]]
    return True, nodes, now_n, qi, s, ref[:nr], hb_rows, hb_entries


@numba.njit(cache=True)
def data_plan(six, eix, local_idx, groups, senders, times, total_hops, seqno, n_groups, n_nodes,
              max_hops, active, parent, member, last_heard, last_seq, last_sent, valid):
    """A cell's DATA copies without the reliable layer, in one pass, as ``Dissemination``
    did in numpy: each row's active slot (rows without one are counted), ``last_heard``
    set where the sender is the slot's parent, copies past ``max_hops`` dropped (counted),
    and for the rest ``last_seq`` raised to the copy's seqno (the last row of a slot
    written last, from the values before the cell), the rows of members (to log a
    delivery) and one (row, child entry) pair per child (``last_sent`` set to the row's
    time). Returns (hit rows, their slots, no-state count, hop-limit count, member rows
    among the hits, child pairs' hit row, child entries). O(q + children)."""
    n = len(local_idx)
    s = np.empty(n, np.int64)
    no_state = 0
    looping = 0
    hit = np.empty(n, np.int64)
    nh = 0
    for i in range(n):
        v = key_value(six, np.int64(local_idx[i]) * n_groups + np.int64(groups[i]))
        if v >= 0 and not active[v]:
            v = -1
        s[i] = v
        if v < 0:
            no_state += 1
            continue
        if parent[v] == senders[i]:
            last_heard[v] = times[i]
        if total_hops[i] > max_hops:
            looping += 1
            continue
        hit[nh] = i
        nh += 1
    hit = hit[:nh]
    hs = np.empty(nh, np.int64)
    raised = np.empty(nh, np.int64)
    for j in range(nh):
        v = s[hit[j]]
        hs[j] = v
        raised[j] = max(last_seq[v], seqno[hit[j]])
    nm = 0
    for j in range(nh):
        last_seq[hs[j]] = raised[j]
        nm += member[hs[j]]
    mem = np.empty(nm, np.int64)
    k = 0
    for j in range(nh):
        if member[hs[j]]:
            mem[k] = j
            k += 1
    qi, e = ranges_where(eix, hs, valid)
    for j in range(len(qi)):
        last_sent[hs[qi[j]]] = times[hit[qi[j]]]
    return hit, hs, no_state, looping, mem, qi, e


@numba.njit(cache=True)
def refresh_known(six, eix, local_idx, groups, children, creds, times, n_groups, n_nodes, active,
                  slot_node, n_children, node_children, e_slot, e_child, e_valid, e_cred,
                  e_refresh):
    """A cell of REFRESHes whose (slot, child) entries all exist already (the common
    case; else nothing is written and ``ok`` is False: the caller's general path inserts
    them). As ``TreeState.add_children`` on the rows with an active slot: every row's
    entry takes its slot, child, credential and time (the last row of an entry written
    last) and becomes valid; an entry that was not valid counts as a new child (once, at
    its first row). Returns (ok, rows with an active slot, their slots, new-child mask
    over those rows). O(q)."""
    n = len(local_idx)
    s = np.empty(n, np.int64)
    e = np.empty(n, np.int64)
    live = np.empty(n, np.int64)
    k = 0
    for i in range(n):
        v = key_value(six, np.int64(local_idx[i]) * n_groups + np.int64(groups[i]))
        if v < 0 or not active[v]:
            continue
        x = key_value(eix, np.int64(v) * n_nodes + children[i])
        if x < 0:
            return False, live[:0], s[:0], np.zeros(0, np.bool_)
        live[k] = i
        s[k] = v
        e[k] = x
        k += 1
    live, s, e = live[:k], s[:k], e[:k]
    new = np.zeros(k, np.bool_)
    order = np.argsort(e, kind="mergesort")    # stable: a run starts at its first row
    for p in range(k):
        j = order[p]
        if (p == 0 or e[order[p - 1]] != e[j]) and not e_valid[e[j]]:
            new[j] = True
    for j in range(k):
        x = e[j]
        i = live[j]
        e_slot[x] = s[j]
        e_child[x] = children[i]
        e_valid[x] = True
        e_cred[x] = creds[i]
        e_refresh[x] = times[i]
    for j in range(k):
        if new[j]:
            n_children[s[j]] += 1
            node_children[slot_node[s[j]]] += 1
    return True, live, s, new


@numba.njit(cache=True)
def delivery_columns(hit, mem, group, dst, origin, publish, time, hops, seqno):
    """The ``delivery`` log columns of the member rows of a DATA cell (``data_plan``'s hit
    rows ``hit`` and member positions ``mem`` among them), from the cell's record columns,
    in the log's types (group, member, source int32; publish_time, time, seqno int64;
    hops int16). O(len(mem))."""
    n = len(mem)
    g = np.empty(n, np.int32)
    who = np.empty(n, np.int32)
    src = np.empty(n, np.int32)
    pub = np.empty(n, np.int64)
    t = np.empty(n, np.int64)
    h = np.empty(n, np.int16)
    sq = np.empty(n, np.int64)
    for k in range(n):
        r = hit[mem[k]]
        g[k] = group[r]
        who[k] = dst[r]
        src[k] = origin[r]
        pub[k] = publish[r]
        t[k] = time[r]
        h[k] = hops[r]
        sq[k] = seqno[r]
    return g, who, src, pub, t, h, sq


@numba.njit(cache=True)
def data_copies(hit, qi, e, child, dst, group, origin, time, publish, seqno, hops, key_hi,
                key_lo, o_src, o_dst, o_sent, o_group, o_key_hi, o_key_lo, o_origin,
                o_publish, o_seqno, o_hops):
    """The DATA copies of a cell written straight into their (zeroed) records' columns
    ``o_*``: copy j goes from the node of hit row ``hit[qi[j]]`` to child entry ``e[j]``,
    sent when that copy arrived, one tree hop further, with its group's key. Returns the
    first copy addressed to node -1 (-1: none; a bug upstream). O(len(qi))."""
    for j in range(len(qi)):
        r = hit[qi[j]]
        c = child[e[j]]
        if c < 0:
            return j
        g = group[r]
        o_src[j] = dst[r]
        o_dst[j] = c
        o_sent[j] = time[r]
        o_group[j] = g
        o_key_hi[j] = key_hi[g]
        o_key_lo[j] = key_lo[g]
        o_origin[j] = origin[r]
        o_publish[j] = publish[r]
        o_seqno[j] = seqno[r]
        o_hops[j] = hops[r] + 1
    return -1


@numba.njit(cache=True)
def tick_messages(node_ids, nodes, now_n, qi, s, ref, hb, hb_e, group, parent, join_cred,
                  child, key_hi, key_lo, r_src, r_dst, r_sent, r_group, r_key_hi, r_key_lo,
                  r_cred, h_src, h_dst, h_sent, h_group, h_key_hi, h_key_lo):
    """The messages of a common-case TICK cell (``tick_plan``'s slot rows ``qi``/``s``,
    refreshing rows ``ref``, heartbeat pairs ``hb``/``hb_e``) written straight into their
    (zeroed) records' columns: a REFRESH from each refreshing slot's node to its parent
    carrying the slot's JOIN credential (``r_*``), a HEARTBEAT to each quiet child
    (``h_*``), sent at the node's tick time with the group's key. ``node_ids``: global id
    of each local node. Returns the first message addressed to node -1 (refreshes first,
    then heartbeats at len(ref) + j; -1: none -- a bug upstream). O(len(ref) + len(hb))."""
    for j in range(len(ref)):
        r = ref[j]
        v = s[r]
        p = parent[v]
        if p < 0:
            return j
        g = group[v]
        r_src[j] = node_ids[nodes[qi[r]]]
        r_dst[j] = p
        r_sent[j] = now_n[qi[r]]
        r_group[j] = g
        r_key_hi[j] = key_hi[g]
        r_key_lo[j] = key_lo[g]
        r_cred[j] = join_cred[v]
    for j in range(len(hb)):
        r = hb[j]
        c = child[hb_e[j]]
        if c < 0:
            return len(ref) + j
        g = group[s[r]]
        h_src[j] = node_ids[nodes[qi[r]]]
        h_dst[j] = c
        h_sent[j] = now_n[qi[r]]
        h_group[j] = g
        h_key_hi[j] = key_hi[g]
        h_key_lo[j] = key_lo[g]
    return -1
