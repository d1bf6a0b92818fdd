"""Leaf-set maintenance (FreePastry's ``PeriodicLeafSetProtocol`` and consistency walk):
keep-alives, failure detection, leaf-set repair, the announce walk and the leaf lookup.

- KA_TIMER (every ``keepalive_us`` per joined node): leaves silent for the timeout are
  presumed failed (table repair); a side short of l/2 members asks its farthest member for
  its leaf set (LEAF_REQ); every member gets a KEEPALIVE.
- KEEPALIVE: refreshes the sender's clock; a sender we do not list is taken in and
  answered (leaf sets are not symmetric while they converge).
- ANNOUNCE ("I joined", or "I am in your leaf set"), LEAF_REQ, LEAF_REPLY: the exchange
  that closes the gaps left by joins overlapping in virtual time: a node that inserts an
  announcer into its leaf set answers with its leaf set; a node that gains members from a
  LEAF_REPLY announces itself to them.
- LEAF_REFRESH (protocol bootstrap): a joined node routes a LEAF_LOOKUP to its own id; the
  node it reaches takes it in and answers with its leaf set (at most
  ``leaf_refresh_rounds`` times per node when > 0; the timer's ``lookups_done`` counts
  them).
- LEAF_REFRESH with ``table_tick`` = 1 (protocol bootstrap, ``table_maintenance_us`` > 0):
  the periodic routing-table maintenance tick: the node asks one random entry of each
  non-empty row for its row (ROWS_REQ; the reply is merged by the join's ROWS_REPLY).
"""

from __future__ import annotations

import numpy as np

from . import handler_kernels, kernels
from . import types as msg_types
from .messages import msgs_of, payload_of, send_rows, take_rows
from .router import ROUTE_LOG_COLUMNS
from .types import Announce, KaTimer, LeafRefresh


