"""Scribe tree repair (SPEC 3): heartbeats, child refresh and expiry, parent suspicion
and re-join, RP replication and take-over. A mixin of ``Scribe``; enabled when the
``heartbeat_us`` parameter is set.

Each node with tree state runs one periodic TICK timer (not one per group). On a tick a
node, for each of its groups: re-joins if its parent has been silent for
``heartbeat_miss`` periods (the repair JOIN carries its last seqno: the faultHandler
hook), otherwise refreshes its entry at the parent; expires children not refreshed for
``child_expiry_miss`` periods; sends a heartbeat to its children unless it sent them data
within the period. All of it vectorized over the ticking nodes of a cell.
"""

from __future__ import annotations

import numpy as np

from .types import HEARTBEAT, JOIN, LEAVE, REFRESH, REJOIN, REPLICA, TICK


class RepairMixin:
    # ---- timers -------------------------------------------------------------------
    def _start_ticks(self, ctx, m):
        """Nodes of batch m that now hold tree state and have no timer get one."""
        period = self.params["heartbeat_us"]
        if not period or not len(m):
            return
        li = self._local(ctx, m["dst"])
        cand = ~self.ticking[li]
        if not cand.any():
            return
        nodes, inv = np.unique(li[cand], return_inverse=True)
        now = np.full(len(nodes), np.iinfo(np.int64).min, np.int64)
        np.maximum.at(now, inv, m["time"][cand])
        qi, _ = self.tree.slots_of_nodes(nodes)
        has = np.zeros(len(nodes), bool)
        has[qi] = True
        nodes, now = nodes[has], now[has]
        if len(nodes):
            self.ticking[nodes] = True
            ctx.timer(np.asarray(ctx.nodes)[nodes], now + period, TICK)

    def _tick(self, ctx, m):
        t, sl = self.tree, self.tree.slots
        period = self.params["heartbeat_us"]
        li = self._local(ctx, m["dst"])
        nodes, first = np.unique(li, return_index=True)
        now_n = m["time"][first]
        gid_n = np.asarray(ctx.nodes)[nodes].astype(np.int64)
        qi, s = t.slots_of_nodes(nodes)
        now, me, grp = now_n[qi], gid_n[qi], sl["group"][s]
        # 1. parent suspicion / refresh
        sl["last_heard"][s] = np.where(sl["last_heard"][s] < 0, now, sl["last_heard"][s])
        child_role = ~sl["root"][s]
        silent = now - sl["last_heard"][s] > self.params["heartbeat_miss"] * period
        suspect = child_role & silent
        rs = s[suspect]
        if len(rs):  # faultHandler: the repair JOIN carries the last seqno received
            ctx.count("scribe_repairs", len(rs))
            self._lose_parent(rs)
            sl["last_heard"][rs] = now[suspect]
            cred = np.where(sl["member"][rs], sl["my_cred"][rs], sl["join_cred"][rs])
            self._route(ctx, me[suspect], JOIN, now[suspect], grp[suspect], a=cred,
                        b=sl["last_seq"][rs], c=np.ones(len(rs), np.int64),
                        origin=me[suspect])
        refresh = child_role & ~silent & (sl["parent"][s] >= 0)
        # issue 22: with the reliable layer the refresh carries the child's last seqno (b)
        pos = {"b": sl["last_seq"][s[refresh]]} if self.params["reliable"] else {}
        self._send(ctx, me[refresh], sl["parent"][s[refresh]], REFRESH, now[refresh],
                   grp[refresh], a=sl["join_cred"][s[refresh]], **pos)
        # 2. children that stopped refreshing expire
        ci, e = t.children_of(s)
        stale = now[ci] - t.entries["refresh"][e] > self.params["child_expiry_miss"] * period
        if stale.any():
            ctx.count("scribe_children_expired", int(stale.sum()))
            t.remove_children(s[ci[stale]], t.entries["child"][e[stale]])
            ps = np.unique(ci[stale])
            self._prune(ctx, s[ps], self._rows(me[ps], grp[ps], now[ps]))
        # 3. heartbeats to children that got no data within the period
        keep = sl["active"][s]
        ci, e = t.children_of(s[keep])
        idx = np.flatnonzero(keep)[ci]
        quiet = now[idx] - sl["last_sent"][s[idx]] >= period
        idx, e = idx[quiet], e[quiet]
        self._send(ctx, me[idx], t.entries["child"][e], HEARTBEAT, now[idx], grp[idx],
                   **self._path_fields(s[idx], me[idx]))
        sl["last_sent"][s[np.unique(idx)]] = now[np.unique(idx)]
        # 4. RPs whose leaf set changed re-send their record to the new closest nodes
        stale = self.replicas_stale[nodes[qi]] & sl["root"][s] & sl["active"][s]
        self._replicate(ctx, s[stale], now[stale])
        self.replicas_stale[nodes] = False
        if self.params["reliable"]:  # issue 22: sources re-route unacknowledged messages
            self._retry_pending(ctx, nodes, now_n)
        # 5. reschedule while the node holds any tree state
        qi2, _ = t.slots_of_nodes(nodes)
        busy = np.zeros(len(nodes), bool)
        busy[qi2] = True
        self.ticking[nodes[~busy]] = False
        if busy.any():
            ctx.timer(gid_n[busy], now_n[busy] + period, TICK)

    @staticmethod
    def _rows(nodes, groups, times):
        """A minimal message-like record array for helpers that take (dst, group, time)."""
        r = np.zeros(len(nodes), dtype=[("dst", "i8"), ("group", "i4"), ("time", "i8")])
        r["dst"], r["group"], r["time"] = nodes, groups, times
        return r

    # ---- liveness messages ----------------------------------------------------------
    def _heard_from_parent(self, ctx, m):
        """Heartbeats (and data) from the current parent reset the suspicion clock."""
        sl = self.tree.slots
        s = self.tree.find_active(self._local(ctx, m["dst"]), m["group"])
        ok = s >= 0
        ok[ok] = sl["parent"][s[ok]] == m["src"][ok]
        sl["last_heard"][s[ok]] = m["time"][ok]
        return ok

    def _heartbeat(self, ctx, m):
        ok = self._heard_from_parent(ctx, m)
        # a former parent still counts us as a child: make it drop us
        sl = self.tree.slots
        s = self.tree.find_active(self._local(ctx, m["dst"]), m["group"])
        self._take_path(ctx, m[ok], s[ok])
        stray = ~ok & ((s < 0) | (sl["parent"][np.maximum(s, 0)] >= 0))
        self._send(ctx, m["dst"][stray], m["src"][stray], LEAVE, m["time"][stray],
                   m["group"][stray])

    def _refresh(self, ctx, m):
        """A child refreshes its entry; unknown children are (re-)admitted (soft state),
        a node without state for the group tells the child to join again."""
        t = self.tree
        s = t.find_active(self._local(ctx, m["dst"]), m["group"])
        live = s >= 0
        sub = m[live]
        new = t.add_children(s[live], sub["src"], sub["a"], sub["time"])
        if self.params["reliable"] and new.any():
            # issue 22: a child re-admitted here (its entry had expired, e.g. its first
            # refresh came late over a long link) missed what was sent meanwhile and never
            # noticed (it kept hearing from us): catch it up from its last seqno
            self._retransmit(ctx, s[live][new], sub["src"][new], sub["b"][new],
                             sub["time"][new])
        dead = m[~live]
        self._send(ctx, dead["dst"], dead["src"], REJOIN, dead["time"], dead["group"])

    # ---- RP replication -------------------------------------------------------------
    def _replica_targets(self, ctx, slots):
        """(rp, row, replica) per message from root slots to each of their k replicas (row
        indexes slots); None when replication is off."""
        k = self.params["replicas"]
        if not k or not len(slots) or not hasattr(self.overlay, "replica_set"):
            return None
        rp = np.asarray(ctx.nodes)[self.tree.slots["node"][slots]].astype(np.int64)
        reps = np.asarray(self.overlay.replica_set(ctx, rp, k), np.int64).reshape(len(rp), -1)
        row, col = np.nonzero(reps >= 0)
        return rp[row], row, reps[row, col]

    def _replicate(self, ctx, slots, now):
        """Send the RP record of root slots to the k nodes closest to the RP."""
        tg = self._replica_targets(ctx, slots)
        if tg is None:
            return
        sl = self.tree.slots
        src, row, dst = tg
        s = slots[row]
        self._send(ctx, src, dst, REPLICA, np.asarray(now)[row],
                   sl["group"][s], a=sl["acl"][s], b=sl["creator"][s])

    def _replica(self, ctx, m):
        t, sl = self.tree, self.tree.slots
        s = t.get_or_make(self._local(ctx, m["dst"]), m["group"])
        sl["rep_acl"][s] = m["a"]
        sl["rep_creator"][s] = m["b"]

    def new_leafs(self, ctx, local_idx):
        """Leaf sets changed: RPs among these nodes refresh their replicas at their next
        tick (the upcall carries no time, so nothing is sent from here)."""
        if self.params["replicas"]:
            self.replicas_stale[np.atleast_1d(np.asarray(local_idx, np.int64))] = True
