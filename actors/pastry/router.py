"""The router: one routing step for routed messages (FreePastry's ``StandardRouter``).

A routed message (``mode`` 1) travels hop by hop; at each node the router picks the next
hop (:func:`.routing.next_hop` over the node's tables) and either delivers the message
there (``deliver`` upcall, and a row in the ``route`` log) or, after the ``forward``
upcall, sends it one hop on. Pastry's own routed messages (JOIN, LEAF_LOOKUP) go to the
overlay's own deliver/forward callbacks instead of the application's.
"""

from __future__ import annotations

import numpy as np

from . import kernels
from . import types as msg_types
from .messages import MSG_DTYPE, make_batch, msgs_of, take_rows

ROUTE_LOG_COLUMNS = tuple((name, name) for name in kernels.ROUTE_LOG_DTYPE.names)


class Router:
    def __init__(self, nodes, acks, app, deliver_own, forward_own):
        """``nodes`` :class:`~.nodes.PastryNodes`; ``acks`` :class:`~.hop_acks.HopAcks`
        (told of every hop sent); ``app`` the application (forward/deliver upcalls);
        ``deliver_own(ctx, msgs, rows)`` / ``forward_own(ctx, msgs)``: Pastry's own
        routed messages arriving at their key's node / passing a node."""
        self.nodes = nodes
        self.acks = acks
        self.app = app
        self.deliver_own = deliver_own
        self.forward_own = forward_own
        # the application's optional one-call step (common API ``routed``)
        self._app_routed = getattr(app, "routed", None)

    def route(self, ctx, src, key_hi, key_lo, type_code, sent, randomize=False, **fields):
        """Route messages from local nodes ``src`` towards 128-bit keys (mode 1).

        ``randomize``: the first hop is a node drawn uniformly from the sender's leaf set
        and routing table (Pastry's randomized routing, used to step off a route that
        loops or meets a faulty node); the route continues normally from there."""
        src = np.atleast_1d(np.asarray(src, np.int64))
        n = len(src)
        if n == 0:
            return
        m = np.zeros(n, MSG_DTYPE)
        m["src"] = m["dst"] = src
        m["time"] = m["sent"] = sent
        m["type"] = type_code
        m["key_hi"], m["key_lo"] = key_hi, key_lo
        m["origin"] = src
        m["group"] = -1
        for k, v in fields.items():
            m[k] = v
        m["mode"] = 1
        if randomize:
            first = self._random_known(ctx, src)
            jump = first >= 0
            if jump.all():   # (the usual case: every sender knows some node)
                self._send_hop(ctx, m, first)
                return
            self._send_hop(ctx, take_rows(m, jump), first[jump])
            m = take_rows(m, ~jump)
        if len(m):
            self.step(ctx, m, None)

    def receive(self, ctx, routed, payload) -> None:
        """Routed messages that arrived at their ``dst``: acknowledge the hop, route on."""
        if self.acks.enabled:
            routed = self.acks.receive(ctx, routed)
        if len(routed):
            self.step(ctx, routed, payload)  # routed is a copy

    def step(self, ctx, m, payload, upcall=True) -> None:
        """One routing step for messages now at ``m['dst']`` (local, alive). ``upcall``
        False: a message re-routed after a lost hop; the node already ran ``forward``."""
        nxt, kind, counts = self._next_hops(ctx, m)
        logged = False
        if upcall and self._app_routed is not None and not counts[kernels.HERE_OWN] \
                and not counts[kernels.ON_OWN] and (payload is None or not len(payload)):
            # only the application's messages: its deliver and forward upcalls in one call
            # where it can (``m`` is the router's own copy: the hops are sent from it)
            if counts[kernels.HERE_APP]:
                self._log_route(ctx, m, kind, counts)
                logged = True
            if self._app_routed(ctx, m, kind == kernels.HERE_APP, nxt):
                go = nxt >= 0    # (-1 for the rows delivered here and those stopped)
                if go.all():
                    self._send_hop(ctx, m, nxt)
                elif go.any():
                    self._send_hop(ctx, take_rows(m, go), nxt[go])
                return
        if counts[kernels.HERE_OWN] or counts[kernels.HERE_APP]:
            self._deliver(ctx, m, kind, counts, payload, upcall, logged)
        go_parts = []
        if counts[kernels.ON_OWN]:
            on = kind == kernels.ON_OWN
            sub = take_rows(m, on)
            if upcall:
                self.forward_own(ctx, sub)
            go_parts.append((sub, nxt[on]))
        if counts[kernels.ON_APP]:
            on = kind == kernels.ON_APP
            sub, nh = take_rows(m, on), nxt[on]
            if upcall:
                forwarded, nh = self.app.forward(ctx, make_batch(sub, payload), nh)
                sub = msgs_of(forwarded)
            go_parts.append((sub, np.asarray(nh, np.int64)))
        for sub, nh in go_parts:
            # as in FreePastry, the message the forward upcall saw is the one sent on
            # (the router's copy, taken above; no upcall keeps it)
            go = nh >= 0
            if go.all():
                self._send_hop(ctx, sub, nh)
            elif go.any():
                self._send_hop(ctx, take_rows(sub, go), nh[go])

    def _next_hops(self, ctx, m):
        """(next hop, kind, count of each kind) of ``kernels.route_step``."""
        li = np.asarray(ctx.local(m["dst"]), np.int64)
        if len(li) and li.min() < 0:
            raise ValueError("Pastry: a routed message for another shard's node reached this shard")
        # a node's lookup of its own id routes as if the node were absent (maintenance.py)
        nodes = self.nodes
        return kernels.route_step(m, li, nodes.table.entries, nodes.leaves.members,
                                  nodes.nbrs.members, nodes.ids_hi, nodes.ids_lo,
                                  nodes.table.b, msg_types.LEAF_LOOKUP, msg_types.FIRST_OWN,
                                  msg_types.LAST_OWN)

    def _log_route(self, ctx, m, kind, counts) -> None:
        """A `route` log row for each message delivered here."""
        rows = np.empty(int(counts[kernels.HERE_OWN] + counts[kernels.HERE_APP]),
                        kernels.ROUTE_LOG_DTYPE)
        kernels.route_log(m, kind, rows)
        ctx.log_records("route", rows, ROUTE_LOG_COLUMNS)

    def _deliver(self, ctx, m, kind, counts, payload, upcall, logged=False) -> None:
        if not logged:
            self._log_route(ctx, m, kind, counts)
        if counts[kernels.HERE_OWN]:
            self.deliver_own(ctx, take_rows(m, kind == kernels.HERE_OWN), upcall)
        if counts[kernels.HERE_APP]:
            self.app.deliver(ctx, make_batch(take_rows(m, kind == kernels.HERE_APP), payload))

    def _random_known(self, ctx, nodes) -> np.ndarray:
        """A uniformly drawn non-empty leaf-set or routing-table entry per node (-1: none):
        the pick-th valid entry of the leaf set then the table, pick = floor(u * count)
        for the node's next uniform draw u (drawn for every node, knowing anyone or not)."""
        li = np.ascontiguousarray(ctx.local(nodes), np.int64)
        return kernels.random_known(self.nodes.leaves.members, self.nodes.table.entries, li,
                                    np.ascontiguousarray(ctx.random(nodes), np.float64))

    def _send_hop(self, ctx, out, nh) -> None:
        """Send routed messages ``out`` (now at out['dst']) one hop on to ``nh``. ``out``
        is the router's own copy (taken with ``take_rows`` in ``route`` and ``step``):
        changed here (``kernels.hop_on``); the hop sent is a copy of its own."""
        if not len(out):
            return
        hr, rdist, lan = self.nodes.latency_tables(ctx)
        hop = take_rows(out, slice(None))
        kernels.hop_on(out, hop, np.ascontiguousarray(nh, np.int64), hr, rdist, lan)
        ctx.send_batch(hop, timed=True)
        self.acks.expect(ctx, hop)
