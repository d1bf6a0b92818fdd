"""One shard's Pastry nodes: who they are, the parts holding their state, and the state
changes several protocols share (learning of nodes, forgetting presumed-failed ones).

Parts (each owns its arrays, one row per local node):

- :class:`~.leafset.LeafSet` ``leaves`` (members, keep-alive clocks);
- :class:`~.routing_table.RoutingTable` ``table``;
- :class:`~.neighbourhood.NeighbourhoodSet` ``nbrs``;
- :class:`~.failed.FailedNodes` ``failed`` (ids presumed failed);
- status: ``joined`` bool[n] (has its state, routes and serves), ``incarnation`` int64[n]
  (bumped by each recovery: timers of an earlier life are void).
"""

from __future__ import annotations

import numpy as np

from . import kernels
from .failed import FailedNodes
from .leafset import LeafSet
from .messages import msgs_of
from .neighbourhood import NeighbourhoodSet
from .routing_table import RoutingTable
from .state import PastryState


class PastryNodes:
    def __init__(self, app, global_ids, ids_hi, ids_lo, tables: PastryState, dead_memory: int,
                 joined: bool):
        """``app`` gets ``new_leafs`` upcalls; ``global_ids`` are the local nodes' ids in
        the engine's numbering; ``ids_hi/ids_lo`` the 128-bit ids of all nodes;
        ``tables`` the initial arrays (empty, or the oracle's)."""
        self.app = app
        self.global_ids = global_ids
        self.ids_hi, self.ids_lo = ids_hi, ids_lo
        n = len(global_ids)
        self.leaves = LeafSet(tables.leaf)
        self.table = RoutingTable(tables.rt, tables.b)
        self.nbrs = NeighbourhoodSet(tables.nbr)
        self.failed = FailedNodes(n, dead_memory)
        self.joined = np.full(n, bool(joined))
        self.incarnation = np.zeros(n, np.int64)
        self._latency_tables = None

    def __len__(self) -> int:
        return len(self.global_ids)

    @staticmethod
    def local(ctx, nodes) -> np.ndarray:
        """Local indices (int64) of global node ids of this shard."""
        if not (isinstance(nodes, np.ndarray) and nodes.ndim == 1 and nodes.dtype.kind == "i"):
            nodes = np.asarray(nodes, np.int64)   # (an id column is looked up as it is)
        return np.asarray(ctx.local(nodes), np.int64)

    @staticmethod
    def local_of(ctx, batch) -> np.ndarray:
        """Local indices (int64) of the nodes a batch's rows go to: those the engine
        computed for the cell it dispatched (``Batch.local``), else looked up."""
        li = getattr(batch, "local", None)
        if li is not None:
            return li
        return PastryNodes.local(ctx, msgs_of(batch)["dst"])

    def tables(self) -> PastryState:
        """The three tables as one :class:`PastryState` (views, not copies): the form the
        next-hop function and the table-quality report take."""
        return PastryState(rt=self.table.entries, leaf=self.leaves.members,
                           nbr=self.nbrs.members, b=self.table.b)

    def latency_tables(self, ctx):
        """(host_router, router_dist_us, lan_us) of the engine's latency model, for the
        kernels that probe delays (the model's arrays, or the same shared inputs)."""
        if self._latency_tables is None:
            self._latency_tables = latency_inputs(ctx)
        return self._latency_tables

    # ---- learning of nodes ----------------------------------------------------------
    def learn(self, ctx, li, cand, t, senders=None, nbrs=False):
        """Offer candidate ids (a padded matrix, one row per entry of ``li``) to the routing
        tables and leaf sets of local nodes ``li`` (leaf-set clocks of newcomers: the
        latest ``t`` of the node's rows), and with ``nbrs`` to their neighbourhood sets;
        ``senders``: each row came straight from that node, so it is alive (out of the
        failed memory first). Fires ``app.new_leafs`` for the nodes whose leaf set changed,
        once their state is all in. Returns (distinct sorted li, changed mask, members
        added -- no rows when no row could change --, latest ``t`` of each). One compiled
        call (``kernels.learn``)."""
        li = np.ascontiguousarray(li, np.int64)
        hr, rdist, lan = self.latency_tables(ctx)
        forget = senders is not None
        keys, known = self.nbrs.key_cache()
        probes, uli, changed, added, latest = kernels.learn(
            self.table.entries, self.leaves.members, self.leaves.heard, self.failed.ids,
            self.nbrs.members, keys, known, self.global_ids, li,
            np.ascontiguousarray(cand, np.int64), np.ascontiguousarray(t, np.int64),
            self.ids_hi, self.ids_lo, self.table.b, self.leaves.half, hr, rdist, lan,
            np.ascontiguousarray(senders, np.int64) if forget else li, forget, bool(nbrs))
        self.learned(ctx, probes, uli, changed)
        return uli, changed, added, latest

    def learn_inputs(self, ctx) -> tuple:
        """The state arrays ``kernels.learn`` works on, in its argument order around the
        per-call ones (rt, members, heard, failed, nbr, nbr_keys, nbr_known, global_ids,
        ids_hi, ids_lo, b, half, host_router, router_dist, lan_us): for the compiled
        handlers (:mod:`.handler_kernels`) that learn inside their own call."""
        hr, rdist, lan = self.latency_tables(ctx)
        keys, known = self.nbrs.key_cache()
        return (self.table.entries, self.leaves.members, self.leaves.heard, self.failed.ids,
                self.nbrs.members, keys, known, self.global_ids, self.ids_hi, self.ids_lo,
                self.table.b, self.leaves.half, hr, rdist, lan)

    def learned(self, ctx, probes, uli, changed) -> None:
        """After a compiled handler learned: count its probes, fire ``app.new_leafs`` for
        the nodes whose leaf set changed (as :meth:`learn` does)."""
        if probes:
            ctx.count("pastry_probes", probes)
        if np.count_nonzero(changed):   # (a C call; ndarray.any() costs a ufunc reduce)
            self.app.new_leafs(ctx, uli[changed])

    def insert_table(self, ctx, li, cand) -> None:
        """Offer candidate ids to the routing tables only (probes counted)."""
        probes = self.table.insert(li, self.global_ids, cand, self.ids_hi, self.ids_lo,
                                   self.latency_tables(ctx), self.failed.ids)
        if probes:
            ctx.count("pastry_probes", probes)

    # ---- forgetting of nodes --------------------------------------------------------
    def heard_from(self, li, senders) -> None:
        """Nodes ``li`` got a message from ``senders`` directly: they are alive."""
        self.failed.forget(li, senders)

    def reset(self, li) -> None:
        """Nodes ``li`` lose all state (a recovered node rejoins from nothing)."""
        self.table.clear(li)
        self.leaves.clear(li)
        self.nbrs.clear(li)
        self.failed.clear(li)
        self.joined[li] = False

    def checkpoint(self) -> dict:
        return {"leaves": self.leaves.checkpoint(), "table": self.table.checkpoint(),
                "nbrs": self.nbrs.checkpoint(), "failed": self.failed.checkpoint(),
                "joined": self.joined, "incarnation": self.incarnation}

    def restore(self, d: dict) -> None:
        self.leaves.restore(d["leaves"])
        self.table.restore(d["table"])
        self.nbrs.restore(d["nbrs"])
        self.failed.restore(d["failed"])
        self.joined, self.incarnation = d["joined"].copy(), d["incarnation"].copy()


def latency_inputs(ctx):
    """(host_router, router_dist_us, lan_us) of the engine's latency model (the context's
    ``latency_tables``): the delays Pastry's proximity rules probe. A context without a
    router-table model gives the shared inputs of those names instead."""
    tables = ctx.latency_tables() if hasattr(ctx, "latency_tables") else None
    if tables is None:
        tables = ctx.shared("host_router"), ctx.shared("router_dist_us"), ctx.shared("lan_us")
    hr, rdist, lan = tables
    return np.ascontiguousarray(hr, np.int32), np.ascontiguousarray(rdist, np.int32), int(lan)
