"""Scribe (Castro et al., JSAC 2002) as the application on top of Pastry.

``Scribe(params)`` is the ``app`` object Pastry drives through the overlay API of
docs/ARCHITECTURE.md: Pastry calls ``forward``/``deliver``/``receive``/``new_leafs`` on it
and passes on the stack calls ``setup``/``on_fail``/``on_recover``/``checkpoint``/
``restore``/``dump``. Scribe reaches the network only through ``overlay.route`` and
``overlay.send`` (the Pastry object, bound with ``bind``).

Every handler works on the whole sub-batch of one message type in one call (numpy,
no per-message Python work) and gives the same result as handling the messages one by
one in (time, src, seq) order: where several messages of a batch touch the same
(node, group) state, the first one in that order is the one that changes it.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ._engine import NO_PAYLOAD, msgs_of
from .bottleneck import pick_drops
from .reliable import MessageRing, ReliableMixin
from .repair import RepairMixin
from .rootpath import RootPathMixin, RootPaths
from .tree import TreeState, first_in_run
from .types import (
    ADOPT,
    BN_JOIN,
    BN_SIBLING,
    COLLAPSE_REQ,
    COLLAPSE_WAVE,
    CREATE,
    CREATE_REQ,
    DATA,
    HEARTBEAT,
    JOIN,
    JOIN_ACK,
    JOIN_REFUSE,
    JOIN_REQ,
    LEAVE,
    LEAVE_REQ,
    MCAST,
    MCAST_REQ,
    REFRESH,
    REJOIN,
    REPLICA,
    REPLICA_DATA,
    RP_ADDR,
    TICK,
    TYPE_NAMES,
)

DEFAULTS = {
    "variant": None,          # label for delivery / tree_edge rows; None: derived
    "groups_key": "groups",   # name of the shared group table (ctx.shared)
    "bottleneck": False,      # run the bottleneck remover
    "bottleneck_bound": 64,   # bound on the total children of a node (all groups)
    "heartbeat_us": None,     # tree maintenance period; None disables repair
    "heartbeat_miss": 3,      # periods without parent news before re-joining
    "child_expiry_miss": 3,   # periods without refresh before a child entry expires
    "replicas": 5,            # RP record copies on the k closest nodes (0: none)
    "rp_cache_ttl_us": None,  # sources re-route to the RP after this; None: 3 periods
    "reliable": False,        # ordered reliable delivery layer (root numbering, buffers)
    "reliable_buffer": 256,   # messages buffered per (node, group)
    "max_tree_hops": 255,     # DATA copies beyond this many hops are dropped (loop guard)
    "root_paths": None,       # pass root paths down the trees to detect loops (SPEC 3);
                              # None: on with the bottleneck remover
    "root_path_max": 32,      # longest root path kept; deeper counts as a loop
    "lazy_growth": False,     # variant: a JOIN stops at the first tree node, which adopts
                              # the joiner itself unless it has bottleneck_bound children
}


class ScribeError(RuntimeError):
    """Scribe was used outside its contract (e.g. not bound to an overlay)."""


class Scribe(RepairMixin, ReliableMixin, RootPathMixin):
    TYPE_NAMES = TYPE_NAMES

    def __init__(self, params: dict | None = None):
        params = dict(params or {})
        unknown = set(params) - set(DEFAULTS)
        if unknown:
            raise ValueError(f"Scribe: unknown parameter(s) {sorted(unknown)}")
        self.params = {**DEFAULTS, **params}
        bound = self.params["bottleneck_bound"]
        if not isinstance(bound, (int, np.integer)) or bound < 1:
            raise ValueError(f"Scribe: bottleneck_bound must be a positive integer, got {bound!r}")
        hb = self.params["heartbeat_us"]
        if hb is not None and (not isinstance(hb, (int, np.integer)) or hb <= 0):
            raise ValueError(f"Scribe: heartbeat_us must be a positive integer or None, got {hb!r}")
        if self.params["rp_cache_ttl_us"] is None and hb:
            self.params["rp_cache_ttl_us"] = self.params["heartbeat_miss"] * hb
        self.overlay = None
        self.tree: TreeState | None = None
        self.collapsed = False
        self._groups = None

    # ---- wiring -----------------------------------------------------------------
    def bind(self, overlay):
        """Attach the overlay (Pastry) that offers ``route`` and ``send``."""
        self.overlay = overlay
        return self

    @property
    def variant(self) -> str:
        if self.params["variant"]:
            return self.params["variant"]
        if self.collapsed:
            return "collapsed"
        return "bottleneck" if self.params["bottleneck"] else "scribe"

    def setup(self, ctx):
        if self.overlay is None:
            raise ScribeError("Scribe.setup: no overlay bound (call scribe.bind(pastry))")
        groups = ctx.shared(self.params["groups_key"])
        if groups is None or "id_hi" not in groups:
            raise ScribeError("Scribe.setup: shared group table missing (see groups.group_table)")
        self._groups = groups
        self.tree = TreeState(len(ctx.nodes), ctx.n_nodes, len(groups["id_hi"]))
        self.ticking = np.zeros(len(ctx.nodes), bool)
        self.replicas_stale = np.zeros(len(ctx.nodes), bool)
        self.ring = MessageRing(self.params["reliable_buffer"])
        self._reliable_setup()  # issue 22: source numbering, RP fifo, replicated stream
        use_paths = self.params["root_paths"]
        if use_paths is None:
            use_paths = self.params["bottleneck"]
        self.paths = RootPaths(self.params["root_path_max"]) if use_paths else None
        self._payload = NO_PAYLOAD

    def _key(self, group):
        return self._groups["id_hi"][group], self._groups["id_lo"][group]

    def _local(self, ctx, nodes):
        li = np.asarray(ctx.local(nodes), dtype=np.int64)
        if len(li) and li.min() < 0:
            raise ScribeError("Scribe: a message for a node of another shard reached this shard")
        return li

    # ---- sending helpers ----------------------------------------------------------
    def _send(self, ctx, src, dst, type_code, sent, group, **fields):
        if len(np.atleast_1d(src)) == 0:
            return
        if np.min(dst) < 0:  # a bug upstream, never a network event: fail loudly
            raise ScribeError(f"Scribe: {TYPE_NAMES[type_code]} addressed to node -1")
        hi, lo = self._key(group)
        self.overlay.send(ctx, src, dst, type_code, sent, group=group, key_hi=hi, key_lo=lo,
                          **fields)

    def _route(self, ctx, src, type_code, sent, group, **fields):
        if len(np.atleast_1d(src)) == 0:
            return
        hi, lo = self._key(group)
        self.overlay.route(ctx, src, hi, lo, type_code, sent, group=group, **fields)

    def _refuse(self, ctx, group, node, op, time):
        if len(group):
            ctx.log("refused", group=np.asarray(group, np.int32), node=np.asarray(node, np.int32),
                    op=np.full(len(group), op, dtype=object), time=np.asarray(time, np.int64))
            ctx.count(f"scribe_refused_{op}", len(group))

    # ---- overlay upcalls ----------------------------------------------------------
    def receive(self, ctx, batch):
        """Direct messages (and self-messages: requests, timers)."""
        self._payload = getattr(batch, "payload", None)
        if self._payload is None:
            self._payload = NO_PAYLOAD
        self._dispatch(ctx, msgs_of(batch), self._RECEIVE)

    def deliver(self, ctx, batch):
        """Routed messages at the live node closest to their key (the RP)."""
        self._dispatch(ctx, msgs_of(batch), self._DELIVER)

    def forward(self, ctx, batch, next_hop):
        """Routed messages passing a node: JOINs build the tree here (SPEC 3)."""
        m = msgs_of(batch)
        next_hop = np.asarray(next_hop).copy()
        is_join = (m["type"] == JOIN) & (m["src"] != m["dst"])  # not the origin's own call
        if is_join.any():
            rows = np.flatnonzero(is_join)
            if self.params["lazy_growth"]:
                self._forward_join_lazy(ctx, m, rows, next_hop)
                return batch, next_hop
            self._forward_join(ctx, m, rows, next_hop)
            self._start_ticks(ctx, m[rows])
        return batch, next_hop

    def _dispatch(self, ctx, m, table):
        if not len(m):
            return
        types = np.unique(m["type"])
        for t in types:  # ascending type code, order within a type preserved
            handler = table.get(int(t))
            sub = m[m["type"] == t]
            if handler is None:
                ctx.count("scribe_unhandled", len(sub))
                continue
            handler(self, ctx, sub)
        self._start_ticks(ctx, m)

    # ---- CREATE -------------------------------------------------------------------
    def _create_req(self, ctx, m):
        self._route(ctx, m["dst"], CREATE, m["time"], m["group"], a=m["a"], origin=m["dst"])

    def _deliver_create(self, ctx, m):
        t = self.tree
        li = self._local(ctx, m["dst"])
        s = t.get_or_make(li, m["group"])
        had = t.slots["root"][s] & (t.slots["acl"][s] >= 0)
        first = first_in_run(s) & ~had
        dup = ~first
        sf = s[first]
        t.slots["active"][sf] = True
        t.slots["root"][sf] = True
        t.slots["acl"][sf] = m["a"][first]
        t.slots["creator"][sf] = m["origin"][first]
        g = m["group"][first]
        if len(g):
            ctx.log("group", group=g.astype(np.int32),
                    rank=self._groups["rank"][g].astype(np.int32),
                    size=self._groups["size"][g].astype(np.int32),
                    rp=m["dst"][first].astype(np.int32),
                    creator=m["origin"][first].astype(np.int32),
                    id_hex=np.asarray(self._groups["id_hex"][g], dtype=object))
        self._refuse(ctx, m["group"][dup], m["origin"][dup], "create", m["time"][dup])
        self._replicate(ctx, sf, m["time"][first])

    # ---- JOIN ---------------------------------------------------------------------
    def _join_req(self, ctx, m):
        t = self.tree
        li = self._local(ctx, m["dst"])
        s = t.get_or_make(li, m["group"])
        sl = t.slots
        active = sl["active"][s]
        acl = sl["acl"][s]
        bad = active & (acl >= 0) & (m["a"] != acl)  # the node knows the ACL: check at once
        self._refuse(ctx, m["group"][bad], m["dst"][bad], "join", m["time"][bad])
        ok = ~bad
        sl["member"][s[ok]] = True
        sl["my_cred"][s[ok]] = m["a"][ok]
        # a node not yet on the tree becomes a tree node and sends its JOIN (first request
        # for the pair only; later ones in the same cell find it active)
        start = ok & ~active & first_in_run(s)
        ss = s[start]
        sl["active"][ss] = True
        self._lose_parent(ss)
        sl["join_cred"][ss] = m["a"][start]
        sub = m[start]
        self._route(ctx, sub["dst"], JOIN, sub["time"], sub["group"], a=sub["a"],
                    b=sl["last_seq"][ss], origin=sub["dst"])

    def _forward_join_lazy(self, ctx, m, rows, next_hop):
        """Lazy growth: nodes off the tree pass the JOIN on untouched; the first tree node
        with room adopts the joiner (the JOIN's origin) directly and stops it."""
        t, sl = self.tree, self.tree.slots
        sub = m[rows].copy()
        s = t.find_active(self._local(ctx, sub["dst"]), sub["group"])
        on_tree = s >= 0
        room = on_tree.copy()
        room[on_tree] = t.node_children[sl["node"][s[on_tree]]] < self.params["bottleneck_bound"]
        acl = sl["acl"][np.maximum(s, 0)]
        bad = room & (acl >= 0) & (sub["a"] != acl)
        self._refuse(ctx, sub["group"][bad], sub["origin"][bad], "join", sub["time"][bad])
        self._send(ctx, sub["dst"][bad], sub["origin"][bad], JOIN_REFUSE, sub["time"][bad],
                   sub["group"][bad], a=sub["a"][bad])
        take = room & ~bad
        sub["src"] = sub["origin"]  # the joiner itself becomes the child
        self._adopt_children(ctx, s[take], sub[take])
        next_hop[rows[room]] = -1

    def _forward_join(self, ctx, m, rows, next_hop):
        """JOIN at an intermediate node y from the previous hop p = src (SPEC 3):
        y adds p as a child; if y was not on the tree it becomes a forwarder and the
        JOIN continues as y's own JOIN, otherwise it stops here."""
        t, sl = self.tree, self.tree.slots
        sub = m[rows]
        li = self._local(ctx, sub["dst"])
        s = t.get_or_make(li, sub["group"])
        was_active = sl["active"][s].copy()
        acl = sl["acl"][s]
        bad = was_active & (acl >= 0) & (sub["a"] != acl)
        # a JOIN from the node's own parent would close a loop: stop it, the sender
        # will learn its place from the ack it gets elsewhere
        loop = was_active & (sl["parent"][s] == sub["src"])
        ok = ~bad & ~loop
        self._refuse(ctx, sub["group"][bad], sub["origin"][bad], "join", sub["time"][bad])
        self._send(ctx, sub["dst"][bad], sub["src"][bad], JOIN_REFUSE, sub["time"][bad],
                   sub["group"][bad], a=sub["a"][bad])
        cont = ok & ~was_active & first_in_run(np.where(ok, s, -1 - np.arange(len(s))))
        sc = s[cont]
        sl["active"][sc] = True
        self._lose_parent(sc)
        sl["join_cred"][sc] = sub["a"][cont]
        if self.params["reliable"]:
            # issue 22: a node that becomes a forwarder for a repair JOIN (c = 1) starts at
            # the repairing child's position (b), not at its new parent's (the JOIN_ACK):
            # its JOIN carries b on, so the parent retransmits b+1.. and the child's gap is
            # filled; synced at the parent's position it dropped them as old and the child
            # stalled for good
            rj = cont & (sub["c"] == 1) & (sub["b"] >= 0)
            sl["last_seq"][s[rj]] = sub["b"][rj]
            sl["synced"][s[rj]] = True
        self._adopt_children(ctx, s[ok], sub[ok])
        looped = ok & was_active & self._on_own_path(s, sub["src"])
        self._rejoin_randomized(ctx, s[looped], sub["dst"][looped], sub["time"][looped],
                                "scribe_loops_join")
        stop = ~cont
        next_hop[rows[stop]] = -1
        # the continuing JOIN becomes this node's own JOIN
        r = rows[cont]
        m["origin"][r] = m["dst"][r]
        m["hops"][r] = 0
        m["path_us"][r] = 0

    def _adopt_children(self, ctx, s, sub):
        """Add sub['src'] as children of slots s and acknowledge (ACL token, seqno)."""
        if not len(s):
            return
        self.tree.add_children(s, sub["src"], sub["a"], sub["time"])
        sl = self.tree.slots
        self._send(ctx, sub["dst"], sub["src"], JOIN_ACK, sub["time"], sub["group"],
                   a=sl["acl"][s], b=sl["last_seq"][s], **self._path_fields(s, sub["dst"]))
        if self.params["reliable"]:  # joinHandler: catch a repairing child up
            rp = sub["c"] == 1
            self._retransmit(ctx, s[rp], sub["src"][rp], sub["b"][rp], sub["time"][rp])
        if self.params["bottleneck"]:
            self._enforce_bound(ctx, sl["node"][s].astype(np.int64), sub["time"])

    # ---- bottleneck remover -------------------------------------------------------
    def _enforce_bound(self, ctx, li, times):
        """Nodes over the children bound drop children one at a time (largest table,
        farthest child) until at the bound or nothing useful is left to drop. The dropped
        child gets one BN_SIBLING per former sibling. O(rounds x their children)."""
        t = self.tree
        bound = self.params["bottleneck_bound"]
        nodes, inv = np.unique(li, return_inverse=True)
        now = np.full(len(nodes), np.iinfo(np.int64).min, np.int64)
        np.maximum.at(now, inv, np.asarray(times, np.int64))  # each node's own clock
        while len(nodes):
            over = t.node_children[nodes] > bound
            nodes, now = nodes[over], now[over]
            if not len(nodes):
                break
            rows, slots, e = pick_drops(t, ctx, nodes)
            if not len(rows):
                break
            child = t.entries["child"][e].astype(np.int64)
            t.remove_children(slots, child)
            parent = np.asarray(ctx.nodes)[nodes[rows]].astype(np.int64)
            qi, es = t.children_of(slots)
            sib = t.entries["child"][es].astype(np.int64)
            self._send(ctx, parent[qi], child[qi], BN_SIBLING, now[rows][qi],
                       t.slots["group"][slots][qi],
                       a=sib, b=np.asarray(ctx.latency(parent[qi], sib), np.int64),
                       c=parent[qi])
            ctx.count("scribe_bottleneck_drops", len(rows))
            nodes, now = nodes[rows], now[rows]

    def _bn_sibling(self, ctx, m):
        """A dropped child probes its former siblings and joins under the one that
        minimizes delay(child, sibling) + delay(sibling, parent)."""
        t, sl = self.tree, self.tree.slots
        n = len(m)
        if not n:
            return
        probe = np.asarray(ctx.latency(m["dst"], m["a"]), np.int64)
        ctx.log("probe", node=m["dst"].astype(np.int32), target=m["a"].astype(np.int32),
                group=m["group"].astype(np.int32), time=m["time"].astype(np.int64))
        ctx.count("scribe_probes", n)
        cost = probe + m["b"]
        o = np.lexsort((m["a"], cost, m["group"], m["dst"]))
        mo = m[o]
        first = np.r_[True, (mo["dst"][1:] != mo["dst"][:-1]) | (mo["group"][1:] != mo["group"][:-1])]
        pick = mo[first]
        s = t.find_active(self._local(ctx, pick["dst"]), pick["group"])
        live = s >= 0
        pick, s = pick[live], s[live]
        self._lose_parent(s)
        self._send(ctx, pick["dst"], pick["a"], BN_JOIN, pick["time"], pick["group"],
                   a=sl["join_cred"][s], b=sl["last_seq"][s], c=np.ones(len(s), np.int64))

    def _bn_join(self, ctx, m):
        """A dropped child asks this node (its former sibling) to adopt it."""
        t, sl = self.tree, self.tree.slots
        s = t.get_or_make(self._local(ctx, m["dst"]), m["group"])
        was_active = sl["active"][s].copy()
        acl = sl["acl"][s]
        bad = was_active & (acl >= 0) & (m["a"] != acl)
        self._refuse(ctx, m["group"][bad], m["src"][bad], "join", m["time"][bad])
        self._send(ctx, m["dst"][bad], m["src"][bad], JOIN_REFUSE, m["time"][bad],
                   m["group"][bad], a=m["a"][bad])
        ok = ~bad
        # the sibling left the tree meanwhile: it becomes a forwarder again
        start = ok & ~was_active & first_in_run(np.where(ok, s, -1 - np.arange(len(s))))
        ss = s[start]
        sl["active"][ss] = True
        self._lose_parent(ss)
        sl["join_cred"][ss] = m["a"][start]
        sub = m[start]
        self._route(ctx, sub["dst"], JOIN, sub["time"], sub["group"], a=sub["a"],
                    b=sl["last_seq"][ss], origin=sub["dst"])
        self._adopt_children(ctx, s[ok], m[ok])
        looped = ok & was_active & self._on_own_path(s, m["src"])
        self._rejoin_randomized(ctx, s[looped], m["dst"][looped], m["time"][looped],
                                "scribe_loops_join")

    def _deliver_join(self, ctx, m):
        t, sl = self.tree, self.tree.slots
        if self.params["lazy_growth"]:  # the RP deals with the joiner itself
            m = m.copy()
            m["src"] = m["origin"]
        li = self._local(ctx, m["dst"])
        s = t.get_or_make(li, m["group"])
        was_root = sl["root"][s] & (sl["acl"][s] >= 0)
        replica = ~was_root & (sl["rep_acl"][s] >= 0)
        acl = np.where(was_root, sl["acl"][s], sl["rep_acl"][s])
        bad = ~(was_root | replica) | (m["a"] != acl)
        self._refuse(ctx, m["group"][bad], m["origin"][bad], "join", m["time"][bad])
        remote = m["src"] != m["dst"]
        rb = bad & remote
        self._send(ctx, m["dst"][rb], m["src"][rb], JOIN_REFUSE, m["time"][rb], m["group"][rb],
                   a=m["a"][rb])
        # the RP itself asked to join with a bad credential: it is no member
        lb = bad & ~remote
        sl["member"][s[lb]] = False
        ok = ~bad
        # the old root failed and Pastry now routes here: take over from the replica
        take = ok & replica & first_in_run(np.where(ok & replica, s, -1 - np.arange(len(s))))
        st = s[take]
        if len(st):
            ctx.count("scribe_rp_takeovers", len(st))
            sl["root"][st] = True
            self._lose_parent(st)
            sl["acl"][st] = sl["rep_acl"][st]
            sl["creator"][st] = sl["rep_creator"][st]
            sl["active"][st] = True
            self._replicate(ctx, st, m["time"][take])
            if self.params["reliable"]:  # issue 22: go on with the replicated stream
                self._take_over_stream(ctx, st, m["dst"][take], m["time"][take])
        sl["active"][s[ok]] = True
        add = ok & remote
        self._adopt_children(ctx, s[add], m[add])

    def _join_ack(self, ctx, m):
        t, sl = self.tree, self.tree.slots
        li = self._local(ctx, m["dst"])
        s = t.find(li, m["group"])
        live = s >= 0
        live[live] = sl["active"][s[live]]
        sa = s[live]
        sl["parent"][sa] = m["src"][live]
        sl["last_heard"][sa] = m["time"][live]
        self._take_path(ctx, m[live], sa)
        if self.params["reliable"]:  # a fresh joiner starts at its parent's position
            start = ~sl["synced"][sa] & (m["b"][live] >= 0)
            sl["last_seq"][sa[start]] = m["b"][live][start]
            sl["synced"][sa[start]] = True
        known = m["a"][live] >= 0
        sl["acl"][sa[known]] = m["a"][live][known]
        # the node left meanwhile: tell the parent to drop the stale child
        stale = ~live
        self._send(ctx, m["dst"][stale], m["src"][stale], LEAVE, m["time"][stale],
                   m["group"][stale])

    def _join_refuse(self, ctx, m):
        """Our JOIN (carrying credential a) was refused upstream: pass the refusal to the
        children that joined with that credential, make the others join again."""
        t, sl = self.tree, self.tree.slots
        li = self._local(ctx, m["dst"])
        s = t.find_active(li, m["group"])
        hit = s >= 0
        sub, s = m[hit], s[hit]
        if not len(s):
            return
        qi, e = t.clear_children(s)
        ch = t.entries["child"][e]
        same = t.entries["cred"][e] == sub["a"][qi]
        self._send(ctx, sub["dst"][qi[same]], ch[same], JOIN_REFUSE, sub["time"][qi[same]],
                   sub["group"][qi[same]], a=sub["a"][qi[same]])
        self._send(ctx, sub["dst"][qi[~same]], ch[~same], REJOIN, sub["time"][qi[~same]],
                   sub["group"][qi[~same]])
        lost = sl["member"][s] & (sl["my_cred"][s] == sub["a"])
        sl["member"][s[lost]] = False
        again = sl["member"][s] & ~sl["root"][s]
        self._lose_parent(s)
        sa = s[again]
        sl["join_cred"][sa] = sl["my_cred"][sa]
        self._route(ctx, sub["dst"][again], JOIN, sub["time"][again], sub["group"][again],
                    a=sl["my_cred"][sa], b=sl["last_seq"][sa], origin=sub["dst"][again])
        gone = ~again & ~sl["root"][s]
        t.reset(s[gone])

    def _rejoin(self, ctx, m):
        t, sl = self.tree, self.tree.slots
        li = self._local(ctx, m["dst"])
        s = t.find_active(li, m["group"])
        hit = (s >= 0) & first_in_run(s)
        sub, s = m[hit], s[hit]
        self._lose_parent(s)
        self._route(ctx, sub["dst"], JOIN, sub["time"], sub["group"], a=sl["join_cred"][s],
                    b=sl["last_seq"][s], c=np.ones(len(s), np.int64), origin=sub["dst"])

    # ---- LEAVE --------------------------------------------------------------------
    def _leave_req(self, ctx, m):
        t, sl = self.tree, self.tree.slots
        li = self._local(ctx, m["dst"])
        s = t.find_active(li, m["group"])
        hit = s >= 0
        hit[hit] = sl["member"][s[hit]]
        ctx.count("scribe_leave_not_member", int((~hit).sum()))
        sl["member"][s[hit]] = False
        self._prune(ctx, s[hit], m[hit])

    def _leave(self, ctx, m):
        t, _sl = self.tree, self.tree.slots
        li = self._local(ctx, m["dst"])
        s = t.find_active(li, m["group"])
        hit = s >= 0
        t.remove_children(s[hit], m["src"][hit])
        self._prune(ctx, s[hit], m[hit])

    def _prune(self, ctx, s, m):
        """Slots left with no child and no member leave their parent (once per slot)."""
        t, sl = self.tree, self.tree.slots
        last = np.zeros(len(s), bool)
        if len(s):  # evaluate after all the batch's removals: the last row per slot decides
            _, idx = np.unique(s[::-1], return_index=True)
            last[len(s) - 1 - idx] = True
        empty = last & sl["active"][s] & ~sl["member"][s] & ~sl["root"][s] \
            & (sl["n_children"][s] == 0)
        se = s[empty]
        par = sl["parent"][se]
        has_parent = par >= 0
        sub = m[empty]
        self._send(ctx, sub["dst"][has_parent], par[has_parent], LEAVE,
                   sub["time"][has_parent], sub["group"][has_parent])
        t.reset(se)

    # ---- MULTICAST ----------------------------------------------------------------
    def _mcast_req(self, ctx, m):
        t, sl = self.tree, self.tree.slots
        li = self._local(ctx, m["dst"])
        s = t.get_or_make(li, m["group"])
        rp = sl["rp_cache"][s]
        cached = rp >= 0
        ttl = self.params["rp_cache_ttl_us"]
        if ttl:  # a cached RP may have failed: rediscover it by routing now and then
            cached &= m["time"] - sl["rp_cache_time"][s] <= ttl
        b = m["b"]
        if self.params["reliable"]:  # issue 22: the source numbers and keeps its messages
            b = self._source_number(ctx, m, s)
        fields = {"a": m["a"], "b": b, "c": m["time"], "origin": m["dst"]}
        d = {k: v[cached] for k, v in fields.items()}
        self._send(ctx, m["dst"][cached], rp[cached], MCAST, m["time"][cached],
                   m["group"][cached], **d)
        r = {k: v[~cached] for k, v in fields.items()}
        self._route(ctx, m["dst"][~cached], MCAST, m["time"][~cached], m["group"][~cached], **r)

    def _mcast_at_rp(self, ctx, m, routed: bool):
        t, sl = self.tree, self.tree.slots
        li = self._local(ctx, m["dst"])
        s = t.find(li, m["group"])
        is_rp = s >= 0
        is_rp[is_rp] = sl["root"][s[is_rp]] & sl["active"][s[is_rp]]
        if not routed:  # stale cache: this node is not the RP (any more); route on
            lost = ~is_rp
            sub = m[lost]
            self._route(ctx, sub["dst"], MCAST, sub["time"], sub["group"], a=sub["a"],
                        b=sub["b"], c=sub["c"], origin=sub["origin"])
            m, s, is_rp = m[~lost], s[~lost], is_rp[~lost]
        bad = ~is_rp | (m["a"] != sl["acl"][np.maximum(s, 0)])
        self._refuse(ctx, m["group"][bad], m["origin"][bad], "multicast", m["time"][bad])
        ok = ~bad
        sub, s = m[ok], s[ok]
        if self.params["reliable"]:  # issue 22: each source's messages in source order;
            sub, s = self._source_fifo(ctx, sub, s)   # acks (RP_ADDR) sent there
        elif routed:  # the source learns the RP's address and sends directly next time
            far = sub["origin"] != sub["dst"]
            self._send(ctx, sub["dst"][far], sub["origin"][far], RP_ADDR, sub["time"][far],
                       sub["group"][far], a=sub["dst"][far])
        seqno = self._number_at_root(s) if self.params["reliable"] else sub["b"]
        self._disseminate(ctx, s, sub["dst"], sub["group"], sub["origin"], sub["c"], seqno,
                          sub["hops"].astype(np.int64), sub["time"])
        if self.params["reliable"]:  # issue 22: replicas keep the numbered stream
            self._replicate_data(ctx, s, sub["origin"], sub["c"], seqno, sub["b"], sub["time"])

    def _deliver_mcast(self, ctx, m):
        self._mcast_at_rp(ctx, m, routed=True)

    def _receive_mcast(self, ctx, m):
        self._mcast_at_rp(ctx, m, routed=False)

    def _rp_addr(self, ctx, m):
        t = self.tree
        s = t.get_or_make(self._local(ctx, m["dst"]), m["group"])
        t.slots["rp_cache"][s] = m["a"]
        t.slots["rp_cache_time"][s] = m["time"]
        if self.params["reliable"]:  # issue 22: RP_ADDR acknowledges up to source seqno b
            self._ack_pending(self._local(ctx, m["dst"]), m["group"], m["b"])

    def _disseminate(self, ctx, s, nodes, group, source, publish, seqno, hops, now):
        """Members among slots s log a delivery; every slot sends one copy per child."""
        if self.params["reliable"]:
            self._reliable_disseminate(ctx, s, nodes, group, source, publish, seqno, hops, now)
            return
        sl = self.tree.slots
        sl["last_seq"][s] = np.maximum(sl["last_seq"][s], seqno)
        mem = sl["member"][s]
        n = int(mem.sum())
        if n:
            ctx.log("delivery", group=group[mem].astype(np.int32),
                    member=nodes[mem].astype(np.int32), source=source[mem].astype(np.int32),
                    publish_time=publish[mem].astype(np.int64), time=now[mem].astype(np.int64),
                    hops=hops[mem].astype(np.int16), seqno=seqno[mem].astype(np.int64),
                    variant=np.full(n, self.variant, dtype=object))
        qi, e = self.tree.children_of(s)
        if len(e):
            sl["last_sent"][s[qi]] = now[qi]
            self._send(ctx, nodes[qi], self.tree.entries["child"][e], DATA, now[qi], group[qi],
                       origin=source[qi], a=publish[qi], b=seqno[qi], c=hops[qi] + 1)

    def _data(self, ctx, m):
        li = self._local(ctx, m["dst"])
        s = self.tree.find_active(li, m["group"])
        hit = s >= 0
        ctx.count("scribe_data_no_state", int((~hit).sum()))
        self._heard_from_parent(ctx, m)
        # a copy that went round more tree hops than any tree is deep is in a loop
        # (possible only under failures): drop it rather than circulate forever
        looping = hit & (m["c"] > self.params["max_tree_hops"])
        ctx.count("scribe_data_hop_limit", int(looping.sum()))
        hit &= ~looping
        sub = m[hit]
        self._disseminate(ctx, s[hit], sub["dst"], sub["group"], sub["origin"], sub["a"],
                          sub["b"], sub["c"], sub["time"])

    # ---- collapse -----------------------------------------------------------------
    def _collapse_req(self, ctx, m):
        """Each requesting node starts a collapse wave down every tree it is the root of."""
        self.collapsed = True
        t, sl = self.tree, self.tree.slots
        li = self._local(ctx, m["dst"])
        act = t.active_slots()
        act = act[sl["root"][act]]
        req_nodes, first = np.unique(li, return_index=True)
        roots = act[np.isin(sl["node"][act], req_nodes)]
        if not len(roots):
            return
        when = m["time"][first][np.searchsorted(req_nodes, sl["node"][roots])]
        qi, e = t.children_of(roots)
        src = ctx.nodes[sl["node"][roots]]
        self._send(ctx, src[qi], t.entries["child"][e], COLLAPSE_WAVE, when[qi],
                   sl["group"][roots][qi], a=src[qi], b=np.full(len(qi), -1, np.int64))

    def _collapse_wave(self, ctx, m):
        """a = nearest kept ancestor A, b = first removed node under A (-1: none).
        A non-member forwarder with one child is removed and passes (A, b) down; any
        other node re-attaches to A if nodes above it were removed, then restarts the
        wave below itself. Chains of removable nodes collapse in one wave."""
        self.collapsed = True
        t, sl = self.tree, self.tree.slots
        li = self._local(ctx, m["dst"])
        s = t.find_active(li, m["group"])
        hit = (s >= 0) & first_in_run(s)
        ctx.count("scribe_collapse_no_state", int((s < 0).sum()))
        sub, s = m[hit], s[hit]
        removable = ~sl["member"][s] & ~sl["root"][s] & (sl["n_children"][s] == 1)
        qi, e = t.children_of(s)
        child = t.entries["child"][e]
        rem_row = removable[qi]
        first_removed = np.where(sub["b"] >= 0, sub["b"], sub["dst"])
        # removed nodes hand (A, first removed) to their only child
        r = qi[rem_row]
        self._send(ctx, sub["dst"][r], child[rem_row], COLLAPSE_WAVE, sub["time"][r],
                   sub["group"][r], a=sub["a"][r], b=first_removed[r])
        # kept nodes restart the wave below them
        k = qi[~rem_row]
        self._send(ctx, sub["dst"][k], child[~rem_row], COLLAPSE_WAVE, sub["time"][k],
                   sub["group"][k], a=sub["dst"][k], b=np.full(len(k), -1, np.int64))
        relink = ~removable & (sub["b"] >= 0)
        sl["parent"][s[relink]] = sub["a"][relink]
        self._send(ctx, sub["dst"][relink], sub["a"][relink], ADOPT, sub["time"][relink],
                   sub["group"][relink], a=sub["b"][relink])
        srem = s[removable]
        t.clear_children(srem)
        t.reset(srem)
        ctx.count("scribe_collapsed_nodes", int(removable.sum()))

    def _adopt(self, ctx, m):
        """A kept node replaces the removed chain below this node as its child."""
        t = self.tree
        li = self._local(ctx, m["dst"])
        s = t.find_active(li, m["group"])
        hit = s >= 0
        ctx.count("scribe_adopt_no_state", int((~hit).sum()))
        sub, s = m[hit], s[hit]
        t.remove_children(s, sub["a"].astype(np.int64))
        cred = np.full(len(s), -1, np.int64)
        t.add_children(s, sub["src"], cred, sub["time"])

    # ---- stack calls --------------------------------------------------------------
    def on_fail(self, ctx, local_idx):
        """A crashed node loses its Scribe state."""
        t = self.tree
        li = np.atleast_1d(np.asarray(local_idx, np.int64))
        act = t.active_slots()
        gone = act[np.isin(t.slots["node"][act], li)]
        t.clear_children(gone)
        t.reset(gone)
        t.slots["rp_cache"][gone] = -1
        self.ticking[li] = False

    def on_recover(self, ctx, local_idx):
        return None

    def dump(self, ctx, phase):
        """Log every tree edge (parent, child) of the shard's active children tables."""
        t = self.tree
        act = t.active_slots()
        qi, e = t.children_of(act)
        n = len(e)
        ctx.log("tree_edge", group=t.slots["group"][act][qi].astype(np.int32),
                parent=np.asarray(ctx.nodes)[t.slots["node"][act][qi]].astype(np.int32),
                child=t.entries["child"][e].astype(np.int32),
                variant=np.full(n, self.variant, dtype=object))

    def checkpoint(self) -> dict:
        return {"tree": self.tree.state(), "collapsed": self.collapsed, "params": self.params,
                "ticking": self.ticking.copy(), "ring": self.ring.state(),
                "replicas_stale": self.replicas_stale.copy(),
                "paths": None if self.paths is None else self.paths.state(),
                "reliable": self._reliable_state()}

    def restore(self, state: dict):
        self.tree = TreeState.from_state(state["tree"])
        self.collapsed = bool(state["collapsed"])
        self.params = dict(state["params"])
        self.ticking = state["ticking"].copy()
        self.replicas_stale = state["replicas_stale"].copy()
        self.ring = MessageRing.from_state(state["ring"])
        self.paths = None if state.get("paths") is None else RootPaths.from_state(state["paths"])
        self._reliable_restore(state.get("reliable"))

    _RECEIVE: ClassVar[dict] = {
        CREATE_REQ: _create_req, JOIN_REQ: _join_req, LEAVE_REQ: _leave_req,
        MCAST_REQ: _mcast_req, COLLAPSE_REQ: _collapse_req,
        JOIN_ACK: _join_ack, JOIN_REFUSE: _join_refuse, LEAVE: _leave, REJOIN: _rejoin,
        MCAST: _receive_mcast, RP_ADDR: _rp_addr, DATA: _data,
        COLLAPSE_WAVE: _collapse_wave, ADOPT: _adopt,
        BN_SIBLING: _bn_sibling, BN_JOIN: _bn_join,
        TICK: RepairMixin._tick, HEARTBEAT: RepairMixin._heartbeat,
        REFRESH: RepairMixin._refresh, REPLICA: RepairMixin._replica,
        REPLICA_DATA: ReliableMixin._replica_data,
    }
    _DELIVER: ClassVar[dict] = {CREATE: _deliver_create, JOIN: _deliver_join, MCAST: _deliver_mcast}
