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

from .groups import GroupDirectory
from .rootpath import RootPathGuard
from .tree import TreeState, first_in_run
from .types import CREATE, REPLICA, Create, CreateReq, Replica
from .wire import Messenger


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

    def on_create(self, ctx, m) -> None:
        """CREATE at the RP: the first one makes the node the group's root (its credential
        becomes the ACL); later ones are refused."""
        t = self.tree
        s = t.get_or_make(self.messenger.local(ctx, m["dst"]), m["group"])
        had = t.slots["root"][s] & (t.slots["acl"][s] >= 0)
        first = first_in_run(s) & ~had
        dup = ~first
        sf = s[first]
        t.slots["active"][sf] = True
        t.slots["root"][sf] = True
        t.slots["acl"][sf] = m[Create.credential][first]
        t.slots["creator"][sf] = m["origin"][first]
        self.groups.log_created(ctx, m["group"][first], m["dst"][first], m["origin"][first])
        self.groups.refuse(ctx, m["group"][dup], m["origin"][dup], "create", m["time"][dup])
        self.replicate(ctx, sf, m["time"][first])

    def targets(self, ctx, slots):
        """(rp, row, replica) per message from root slots to each of their k replicas (row
        indexes slots); None when replication is off."""
        if not self.k or not len(slots):
            return None
        rp = np.asarray(ctx.nodes)[self.tree.slots["node"][slots]].astype(np.int64)
        reps = np.asarray(self.messenger.replica_set(ctx, rp, self.k), np.int64)
        reps = reps.reshape(len(rp), -1)
        row, col = np.nonzero(reps >= 0)
        return rp[row], row, reps[row, col]

    def replicate(self, ctx, slots, now) -> None:
        """Send the RP record of root slots to the k nodes closest to the RP."""
        tg = self.targets(ctx, slots)
        if tg is None:
            return
        sl = self.tree.slots
        src, row, dst = tg
        s = slots[row]
        self.messenger.send(ctx, src, dst, REPLICA, np.asarray(now)[row],
                            sl["group"][s],
                            **Replica.fields(acl=sl["acl"][s], creator=sl["creator"][s]))

    def on_replica(self, ctx, m) -> None:
        """Keep the RP record a REPLICA message carries."""
        t, sl = self.tree, self.tree.slots
        s = t.get_or_make(self.messenger.local(ctx, m["dst"]), m["group"])
        sl["rep_acl"][s] = m[Replica.acl]
        sl["rep_creator"][s] = m[Replica.creator]

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
