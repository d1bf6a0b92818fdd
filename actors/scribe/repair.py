"""Scribe tree repair (SPEC 3): heartbeats, child refresh and expiry, parent suspicion
and re-join; enabled when the ``heartbeat_us`` parameter is set. RP replication and
take-over are ``rendezvous.RendezvousPoints``'s.

Each node with tree state runs one periodic TICK timer (not one per group). On a tick a
node, for each of its groups: re-joins if its parent has been silent for
``heartbeat_miss`` periods (the repair JOIN carries its last seqno: the faultHandler
hook), otherwise refreshes its entry at the parent; expires children not refreshed for
``child_expiry_miss`` periods; sends a heartbeat to its children unless it sent them data
within the period. All of it vectorized over the ticking nodes of a cell.
"""

from __future__ import annotations

import numpy as np

from emulator.kernels import unique_first

from . import handler_kernels, kernels
from .membership import TreeLeaves
from .publishing import ReliablePublishing
from .reliable import OrderedDelivery
from .rendezvous import RendezvousPoints
from .rootpath import RootPathGuard
from .tree import TreeState
from .types import HEARTBEAT, JOIN, LEAVE, REFRESH, REJOIN, TICK, Refresh
from .wire import Messenger, take_rows


def _rows(nodes, groups, times):
    """A minimal message-like record array for helpers that take (dst, group, time)."""
    r = np.zeros(len(nodes), dtype=[("dst", "i8"), ("group", "i4"), ("time", "i8")])
    r["dst"], r["group"], r["time"] = nodes, groups, times
    return r


