"""Rendezvous points (SPEC 3): the group records at the RPs, their copies, the take-over.

A CREATE is routed to the group's key; the node it reaches (the RP) keeps the group
record (ACL token = the creator's credential, creator) and logs the ``group`` row. The RP
of a group sends its record (ACL token, creator) to the k nodes closest to it
(``Endpoint.replica_set``: its leaf set's core), again at its next tick when its leaf set
changed. When the RP fails, Pastry routes the group's JOINs to one of those nodes, which
finds the copy and takes over as the root.
"""

from __future__ import annotations

import numpy as np

from . import rendezvous_kernels
from .groups import GroupDirectory
from .rootpath import RootPathGuard
from .tree import TreeState
from .types import CREATE, REPLICA, Create, CreateReq
from .wire import Messenger, ScribeError


class RendezvousPoints:
    """Group records at their RPs: creation, copies on the k closest nodes (``replicas``
    = k, 0: off) and the take-over from a copy."""

    def __init__(self, tree: TreeState, groups: GroupDirectory, messenger: Messenger,
                 guard: RootPathGuard, replicas: int, stale=None):
        self.tree = tree
        self.groups = groups
        self.messenger = messenger
        self.guard = guard
        self.k = replicas
        # local nodes whose leaf set changed since their last tick (RPs among them re-send)
        self.stale = np.zeros(tree.n_local, bool) if stale is None else stale

    def on_create_req(self, ctx, m) -> None:
        self.messenger.route(ctx, m["dst"], CREATE, m["time"], m["group"],
                             **Create.fields(credential=m[CreateReq.credential]),
                             origin=m["dst"])

    def on_create(self, ctx, m) -> bool:
        """CREATE at the RP (``rendezvous_kernels.on_create``): the first one makes the
        node the group's root (its credential becomes the ACL) and sends the record to the
        RP's replicas; later ones are refused."""
        t, sl, keys = self.tree, self.tree.slots, self.groups.table
        li = self.messenger.local(ctx, m["dst"])
        reps = self._replicas(ctx, m["dst"])
        t.make_room(len(m), 0)
        sizes = np.array([t.slot_index.size, t.entry_index.size], np.int64)
        refused = np.zeros(len(m), bool)
        status, = self.messenger.send_compiled(
            ctx, int(np.count_nonzero(reps >= 0)), rendezvous_kernels.on_create, m, li, reps,
            True, t.slot_index.arrays, t.n_groups, sizes, sl["node"], sl["group"],
            sl["active"], sl["root"], sl["acl"], sl["creator"], keys["id_hi"], keys["id_lo"],
            REPLICA, refused)
        if status != rendezvous_kernels.DONE:
            raise ScribeError("CREATE: a node of another shard, or no room after make_room")
        t.inserted(sizes[0], sizes[1])
        made = ~refused
        self.groups.log_created(ctx, m["group"][made], m["dst"][made], m["origin"][made])
        self.groups.refuse(ctx, m["group"][refused], m["origin"][refused], "create",
                           m["time"][refused])
        return True

    def _replicas(self, ctx, nodes) -> np.ndarray:
        """(len(nodes), k) replica set of each local node (k = 0: replication off)."""
        if not self.k or not len(nodes):
            return np.empty((len(nodes), 0), np.int32)
        reps = np.asarray(self.messenger.replica_set(ctx, nodes, self.k), np.int32)
        return np.ascontiguousarray(reps.reshape(len(nodes), -1))

    def targets(self, ctx, slots):
        """(rp, row, replica) per message from root slots to each of their k replicas (row
        indexes slots); None when replication is off."""
        if not self.k or not len(slots):
            return None
        rp = np.asarray(ctx.nodes)[self.tree.slots["node"][slots]].astype(np.int64)
        reps = self._replicas(ctx, rp)
        row, col = np.nonzero(reps >= 0)
        return rp[row], row, reps[row, col].astype(np.int64)

    def replicate(self, ctx, slots, now) -> None:
        """Send the RP record of root slots to the k nodes closest to the RP
        (``rendezvous_kernels.replicate``)."""
        if not self.k or not len(slots):
            return
        sl, keys = self.tree.slots, self.groups.table
        slots = np.ascontiguousarray(slots, np.int64)
        rp = np.asarray(ctx.nodes)[sl["node"][slots]].astype(np.int64)
        reps = self._replicas(ctx, rp)
        status, = self.messenger.send_compiled(
            ctx, int(np.count_nonzero(reps >= 0)), rendezvous_kernels.replicate, slots, rp,
            reps, np.ascontiguousarray(np.broadcast_to(now, len(slots)), np.int64),
            sl["group"], sl["acl"], sl["creator"], keys["id_hi"], keys["id_lo"], REPLICA)
        if status != rendezvous_kernels.DONE:
            raise ScribeError("REPLICA: the records' sends were not written")

    def on_replica(self, ctx, m) -> bool:
        """Keep the RP record a REPLICA message carries (``rendezvous_kernels.on_replica``)."""
        t, sl = self.tree, self.tree.slots
        t.make_room(len(m), 0)
        sizes = np.array([t.slot_index.size, t.entry_index.size], np.int64)
        status, = self.messenger.send_compiled(
            ctx, 0, rendezvous_kernels.on_replica, m, self.messenger.local(ctx, m["dst"]),
            t.slot_index.arrays, t.n_groups, sizes, sl["node"], sl["group"], sl["active"],
            sl["rep_acl"], sl["rep_creator"], REPLICA)
        if status != rendezvous_kernels.DONE:
            raise ScribeError("REPLICA: a cell of other messages, or no room after make_room")
        t.inserted(sizes[0], sizes[1])
        return True

    def mark_stale(self, local_idx) -> None:
        """Leaf sets changed: RPs among these nodes refresh their replicas at their next
        tick (the upcall carries no time, so nothing is sent from here)."""
        if self.k:
            self.stale[np.atleast_1d(np.asarray(local_idx, np.int64))] = True

    def refresh_stale(self, ctx, nodes, qi, s, now) -> None:
        """Tick of local ``nodes`` (active slots s, row qi into nodes): RPs whose leaf set
        changed re-send their record to the new closest nodes."""
        sl = self.tree.slots
        due = self.stale[nodes[qi]] & sl["root"][s] & sl["active"][s]
        self.replicate(ctx, s[due], now[due])
        self.stale[nodes] = False

    def take_over(self, ctx, st, now) -> None:
        """The old root failed and Pastry now routes the group here: slots st become the
        root from their replica of the record, and replicate it in turn."""
        if not len(st):
            return
        sl = self.tree.slots
        ctx.count("scribe_rp_takeovers", len(st))
        sl["root"][st] = True
        self.guard.lose_parent(st)
        sl["acl"][st] = sl["rep_acl"][st]
        sl["creator"][st] = sl["rep_creator"][st]
        sl["active"][st] = True
        self.replicate(ctx, st, now)
