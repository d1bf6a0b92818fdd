"""Tree collapse's wave and adoption as compiled passes, the only implementation of both:
``collapse.TreeCollapse`` runs them on a cell's messages, and the stack's compiled loop
calls them from ``handler_kernels.on_runs``.

The wave carries the nearest kept ancestor A and the first removed node under A (-1:
none). A non-member forwarder with one child that is not the root is removed and passes
(A, first removed) down to its child; any other node re-attaches to A if nodes above it
were removed (ADOPT to A, which replaces the first removed node by it among its
children) and restarts the wave below itself (A = itself). Chains of removable nodes thus
collapse in one wave.

Each kernel ends with the arguments ``ShardContext.send_compiled`` appends (out, pool,
cursor, host_router, router_dist, lan_us) and returns (status, need, ..., rows written,
cursor), as ``handler_kernels``' do; the rows lent are zeroed here.
"""

from __future__ import annotations

import numba
import numpy as np

from emulator.kernels import put_send, unique_first, zero_rows

from .kernel_rows import DECLINED, DONE, MORE_ROOM, direct_rows, put_group
from .kernels import active_slot, clear_slot_children, remove_child, reset_slot, write_child
from .keyindex import chain_first, chain_head, has_room, insert_key
from .types import Adopt, CollapseWave

_ANCESTOR = CollapseWave.ancestor
_FIRST_REMOVED = CollapseWave.first_removed
_REPLACED = Adopt.replaced

# what a pass counts (``TreeCollapse.counted`` reports it): wave passes taken, wave rows
# for a node without state for the group, nodes removed; adoption passes taken, their
# rows without state
WAVES, WAVE_NO_STATE, COLLAPSED, ADOPTS, ADOPT_NO_STATE, N_COUNTS = range(6)


@numba.njit(cache=True)
def _put(out, w, src, dst, type_, r, key_hi, key_lo, s_hr, s_rdist, s_lan):
    """Row w of out: a message of r's group from src to dst at r's time."""
    put_send(out, w, src, dst, type_, r["time"], s_hr, s_rdist, s_lan)
    put_group(out, w, r["group"], key_hi, key_lo)


