"""The Pastry join protocol (JOIN_START .. JOIN_LEAFS, the row exchange) and the rejoin of
recovered nodes.

Join of node X (SPEC 2), all on the virtual clock:

1. JOIN_START (timer at X's arrival time, drawn from a seeded Poisson schedule shared by
   all shards): X contacts A, the live node nearest to X by network delay among the nodes
   that arrived at least ``join_settle_us`` earlier. A is found per router: the earliest
   settled host of every router is a candidate, and X takes the candidate router nearest
   to its own (a stand-in for an expanding-ring search; ties: earliest host). The first
   node has no contact and forms the overlay alone. A joiner that finds no settled node
   takes node 0 (``join_contact_fallback = "first"``) or the nearest node that arrived
   before it (``"nearest"``; its JOIN_REQ is held there until that node has joined).
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

The receiving side of step 3's announcements and step 4 are leaf-set maintenance
(:mod:`.maintenance`), which also runs the keep-alives and the leaf-set repair with the
same LEAF_REQ / LEAF_REPLY exchange.
"""

from __future__ import annotations

import numba
import numpy as np

from . import handler_kernels
from . import types as msg_types
from .messages import msgs_of, payload_of, send_rows, take_rows
from .router import ROUTE_LOG_COLUMNS
from .types import Join, JoinLeafs, JoinReq, JoinStart, RowsReq

# An unjoined contact A holds a JOIN_REQ and looks again this much later, until it has
# joined: served from A's nearly empty tables, the joiner would start from nothing and its
# leaf set would never reach its true neighbours (a flash crowd chains joiners through
# contacts that are themselves joining). Every chain ends at a settled node or node 0, so
# the hold ends when the joins before it do; the bound (an hour of virtual time) only stops
# a contact that can never join from retrying forever.
JOIN_REQ_RETRY_US = 50_000
JOIN_REQ_MAX_RETRIES = 3_600_000_000 // JOIN_REQ_RETRY_US


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
    O(len(joiners) * R), R = routers hosting a node.
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
    out[:] = first_host[_nearest_column(host_router[joiners], cnt, routers,
                                        np.asarray(router_dist))]
    out[cnt == 0] = 0  # nobody settled yet: the first node is the bootstrap contact
    out[joiners == 0] = -1
    return out


@numba.njit(cache=True)
def _nearest_column(joiner_router, cnt, routers, router_dist):
    """For each joiner j, the column c < cnt[j] of ``routers`` nearest to its router
    (``router_dist[joiner_router[j], routers[c]]``), the first such column on ties; 0 when
    cnt[j] is 0. O(sum of cnt) <= O(len(cnt) * len(routers))."""
    out = np.zeros(len(cnt), np.int64)
    for j in range(len(cnt)):
        row = router_dist[joiner_router[j]]
        best = row[routers[0]] if cnt[j] > 0 else 0
        arg = 0
        for c in range(1, cnt[j]):
            d = row[routers[c]]
            if d < best:
                best, arg = d, c
        out[j] = arg
    return out


