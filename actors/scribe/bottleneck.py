"""The bottleneck remover (SPEC 3), a tree-shaping policy plugged into the join protocol.

A node whose total number of children (all groups) exceeds the bound picks the group with
the largest children table and drops that group's child farthest from it by proximity;
the dropped child probes its former siblings and asks the best one to adopt it (BN_JOIN,
handled by the join protocol like a JOIN that stops at once).
"""

from __future__ import annotations

import numpy as np

from .rootpath import RootPathGuard
from .tree import TreeState
from .types import BN_JOIN, BN_SIBLING, BnSibling
from .wire import Messenger


def pick_drops(tree: TreeState, ctx, over_local: np.ndarray):
    """For each overloaded local node, the (slot, entry) to drop, or none if its largest
    children table has a single child (moving it could not help).

    Ties: the lowest group index among the largest tables, then the lowest child id among
    the farthest children. O(slots and children of the given nodes, log factors).
    Returns (row index into over_local, slot, entry) for the nodes that drop a child."""
    over_local = np.asarray(over_local, np.int64)
    qi, slots = tree.slot_index.within(over_local)
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


class BottleneckRemover:
    """Keeps every node's total children at or under ``bound``."""

    def __init__(self, tree: TreeState, messenger: Messenger, guard: RootPathGuard, bound: int):
        self.tree = tree
        self.messenger = messenger
        self.guard = guard
        self.bound = bound

    def after_adopt(self, ctx, local_nodes, times) -> None:
        """Local nodes just adopted children at the given times: enforce the bound."""
        self.enforce_bound(ctx, local_nodes, times)

    def enforce_bound(self, ctx, li, times) -> None:
        """Nodes over the children bound drop children one at a time (largest table,
        farthest child) until at the bound or nothing useful is left to drop. The dropped
        child gets one BN_SIBLING per former sibling. O(rounds x their children)."""
        t = self.tree
        nodes, inv = np.unique(li, return_inverse=True)
        now = np.full(len(nodes), np.iinfo(np.int64).min, np.int64)
        np.maximum.at(now, inv, np.asarray(times, np.int64))  # each node's own clock
        while len(nodes):
            over = t.node_children[nodes] > self.bound
            nodes, now = nodes[over], now[over]
            if not len(nodes):
                break
            rows, slots, e = pick_drops(t, ctx, nodes)
            if not len(rows):
                break
            child = t.entries["child"][e].astype(np.int64)
            t.remove_children(slots, child)
            self._tell_siblings(ctx, nodes[rows], slots, child, now[rows])
            ctx.count("scribe_bottleneck_drops", len(rows))
            nodes, now = nodes[rows], now[rows]

    def _tell_siblings(self, ctx, parent_local, slots, child, now) -> None:
        """One BN_SIBLING to each dropped child per remaining sibling (the sibling, the
        delay parent -> sibling, the parent)."""
        t = self.tree
        parent = np.asarray(ctx.nodes)[parent_local].astype(np.int64)
        qi, es = t.children_of(slots)
        sib = t.entries["child"][es].astype(np.int64)
        self.messenger.send(ctx, parent[qi], child[qi], BN_SIBLING, now[qi],
                            t.slots["group"][slots][qi],
                            **BnSibling.fields(
                                sibling=sib,
                                sibling_delay=np.asarray(ctx.latency(parent[qi], sib), np.int64),
                                parent=parent[qi]))

    def on_bn_sibling(self, ctx, m) -> None:
        """A dropped child probes its former siblings and joins under the one that
        minimizes delay(child, sibling) + delay(sibling, parent)."""
        t, sl = self.tree, self.tree.slots
        n = len(m)
        if not n:
            return
        sib = m[BnSibling.sibling]
        probe = np.asarray(ctx.latency(m["dst"], sib), np.int64)
        ctx.log_owned("probe", node=m["dst"].astype(np.int32), target=sib.astype(np.int32),
                      group=m["group"].astype(np.int32), time=m["time"].astype(np.int64))
        ctx.count("scribe_probes", n)
        cost = probe + m[BnSibling.sibling_delay]
        o = np.lexsort((sib, cost, m["group"], m["dst"]))
        mo = m[o]
        first = np.r_[True, (mo["dst"][1:] != mo["dst"][:-1])
                      | (mo["group"][1:] != mo["group"][:-1])]
        pick = mo[first]
        s = t.find_active(self.messenger.local(ctx, pick["dst"]), pick["group"])
        live = s >= 0
        pick, s = pick[live], s[live]
        self.guard.lose_parent(s)
        self.messenger.send(ctx, pick["dst"], pick[BnSibling.sibling], BN_JOIN, pick["time"],
                            pick["group"],
                            **t.repair_join(s, sl["join_cred"][s]))
