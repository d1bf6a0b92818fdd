"""The Pastry join protocol and leaf-set maintenance, as handlers of :class:`Pastry`.

Join of node X (SPEC 2), all on the virtual clock:

1. JOIN_START (timer at X's arrival time, drawn from a seeded Poisson schedule shared by
   all shards): X contacts A, the live node nearest to X by network delay among the nodes
   that arrived at least ``join_settle_us`` earlier. A is found per router: the earliest
   settled host of every router is a candidate, and X takes the candidate router nearest
   to its own (a stand-in for an expanding-ring search; ties: earliest host). The first
   node has no contact and forms the overlay alone.
2. JOIN_REQ X -> A: once A itself has joined (a contact still joining holds the request;
   it arrived ``join_settle_us`` earlier but on a slow network may not be done yet),
   A sends X its neighbourhood set (JOIN_NBRS) and routes a JOIN with key X; every node
   Y on the route (A .. Z) sends X its table rows 0..spl(Y, X) (JOIN_ROWS); Z, the
   numerically closest live node, also sends its leaf set and the number of route nodes
   (JOIN_LEAFS).
3. X merges everything as it arrives: the leaf set is the l/2 + l/2 closest ids seen, the
   neighbourhood set the M nearest by probing, table entries by probing (PNS).
   When all pieces are in, X is joined and announces itself (ANNOUNCE) to every node in
   its state.
4. A node that inserts an announcer into its leaf set answers with its leaf set
   (LEAF_REPLY); a node that gains leaf-set members from a LEAF_REPLY announces itself
   to them. This closes the gaps left by joins that overlap in virtual time: the overlay
   converges to leaf sets equal to the true l/2 + l/2 closest ids.

Keep-alives and repair use the same LEAF_REQ / LEAF_REPLY exchange.
"""

from __future__ import annotations

import numpy as np

from emulator.batch import pack_rows, payload_rows, take_rows

from . import kernels
from . import types as T
from .ids import shared_prefix_len
from .merge import group_rows

CHUNK = 1024
# an unjoined contact A holds a JOIN_REQ and looks again this much later, up to this many
# times (10 virtual s) before serving it with whatever state it has
JOIN_REQ_RETRY_US = 50_000
JOIN_REQ_MAX_RETRIES = 200


def join_schedule(n: int, rate_per_s: float, start_us: int, seed: int) -> np.ndarray:
    """Arrival time (us) of nodes 0..n-1: Poisson arrivals at ``rate_per_s``, node i the
    i-th to arrive. Identical on every shard (one seeded Generator). O(n)."""
    if rate_per_s <= 0:
        raise ValueError(f"Pastry: join_rate_per_s must be > 0, got {rate_per_s}")
    rng = np.random.default_rng([int(seed), 0x9A57])
    gaps = rng.exponential(1e6 / rate_per_s, size=n)
    gaps[0] = 0.0
    return int(start_us) + np.cumsum(np.ceil(gaps)).astype(np.int64)


def nearby_contacts(joiners, times, settle_us, host_router, router_dist,
                    fallback="first") -> np.ndarray:
    """Contact A for each joiner (see the module docstring); -1 for node 0 (the first).

    A joiner that finds no node settled for ``settle_us`` takes node 0 (``fallback =
    "first"``) or the nearest node that arrived before it (``"nearest"``; its JOIN_REQ is
    held there until that node has joined): in a flash crowd "first" makes node 0 the
    contact, and so the first route hop and a table entry, of every early joiner.
    O(len(joiners) * R) in chunks, R = routers hosting a node.
    """
    if fallback not in ("first", "nearest"):
        raise ValueError(f"Pastry: join_contact_fallback must be 'first' or 'nearest', "
                         f"got {fallback!r}")
    joiners = np.asarray(joiners, np.int64)
    host_router = np.asarray(host_router, np.int64)
    n = len(times)
    out = np.zeros(len(joiners), np.int64)
    if n == 0 or len(joiners) == 0:
        return out
    r_sorted = np.unique(host_router, return_index=True)
    routers, first_host = r_sorted[0], r_sorted[1]  # first (earliest) host of each router
    o = np.argsort(first_host, kind="stable")
    routers, first_host = routers[o], first_host[o]
    avail = np.searchsorted(times + settle_us, times[joiners], side="right")  # nodes < avail
    if fallback == "nearest":  # nobody settled: any node that arrived earlier (index < i)
        avail = np.where(avail == 0, joiners, avail)
    cnt = np.searchsorted(first_host, avail, side="left")  # candidate columns per joiner
    big = np.iinfo(np.int64).max
    for c0 in range(0, len(joiners), CHUNK):
        sl = slice(c0, c0 + CHUNK)
        d = router_dist[np.ix_(host_router[joiners[sl]], routers)].astype(np.int64)
        d[np.arange(d.shape[1])[None, :] >= cnt[sl, None]] = big
        out[sl] = first_host[np.argmin(d, axis=1)]
    out[cnt == 0] = 0  # nobody settled yet: the first node is the bootstrap contact
    out[joiners == 0] = -1
    return out