class JoinProtocol:
    """The join of new and recovered nodes (see the module docstring).

    Owns the per-node join progress: ``rows_got`` (JOIN_ROWS received), ``rows_expected``
    (from JOIN_LEAFS: the route's node count; -1 before), ``nbrs_got`` (JOIN_NBRS
    received), and ``rejoin_contacts`` int32[n, M + l] (a recovered node's candidate
    contacts, nearest first; allocated on the first recovery)."""

    def __init__(self, nodes, router, maintenance, *, join_rate_per_s: float,
                 join_start_us: int, join_settle_us: int, join_exchange_rows: int,
                 rejoin_timeout_us: int, seed: int, join_contact_fallback: str):
        """``nodes`` :class:`~.nodes.PastryNodes`; ``router`` routes the JOINs;
        ``maintenance`` :class:`~.maintenance.LeafSetMaintenance` (a joined node starts
        its keep-alives and leaf refresh)."""
        self.nodes = nodes
        self.router = router
        self.maintenance = maintenance
        self.join_rate_per_s = join_rate_per_s
        self.join_start_us = join_start_us
        self.join_settle_us = join_settle_us
        self.join_contact_fallback = join_contact_fallback
        self.join_exchange_rows = join_exchange_rows
        self.rejoin_timeout_us = rejoin_timeout_us
        self.seed = seed
        n = len(nodes)
        self.rows_got = np.zeros(n, np.int64)
        self.rows_expected = np.full(n, -1, np.int64)
        self.nbrs_got = np.zeros(n, bool)
        self.rejoin_contacts = None

    def schedule_arrivals(self, ctx) -> None:
        """Protocol bootstrap: a JOIN_START timer per local node at its arrival time, with
        its contact; the leaf refresh stops after the last arrival + join_settle_us."""
        nodes = self.nodes
        if not len(nodes):
            return
        times = join_schedule(ctx.n_nodes, self.join_rate_per_s, self.join_start_us,
                              self.seed)
        times = times + int(getattr(ctx, "delta_us", 0) or 0) + 1
        hr, rdist, _ = nodes.latency_tables(ctx)
        contact = nearby_contacts(nodes.global_ids, times, self.join_settle_us, hr, rdist,
                                  self.join_contact_fallback)
        ctx.timer(nodes.global_ids, times[nodes.global_ids], msg_types.JOIN_START,
                  **JoinStart.fields(contact=contact))
        self.maintenance.stop_refresh_at(int(times.max()) + int(self.join_settle_us))

    def checkpoint(self) -> dict:
        return {"rows_got": self.rows_got, "rows_expected": self.rows_expected,
                "nbrs_got": self.nbrs_got, "rejoin_contacts": self.rejoin_contacts}

    def restore(self, d: dict) -> None:
        self.rows_got, self.rows_expected = d["rows_got"].copy(), d["rows_expected"].copy()
        self.nbrs_got = d["nbrs_got"].copy()
        cand = d["rejoin_contacts"]
        self.rejoin_contacts = None if cand is None else cand.copy()

    def _restart(self, li) -> None:
        self.rows_got[li], self.rows_expected[li], self.nbrs_got[li] = 0, -1, False

    # ---- recovery -------------------------------------------------------------------
    def rejoin(self, ctx, li, now) -> None:
        """Recovered nodes ``li`` drop their tables and join again with their own ids.

        Contacts: the nodes of the old neighbourhood set (nearest first), then of the old
        leaf set; a contact that does not lead to a completed join within
        ``rejoin_timeout_us`` (it may have failed too) is replaced by the next one. A new
        incarnation number invalidates the node's timers from before the crash.
        """
        nodes = self.nodes
        li = np.asarray(li, np.int64)
        if self.rejoin_contacts is None:  # allocated on the first recovery only
            self.rejoin_contacts = np.full((len(nodes), nodes.nbrs.size + nodes.leaves.size),
                                           -1, np.int32)
        cand = np.concatenate([nodes.nbrs.members[li], nodes.leaves.members[li]], axis=1)
        # nearest first, duplicates out, packed to the left
        dup = np.zeros(cand.shape, bool)
        for j in range(1, cand.shape[1]):  # M + l columns, vectorized over nodes
            dup[:, j] = (cand[:, :j] == cand[:, j:j + 1]).any(axis=1)
        cand = np.where(dup, -1, cand)
        o = np.argsort(cand < 0, axis=1, kind="stable")
        self.rejoin_contacts[li] = np.take_along_axis(cand, o, axis=1)
        nodes.incarnation[li] += 1
        nodes.reset(li)
        self._restart(li)
        ctx.count("pastry_rejoins", len(li))
        t = np.full(len(li), now + max(int(getattr(ctx, "delta_us", 0) or 0), 1), np.int64)
        self._rejoin_attempt(ctx, li, np.zeros(len(li), np.int64), t)

    def _rejoin_attempt(self, ctx, li, k, t) -> None:
        """JOIN_START of attempt ``k`` (attempt k + 1 marks a rejoin; incarnation: the
        node's, so a timer left from before a later crash is void)."""
        has = (k < self.rejoin_contacts.shape[1])
        has[has] = self.rejoin_contacts[li[has], k[has]] >= 0
        if (~has).any():
            ctx.count("pastry_rejoin_gave_up", int((~has).sum()))
        li, k, t = li[has], k[has], t[has]
        if len(li):
            ctx.timer(self.nodes.global_ids[li], t, msg_types.JOIN_START,
                      **JoinStart.fields(contact=self.rejoin_contacts[li, k], attempt=k + 1,
                                         incarnation=self.nodes.incarnation[li]))

    # ---- join -----------------------------------------------------------------------
    def on_join_start(self, ctx, batch) -> None:
        """JOIN_START: X asks its contact A to route its join; no contact: X is the
        first node and forms the overlay alone."""
        m = msgs_of(batch)
        # (contiguous int64 columns, as the compiled loop passes them: one compile)
        ok, = ctx.send_compiled(len(m), 0, handler_kernels.on_join_start, m,
                                np.ascontiguousarray(m[JoinStart.contact], np.int64),
                                np.ascontiguousarray(m[JoinStart.attempt], np.int64),
                                msg_types.JOIN_REQ)
        if ok:   # (the common case in one compiled call: first joins with a contact)
            return
        nodes = self.nodes
        rj = m[JoinStart.attempt] > 0
        if rj.any():  # rejoin attempts of recovered nodes
            li = nodes.local(ctx, m["dst"][rj])
            go = (m[JoinStart.incarnation][rj] == nodes.incarnation[li]) & ~nodes.joined[li]
            li, r = li[go], take_rows(take_rows(m, rj), go)
            if len(li):
                # counts restart: pieces of an earlier attempt may still arrive, harmless
                self._restart(li)
                ctx.send(r["dst"], r[JoinStart.contact], msg_types.JOIN_REQ, r["time"],
                         **JoinReq.fields(joiner=r["dst"]), mode=0)
                self._rejoin_attempt(ctx, li, r[JoinStart.attempt],
                                     r["time"] + self.rejoin_timeout_us)
            m = take_rows(m, ~rj)
        x, a, t = m["dst"].astype(np.int64), m[JoinStart.contact], m["time"]
        alone = a < 0
        if alone.any():
            li = nodes.local(ctx, x[alone])
            nodes.joined[li] = True
            self.maintenance.start_keepalive(ctx, li, t[alone])
            self.maintenance.schedule_refresh(ctx, li, t[alone])
            self.maintenance.schedule_table_maintenance(ctx, li, t[alone])
        if (~alone).any():
            ctx.send(x[~alone], a[~alone], msg_types.JOIN_REQ, t[~alone],
                     **JoinReq.fields(joiner=x[~alone]), mode=0)

    def on_join_req(self, ctx, batch) -> None:
        """JOIN_REQ at contact A: send X (the joiner) the neighbourhood set, route X's
        JOIN (one compiled call, ``handler_kernels.on_join_req``)."""
        m = msgs_of(batch)
        nodes = self.nodes
        li = nodes.local_of(ctx, batch)
        # a contact still joining has (nearly) empty tables: serving now would give X an
        # empty state and a JOIN delivered at A itself, so X's leaf set would never reach
        # its true neighbours (and short sides claim whole half rings: routing loops).
        # Hold the request until A has joined (retry timer, counting the retries).
        acks = self.router.acks
        if acks.enabled:
            acks.make_room(len(m))
        n, table = len(m), nodes.table
        log, = ctx.send_compiled(
            (4 + acks.enabled) * n, n * (nodes.nbrs.members.shape[1] + table.rows * table.width
                                         + nodes.leaves.members.shape[1]),
            handler_kernels.on_join_req, m, li, nodes.joined, m[JoinReq.joiner],
            m[JoinReq.retries], JOIN_REQ_MAX_RETRIES, JOIN_REQ_RETRY_US, table.entries,
            nodes.leaves.members, nodes.nbrs.members, nodes.ids_hi, nodes.ids_lo,
            table.b, msg_types.LEAF_LOOKUP, msg_types.FIRST_OWN, msg_types.LAST_OWN,
            msg_types.JOIN_REQ, msg_types.JOIN_NBRS, msg_types.JOIN, msg_types.JOIN_ROWS,
            msg_types.JOIN_LEAFS, not acks.enabled, *acks.loop_inputs())
        if len(log):
            ctx.log_records("route", log, ROUTE_LOG_COLUMNS)

    def _send_rows(self, ctx, m) -> None:
        """Each route node Y sends X (the JOIN's joiner) its rows 0..min(spl(Y, X),
        rows-1)."""
        y, x = m["dst"].astype(np.int64), m[Join.joiner]
        nodes = self.nodes
        rows = nodes.table.rows_for(nodes.local(ctx, y), y, x, nodes.ids_hi, nodes.ids_lo)
        send_rows(ctx, y, x, msg_types.JOIN_ROWS, m["time"], rows)

    def receive_joins(self, ctx, batch) -> bool:
        """JOINs arriving at a node, with no hop acknowledgements: the routing step, the
        route log, :meth:`deliver` at Z, :meth:`forward` on the way and the next hops in one
        compiled call (``handler_kernels.on_join``). False: not taken (acks on, or records
        the router's general path must handle), nothing done."""
        if self.router.acks.enabled:
            return False
        m = msgs_of(batch)
        nodes = self.nodes
        n, table = len(m), nodes.table
        ok, log = ctx.send_compiled(
            3 * n, n * (table.rows * table.width + nodes.leaves.members.shape[1]),
            handler_kernels.on_join, m, nodes.local_of(ctx, batch), m[Join.joiner],
            table.entries, nodes.leaves.members, nodes.nbrs.members, nodes.ids_hi,
            nodes.ids_lo, table.b, msg_types.LEAF_LOOKUP, msg_types.FIRST_OWN,
            msg_types.LAST_OWN, msg_types.JOIN_ROWS, msg_types.JOIN_LEAFS)
        if ok and len(log):
            ctx.log_records("route", log, ROUTE_LOG_COLUMNS)
        return ok

    def forward(self, ctx, m) -> None:
        """Pastry's own routed messages passing a node: JOINs collect its rows."""
        if len(m):
            j = m["type"] == msg_types.JOIN
            if j.any():
                self._send_rows(ctx, take_rows(m, j))

    def deliver(self, ctx, m, rows=True) -> None:
        """JOINs at Z, the node numerically closest to X: Z's rows and leaf set (with the
        route's node count, so X knows how many JOIN_ROWS to wait for). ``rows`` False:
        a JOIN re-routed after a lost hop, this node sent its rows already."""
        j = m["type"] == msg_types.JOIN
        if not j.any():
            return
        m = take_rows(m, j)
        if rows:
            self._send_rows(ctx, m)
        li = self.nodes.local(ctx, m["dst"])
        send_rows(ctx, m["dst"], m[Join.joiner], msg_types.JOIN_LEAFS, m["time"],
                  self.nodes.leaves.members[li],
                  **JoinLeafs.fields(route_nodes=m["hops"].astype(np.int64) + 1))

    def on_join_rows(self, ctx, batch) -> None:
        self._on_piece(ctx, batch, handler_kernels.PIECE_ROWS)

    def on_join_nbrs(self, ctx, batch) -> None:
        self._on_piece(ctx, batch, handler_kernels.PIECE_NBRS)

    def on_join_leafs(self, ctx, batch) -> None:
        self._on_piece(ctx, batch, handler_kernels.PIECE_LEAFS)

    def _on_piece(self, ctx, batch, piece) -> None:
        """A join piece at the joiner: learn of it, count it; the joiners with every piece
        in are joined (``handler_kernels.on_join_piece``, then :meth:`_joined`)."""
        m = msgs_of(batch)
        nodes = self.nodes
        probes, uli, changed, li, t = ctx.send_compiled(
            0, 0, handler_kernels.on_join_piece, m, np.asarray(payload_of(batch), np.int32),
            nodes.local_of(ctx, batch), piece, m[JoinLeafs.route_nodes],
            *nodes.learn_inputs(ctx), nodes.joined, self.nbrs_got, self.rows_expected,
            self.rows_got)
        nodes.learned(ctx, probes, uli, changed)
        if len(li):
            self._joined(ctx, li, t)

    def _joined(self, ctx, li, t) -> None:
        """Nodes ``li`` (distinct, sorted) just joined at ``t``: they announce themselves
        to every node they know, start keep-alives and leaf refresh, and ask for better
        rows (one compiled call, ``handler_kernels.joined``, for their sends)."""
        nodes = self.nodes
        ctx.count("pastry_joined", len(li))
        lm, table = self.maintenance, nodes.table
        top = min(int(self.join_exchange_rows), table.rows)
        ctx.send_compiled(len(li) * self.joined_room(), 0, handler_kernels.joined, li, t,
                          nodes.leaves.members,
                          table.entries, nodes.nbrs.members, nodes.leaves.heard,
                          nodes.global_ids, nodes.incarnation, msg_types.ANNOUNCE,
                          lm.keepalive_us, msg_types.KA_TIMER, lm.leaf_refresh_us,
                          lm.refresh_until, lm.leaf_refresh_rounds, msg_types.LEAF_REFRESH,
                          lm.table_maintenance_us, top, msg_types.ROWS_REQ)

    def joined_room(self) -> int:
        """Send rows :meth:`_joined` may write per node (``handler_kernels.joined_room``)."""
        nodes, table = self.nodes, self.nodes.table
        return handler_kernels.joined_room(nodes.leaves.members.shape[1], table.rows,
                                           table.width, nodes.nbrs.members.shape[1],
                                           int(self.join_exchange_rows))

    def run_inputs(self) -> tuple:
        """What ``handler_kernels.on_runs`` takes after learn's inputs to handle join
        pieces as :meth:`_on_piece` does and the leaf refresh as
        ``LeafSetMaintenance.on_leaf_refresh``: (joined, nbrs_got, rows_expected, rows_got,
        incarnation, keepalive_us, the keep-alive timeout -- the KA_TIMERs ``on_runs`` takes
        as ``LeafSetMaintenance.on_ka_timer`` does --, leaf_refresh_us, refresh_until,
        leaf_refresh_rounds, table_maintenance_us, exchange rows, a JOIN_REQ's retries and
        their interval, the failed memory's next slots -- a KA_TIMER's presumed failures --).
        Read at each call: a restore replaces the arrays, and the refresh's end is set at
        the arrivals' schedule."""
        nodes, lm = self.nodes, self.maintenance
        return (nodes.joined, self.nbrs_got, self.rows_expected, self.rows_got,
                nodes.incarnation, lm.keepalive_us, lm.timeout_us, lm.leaf_refresh_us,
                lm.refresh_until, lm.leaf_refresh_rounds, lm.table_maintenance_us,
                min(int(self.join_exchange_rows), nodes.table.rows), JOIN_REQ_MAX_RETRIES,
                JOIN_REQ_RETRY_US, nodes.failed.next_slot)

    # ---- second join stage: routing-table rows from the table's own nodes ------------------
    # The rows X got on its join route come from nodes near A's route, not near X; as in
    # Castro et al. (2002, "Exploiting network proximity"), X then asks each node of its
    # row r for that node's row r (same prefix, so every entry fits X's row r) and keeps any
    # closer entry (insert_table probes). Only the top join_exchange_rows rows: they have the
    # most candidates, so that is where the route-built choice is furthest from the nearest.
    # (The requests go out with the join's other sends: handler_kernels.joined.)
    def on_rows_req(self, ctx, batch) -> None:
        """The requester gets our table row r (one compiled call)."""
        m = msgs_of(batch)
        table = self.nodes.table
        n = len(m)
        ctx.send_compiled(n, n * table.width, handler_kernels.on_rows_req, m,
                          self.nodes.local_of(ctx, batch), m[RowsReq.row], table.entries,
                          msg_types.ROWS_REPLY)

    def on_rows_reply(self, ctx, batch) -> None:
        # routing table only: a leaf member taken in silently would never be announced to
        # (the walk announces to members a LEAF_REPLY adds), so it would not learn of X
        m = msgs_of(batch)
        nodes = self.nodes
        hr, rdist, lan = nodes.latency_tables(ctx)
        probes, = ctx.send_compiled(
            0, 0, handler_kernels.on_rows_reply, m, np.asarray(payload_of(batch), np.int32),
            nodes.local_of(ctx, batch), nodes.table.entries, nodes.failed.ids,
            nodes.global_ids, nodes.ids_hi, nodes.ids_lo, nodes.table.b, hr, rdist, lan)
        if probes:
            ctx.count("pastry_probes", probes)
