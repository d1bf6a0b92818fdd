"""The tree-building protocol (SPEC 3): JOIN and LEAVE (CREATE: ``rendezvous.py``).

A JOIN is routed towards the group's key; every node it passes adds the previous hop as a
child, and a node that was not on the tree becomes a forwarder and sends the JOIN on as
its own; the RP (the node closest to the key) checks the credential against the ACL. A
node left with no child and no member leaves its parent (LEAVE), and so on up.

Every handler works on the whole sub-batch of one message type in one call (numpy, no
per-message Python work) and gives the same result as handling the messages one by one
in (time, src, seq) order: where several messages of a batch touch the same
(node, group) state, the first one in that order is the one that changes it.
"""

from __future__ import annotations

import numpy as np

from . import handler_kernels
from .groups import GroupDirectory, wrong_credential
from .reliable import OrderedDelivery
from .rendezvous import RendezvousPoints
from .rootpath import RootPathGuard
from .tree import TreeState, first_in_run
from .types import (
    JOIN,
    JOIN_ACK,
    JOIN_REFUSE,
    LEAVE,
    REJOIN,
    TICK,
    BnJoin,
    Join,
    JoinAck,
    JoinRefuse,
    JoinReq,
)
from .wire import Messenger


def first_of_slot_among(s, among) -> np.ndarray:
    """Rows that are the first row of their slot among the rows of mask ``among`` (rows
    outside it get distinct negative keys, so they never hide a later row)."""
    return first_in_run(np.where(among, s, -1 - np.arange(len(s))))



def count_earlier(keys: np.ndarray, flags: np.ndarray) -> np.ndarray:
    """For each row, how many earlier rows (in the given order) with the same key have
    their flag set. O(n log n)."""
    order = np.argsort(keys, kind="stable")
    k, f = keys[order], flags[order].astype(np.int64)
    before = np.cumsum(f) - f
    if len(k):
        starts = np.r_[0, np.flatnonzero(np.diff(k)) + 1]
        run = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(k)]))
        before -= before[starts][run]
    out = np.empty_like(before)
    out[order] = before
    return out

class TreeLeaves:
    """LEAVE: members leave, children go, empty forwarders leave their parent."""

    def __init__(self, tree: TreeState, messenger: Messenger):
        self.tree = tree
        self.messenger = messenger

    def on_leave_req(self, ctx, m) -> None:
        t, sl = self.tree, self.tree.slots
        s = t.find_active(self.messenger.local(ctx, m["dst"]), m["group"])
        hit = s >= 0
        hit[hit] = sl["member"][s[hit]]
        ctx.count("scribe_leave_not_member", int((~hit).sum()))
        sl["member"][s[hit]] = False
        self.prune(ctx, s[hit], m[hit])

    def on_leave(self, ctx, m) -> None:
        t = self.tree
        s = t.find_active(self.messenger.local(ctx, m["dst"]), m["group"])
        hit = s >= 0
        t.remove_children(s[hit], m["src"][hit])
        self.prune(ctx, s[hit], m[hit])

    def prune(self, ctx, s, m) -> None:
        """Slots left with no child and no member leave their parent (once per slot);
        m holds each row's (dst, group, time)."""
        t, sl = self.tree, self.tree.slots
        # evaluated after all the batch's removals: the last row per slot decides
        last = first_in_run(s[::-1])[::-1]
        empty = last & sl["active"][s] & ~sl["member"][s] & ~sl["root"][s] \
            & (sl["n_children"][s] == 0)
        se = s[empty]
        par = sl["parent"][se]
        has_parent = par >= 0
        sub = m[empty]
        self.messenger.send(ctx, sub["dst"][has_parent], par[has_parent], LEAVE,
                            sub["time"][has_parent], sub["group"][has_parent])
        t.reset(se)


