"""Compiled tree-state look-ups (numba, cached): what Scribe's handlers ask of
:class:`~.tree.TreeState` for a few dozen messages at a time.

Each gives what the vectorized form in ``TreeState`` gives -- same values, same order,
the same row written last where rows repeat -- in one call instead of 5-15 small numpy
calls (docs/ARCHITECTURE.md, "Compiled kernels"). Slots are found by the
key ``local_idx * n_groups + group``, child entries by ``slot * n_nodes + child``, in
:class:`~.keyindex.KeyIndex` arrays.
"""

from __future__ import annotations

import numba
import numpy as np

from emulator.kernels import unique_first

from .keyindex import chain_first, key_value, ranges_where


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
def active_slot(six, n_groups, active, local, g):
    """The active slot of (local node, group g), else -1 (``find_slots`` for one pair,
    only active). O(1) expected."""
    v = key_value(six, np.int64(local) * n_groups + np.int64(g))
    return np.int64(v) if v >= 0 and active[v] else np.int64(-1)


@numba.njit(cache=True)
def write_children(e, slots, children, creds, now, valid, e_slot, e_child, e_cred, e_refresh,
                   n_children, node_children, slot_node):
    """Child entries ``e`` (one per row, from the entry index) become (slot, child) with
    the row's credential and refresh time, valid; a row whose entry was not valid before
    the call, and is its entry's first row, is a new child: its slot's and node's child
    counts go up. Returns that mask. Row by row: an entry's later rows find it valid (its
    first row made it so) and write over it, as numpy's assignment in row order. O(q)."""
    newly = np.zeros(len(e), np.bool_)
    for i in range(len(e)):
        newly[i] = write_child(np.int64(e[i]), np.int64(slots[i]), children[i], creds[i],
                               now[i], valid, e_slot, e_child, e_cred, e_refresh, n_children,
                               node_children, slot_node)
    return newly


@numba.njit(cache=True)
def write_child(x, slot, child, cred, now, valid, e_slot, e_child, e_cred, e_refresh,
                n_children, node_children, slot_node):
    """Child entry ``x`` becomes (slot, child) with the credential and refresh time,
    valid; an entry that was not valid is a new child: its slot's and node's child counts
    go up. Returns whether it was new. Every compiled write of a child entry is this
    (adoption by a JOIN, a REFRESH). O(1)."""
    new = not valid[x]
    if new:
        n_children[slot] += 1
        node_children[slot_node[slot]] += 1
    e_slot[x] = slot
    e_child[x] = child
    valid[x] = True
    e_cred[x] = cred
    e_refresh[x] = now
    return new


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
        ok[i] = heard_parent(s, senders[i], times[i], active, parent, last_heard)
    return ok


@numba.njit(cache=True)
def heard_parent(s, sender, time, active, parent, last_heard):
    """Whether ``sender`` is the parent of active slot ``s`` (-1: none); if so, ``time``
    becomes the slot's ``last_heard`` (its parent is not silent). Every compiled check of a
    message from the parent (heartbeats, data) is this. O(1)."""
    if s >= 0 and active[s] and parent[s] == sender:
        last_heard[s] = time
        return True
    return False


@numba.njit(cache=True)
def ticking_nodes(local_idx, times):
    """The distinct nodes of a TICK cell, sorted (int64), and the time of each one's first
    row. O(q log q)."""
    vals, first = unique_first(local_idx)
    nodes = vals.astype(np.int64)
    now_n = np.empty(len(first), np.int64)
    for k in range(len(first)):
        now_n[k] = times[first[k]]
    return nodes, now_n


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
    ``TreeRepair``'s general path writes them: a slot's unset ``last_heard`` becomes its
    tick time, and ``last_sent`` the tick time of every slot that sends heartbeats.
    O(q + children).
    """
    nodes, now_n, qi, s, ci, e = tick_slots(six, eix, local_idx, times, active, valid)
    m = len(s)
    empty = np.empty(0, np.int64)
    if not tick_is_common(now_n, qi, s, ci, e, root, last_heard, refresh, silent_after,
                          stale_after):
        return False, nodes, now_n, qi, s, empty, empty, e[:0]
    start_clocks(now_n, qi, s, last_heard)
    ref = np.empty(m, np.int64)
    nr = 0
    for r in range(m):
        sr = s[r]
        if not root[sr] and parent[sr] >= 0:
            ref[nr] = r
            nr += 1
    quiet = tick_quiet(now_n, qi, s, ci, e, last_sent, period)
    nh = 0
    for j in range(len(e)):
        nh += quiet[j]
    hb_rows = np.empty(nh, np.int64)
    hb_entries = np.empty(nh, e.dtype)
    h = 0
    for j in range(len(e)):
        if quiet[j]:
            hb_rows[h] = ci[j]
            hb_entries[h] = e[j]
            h += 1
    mark_sent(now_n, qi, s, ci, quiet, last_sent)
    return True, nodes, now_n, qi, s, ref[:nr], hb_rows, hb_entries


# ---- the tick rule, shared by tick_plan and handler_kernels.on_tick --------------------
@numba.njit(cache=True)
def tick_slots(six, eix, local_idx, times, active, valid):
    """A TICK cell's nodes (sorted) and the time of each one's first row; their active
    slots (row qi into nodes, slot s, in group order); those slots' valid child entries
    (row ci into s, entry e). O(q log q + slots + children)."""
    nodes, now_n = ticking_nodes(local_idx, times)
    qi, s = ranges_where(six, nodes, active)
    ci, e = ranges_where(eix, s.astype(np.int64), valid)
    return nodes, now_n, qi, s, ci, e


@numba.njit(cache=True)
def tick_is_common(now_n, qi, s, ci, e, root, last_heard, refresh, silent_after,
                   stale_after):
    """Whether a tick is the common case: no slot's parent silent for longer than
    ``silent_after`` (a root has none; an unset clock is not silent) and no child entry
    older than ``stale_after``; else the general path re-joins and expires. Writes
    nothing. O(slots + children)."""
    for r in range(len(s)):
        lh = last_heard[s[r]]
        if lh >= 0 and not root[s[r]] and now_n[qi[r]] - lh > silent_after:
            return False
    for j in range(len(e)):
        if now_n[qi[ci[j]]] - refresh[e[j]] > stale_after:
            return False
    return True


@numba.njit(cache=True)
def start_clocks(now_n, qi, s, last_heard):
    """A slot's unset ``last_heard`` becomes its tick time. O(slots)."""
    for r in range(len(s)):
        if last_heard[s[r]] < 0:
            last_heard[s[r]] = now_n[qi[r]]


