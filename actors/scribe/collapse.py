"""Tree collapse, a tree-shaping policy run on request (COLLAPSE_REQ).

The root of a tree starts a wave down it: non-member forwarders with one child are
removed and their child re-attached to the nearest kept ancestor, so chains of such nodes
collapse in one wave. After a collapse the delivery and tree_edge rows are labelled
``collapsed``.
"""

from __future__ import annotations

import numpy as np

from emulator.kernels import unique_first

from .tree import TreeState, first_in_run
from .types import ADOPT, COLLAPSE_WAVE, Adopt, CollapseWave
from .wire import Messenger


class TreeCollapse:
    def __init__(self, tree: TreeState, messenger: Messenger, collapsed: bool = False):
        self.tree = tree
        self.messenger = messenger
        self.collapsed = collapsed   # a collapse ran on this shard (labels the logs)

    def on_collapse_req(self, ctx, m) -> None:
        """Each requesting node starts a collapse wave down every tree it is the root of."""
        self.collapsed = True
        t, sl = self.tree, self.tree.slots
        li = self.messenger.local(ctx, m["dst"])
        act = t.active_slots()
        act = act[sl["root"][act]]
        req_nodes, first = unique_first(li)
        roots = act[np.isin(sl["node"][act], req_nodes)]
        if not len(roots):
            return
        when = m["time"][first][np.searchsorted(req_nodes, sl["node"][roots])]
        qi, e = t.children_of(roots)
        src = ctx.nodes[sl["node"][roots]]
        self.messenger.send(ctx, src[qi], t.entries["child"][e], COLLAPSE_WAVE, when[qi],
                            sl["group"][roots][qi],
                            **CollapseWave.fields(ancestor=src[qi],
                                                  first_removed=np.full(len(qi), -1, np.int64)))

    def on_collapse_wave(self, ctx, m) -> None:
        """The wave carries the nearest kept ancestor A and the first removed node under
        A (-1: none). A non-member forwarder with one child is removed and passes (A, first
        removed) down; any other node re-attaches to A if nodes above it were removed, then
        restarts the wave below itself. Chains of removable nodes collapse in one wave."""
        self.collapsed = True
        t, sl = self.tree, self.tree.slots
        li = self.messenger.local(ctx, m["dst"])
        s = t.find_active(li, m["group"])
        hit = (s >= 0) & first_in_run(s)
        ctx.count("scribe_collapse_no_state", int((s < 0).sum()))
        sub, s = m[hit], s[hit]
        removable = ~sl["member"][s] & ~sl["root"][s] & (sl["n_children"][s] == 1)
        self._pass_wave_down(ctx, sub, s, removable)
        ancestor, first_removed = sub[CollapseWave.ancestor], sub[CollapseWave.first_removed]
        relink = ~removable & (first_removed >= 0)
        sl["parent"][s[relink]] = ancestor[relink]
        self.messenger.send(ctx, sub["dst"][relink], ancestor[relink], ADOPT,
                            sub["time"][relink], sub["group"][relink],
                            **Adopt.fields(replaced=first_removed[relink]))
        srem = s[removable]
        t.clear_children(srem)
        t.reset(srem)
        ctx.count("scribe_collapsed_nodes", int(removable.sum()))

    def _pass_wave_down(self, ctx, sub, s, removable) -> None:
        """Removed nodes hand (A, first removed) to their only child; kept nodes restart
        the wave below them (A = themselves)."""
        t = self.tree
        qi, e = t.children_of(s)
        child = t.entries["child"][e]
        rem_row = removable[qi]
        below = sub[CollapseWave.first_removed]
        first_removed = np.where(below >= 0, below, sub["dst"])
        r = qi[rem_row]
        self.messenger.send(ctx, sub["dst"][r], child[rem_row], COLLAPSE_WAVE, sub["time"][r],
                            sub["group"][r],
                            **CollapseWave.fields(ancestor=sub[CollapseWave.ancestor][r],
                                                  first_removed=first_removed[r]))
        k = qi[~rem_row]
        self.messenger.send(ctx, sub["dst"][k], child[~rem_row], COLLAPSE_WAVE, sub["time"][k],
                            sub["group"][k],
                            **CollapseWave.fields(ancestor=sub["dst"][k],
                                                  first_removed=np.full(len(k), -1, np.int64)))

    def on_adopt(self, ctx, m) -> None:
        """A kept node replaces the removed chain below this node as its child."""
        t = self.tree
        li = self.messenger.local(ctx, m["dst"])
        s = t.find_active(li, m["group"])
        hit = s >= 0
        ctx.count("scribe_adopt_no_state", int((~hit).sum()))
        sub, s = m[hit], s[hit]
        t.remove_children(s, sub[Adopt.replaced].astype(np.int64))
        cred = np.full(len(s), -1, np.int64)
        t.add_children(s, sub["src"], cred, sub["time"])