class TreeJoins:
    """JOIN: children tables, parents, acknowledgements, credential checks.

    ``ordered`` (the reliable layer, or None) catches repairing children up;
    ``shaper`` (the bottleneck remover, or None) runs after every adoption;
    ``lazy_growth``: a JOIN stops at the first tree node with room, which adopts the
    joiner itself."""

    def __init__(self, tree: TreeState, groups: GroupDirectory, messenger: Messenger,
                 guard: RootPathGuard, rendezvous: RendezvousPoints,
                 ordered: OrderedDelivery | None,
                 shaper, lazy_growth: bool, bound: int):
        self.tree = tree
        self.groups = groups
        self.messenger = messenger
        self.guard = guard
        self.rendezvous = rendezvous
        self.ordered = ordered
        self.shaper = shaper
        self.lazy_growth = lazy_growth
        self.bound = bound
        self.on_take_over = None   # (ctx, slots, nodes, now) after an RP take-over
        # (ctx) -> the first TICK timers' inputs (``TreeRepair.timer_inputs``)
        self.timer_inputs = None

    # ---- JOIN at the member and on the way -------------------------------------------
    def on_join_req(self, ctx, m) -> None:
        """A local member joins: checked at once where the ACL is known; a node not yet on
        the tree becomes a tree node and sends its JOIN."""
        t = self.tree
        s = t.get_or_make(self.messenger.local(ctx, m["dst"]), m["group"])
        sl = t.slots
        active = sl["active"][s]
        cred = m[JoinReq.credential]
        bad = active & wrong_credential(sl["acl"][s], cred)
        self.groups.refuse(ctx, m["group"][bad], m["dst"][bad], "join", m["time"][bad])
        ok = ~bad
        sl["member"][s[ok]] = True
        sl["my_cred"][s[ok]] = cred[ok]
        # first request for the pair only; later ones in the same cell find it active
        start = ok & ~active & first_in_run(s)
        self._send_own_join(ctx, s[start], cred[start], m[start])

    def _activate(self, s, cred) -> None:
        """Slots s join the tree as forwarders (no parent yet) with JOIN credential cred."""
        sl = self.tree.slots
        sl["active"][s] = True
        self.guard.lose_parent(s)
        sl["join_cred"][s] = cred

    def _send_own_join(self, ctx, s, cred, sub) -> None:
        """Slots s (rows sub) become tree nodes and route their own JOIN to the RP, with
        credential cred."""
        self._activate(s, cred)
        self.messenger.route(ctx, sub["dst"], JOIN, sub["time"], sub["group"],
                             **Join.fields(credential=cred,
                                           last_seq=self.tree.slots["last_seq"][s]),
                             origin=sub["dst"])

    def _refuse_join(self, ctx, sub, bad, refused, told) -> None:
        """Log the refusal of the JOIN (or BN_JOIN) rows ``bad`` (of joiner ``refused``)
        and send JOIN_REFUSE to ``told`` (the previous hop)."""
        self.groups.refuse(ctx, sub["group"][bad], refused[bad], "join", sub["time"][bad])
        self.messenger.send(ctx, sub["dst"][bad], told[bad], JOIN_REFUSE, sub["time"][bad],
                            sub["group"][bad],
                            **JoinRefuse.fields(credential=sub[Join.credential][bad]))

    def forward(self, ctx, m, rows, next_hop) -> None:
        """JOINs (rows of m) passing a node; next_hop is set to -1 where they stop."""
        if self.lazy_growth:
            self._forward_lazy(ctx, m, rows, next_hop)
        else:
            self._forward(ctx, m, rows, next_hop)

    def _forward_lazy(self, ctx, m, rows, next_hop) -> None:
        """Lazy growth: nodes off the tree pass the JOIN on untouched; the first tree node
        with room adopts the joiner (the JOIN's origin) directly and stops it."""
        t, sl = self.tree, self.tree.slots
        sub = m[rows].copy()
        s = t.find_active(self.messenger.local(ctx, sub["dst"]), sub["group"])
        on_tree = s >= 0
        node = sl["node"][np.maximum(s, 0)]
        wrong = wrong_credential(sl["acl"][np.maximum(s, 0)], sub[Join.credential])
        # joins reaching one node in the same cell take its room in turn (row order): the
        # adoptions earlier in the batch count against the bound of the later ones
        taken_before = count_earlier(np.where(on_tree, node, -1), on_tree & ~wrong)
        room = on_tree & (t.node_children[node] + taken_before < self.bound)
        bad = room & wrong
        self._refuse_join(ctx, sub, bad, sub["origin"], sub["origin"])
        take = room & ~bad
        sub["src"] = sub["origin"]  # the joiner itself becomes the child
        self.adopt_children(ctx, s[take], sub[take])
        next_hop[rows[room]] = -1

    def _forward(self, ctx, m, rows, next_hop) -> None:
        """JOIN at an intermediate node y from the previous hop p = src (SPEC 3):
        y adds p as a child; if y was not on the tree it becomes a forwarder and the
        JOIN continues as y's own JOIN, otherwise it stops here."""
        t, sl = self.tree, self.tree.slots
        sub = m[rows]
        s = t.get_or_make(self.messenger.local(ctx, sub["dst"]), sub["group"])
        was_active = sl["active"][s].copy()
        bad = was_active & wrong_credential(sl["acl"][s], sub[Join.credential])
        # a JOIN from the node's own parent would close a loop: stop it, the sender
        # will learn its place from the ack it gets elsewhere
        loop = was_active & (sl["parent"][s] == sub["src"])
        ok = ~bad & ~loop
        self._refuse_join(ctx, sub, bad, sub["origin"], sub["src"])
        cont = ok & ~was_active & first_of_slot_among(s, ok)
        self._activate(s[cont], sub[Join.credential][cont])
        if self.ordered is not None:
            # a node that becomes a forwarder for a repair JOIN starts at the repairing
            # child's position (last_seq), not at its new parent's (the JOIN_ACK): its JOIN
            # carries last_seq on, so the parent retransmits last_seq+1.. and the child's
            # gap is filled (at the parent's position it would drop them as old, and the
            # child would stall for good). A child that never had a message (-1) wants all
            # of them: started at the first copy it saw, a live message overtaking the
            # retransmitted ones would make the forwarder drop those as old
            pos = sub[Join.last_seq]
            rj = cont & (sub[Join.repair] == 1) & (pos >= -1)
            sl["last_seq"][s[rj]] = pos[rj]
            sl["synced"][s[rj]] = True
        self.adopt_children(ctx, s[ok], sub[ok])
        looped = ok & was_active & self.guard.on_own_path(s, sub["src"])
        self.guard.rejoin_randomized(ctx, s[looped], sub["dst"][looped], sub["time"][looped],
                                     "scribe_loops_join")
        next_hop[rows[~cont]] = -1
        # the continuing JOIN becomes this node's own JOIN
        r = rows[cont]
        m["origin"][r] = m["dst"][r]
        m["hops"][r] = 0
        m["path_us"][r] = 0

    def adopt_children(self, ctx, s, sub) -> None:
        """Add sub['src'] (JOIN or BN_JOIN rows: they share their fields) as children of
        slots s and acknowledge (ACL token, seqno)."""
        if not len(s):
            return
        self.tree.add_children(s, sub["src"], sub[Join.credential], sub["time"])
        sl = self.tree.slots
        self.messenger.send(ctx, sub["dst"], sub["src"], JOIN_ACK, sub["time"], sub["group"],
                            **JoinAck.fields(acl=sl["acl"][s], parent_seq=sl["last_seq"][s]),
                            **self.guard.path_fields(s, sub["dst"]))
        if self.ordered is not None:  # joinHandler: catch a repairing child up
            rp = sub[Join.repair] == 1
            self.ordered.retransmit(ctx, s[rp], sub["src"][rp], sub[Join.last_seq][rp],
                                    sub["time"][rp])
        if self.shaper is not None:
            self.shaper.after_adopt(ctx, sl["node"][s].astype(np.int64), sub["time"])

    def forward_compiled(self, ctx, m, next_hop) -> bool:
        """The JOIN rows of a forward upcall in one compiled pass: as :meth:`forward`
        without the reliable layer, root paths, a shaper and lazy growth (Scribe registers
        it only then). False (nothing done) when it declines."""
        return self._joins_compiled(ctx, m, np.zeros(len(m), bool), next_hop, len(m))

    def routed_compiled(self, ctx, m, here, next_hop) -> bool:
        """A routing step's messages in one compiled pass: JOINs delivered here (rows
        ``here``) as :meth:`at_rp_compiled`, then the rest as :meth:`forward_compiled`.
        False (nothing done) when it declines."""
        return self._joins_compiled(ctx, m, here, next_hop, len(m))

    def at_rp_compiled(self, ctx, m) -> bool:
        """JOINs at their RP in one compiled pass: as :meth:`on_join_at_rp` where the RP's
        record accepts every one, without the reliable layer, root paths, a shaper and
        lazy growth (Scribe registers it only then). False (nothing done) when it
        declines."""
        return self._joins_compiled(ctx, m, np.ones(len(m), bool),
                                    np.full(len(m), -1, np.int64), 0)

    def _joins_compiled(self, ctx, m, here, next_hop, new_slots) -> bool:
        """``handler_kernels.on_routed_joins`` over JOIN rows ``m``: those of mask ``here``
        at their RP, the others passing their node towards ``next_hop`` (changed in place),
        after room for ``new_slots`` slots and a child entry per row; with tree repair,
        the first TICK timers of each upcall's nodes (``TreeRepair.start_ticks``) in the
        same call. False (nothing done) when it declines."""
        t = self.tree
        t.make_room(new_slots, len(m))
        sl, en, keys = t.slots, t.entries, self.messenger.groups.table
        status, s_size, e_size = self.messenger.send_compiled(
            ctx, len(m), handler_kernels.on_routed_joins, m,
            ctx.local(m["dst"]).astype(np.int64),   # (the compiled loop's li type)
            here, next_hop, t.slot_index.arrays, t.n_groups, t.slot_index.size,
            t.entry_index.arrays, t.n_nodes, t.entry_index.size, sl["node"], sl["group"],
            sl["active"], sl["root"], sl["parent"], sl["acl"], sl["join_cred"],
            sl["last_seq"], sl["n_children"], t.node_children, en["valid"], en["slot"],
            en["child"], en["cred"], en["refresh"], keys["id_hi"], keys["id_lo"],
            *self.timer_inputs(ctx), JOIN, JOIN_ACK, TICK)
        if status != handler_kernels.DONE:
            return False
        t.inserted(s_size, e_size)
        return True

    def on_bn_join(self, ctx, m) -> None:
        """A child dropped by the bottleneck remover asks this node (its former sibling) to
        adopt it: a JOIN that stops here."""
        t, sl = self.tree, self.tree.slots
        s = t.get_or_make(self.messenger.local(ctx, m["dst"]), m["group"])
        was_active = sl["active"][s].copy()
        cred = m[BnJoin.credential]
        bad = was_active & wrong_credential(sl["acl"][s], cred)
        self._refuse_join(ctx, m, bad, m["src"], m["src"])
        ok = ~bad
        # the sibling left the tree meanwhile: it becomes a forwarder again
        start = ok & ~was_active & first_of_slot_among(s, ok)
        self._send_own_join(ctx, s[start], cred[start], m[start])
        self.adopt_children(ctx, s[ok], m[ok])
        looped = ok & was_active & self.guard.on_own_path(s, m["src"])
        self.guard.rejoin_randomized(ctx, s[looped], m["dst"][looped], m["time"][looped],
                                     "scribe_loops_join")

    # ---- JOIN at the RP and the answers -------------------------------------------
    def on_join_at_rp(self, ctx, m) -> None:
        """JOIN delivered at the RP: checked against the ACL (or the replica of the record,
        which then takes over as the root); accepted joiners become children."""
        t, sl = self.tree, self.tree.slots
        if self.lazy_growth:  # the RP deals with the joiner itself
            m = m.copy()
            m["src"] = m["origin"]
        s = t.get_or_make(self.messenger.local(ctx, m["dst"]), m["group"])
        was_root = sl["root"][s] & (sl["acl"][s] >= 0)
        replica = ~was_root & (sl["rep_acl"][s] >= 0)
        acl = np.where(was_root, sl["acl"][s], sl["rep_acl"][s])
        cred = m[Join.credential]
        bad = ~(was_root | replica) | (cred != acl)
        remote = m["src"] != m["dst"]
        self.groups.refuse(ctx, m["group"][bad], m["origin"][bad], "join", m["time"][bad])
        rb = bad & remote
        self.messenger.send(ctx, m["dst"][rb], m["src"][rb], JOIN_REFUSE, m["time"][rb],
                            m["group"][rb], **JoinRefuse.fields(credential=cred[rb]))
        # the RP itself asked to join with a bad credential: it is no member
        sl["member"][s[bad & ~remote]] = False
        ok = ~bad
        take = ok & replica & first_of_slot_among(s, ok & replica)
        st = s[take]
        if len(st):
            self.rendezvous.take_over(ctx, st, m["time"][take])
            if self.on_take_over is not None:
                self.on_take_over(ctx, st, m["dst"][take], m["time"][take])
        sl["active"][s[ok]] = True
        add = ok & remote
        self.adopt_children(ctx, s[add], m[add])

    def on_join_ack(self, ctx, m) -> None:
        """The parent accepted: link to it, learn the ACL, the root path and (reliable
        layer) the starting position; a node that left meanwhile tells it to drop it."""
        t, sl = self.tree, self.tree.slots
        s = t.find(self.messenger.local(ctx, m["dst"]), m["group"])
        live = s >= 0
        live[live] = sl["active"][s[live]]
        sa = s[live]
        sl["parent"][sa] = m["src"][live]
        sl["last_heard"][sa] = m["time"][live]
        self.guard.take_path(ctx, m[live], sa)
        if self.ordered is not None:  # a fresh joiner starts at its parent's position
            pos = m[JoinAck.parent_seq][live]
            start = ~sl["synced"][sa] & (pos >= 0)
            sl["last_seq"][sa[start]] = pos[start]
            sl["synced"][sa[start]] = True
        acl = m[JoinAck.acl][live]
        known = acl >= 0
        sl["acl"][sa[known]] = acl[known]
        stale = ~live
        self.messenger.send(ctx, m["dst"][stale], m["src"][stale], LEAVE, m["time"][stale],
                            m["group"][stale])

    def join_ack_compiled(self, ctx, m) -> bool:
        """A JOIN_ACK cell in one compiled pass (``handler_kernels.on_join_ack``): as
        :meth:`on_join_ack` without the reliable layer and root paths (Scribe registers it
        only then). False (nothing done) when it declines."""
        t, keys = self.tree, self.messenger.groups.table
        status, = self.messenger.send_compiled(
            ctx, len(m), handler_kernels.on_join_ack, m, ctx.local(m["dst"]),
            t.slot_index.arrays, t.n_groups, t.slots["active"], t.slots["parent"],
            t.slots["last_heard"], t.slots["acl"], keys["id_hi"], keys["id_lo"], JOIN_ACK,
            LEAVE)
        return status == handler_kernels.DONE

    def on_join_refuse(self, ctx, m) -> None:
        """Our JOIN (carrying the refused credential) was refused upstream: pass the
        refusal to the children that joined with that credential, make the others join
        again."""
        t, sl = self.tree, self.tree.slots
        s = t.find_active(self.messenger.local(ctx, m["dst"]), m["group"])
        hit = s >= 0
        sub, s = m[hit], s[hit]
        if not len(s):
            return
        qi, e = t.clear_children(s)
        ch = t.entries["child"][e]
        refused = sub[JoinRefuse.credential]
        same = t.entries["cred"][e] == refused[qi]
        r = qi[same]
        self.messenger.send(ctx, sub["dst"][r], ch[same], JOIN_REFUSE, sub["time"][r],
                            sub["group"][r], **JoinRefuse.fields(credential=refused[r]))
        r = qi[~same]
        self.messenger.send(ctx, sub["dst"][r], ch[~same], REJOIN, sub["time"][r],
                            sub["group"][r])
        lost = sl["member"][s] & (sl["my_cred"][s] == refused)
        sl["member"][s[lost]] = False
        again = sl["member"][s] & ~sl["root"][s]
        self.guard.lose_parent(s)
        sa = s[again]
        sl["join_cred"][sa] = sl["my_cred"][sa]
        self.messenger.route(ctx, sub["dst"][again], JOIN, sub["time"][again],
                             sub["group"][again],
                             **Join.fields(credential=sl["my_cred"][sa],
                                           last_seq=sl["last_seq"][sa]),
                             origin=sub["dst"][again])
        gone = ~again & ~sl["root"][s]
        t.reset(s[gone])

    def on_rejoin(self, ctx, m) -> None:
        """The parent lost its place (or state) for us: join again (a repair JOIN)."""
        t, sl = self.tree, self.tree.slots
        s = t.find_active(self.messenger.local(ctx, m["dst"]), m["group"])
        hit = (s >= 0) & first_in_run(s)
        sub, s = m[hit], s[hit]
        self.guard.lose_parent(s)
        self.messenger.route(ctx, sub["dst"], JOIN, sub["time"], sub["group"],
                             **t.repair_join(s, sl["join_cred"][s]),
                             origin=sub["dst"])
