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
def find_slots(keys, vals, dkeys, dvals, local_idx, groups, n_groups, active, only_active):
    """Slot of each (local node, group) (int32), -1 where the node has none (or, with
    ``only_active``, none that is active). O(q log S)."""
    out = np.empty(len(local_idx), np.int32)
    for i in range(len(local_idx)):
        s = key_value(keys, vals, dkeys, dvals,
                      np.int64(local_idx[i]) * n_groups + np.int64(groups[i]))
        if only_active and s >= 0 and not active[s]:
            s = -1
        out[i] = s
    return out


@numba.njit(cache=True)
def heard_from_parent(keys, vals, dkeys, dvals, local_idx, groups, n_groups, active, parent,
                      senders, times, last_heard):
    """Rows whose sender is the parent of the receiving node's active slot for the group;
    their time becomes the slot's ``last_heard`` (in row order: the last row wins).
    O(q log S)."""
    ok = np.zeros(len(local_idx), np.bool_)
    for i in range(len(local_idx)):
        s = key_value(keys, vals, dkeys, dvals,
                      np.int64(local_idx[i]) * n_groups + np.int64(groups[i]))
        if s >= 0 and active[s] and parent[s] == senders[i]:
            ok[i] = True
            last_heard[s] = times[i]
    return ok


@numba.njit(cache=True)
def within(keys, vals, dkeys, dvals, bases, width, keep):
    """(row, value) of the keys in [bases[r] * width, (bases[r] + 1) * width) whose value
    has keep[value], by row then key: the children of slots (width n_nodes) or the slots
    of nodes (width n_groups). O(q log n + output)."""
    n = len(bases)
    lo = np.empty(n, np.int64)
    hi = np.empty(n, np.int64)
    for i in range(n):
        lo[i] = np.int64(bases[i]) * width
        hi[i] = lo[i] + width
    return ranges_where(keys, vals, dkeys, dvals, lo, hi, keep)