@numba.njit(cache=True)
def tick_quiet(now_n, qi, s, ci, e, last_sent, period):
    """Which child entries get a heartbeat: their slot sent them nothing within
    ``period``. O(children)."""
    quiet = np.empty(len(e), np.bool_)
    for j in range(len(e)):
        r = ci[j]
        quiet[j] = now_n[qi[r]] - last_sent[s[r]] >= period
    return quiet


@numba.njit(cache=True)
def mark_sent(now_n, qi, s, ci, quiet, last_sent):
    """Slots that send heartbeats (``quiet`` entries) sent at their tick time."""
    for j in range(len(quiet)):
        if quiet[j]:
            r = ci[j]
            last_sent[s[r]] = now_n[qi[r]]


@numba.njit(cache=True)
def reset_slot(v, flags, small, wide):
    """Slot v forgets the node's tree state (``TreeState.reset``): its ``flags`` columns
    (``TreeState.reset_columns``) become False, its ``small`` and ``wide`` ones -1 (the
    columns' defaults). O(columns)."""
    for c in flags:
        c[v] = False
    for c in small:
        c[v] = -1
    for c in wide:
        c[v] = -1


@numba.njit(cache=True)
def reset_slots(slots, flags, small, wide):
    """:func:`reset_slot` for every slot of ``slots``. O(q)."""
    for i in range(len(slots)):
        reset_slot(np.int64(slots[i]), flags, small, wide)


@numba.njit(cache=True)
def clear_slot_children(v, eix, valid, n_children, node_children, slot_node):
    """Slot v drops every child (its valid entries become invalid, its slot's and node's
    child counts go down by as many). Returns how many it had. O(the slot's entries, in
    any order)."""
    head, nxt = eix[2], eix[3]
    cur = chain_first(head, v)
    k = 0
    while cur >= 0:
        if valid[cur]:
            valid[cur] = False
            k += 1
        cur = nxt[cur]
    n_children[v] -= k
    node_children[slot_node[v]] -= k
    return k


@numba.njit(cache=True)
def clear_children(slots, eix, valid, n_children, node_children, slot_node):
    """:func:`clear_slot_children` for every slot of ``slots`` (a slot listed twice is
    cleared once: the second finds no child). O(q + entries)."""
    for i in range(len(slots)):
        clear_slot_children(np.int64(slots[i]), eix, valid, n_children, node_children,
                            slot_node)


@numba.njit(cache=True)
def remove_child(v, child, eix, n_nodes, valid, n_children, node_children, slot_node):
    """The entry (slot v, child) becomes invalid if it is valid (the slot's and node's
    child counts go down). Returns whether it removed something. O(1) expected."""
    x = key_value(eix, np.int64(v) * n_nodes + np.int64(child))
    if x < 0 or not valid[x]:
        return False
    valid[x] = False
    n_children[v] -= 1
    node_children[slot_node[v]] -= 1
    return True


@numba.njit(cache=True)
def remove_children(slots, children, eix, n_nodes, valid, n_children, node_children,
                    slot_node):
    """:func:`remove_child` row by row (a pair repeated is removed once: its later rows
    find it invalid). Returns the mask of rows that removed something. O(q)."""
    hit = np.zeros(len(slots), np.bool_)
    for i in range(len(slots)):
        hit[i] = remove_child(np.int64(slots[i]), np.int64(children[i]), eix, n_nodes, valid,
                              n_children, node_children, slot_node)
    return hit