@numba.njit(cache=True)
def on_collapse_wave(m, li, six, eix, n_groups, active, member, root, parent, n_children,
                     node_children, slot_node, valid, e_child, reset_cols, key_hi, key_lo,
                     wave_type, adopt_type, counts, out, pool, cursor, s_hr, s_rdist, s_lan):
    """A cell of COLLAPSE_WAVEs (``li``: each row's local node). The first row of each
    active slot is taken (rows without one are counted); the others change nothing.
    Sends, all at their row's time: the removed slots' waves to their only child, in row
    order; the kept slots' new waves to each child, by row then child id; the ADOPTs of
    kept slots below removed ones, in row order (their parent becomes A). Then the
    removed slots lose their children and their state (``kernels.reset_slot``). Declines
    (nothing written) unless every row is a direct COLLAPSE_WAVE to a node of this shard
    (``kernel_rows.direct_rows``). Returns (status, need, the removed slots, rows written,
    cursor); ``counts`` advanced. O(q log q + children)."""
    n = len(m)
    none = np.empty(0, np.int64)
    if not direct_rows(m, li, wave_type):
        return DECLINED, 0, none, 0, cursor
    s = np.empty(n, np.int64)
    no_state = 0
    for i in range(n):
        s[i] = active_slot(six, n_groups, active, li[i], m[i]["group"])
        no_state += s[i] < 0
    # each slot's first row (TreeState keys: a slot's later rows change nothing)
    taken = np.zeros(n, np.bool_)
    _, first = unique_first(s)
    for j in first:
        taken[j] = s[j] >= 0
    removable = np.zeros(n, np.bool_)
    head, nxt, key_of = eix[2], eix[3], eix[4]
    need = 0
    for i in range(n):
        if not taken[i]:
            continue
        v = s[i]
        removable[i] = not member[v] and not root[v] and n_children[v] == 1
        cur = chain_head(head, nxt, key_of, v)   # (in child order: the waves go out in it)
        while cur >= 0:
            need += valid[cur]
            cur = nxt[cur]
        need += not removable[i] and m[i][_FIRST_REMOVED] >= 0
    if need > len(out):
        return MORE_ROOM, need, none, 0, cursor
    zero_rows(out, np.int64(0), need)
    w = np.int64(0)
    for kept in (False, True):
        for i in range(n):
            if not taken[i] or removable[i] == kept:
                continue
            r = m[i]
            v = s[i]
            cur = chain_first(head, v)      # (in child order since the count)
            while cur >= 0:
                if valid[cur]:
                    _put(out, w, r["dst"], e_child[cur], wave_type, r, key_hi, key_lo, s_hr,
                         s_rdist, s_lan)
                    if kept:
                        out[w][_ANCESTOR] = r["dst"]
                        out[w][_FIRST_REMOVED] = -1
                    else:
                        out[w][_ANCESTOR] = r[_ANCESTOR]
                        below = r[_FIRST_REMOVED]
                        out[w][_FIRST_REMOVED] = below if below >= 0 else r["dst"]
                    w += 1
                cur = nxt[cur]
    n_removed = 0
    for i in range(n):
        if taken[i] and not removable[i] and m[i][_FIRST_REMOVED] >= 0:
            r = m[i]
            parent[s[i]] = r[_ANCESTOR]
            _put(out, w, r["dst"], r[_ANCESTOR], adopt_type, r, key_hi, key_lo, s_hr, s_rdist,
                 s_lan)
            out[w][_REPLACED] = r[_FIRST_REMOVED]
            w += 1
        n_removed += removable[i]
    removed = np.empty(n_removed, np.int64)
    flags, small, wide = reset_cols
    k = 0
    for i in range(n):
        if removable[i]:
            v = s[i]
            clear_slot_children(v, eix, valid, n_children, node_children, slot_node)
            reset_slot(v, flags, small, wide)
            removed[k] = v
            k += 1
    counts[WAVES] += 1
    counts[WAVE_NO_STATE] += no_state
    counts[COLLAPSED] += n_removed
    return DONE, 0, removed, w, cursor


@numba.njit(cache=True)
def on_adopt(m, li, six, eix, n_groups, n_nodes, sizes, active, slot_node, n_children,
             node_children, valid, e_slot, e_child, e_cred, e_refresh, adopt_type, counts,
             out, pool, cursor, s_hr, s_rdist, s_lan):
    """A cell of ADOPTs (``li``: each row's local node): at each row's
    active slot (rows without one counted) the removed child it names is dropped, every
    row's first, then the sender becomes a child there (no credential, the row's time;
    an entry made where the pair has none, from index size ``sizes[1]`` on, advanced), as
    ``TreeState.remove_children`` then ``add_children`` on the whole cell. Declines
    (nothing written) unless every row is a direct ADOPT to a node of this shard, or where
    the entry index lacks room for an entry per row (``TreeState.make_room``). Sends
    nothing. Returns (status, need, rows written, cursor); ``counts`` advanced. O(q)."""
    n = len(m)
    if not direct_rows(m, li, adopt_type):
        return DECLINED, 0, 0, cursor
    if not has_room(eix, sizes[1], n, sizes[0]) or sizes[1] + n > len(valid):
        return DECLINED, 0, 0, cursor
    s = np.empty(n, np.int64)
    no_state = 0
    for i in range(n):
        s[i] = active_slot(six, n_groups, active, li[i], m[i]["group"])
        no_state += s[i] < 0
    for i in range(n):
        if s[i] >= 0:
            remove_child(s[i], m[i][_REPLACED], eix, n_nodes, valid, n_children,
                         node_children, slot_node)
    size = sizes[1]
    for i in range(n):
        v = s[i]
        if v >= 0:
            src = m[i]["src"]
            x, _, size = insert_key(eix, n_nodes, size, v * n_nodes + np.int64(src))
            write_child(np.int64(x), v, src, np.int64(-1), m[i]["time"], valid, e_slot,
                        e_child, e_cred, e_refresh, n_children, node_children, slot_node)
    sizes[1] = size
    counts[ADOPTS] += 1
    counts[ADOPT_NO_STATE] += no_state
    return DONE, 0, 0, cursor