def _padded(m, payload):
    """Payload rows as a padded int64 matrix (-1 pads) plus each row's sender appended."""
    return np.concatenate([payload_rows(m, payload), m["src"].astype(np.int64)[:, None]],
                          axis=1)


class JoinMixin:
    """Join protocol, announcements, keep-alives and leaf-set repair (see module doc)."""

    # ---- setup / checkpoint ---------------------------------------------------------
    def join_setup(self, ctx):
        n = len(self.nodes)
        self.jn_got = np.zeros(n, np.int64)       # JOIN_ROWS received
        self.jn_expect = np.full(n, -1, np.int64)  # JOIN_ROWS expected (from JOIN_LEAFS)
        self.jn_nbrs = np.zeros(n, bool)          # JOIN_NBRS received
        self.jn_inc = np.zeros(n, np.int64)       # incarnation: bumped by each recovery
        self.jn_cand = None                       # rejoin contacts (allocated on recovery)
        self.refresh_until = -1                   # leaf refresh runs until then (bootstrap)
        if self.params["bootstrap"] != "protocol" or n == 0:
            return
        p = self.params
        times = join_schedule(ctx.n_nodes, p["join_rate_per_s"], p["join_start_us"], p["seed"])
        times = times + int(getattr(ctx, "delta_us", 0) or 0) + 1
        contact = nearby_contacts(self.nodes, times, p["join_settle_us"],
                                  ctx.shared("host_router"), ctx.shared("router_dist_us"),
                                  p["join_contact_fallback"])
        ctx.timer(self.nodes, times[self.nodes], T.JOIN_START, a=contact)
        self.refresh_until = int(times.max()) + int(p["join_settle_us"])

    def join_checkpoint(self) -> dict:
        return {"got": self.jn_got.copy(), "expect": self.jn_expect.copy(),
                "refresh_until": self.refresh_until,
                "nbrs": self.jn_nbrs.copy(), "inc": self.jn_inc.copy(),
                "cand": None if self.jn_cand is None else self.jn_cand.copy()}

    def join_restore(self, d):
        self.jn_got, self.jn_expect = d["got"].copy(), d["expect"].copy()
        self.jn_nbrs, self.jn_inc = d["nbrs"].copy(), d["inc"].copy()
        self.refresh_until = int(d.get("refresh_until", -1))
        self.jn_cand = None if d["cand"] is None else d["cand"].copy()

    # ---- recovery -------------------------------------------------------------------
    def rejoin(self, ctx, li, now):
        """Recovered nodes ``li`` drop their tables and join again with their own ids.

        Contacts: the nodes of the old neighbourhood set (nearest first), then of the old
        leaf set; a contact that does not lead to a completed join within
        ``rejoin_timeout_us`` (it may have failed too) is replaced by the next one. A new
        incarnation number invalidates the node's timers from before the crash.
        """
        s = self.state
        li = np.asarray(li, np.int64)
        if self.jn_cand is None:  # allocated on the first recovery only
            self.jn_cand = np.full((len(self.nodes), s.nbr.shape[1] + s.l), -1, np.int32)
        cand = np.concatenate([s.nbr[li], s.leaf[li]], axis=1)
        # nearest first, duplicates out, packed to the left
        dup = np.zeros(cand.shape, bool)
        for j in range(1, cand.shape[1]):  # M + l columns, vectorized over nodes
            dup[:, j] = (cand[:, :j] == cand[:, j:j + 1]).any(axis=1)
        cand = np.where(dup, -1, cand)
        o = np.argsort(cand < 0, axis=1, kind="stable")
        self.jn_cand[li] = np.take_along_axis(cand, o, axis=1)
        self.jn_inc[li] += 1
        s.rt[li] = -1
        s.leaf[li] = -1
        s.nbr[li] = -1
        self.heard[li] = 0
        self.dead[li] = -1
        self.joined[li] = False
        self.jn_got[li], self.jn_expect[li], self.jn_nbrs[li] = 0, -1, False
        ctx.count("pastry_rejoins", len(li))
        t = np.full(len(li), now + max(int(getattr(ctx, "delta_us", 0) or 0), 1), np.int64)
        self._rejoin_attempt(ctx, li, np.zeros(len(li), np.int64), t)

    def _rejoin_attempt(self, ctx, li, k, t):
        """JOIN_START of attempt ``k`` (b = k + 1 marks a rejoin; c = incarnation)."""
        has = (k < self.jn_cand.shape[1])
        has[has] = self.jn_cand[li[has], k[has]] >= 0
        if (~has).any():
            ctx.count("pastry_rejoin_gave_up", int((~has).sum()))
        li, k, t = li[has], k[has], t[has]
        if len(li):
            ctx.timer(self.nodes[li], t, T.JOIN_START, a=self.jn_cand[li, k], b=k + 1,
                      c=self.jn_inc[li])

    def _li(self, ctx, nodes):
        return np.asarray(ctx.local(np.asarray(nodes, np.int64)), np.int64)

    def _send_payload(self, ctx, src, dst, type_code, sent, rows, **fields):
        """Direct messages each carrying one row of ``rows`` (-1 entries dropped)."""
        ctx.send(src, dst, type_code, sent, mode=0, **pack_rows(rows), **fields)

    def _send_leaf_set(self, ctx, li, me, to, t):
        """LEAF_REPLY from local nodes ``li`` (ids ``me``) to ``to``: leaf set + sender."""
        rows = np.concatenate([self.state.leaf[li], np.asarray(me, np.int32)[:, None]], axis=1)
        self._send_payload(ctx, me, to, T.LEAF_REPLY, t, rows)

    # ---- join -----------------------------------------------------------------------
    def _join_start(self, ctx, batch):
        m = self._msgs(batch)
        rj = m["b"] > 0
        if rj.any():  # rejoin attempts of recovered nodes
            li = self._li(ctx, m["dst"][rj])
            go = (m["c"][rj] == self.jn_inc[li]) & ~self.joined[li]
            li, r = li[go], take_rows(take_rows(m, rj), go)
            if len(li):
                # counts restart: pieces of an earlier attempt may still arrive, harmless
                self.jn_got[li], self.jn_expect[li], self.jn_nbrs[li] = 0, -1, False
                ctx.send(r["dst"], r["a"], T.JOIN_REQ, r["time"], a=r["dst"], mode=0)
                self._rejoin_attempt(ctx, li, r["b"], r["time"] + self.params["rejoin_timeout_us"])
            m = take_rows(m, ~rj)
        x, a, t = m["dst"].astype(np.int64), m["a"], m["time"]
        alone = a < 0
        if alone.any():
            li = self._li(ctx, x[alone])
            self.joined[li] = True
            self._start_keepalive(ctx, li, t[alone])
            self._schedule_refresh(ctx, li, t[alone])
            self._schedule_maintenance(ctx, li, t[alone])
        if (~alone).any():
            ctx.send(x[~alone], a[~alone], T.JOIN_REQ, t[~alone], a=x[~alone], mode=0)

    def _join_req(self, ctx, batch):
        m = self._msgs(batch)
        li = self._li(ctx, m["dst"])
        # a contact still joining has (nearly) empty tables: serving now would give X an
        # empty state and a JOIN delivered at A itself, so X's leaf set would never reach
        # its true neighbours (and short sides claim whole half rings: routing loops).
        # Hold the request until A has joined (retry timer; c counts the retries).
        wait = ~self.joined[li] & (m["c"] < JOIN_REQ_MAX_RETRIES)
        if wait.any():
            w = take_rows(m, wait)
            ctx.timer(w["dst"], w["time"] + JOIN_REQ_RETRY_US, T.JOIN_REQ, a=w["a"],
                      c=w["c"] + 1, mode=0)
            m, li = take_rows(m, ~wait), li[~wait]
            if not len(m):
                return
        a_nodes, x, t = m["dst"].astype(np.int64), m["a"], m["time"]
        self._send_payload(ctx, a_nodes, x, T.JOIN_NBRS, t, self.state.nbr[li])
        self.route(ctx, a_nodes, self.ids_hi[x], self.ids_lo[x], T.JOIN, t, origin=x, a=x)

    def _send_rows(self, ctx, m):
        """Each route node Y sends X = m['a'] its rows 0..min(spl(Y, X), rows-1)."""
        y, x = m["dst"].astype(np.int64), m["a"]
        li = self._li(ctx, y)
        s = self.state
        p = shared_prefix_len(self.ids_hi[y], self.ids_lo[y], self.ids_hi[x], self.ids_lo[x], s.b)
        last = np.minimum(p, s.rows - 1)
        rows = s.rt[li].reshape(len(li), -1).astype(np.int64)
        width = 1 << s.b
        rows[np.arange(rows.shape[1])[None, :] >= ((last + 1) * width)[:, None]] = -1
        self._send_payload(ctx, y, x, T.JOIN_ROWS, m["time"], rows)

    def _forward_own(self, ctx, m):
        if len(m):
            j = m["type"] == T.JOIN
            if j.any():
                self._send_rows(ctx, take_rows(m, j))

    def _deliver_own(self, ctx, m, rows=True):
        look = (m["type"] == T.LEAF_LOOKUP) & (m["origin"] != m["dst"])
        if look.any():  # the origin was unknown here: take it in, send it our leaf set
            lk = take_rows(m, look)
            li = self._li(ctx, lk["dst"])
            self._learn(ctx, li, lk["origin"].astype(np.int64)[:, None], lk["time"])
            self._send_leaf_set(ctx, li, lk["dst"], lk["origin"], lk["time"])
        j = m["type"] == T.JOIN
        if not j.any():
            return
        m = take_rows(m, j)
        if rows:  # a JOIN re-routed after a lost hop: this node sent its rows already
            self._send_rows(ctx, m)
        li = self._li(ctx, m["dst"])
        self._send_payload(ctx, m["dst"], m["a"], T.JOIN_LEAFS, m["time"], self.state.leaf[li],
                           a=m["hops"].astype(np.int64) + 1)

    def _learn(self, ctx, li, cand, t):
        """Offer candidates to leaf sets and routing tables of local nodes ``li``."""
        self._insert_table(ctx, li, cand)
        return self._merge_leaves(ctx, li, cand, t)

    def _join_rows(self, ctx, batch):
        m = self._msgs(batch)
        li = self._li(ctx, m["dst"])
        self._learn(ctx, li, _padded(m, self._payload(batch)), m["time"])
        np.add.at(self.jn_got, li, 1)
        self._maybe_joined(ctx, li, m["time"])

    def _join_nbrs(self, ctx, batch):
        m = self._msgs(batch)
        li = self._li(ctx, m["dst"])
        cand = _padded(m, self._payload(batch))
        self._learn(ctx, li, cand, m["time"])
        self._merge_nbrs(ctx, li, cand)
        self.jn_nbrs[li] = True
        self._maybe_joined(ctx, li, m["time"])

    def _join_leafs(self, ctx, batch):
        m = self._msgs(batch)
        li = self._li(ctx, m["dst"])
        self._learn(ctx, li, _padded(m, self._payload(batch)), m["time"])
        self.jn_expect[li] = m["a"]
        self._maybe_joined(ctx, li, m["time"])

    def _merge_nbrs(self, ctx, li, cand):
        s = self.state
        li, cand, _ = group_rows(li, cand)
        both = np.concatenate([s.nbr[li].astype(np.int64), cand], axis=1)
        hr, rdist, lan = self._latency_tables(ctx)
        s.nbr[li] = kernels.select_nearest(self.nodes[li], both, s.nbr.shape[1], self.dead[li],
                                           hr, rdist, lan)

    def _maybe_joined(self, ctx, li, t):
        li, first = np.unique(li, return_index=True)
        t = np.asarray(t)[first]
        done = (~self.joined[li]) & self.jn_nbrs[li] & (self.jn_expect[li] >= 0) & \
            (self.jn_got[li] >= self.jn_expect[li])
        if not done.any():
            return
        li, t = li[done], t[done]
        self.joined[li] = True
        ctx.count("pastry_joined", len(li))
        known = self.state.known(li).astype(np.int64)
        r, c = np.nonzero(known >= 0)
        pair = np.unique(np.stack([r, known[r, c]], axis=1), axis=0)
        if len(pair):
            # b = 1: "you are in my leaf set" -- such receivers always answer with theirs,
            # so a joiner that got a stale leaf set walks to its true neighbours
            is_leaf = (self.state.leaf[li][pair[:, 0]] == pair[:, 1:2]).any(axis=1)
            ctx.send(self.nodes[li][pair[:, 0]], pair[:, 1], T.ANNOUNCE, t[pair[:, 0]],
                     a=self.nodes[li][pair[:, 0]], b=is_leaf.astype(np.int64), mode=0)
        self._start_keepalive(ctx, li, t)
        self._schedule_refresh(ctx, li, t)
        self._schedule_maintenance(ctx, li, t)
        self._exchange_rows(ctx, li, t)

    def _announce(self, ctx, batch):
        m = self._msgs(batch)
        li = self._li(ctx, m["dst"])
        self._forget_dead(li, m["src"])
        cand = m["src"].astype(np.int64)[:, None]
        uli, changed, _added = self._learn(ctx, li, cand, m["time"])
        self._merge_nbrs(ctx, li, cand)
        # the announcer now sits in our leaf set: tell it our leaf set
        ch = np.zeros(len(self.nodes), bool)
        ch[uli[changed]] = True
        new_member = (self.state.leaf[li] == m["src"][:, None]).any(axis=1) & ch[li]
        inleaf = new_member | (m["b"] == 1)
        # and ask the new member for its leaf set: an announcer heard of through a third
        # node (LEAF_REPLY) may know neighbours of ours that nobody else will tell us about
        ask = new_member & (m["b"] == 1)
        if ask.any():
            ctx.send(m["dst"][ask], m["src"][ask], T.LEAF_REQ, m["time"][ask], mode=0)
        if inleaf.any():
            self._send_leaf_set(ctx, li[inleaf], m["dst"][inleaf], m["src"][inleaf],
                                m["time"][inleaf])

    def _leaf_reply(self, ctx, batch):
        m = self._msgs(batch)
        li = self._li(ctx, m["dst"])
        self._forget_dead(li, m["src"])
        uli, _changed, added = self._learn(ctx, li, _padded(m, self._payload(batch)), m["time"])
        r, c = np.nonzero(added >= 0)
        if len(r):
            t_of = np.zeros(len(self.nodes), np.int64)
            np.maximum.at(t_of, li, m["time"])
            me = self.nodes[uli[r]]
            ctx.send(me, added[r, c], T.ANNOUNCE, t_of[uli[r]], a=me, b=1, mode=0)

    def _leaf_req(self, ctx, batch):
        m = self._msgs(batch)
        li = self._li(ctx, m["dst"])
        self._forget_dead(li, m["src"])
        self._send_leaf_set(ctx, li, m["dst"], m["src"], m["time"])

    # ---- second join stage: routing-table rows from the table's own nodes ------------------
    # The rows X got on its join route come from nodes near A's route, not near X; as in
    # Castro et al. (2002, "Exploiting network proximity"), X then asks each node of its
    # row r for that node's row r (same prefix, so every entry fits X's row r) and keeps any
    # closer entry (insert_table probes). Only the top join_exchange_rows rows: they have the
    # most candidates, so that is where the route-built choice is furthest from the nearest.
    def _exchange_rows(self, ctx, li, t):
        k = min(int(self.params["join_exchange_rows"]), self.state.rows)
        if k <= 0 or not len(li):
            return
        width = 1 << self.state.b
        ent = self.state.rt[li, :k].reshape(len(li), -1).astype(np.int64)
        r, c = np.nonzero(ent >= 0)
        if len(r):
            ctx.send(self.nodes[li[r]], ent[r, c], T.ROWS_REQ, np.asarray(t)[r],
                     a=c // width, mode=0)

    def _rows_req(self, ctx, batch):
        m = self._msgs(batch)
        li = self._li(ctx, m["dst"])
        row = self.state.rt[li, np.minimum(m["a"], self.state.rows - 1)]
        self._send_payload(ctx, m["dst"], m["src"], T.ROWS_REPLY, m["time"], row, a=m["a"])

    def _rows_reply(self, ctx, batch):
        m = self._msgs(batch)
        li = self._li(ctx, m["dst"])
        # routing table only: a leaf member taken in silently would never be announced to
        # (the walk announces to members a LEAF_REPLY adds), so it would not learn of X
        self._insert_table(ctx, li, _padded(m, self._payload(batch)))

    # ---- leaf-set refresh during the protocol bootstrap ---------------------------------
    # A node that joined early got its leaf set from a small network; nodes that arrive
    # later between it and its leaves learn of it only if a route passes it, so without
    # periodic exchange its leaf set stays stale and nobody near it knows it (seen at
    # 20,000 nodes and 2,000 joins/s on ts5050: 85 wrong leaf sets, a few isolated nodes).
    # Asking its own leaves is not enough: they are far away, and the announce walk
    # towards the true neighbours moves ~l/2 ids per round trip (minutes on ts5050).
    # So every leaf_refresh_us each joined node routes a LEAF_LOOKUP to its own id
    # (randomized first hop, so the route does not start inside its own stale view): when
    # it arrives at another node Z, X was unknown there, Z takes X into its state and
    # answers with its leaf set, and the announce walk (_leaf_reply) closes the rest. It
    # stops at the last arrival + join_settle_us, so the bootstrap still ends by itself.
    # With arrivals spread over a long span (a fixed rate at any size), refreshing until the
    # last arrival would cost every early node span / leaf_refresh_us lookups; the gaps the
    # refresh closes come from joins overlapping the node's own, so leaf_refresh_rounds > 0
    # stops a node's lookups after that many (timer field b counts them; 0: no bound).
    def _schedule_refresh(self, ctx, li, t, done=None):
        per = self.params["leaf_refresh_us"]
        if not per or not len(li):
            return
        done = np.zeros(len(li), np.int64) if done is None else np.asarray(done, np.int64)
        nxt = np.asarray(t, np.int64) + per
        go = nxt <= self.refresh_until
        rounds = int(self.params["leaf_refresh_rounds"])
        count = {}
        if rounds > 0:  # (without a bound the timers stay as they were: b = 0)
            go &= done < rounds
            count = {"b": done[go]}
        if go.any():
            ctx.timer(self.nodes[li[go]], nxt[go], T.LEAF_REFRESH, c=self.jn_inc[li[go]],
                      **count)

    def _leaf_refresh(self, ctx, batch):
        m = self._msgs(batch)
        m = take_rows(m, m["c"] == self.jn_inc[self._li(ctx, m["dst"])])
        tick = m["a"] == 1  # the same timer type carries the table-maintenance ticks
        if tick.any():
            self._maintain_table(ctx, take_rows(m, tick))
            m = take_rows(m, ~tick)
        li = self._li(ctx, m["dst"])
        x = m["dst"].astype(np.int64)
        self.route(ctx, x, self.ids_hi[x], self.ids_lo[x], T.LEAF_LOOKUP, m["time"],
                   randomize=True, origin=x)
        self._schedule_refresh(ctx, li, m["time"], m["b"].astype(np.int64) + 1)

    # ---- periodic routing-table maintenance (Castro et al. 2002) ------------------------
    # Rows a node got at its join reflect the overlay of that moment; nodes that arrive
    # later and sit closer only enter its table if they announce to it or a reply carries
    # them. So every table_maintenance_us (0: off) a joined node picks one random entry of
    # each non-empty row r and asks it for its row r (ROWS_REQ, the second stage's
    # message), keeping closer entries by probing. Ticks stop at the last arrival +
    # join_settle_us, like the leaf refresh, so the bootstrap still ends by itself.
    def _schedule_maintenance(self, ctx, li, t):
        per = int(self.params["table_maintenance_us"])
        if not per or not len(li):
            return
        nxt = np.asarray(t, np.int64) + per
        go = nxt <= self.refresh_until
        if go.any():
            ctx.timer(self.nodes[li[go]], nxt[go], T.LEAF_REFRESH, a=1, c=self.jn_inc[li[go]])

    def _maintain_table(self, ctx, m):
        li = self._li(ctx, m["dst"])
        rt = self.state.rt[li].astype(np.int64)          # [n, rows, 2^b]
        valid = rt >= 0
        count = valid.sum(axis=2)
        r_node, r_row = np.nonzero(count > 0)
        if len(r_node):
            me = self.nodes[li[r_node]]
            pick = np.floor(ctx.random(me) * count[r_node, r_row]).astype(np.int64)
            col = np.argmax(np.cumsum(valid[r_node, r_row], axis=1) > pick[:, None], axis=1)
            ctx.send(me, rt[r_node, r_row, col], T.ROWS_REQ, m["time"][r_node], a=r_row,
                     mode=0)
        self._schedule_maintenance(ctx, li, m["time"])

    # ---- keep-alives and failure detection --------------------------------------------
    def _start_keepalive(self, ctx, li, t):
        per = self.params["keepalive_us"]
        if per and len(li):
            self.heard[li] = np.asarray(t)[:, None]
            ctx.timer(self.nodes[li], np.asarray(t) + per, T.KA_TIMER, c=self.jn_inc[li])

    def _timeout(self):
        p = self.params
        return p["fail_timeout_us"] or 3 * p["keepalive_us"]

    def _ka_timer(self, ctx, batch):
        m = self._msgs(batch)
        # a timer set before a crash (c = old incarnation) is void after the recovery
        m = take_rows(m, m["c"] == self.jn_inc[self._li(ctx, m["dst"])])
        x, t = m["dst"].astype(np.int64), m["time"]
        li = self._li(ctx, x)
        s = self.state
        leaf = s.leaf[li].astype(np.int64)
        silent = (leaf >= 0) & (self.heard[li] < (t - self._timeout())[:, None])
        r, c = np.nonzero(silent)
        if len(r):
            ctx.count("pastry_presumed_failed", len(r))
            self._presume_dead(ctx, li[r], leaf[r, c], t[r])
        # repair, repeated every period until full: a side short of l/2 members asks its
        # farthest surviving member for its leaf set
        half = s.half
        for side in (slice(0, half), slice(half, 2 * half)):
            part = s.leaf[li, side]
            n_ok = (part >= 0).sum(axis=1)
            far = part[np.arange(len(li)), np.maximum(n_ok - 1, 0)]
            ask = (n_ok > 0) & (n_ok < half) & self.joined[li]
            if ask.any():
                ctx.send(x[ask], far[ask], T.LEAF_REQ, t[ask], mode=0)
        leaf = s.leaf[li].astype(np.int64)
        r, c = np.nonzero(leaf >= 0)
        if len(r):
            ctx.send(x[r], leaf[r, c], T.KEEPALIVE, t[r], mode=0)
        ctx.timer(x, t + self.params["keepalive_us"], T.KA_TIMER, c=self.jn_inc[li])

    def _keepalive(self, ctx, batch):
        m = self._msgs(batch)
        li = self._li(ctx, m["dst"])
        self._forget_dead(li, m["src"])
        hit = self.state.leaf[li] == m["src"][:, None]
        r, c = np.nonzero(hit)
        np.maximum.at(self.heard, (li[r], c), m["time"][r])
        stranger = ~hit.any(axis=1)
        if stranger.any():  # a node that lists us (e.g. recovered, or a repaired neighbour)
            self._learn(ctx, li[stranger], m["src"][stranger, None].astype(np.int64),
                        m["time"][stranger])
            # Leaf sets are not symmetric while they converge: the sender lists us but we
            # do not list it, so we send it no keep-alives and it would presume us failed
            # (and then keep us out through its dead memory). Answer it (b = 1: a reply,
            # which is never answered, so no ping-pong).
            still = stranger & ~(self.state.leaf[li] == m["src"][:, None]).any(axis=1) & \
                (m["b"] == 0)
            if still.any():
                ctx.send(m["dst"][still], m["src"][still], T.KEEPALIVE, m["time"][still], b=1,
                         mode=0)

    def _msgs(self, batch):
        return batch.msgs if hasattr(batch, "msgs") else batch

    def _payload(self, batch):
        p = getattr(batch, "payload", None)
        return np.zeros(0, np.int32) if p is None else np.asarray(p)

    _HANDLERS = {
        T.JOIN_START: _join_start,
        T.JOIN_REQ: _join_req,
        T.JOIN_ROWS: _join_rows,
        T.JOIN_NBRS: _join_nbrs,
        T.JOIN_LEAFS: _join_leafs,
        T.ANNOUNCE: _announce,
        T.LEAF_REQ: _leaf_req,
        T.LEAF_REPLY: _leaf_reply,
        T.KA_TIMER: _ka_timer,
        T.LEAF_REFRESH: _leaf_refresh,
        T.ROWS_REQ: _rows_req,
        T.ROWS_REPLY: _rows_reply,
        T.KEEPALIVE: _keepalive,
    }
