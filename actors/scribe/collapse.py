"""Tree collapse, a tree-shaping policy run on request (COLLAPSE_REQ).

The root of a tree starts a wave down it: non-member forwarders with one child are
removed and their child re-attached to the nearest kept ancestor, so chains of such nodes
collapse in one wave. After a collapse the delivery and tree_edge rows are labelled
``collapsed``.
"""

from __future__ import annotations

import numpy as np

from emulator.kernels import unique_first

from . import collapse_kernels
from .tree import TreeState
from .types import ADOPT, COLLAPSE_WAVE, CollapseWave
from .wire import Messenger, ScribeError


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

    def on_collapse_wave(self, ctx, m) -> bool:
        """A cell of waves (``collapse_kernels.on_collapse_wave``): removed nodes pass the
        wave to their only child, kept ones restart it below themselves and re-attach to
        the nearest kept ancestor; the removed slots' state is forgotten
        (``TreeState.reset``'s hooks called after the kernel's reset)."""
        t, sl, keys = self.tree, self.tree.slots, self.messenger.groups.table
        counts = np.zeros(collapse_kernels.N_COUNTS, np.int64)
        status, removed = self.messenger.send_compiled(
            ctx, len(m), collapse_kernels.on_collapse_wave, m, self.messenger.local(ctx, m["dst"]),
            t.slot_index.arrays, t.entry_index.arrays, t.n_groups, sl["active"], sl["member"],
            sl["root"], sl["parent"], sl["n_children"], t.node_children, sl["node"],
            t.entries["valid"], t.entries["child"], t.reset_columns(), keys["id_hi"], keys["id_lo"],
            COLLAPSE_WAVE, ADOPT, counts)
        if status != collapse_kernels.DONE:
            raise ScribeError("COLLAPSE_WAVE: a cell of other messages")
        for forget in t.on_reset:
            forget(removed)
        self.counted(ctx, counts)
        return True

    def on_adopt(self, ctx, m) -> bool:
        """A cell of adoptions (``collapse_kernels.on_adopt``): a kept node replaces the
        removed chain below the receiver as its child."""
        t, sl, en = self.tree, self.tree.slots, self.tree.entries
        t.make_room(0, len(m))
        sizes = np.array([t.slot_index.size, t.entry_index.size], np.int64)
        counts = np.zeros(collapse_kernels.N_COUNTS, np.int64)
        status, = self.messenger.send_compiled(
            ctx, 0, collapse_kernels.on_adopt, m, self.messenger.local(ctx, m["dst"]),
            t.slot_index.arrays, t.entry_index.arrays, t.n_groups, t.n_nodes, sizes,
            sl["active"], sl["node"], sl["n_children"], t.node_children, en["valid"],
            en["slot"], en["child"], en["cred"], en["refresh"], ADOPT, counts)
        if status != collapse_kernels.DONE:
            raise ScribeError("ADOPT: a cell of other messages, or no room after make_room")
        t.inserted(sizes[0], sizes[1])
        self.counted(ctx, counts)
        return True

    def counted(self, ctx, counts) -> None:
        """What the kernels counted (``collapse_kernels.N_COUNTS``), as counters; a shard
        that took a wave labels its logs collapsed from then on."""
        if counts[collapse_kernels.WAVES]:
            self.collapsed = True
            ctx.count("scribe_collapse_no_state", int(counts[collapse_kernels.WAVE_NO_STATE]))
            ctx.count("scribe_collapsed_nodes", int(counts[collapse_kernels.COLLAPSED]))
        if counts[collapse_kernels.ADOPTS]:
            ctx.count("scribe_adopt_no_state", int(counts[collapse_kernels.ADOPT_NO_STATE]))