class LeafSetMaintenance:
    def __init__(self, nodes, router, repair, keepalive_us: int, fail_timeout_us: int,
                 leaf_refresh_us: int, leaf_refresh_rounds: int, table_maintenance_us: int):
        """``nodes`` :class:`~.nodes.PastryNodes`; ``router`` routes the LEAF_LOOKUPs;
        ``repair`` :class:`~.table_repair.TableRepair` presumes silent leaves failed.
        ``fail_timeout_us`` 0: three keep-alive periods; ``leaf_refresh_rounds`` 0: no
        bound; ``table_maintenance_us`` 0: no routing-table maintenance."""
        self.nodes = nodes
        self.router = router
        self.repair = repair
        self.keepalive_us = int(keepalive_us)
        self.timeout_us = int(fail_timeout_us) or 3 * self.keepalive_us
        self.leaf_refresh_us = int(leaf_refresh_us)
        self.leaf_refresh_rounds = int(leaf_refresh_rounds)
        self.table_maintenance_us = int(table_maintenance_us)
        self.refresh_until = -1  # leaf refresh runs until then (protocol bootstrap)

    def send_leaf_set(self, ctx, li, me, to, t) -> None:
        """LEAF_REPLY from local nodes ``li`` (ids ``me``) to ``to``: leaf set + sender."""
        rows = kernels.rows_and(self.nodes.leaves.members, np.asarray(li, np.int64),
                                np.asarray(me, np.int64))
        send_rows(ctx, me, to, msg_types.LEAF_REPLY, t, rows)

    # ---- keep-alives and failure detection --------------------------------------------
    def start_keepalive(self, ctx, li, t) -> None:
        if self.keepalive_us and len(li):
            self.nodes.leaves.heard[li] = np.asarray(t)[:, None]
            ctx.timer(self.nodes.global_ids[li], np.asarray(t) + self.keepalive_us,
                      msg_types.KA_TIMER,
                      **KaTimer.fields(incarnation=self.nodes.incarnation[li]))

    def start_keepalive_all(self, ctx) -> None:
        """Oracle bootstrap: every node is joined at time 0 and starts its keep-alives."""
        n = len(self.nodes)
        if self.keepalive_us and n:
            ctx.timer(self.nodes.global_ids, np.full(n, self.keepalive_us, np.int64),
                      msg_types.KA_TIMER)

    def on_ka_timer(self, ctx, batch) -> None:
        """Leaves silent for the timeout are presumed failed (table repair); then a side
        short of l/2 members asks its farthest member for its leaf set (LEAF_REQ), every
        member gets a KEEPALIVE and the next timer is set (``handler_kernels.on_ka_timer``).
        A timer set before a crash (an old incarnation) is void after the recovery."""
        m = msgs_of(batch)
        nodes = self.nodes
        li = np.ascontiguousarray(nodes.local_of(ctx, batch), np.int64)
        if self._keepalive_round(ctx, m, li, True):
            return
        # some leaf was silent too long: presume the silent ones failed, then the round
        repair = self.repair
        per_leaf = nodes.table.rows * nodes.table.width    # (any slot holding one asks)
        room = len(m) * nodes.leaves.members.shape[1] * per_leaf
        lost, = ctx.send_compiled(
            room, 0, handler_kernels.presume_silent_leaves, m, li, nodes.incarnation,
            self.timeout_us, *repair.presume_inputs(), per_leaf, msg_types.ROW_REQ,
            repair.counts, zeroed=False)
        repair.repaired(ctx, lost)
        self._keepalive_round(ctx, m, li, False)

    def _keepalive_round(self, ctx, m, li, check_silent: bool) -> bool:
        """KA_TIMERs ``m`` at local nodes ``li`` in one compiled call; with
        ``check_silent``, False (nothing done) when a leaf was silent too long."""
        nodes = self.nodes
        leaves = nodes.leaves
        ok, = ctx.send_compiled(
            len(m) * (leaves.members.shape[1] + 3), 0, handler_kernels.on_ka_timer, m, li,
            nodes.incarnation, leaves.members, leaves.heard, nodes.joined, nodes.global_ids,
            leaves.half, self.timeout_us, check_silent, self.keepalive_us,
            msg_types.LEAF_REQ, msg_types.KEEPALIVE, msg_types.KA_TIMER)
        return ok

    def on_keepalive(self, ctx, batch) -> None:
        """The senders are alive and their slots heard; a sender we do not list is taken
        in and, unless its keep-alive was a reply, answered (one compiled call,
        ``handler_kernels.on_keepalive``). Leaf sets are not symmetric while they converge:
        a sender that lists us while we do not list it gets no keep-alives from us and
        would presume us failed (and then keep us out through its failed memory); a reply
        is never answered, so there is no ping-pong."""
        m = msgs_of(batch)
        nodes = self.nodes
        probes, uli, changed = ctx.send_compiled(
            len(m), 0, handler_kernels.on_keepalive, m, nodes.local_of(ctx, batch),
            *nodes.learn_inputs(ctx), msg_types.KEEPALIVE)
        nodes.learned(ctx, probes, uli, changed)

    # ---- the announce walk -------------------------------------------------------------
    def on_announce(self, ctx, batch) -> None:
        """The announcer into the receiver's state; a new leaf-set member, or an announcer
        whose leaf set holds the receiver, gets the receiver's leaf set (one compiled call,
        ``handler_kernels.on_announce``)."""
        m = msgs_of(batch)
        nodes = self.nodes
        n = len(m)
        probes, uli, changed = ctx.send_compiled(
            2 * n, n * (nodes.leaves.members.shape[1] + 1), handler_kernels.on_announce, m,
            nodes.local_of(ctx, batch), m[Announce.in_leaf_set], *nodes.learn_inputs(ctx),
            msg_types.LEAF_REQ, msg_types.LEAF_REPLY)
        nodes.learned(ctx, probes, uli, changed)

    def on_leaf_reply(self, ctx, batch) -> None:
        """Learn of the leaf set; announce to each member it gained (one compiled call,
        ``handler_kernels.on_leaf_reply``)."""
        m = msgs_of(batch)
        nodes = self.nodes
        probes, uli, changed = ctx.send_compiled(
            len(m) * nodes.leaves.members.shape[1], 0, handler_kernels.on_leaf_reply, m,
            np.asarray(payload_of(batch), np.int32), nodes.local_of(ctx, batch),
            *nodes.learn_inputs(ctx), msg_types.ANNOUNCE)
        nodes.learned(ctx, probes, uli, changed)

    def on_leaf_req(self, ctx, batch) -> None:
        """The requester is alive; it gets our leaf set (one compiled call)."""
        m = msgs_of(batch)
        nodes = self.nodes
        n = len(m)
        ctx.send_compiled(n, n * (nodes.leaves.members.shape[1] + 1),
                          handler_kernels.on_leaf_req, m, nodes.local_of(ctx, batch),
                          nodes.leaves.members, nodes.failed.ids, msg_types.LEAF_REPLY)

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
    # answers with its leaf set, and the announce walk (on_leaf_reply) closes the rest. It
    # stops at the last arrival + join_settle_us, so the bootstrap still ends by itself.
    # With arrivals spread over a long span (a fixed rate at any size), refreshing until the
    # last arrival would cost every early node span / leaf_refresh_us lookups; the gaps the
    # refresh closes come from joins overlapping the node's own, so leaf_refresh_rounds > 0
    # stops a node's lookups after that many (the timer's lookups_done counts them; 0: no
    # bound).
    def stop_refresh_at(self, t_us: int) -> None:
        self.refresh_until = int(t_us)

    def schedule_refresh(self, ctx, li, t, done=None) -> None:
        """Next LEAF_REFRESH of local nodes ``li`` after ``t``; ``done``: the lookups each
        has made so far (None: 0)."""
        per = self.leaf_refresh_us
        if not per or not len(li):
            return
        done = np.zeros(len(li), np.int64) if done is None else np.asarray(done, np.int64)
        nxt = np.asarray(t, np.int64) + per
        go = nxt <= self.refresh_until
        count = {}
        if self.leaf_refresh_rounds > 0:  # (0: no bound, every timer goes on)
            go &= done < self.leaf_refresh_rounds
            count = {"lookups_done": done[go]}
        if go.any():
            ctx.timer(self.nodes.global_ids[li[go]], nxt[go], msg_types.LEAF_REFRESH,
                      **LeafRefresh.fields(incarnation=self.nodes.incarnation[li[go]], **count))

    def on_leaf_refresh(self, ctx, batch) -> None:
        m = msgs_of(batch)
        nodes = self.nodes
        if not self.router.acks.enabled and not np.count_nonzero(m[LeafRefresh.table_tick]):
            # the common case in one compiled call (handler_kernels.on_leaf_refresh): the
            # lookups' first hops and the next timers; not when a node knows nobody
            seed, draws = ctx.rng_state()
            done, = ctx.send_compiled(
                2 * len(m), 0, handler_kernels.on_leaf_refresh, m, nodes.local_of(ctx, batch),
                nodes.incarnation, m[LeafRefresh.incarnation], m[LeafRefresh.lookups_done],
                nodes.ids_hi, nodes.ids_lo, nodes.leaves.members, nodes.table.entries, seed,
                draws, nodes.global_ids, msg_types.LEAF_LOOKUP, msg_types.LEAF_REFRESH,
                self.leaf_refresh_us, self.refresh_until, self.leaf_refresh_rounds)
            if done:
                return
        m = take_rows(m, m[LeafRefresh.incarnation]
                      == nodes.incarnation[nodes.local(ctx, m["dst"])])
        tick = m[LeafRefresh.table_tick] == 1  # the table-maintenance ticks ride on this timer
        if tick.any():
            self.maintain_table(ctx, take_rows(m, tick))
            m = take_rows(m, ~tick)
        if not len(m):
            return
        li = nodes.local(ctx, m["dst"])
        x = m["dst"].astype(np.int64)
        self.router.route(ctx, x, nodes.ids_hi[x], nodes.ids_lo[x], msg_types.LEAF_LOOKUP,
                          m["time"], randomize=True, origin=x)
        self.schedule_refresh(ctx, li, m["time"],
                              m[LeafRefresh.lookups_done].astype(np.int64) + 1)

    # ---- periodic routing-table maintenance (Castro et al. 2002) ------------------------
    # Rows a node got at its join reflect the overlay of that moment; nodes that arrive
    # later and sit closer only enter its table if they announce to it or a reply carries
    # them. So every table_maintenance_us (0: off) a joined node picks one random entry of
    # each non-empty row r and asks it for its row r (ROWS_REQ, the join's second-stage
    # message, answered and merged by JoinProtocol), keeping closer entries by probing.
    # Ticks ride on the LEAF_REFRESH timer with table_tick = 1 and stop at the last
    # arrival + join_settle_us, like the leaf refresh, so the bootstrap still ends by itself.
    def schedule_table_maintenance(self, ctx, li, t) -> None:
        per = self.table_maintenance_us
        if not per or not len(li):
            return
        nxt = np.asarray(t, np.int64) + per
        go = nxt <= self.refresh_until
        if go.any():
            ctx.timer(self.nodes.global_ids[li[go]], nxt[go], msg_types.LEAF_REFRESH,
                      **LeafRefresh.fields(table_tick=1,
                                           incarnation=self.nodes.incarnation[li[go]]))

    def maintain_table(self, ctx, m) -> None:
        """Table-maintenance ticks ``m`` (LEAF_REFRESH rows with table_tick = 1, of their
        node's current incarnation): ``handler_kernels.table_ticks``."""
        nodes = self.nodes
        seed, draws = ctx.rng_state()
        ctx.send_compiled(len(m) * (nodes.table.rows + 1), 0, handler_kernels.on_table_ticks,
                          m, nodes.local(ctx, m["dst"]).astype(np.int64), nodes.table.entries,
                          seed, draws, nodes.global_ids, nodes.incarnation,
                          msg_types.ROWS_REQ, msg_types.LEAF_REFRESH,
                          self.table_maintenance_us, self.refresh_until)

    def receive_lookups(self, ctx, batch) -> bool:
        """LEAF_LOOKUPs arriving at a node, with no hop acknowledgements: the routing step,
        the route log, the delivery (:meth:`deliver_lookup`) and the next hops in one
        compiled call (``handler_kernels.on_leaf_lookup``). False: not taken (acks on, or
        records the router's general path must handle), nothing done."""
        if self.router.acks.enabled:
            return False
        m = msgs_of(batch)
        nodes = self.nodes
        n = len(m)
        keys, known = nodes.nbrs.key_cache()
        hr, rdist, lan = nodes.latency_tables(ctx)
        ok, log, probes, uli, changed = ctx.send_compiled(
            n, n * (nodes.leaves.members.shape[1] + 1), handler_kernels.on_leaf_lookup, m,
            nodes.local_of(ctx, batch), nodes.table.entries, nodes.leaves.members,
            nodes.nbrs.members, nodes.ids_hi, nodes.ids_lo, nodes.table.b,
            msg_types.LEAF_LOOKUP, msg_types.FIRST_OWN, msg_types.LAST_OWN,
            nodes.leaves.heard, nodes.failed.ids, keys, known, nodes.global_ids,
            nodes.leaves.half, hr, rdist, lan, msg_types.LEAF_REPLY)
        if not ok:
            return False
        if len(log):
            ctx.log_records("route", log, ROUTE_LOG_COLUMNS)
        nodes.learned(ctx, probes, uli, changed)
        return True

    def deliver_lookup(self, ctx, m) -> None:
        """LEAF_LOOKUPs that reached their key's node: where that is not the origin, the
        origin was unknown here: take it in, send it our leaf set."""
        look = (m["type"] == msg_types.LEAF_LOOKUP) & (m["origin"] != m["dst"])
        if look.any():
            lk = take_rows(m, look)
            li = self.nodes.local(ctx, lk["dst"])
            self.nodes.learn(ctx, li, lk["origin"].astype(np.int64)[:, None], lk["time"])
            self.send_leaf_set(ctx, li, lk["dst"], lk["origin"], lk["time"])

    def checkpoint(self) -> dict:
        return {"refresh_until": self.refresh_until}

    def restore(self, d: dict) -> None:
        self.refresh_until = int(d["refresh_until"])