class TreeRepair:
    """Per-node TICK timers and what a tick does; the HEARTBEAT and REFRESH handlers.

    ``ordered``/``publishing``: the reliable layer's parts (None when it is off)."""

    def __init__(self, tree: TreeState, messenger: Messenger, guard: RootPathGuard,
                 rendezvous: RendezvousPoints, leaves: TreeLeaves,
                 ordered: OrderedDelivery | None,
                 publishing: ReliablePublishing | None, params: dict, ticking=None):
        self.tree = tree
        self.messenger = messenger
        self.guard = guard
        self.rendezvous = rendezvous
        self.leaves = leaves
        self.ordered = ordered
        self.publishing = publishing
        self.period = params["heartbeat_us"]
        self.heartbeat_miss = params["heartbeat_miss"]
        self.child_expiry_miss = params["child_expiry_miss"]
        # local nodes whose TICK timer is running
        self.ticking = np.zeros(tree.n_local, bool) if ticking is None else ticking

    # ---- timers -------------------------------------------------------------------
    def start_ticks(self, ctx, m) -> None:
        """Nodes of batch m that now hold tree state and have no timer get one."""
        period = self.period
        if not period or not len(m):
            return
        # the usual case, every node ticking already, on the engine's int32 local indices
        # in one compiled call (Messenger.local's checked int64 copy only when not)
        if kernels.all_set(self.ticking, ctx.local(m["dst"])):
            return
        self.messenger.send_compiled(
            ctx, len(m), handler_kernels.start_ticks, m, self.messenger.local(ctx, m["dst"]),
            self.tree.slot_index.arrays, self.tree.slots["active"], *self.timer_inputs(ctx),
            TICK)

    def timer_inputs(self, ctx) -> tuple:
        """What the first TICK timers' kernels take after the tree (``handler_kernels.
        start_ticks``, ``on_routed_joins``): the ticking flags, the nodes' global ids, the
        period (0: no tree repair)."""
        return self.ticking, np.asarray(ctx.nodes), self.period or 0

    def forget_nodes(self, local_idx) -> None:
        """Crashed nodes: their timers are gone with them."""
        self.ticking[local_idx] = False

    def on_tick(self, ctx, m) -> None:
        li = self.messenger.local(ctx, m["dst"])
        period = self.period
        plan = self.tree.tick_plan(li, m["time"], period, self.heartbeat_miss * period,
                                   self.child_expiry_miss * period)
        if plan is None:   # a parent fell silent or a child went stale
            self._tick_general(ctx, li, m)
            return
        # the common case, computed in one compiled pass (the same rows as the general
        # path's: no re-join, no expiry)
        t, sl = self.tree, self.tree.slots
        nodes, now_n, qi, s, ref, hb, hb_e = plan
        gid_n = np.asarray(ctx.nodes)[nodes].astype(np.int64)
        now, me = now_n[qi], gid_n[qi]
        grp = sl["group"][s]
        self._refresh_parents(ctx, s[ref], now[ref], me[ref], grp[ref])
        self.messenger.send(ctx, me[hb], t.entries["child"][hb_e], HEARTBEAT, now[hb],
                            grp[hb], **self.guard.path_fields(s[hb], me[hb]))
        self._after_tick(ctx, nodes, qi, s, now, now_n, gid_n)

    def tick_compiled(self, ctx, m) -> bool:
        """A TICK cell in one compiled pass (``handler_kernels.on_tick``): the common case
        of ``on_tick`` without the reliable layer and root paths. False (nothing done) when
        the case does not hold."""
        t = self.tree
        sl, en, keys = t.slots, t.entries, self.messenger.groups.table
        period = self.period
        status, = self.messenger.send_compiled(
            ctx, 4 * len(m), handler_kernels.on_tick, m,
            ctx.local(m["dst"]).astype(np.int64),   # (the compiled loop's li type)
            np.asarray(ctx.nodes), t.slot_index.arrays, t.entry_index.arrays, t.n_groups,
            sl["active"], sl["root"], sl["parent"], sl["last_heard"], sl["last_sent"],
            en["valid"], en["refresh"], sl["group"], sl["join_cred"], en["child"],
            keys["id_hi"], keys["id_lo"], self.rendezvous.stale, self.ticking, period,
            self.heartbeat_miss * period, self.child_expiry_miss * period, TICK, REFRESH,
            HEARTBEAT)
        return status == handler_kernels.DONE

    def _tick_general(self, ctx, li, m) -> None:
        nodes, first = unique_first(li)
        now_n = m["time"][first]
        gid_n = np.asarray(ctx.nodes)[nodes].astype(np.int64)
        qi, s = self.tree.slots_of_nodes(nodes)
        now, me, grp = now_n[qi], gid_n[qi], self.tree.slots["group"][s]
        self._check_parents(ctx, s, now, me, grp)
        self._expire_children(ctx, s, now, me, grp)
        self._heartbeat_children(ctx, s, now, me, grp)
        self._after_tick(ctx, nodes, qi, s, now, now_n, gid_n)

    def _after_tick(self, ctx, nodes, qi, s, now, now_n, gid_n) -> None:
        """RP records re-sent where the leaf set changed, unacknowledged messages
        re-sent, and the next TICK of every node that still holds tree state."""
        self.rendezvous.refresh_stale(ctx, nodes, qi, s, now)
        if self.publishing is not None:  # sources re-send unacknowledged messages
            self.publishing.retry_pending(ctx, nodes, now_n)
        qi2, _ = self.tree.slots_of_nodes(nodes)
        busy = np.zeros(len(nodes), bool)
        busy[qi2] = True
        self.ticking[nodes[~busy]] = False
        if busy.any():
            ctx.timer(gid_n[busy], now_n[busy] + self.period, TICK)

    def _check_parents(self, ctx, s, now, me, grp) -> None:
        """Slots (not roots) whose parent was silent too long re-join; the others refresh
        their entry at the parent."""
        sl = self.tree.slots
        sl["last_heard"][s] = np.where(sl["last_heard"][s] < 0, now, sl["last_heard"][s])
        child_role = ~sl["root"][s]
        silent = now - sl["last_heard"][s] > self.heartbeat_miss * self.period
        suspect = child_role & silent
        rs = s[suspect]
        if len(rs):  # faultHandler: the repair JOIN carries the last seqno received
            ctx.count("scribe_repairs", len(rs))
            self.guard.lose_parent(rs)
            sl["last_heard"][rs] = now[suspect]
            cred = np.where(sl["member"][rs], sl["my_cred"][rs], sl["join_cred"][rs])
            self.messenger.route(ctx, me[suspect], JOIN, now[suspect], grp[suspect],
                                 **self.tree.repair_join(rs, cred),
                                 origin=me[suspect])
        refresh = child_role & ~silent & (sl["parent"][s] >= 0)
        self._refresh_parents(ctx, s[refresh], now[refresh], me[refresh], grp[refresh])

    def _refresh_parents(self, ctx, s, now, me, grp) -> None:
        """Slots s refresh their entry at their parent."""
        sl = self.tree.slots
        # with the reliable layer the refresh carries the child's last seqno
        pos = {"last_seq": sl["last_seq"][s]} if self.ordered is not None else {}
        self.messenger.send(ctx, me, sl["parent"][s], REFRESH, now, grp,
                            **Refresh.fields(credential=sl["join_cred"][s], **pos))

    def _expire_children(self, ctx, s, now, me, grp) -> None:
        """Children that stopped refreshing expire; slots left empty leave their parent."""
        t = self.tree
        ci, e = t.children_of(s)
        stale = now[ci] - t.entries["refresh"][e] > self.child_expiry_miss * self.period
        if stale.any():
            ctx.count("scribe_children_expired", int(stale.sum()))
            t.remove_children(s[ci[stale]], t.entries["child"][e[stale]])
            ps = np.unique(ci[stale])
            self.leaves.prune(ctx, s[ps], _rows(me[ps], grp[ps], now[ps]))

    def _heartbeat_children(self, ctx, s, now, me, grp) -> None:
        """Heartbeats (with the root path) to the children that got no data within the
        period."""
        t, sl = self.tree, self.tree.slots
        keep = sl["active"][s]
        ci, e = t.children_of(s[keep])
        idx = np.flatnonzero(keep)[ci]
        quiet = now[idx] - sl["last_sent"][s[idx]] >= self.period
        idx, e = idx[quiet], e[quiet]
        self.messenger.send(ctx, me[idx], t.entries["child"][e], HEARTBEAT, now[idx], grp[idx],
                            **self.guard.path_fields(s[idx], me[idx]))
        sl["last_sent"][s[np.unique(idx)]] = now[np.unique(idx)]

    # ---- liveness messages ----------------------------------------------------------
    def on_heartbeat(self, ctx, m) -> None:
        li = self.messenger.local(ctx, m["dst"])
        ok = self.tree.heard_from_parent(li, m["group"], m["src"], m["time"])
        # a former parent still counts us as a child: make it drop us
        sl = self.tree.slots
        s = self.tree.find_active(li, m["group"])
        self.guard.take_path(ctx, take_rows(m, ok), s[ok])
        stray = ~ok & ((s < 0) | (sl["parent"][np.maximum(s, 0)] >= 0))
        self.messenger.send(ctx, m["dst"][stray], m["src"][stray], LEAVE, m["time"][stray],
                            m["group"][stray])

    def heartbeat_compiled(self, ctx, m) -> bool:
        """A HEARTBEAT cell in one compiled pass (``handler_kernels.on_heartbeat``): as
        ``on_heartbeat`` without root paths. False (nothing done) when it declines."""
        t, keys = self.tree, self.messenger.groups.table
        status, = self.messenger.send_compiled(
            ctx, len(m), handler_kernels.on_heartbeat, m, ctx.local(m["dst"]),
            t.slot_index.arrays, t.n_groups, t.slots["active"], t.slots["parent"],
            t.slots["last_heard"], keys["id_hi"], keys["id_lo"], HEARTBEAT, LEAVE)
        return status == handler_kernels.DONE

    def refresh_compiled(self, ctx, m) -> bool:
        """A REFRESH cell in one compiled pass (``handler_kernels.on_refresh``): as
        ``on_refresh`` without the reliable layer, when every child is listed. False
        (nothing done) when it declines."""
        t, keys = self.tree, self.messenger.groups.table
        sl, en = t.slots, t.entries
        status, = self.messenger.send_compiled(
            ctx, len(m), handler_kernels.on_refresh, m, ctx.local(m["dst"]),
            t.slot_index.arrays, t.entry_index.arrays, t.n_groups, t.n_nodes, sl["active"],
            sl["node"], sl["n_children"], t.node_children, en["slot"], en["child"],
            en["valid"], en["cred"], en["refresh"], keys["id_hi"], keys["id_lo"], REFRESH,
            REJOIN)
        return status == handler_kernels.DONE

    def on_refresh(self, ctx, m) -> None:
        """A child refreshes its entry; unknown children are (re-)admitted (soft state),
        a node without state for the group tells the child to join again."""
        t = self.tree
        li = self.messenger.local(ctx, m["dst"])
        s = t.find_active(li, m["group"])
        live = s >= 0
        s_live = s[live]
        sub = take_rows(m, live)
        new = t.add_children(s_live, sub["src"], sub[Refresh.credential], sub["time"])
        if self.ordered is not None and new.any():
            # a child re-admitted here (its entry had expired, e.g. its first
            # refresh came late over a long link) missed what was sent meanwhile and never
            # noticed (it kept hearing from us): catch it up from its last seqno
            sub = take_rows(m, live)
            self.ordered.retransmit(ctx, s_live[new], sub["src"][new],
                                    sub[Refresh.last_seq][new], sub["time"][new])
        dead = take_rows(m, ~live)
        self.messenger.send(ctx, dead["dst"], dead["src"], REJOIN, dead["time"], dead["group"])
