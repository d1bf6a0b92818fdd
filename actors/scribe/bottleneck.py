"""Bottleneck remover selection (SPEC 3): which child an overloaded node drops.

A node whose total number of children (all groups) exceeds the bound picks the group with
the largest children table and drops that group's child farthest from it by proximity.
"""

from __future__ import annotations

import numpy as np

from .tree import TreeState


def pick_drops(tree: TreeState, ctx, over_local: np.ndarray):
    """For each overloaded local node, the (slot, entry) to drop, or none if its largest
    children table has a single child (moving it could not help).

    Ties: the lowest group index among the largest tables, then the lowest child id among
    the farthest children. O(slots and children of the given nodes, log factors).
    Returns (row index into over_local, slot, entry) for the nodes that drop a child."""
    g = tree.n_groups
    over_local = np.asarray(over_local, np.int64)
    qi, slots = tree.slot_index.ranges(over_local * g, (over_local + 1) * g)
    act = tree.slots["active"][slots]
    qi, slots = qi[act], slots[act]
    if not len(slots):
        z = np.zeros(0, np.int64)
        return z, z, z
    nch = tree.slots["n_children"][slots]
    # per node: largest table first, lowest group among equals (ranges are in group order)
    o = np.lexsort((tree.slots["group"][slots], -nch, qi))
    qi, slots, nch = qi[o], slots[o], nch[o]
    first = np.r_[True, qi[1:] != qi[:-1]]
    rows, best = qi[first], slots[first]
    useful = nch[first] >= 2
    rows, best = rows[useful], best[useful]
    ci, e = tree.children_of(best)
    child = tree.entries["child"][e]
    parent_global = np.asarray(ctx.nodes)[tree.slots["node"][best]][ci]
    lat = np.asarray(ctx.latency(parent_global, child), np.int64)
    o = np.lexsort((child, -lat, ci))
    ci, e = ci[o], e[o]
    first = np.r_[True, ci[1:] != ci[:-1]]
    return rows[ci[first]], best[ci[first]], e[first]
