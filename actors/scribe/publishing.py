"""Reliable publishing and RP fail-over, enabled by ``reliable``.

The numbering of ``reliable.OrderedDelivery`` starts at the root; without this layer two
holes remain before it:
- order: the root numbered MCASTs in arrival order, and a source's MCASTs reach the RP
  by different paths (routed, then direct once RP_ADDR arrives, routed again when the
  cache expires): a direct copy overtook a routed one and members got the stream out
  of publish order;
- loss: MCASTs sent to a failed RP vanish, and the replica that takes over numbered
  from its own position (nothing if it was off the tree), reusing seqnos members had
  already delivered.
Closed as follows:
- the source numbers its messages per group (slot column src_seq; MCAST seqno) and
  keeps each until the RP acknowledges it (RP_ADDR acked_seq: the last source seqno
  numbered, cumulative); on its TICK it re-sends those unacknowledged for heartbeat_miss
  periods, then every period until acknowledged, as it sends a new one: directly to the
  RP while that answers (its cached address is fresh), routed once it fell silent;
- the RP numbers each source's messages in source order: later ones wait for a gap
  (src_held), repeats are dropped and acknowledged again;
- the RP copies every numbered message to its replicas (REPLICA_DATA); the replica
  that takes over first re-disseminates those past its own position, so numbering,
  buffers and per-source positions continue where the failed RP stopped.
Left open (docs/scribe.md): a source without tree state has no TICK and does not
retry; a second take-over in the same group only has the messages numbered since the
first; all k replicas failing with the RP loses the group.
"""

from __future__ import annotations

import numpy as np

from .reliable import MessageRing, OrderedDelivery, numbered, seqno_ranges
from .rendezvous import RendezvousPoints
from .tree import TreeState
from .types import REPLICA_DATA, RP_ADDR, Mcast, McastReq, ReplicaData, RpAddr
from .wire import Messenger

_PENDING_COLUMNS = ("li", "group", "seq", "cred", "publish", "sent")


class ReliablePublishing:
    """Source numbering and retries, the RP's per-source order, the replicated stream."""

    def __init__(self, tree: TreeState, messenger: Messenger, ordered: OrderedDelivery,
                 rendezvous: RendezvousPoints, buffer: int, heartbeat_us, heartbeat_miss: int):
        self.tree = tree
        self.messenger = messenger
        self.ordered = ordered
        self.rendezvous = rendezvous
        self.heartbeat_us = heartbeat_us
        self.heartbeat_miss = heartbeat_miss
        self.src_next: dict = {}    # (slot, source) -> next source seqno to number (RP)
        self.src_held: dict = {}    # (slot, source) -> {source seqno: MCAST record} (RP)
        self.rep_src: dict = {}     # (slot, source) -> next source seqno (replica record)
        self.rep_ring = MessageRing(buffer)
        # the source's unacknowledged messages, one row each
        self.pend = {k: np.zeros(0, np.int64) for k in _PENDING_COLUMNS}
        # (ctx, slots, nodes, now, group, credential, seqno, publish): how a source sends an
        # MCAST (``Dissemination.send_mcast``), for the re-sends
        self.send_mcast = None

    def state(self) -> dict:
        return {"src_next": dict(self.src_next),
                "src_held": {k: dict(v) for k, v in self.src_held.items()},
                "rep_src": dict(self.rep_src), "rep_ring": self.rep_ring.state(),
                "pend": dict(self.pend),
                "ring": self.ordered.ring.state()}

    def restore(self, st: dict) -> None:
        self.src_next = dict(st["src_next"])
        self.src_held = {k: dict(v) for k, v in st["src_held"].items()}
        self.rep_src = dict(st["rep_src"])
        self.rep_ring = MessageRing.from_state(st["rep_ring"])
        self.pend = {k: v.copy() for k, v in st["pend"].items()}
        self.ordered.ring = MessageRing.from_state(st["ring"])

    # ---- the source ---------------------------------------------------------------
    def number_at_source(self, ctx, m, s):
        """Source side of MCAST_REQ: number each (source, group)'s messages 0, 1, ... and
        keep them until acknowledged. Returns the source seqnos (MCAST seqno)."""
        sl = self.tree.slots
        seq = numbered(s, sl["src_seq"][s])
        np.add.at(sl["src_seq"], s, 1)
        new = {"li": self.messenger.local(ctx, m["dst"]), "group": m["group"].astype(np.int64),
               "seq": seq, "cred": m[McastReq.credential].astype(np.int64),
               "publish": m["time"].astype(np.int64), "sent": m["time"].astype(np.int64)}
        self.pend = {k: np.r_[self.pend[k], new[k]] for k in self.pend}
        return seq

    def acknowledge(self, li, group, upto) -> None:
        """Forget the pending messages of (local node, group) numbered up to `upto`."""
        if not len(li) or not len(self.pend["li"]):
            return
        p = self.pend
        key = p["li"] * (1 << 32) + p["group"]
        ak = np.asarray(li, np.int64) * (1 << 32) + np.asarray(group, np.int64)
        # the highest acknowledgement per (node, group), keys sorted
        o = np.argsort(ak, kind="stable")
        ak, au = ak[o], np.asarray(upto, np.int64)[o]
        starts = np.r_[0, np.flatnonzero(np.diff(ak)) + 1]
        bk, bu = ak[starts], np.maximum.reduceat(au, starts)
        i = np.clip(np.searchsorted(bk, key), 0, len(bk) - 1)
        done = (bk[i] == key) & (p["seq"] <= bu[i])
        if done.any():
            keep = ~done
            self.pend = {k: v[keep] for k, v in p.items()}

    def retry_pending(self, ctx, nodes, now_n) -> None:
        """Source TICK: re-send the messages unacknowledged for heartbeat_miss periods, in
        source order, as a fresh publish goes (``send_mcast``): to the RP that answered
        within the cache's lifetime, routed once it fell silent (it may have failed: a new
        one is found by routing). Re-routing while the RP still answers could miss it for
        good: after a fail-over, the failed RP, recovered without state, is again the node
        closest to the group's key, where every routed message then ends and is refused."""
        p = self.pend
        if not len(p["li"]) or not len(nodes):
            return
        wait = self.heartbeat_miss * self.heartbeat_us
        i = np.clip(np.searchsorted(nodes, p["li"]), 0, len(nodes) - 1)
        due = (nodes[i] == p["li"]) & (now_n[i] - p["sent"] >= wait)
        if not due.any():
            return
        rows = np.flatnonzero(due)
        rows = rows[np.lexsort((p["seq"][rows], p["group"][rows], p["li"][rows]))]
        now = now_n[i[rows]]
        # once overdue, again every period until acknowledged (repeats are dropped at the RP)
        p["sent"][rows] = now - wait + self.heartbeat_us
        ctx.count("scribe_publish_retries", len(rows))
        me = np.asarray(ctx.nodes)[p["li"][rows]].astype(np.int64)
        s = self.tree.get_or_make(p["li"][rows], p["group"][rows])
        self.send_mcast(ctx, s, me, now, p["group"][rows], p["cred"][rows], p["seq"][rows],
                        p["publish"][rows])

    # ---- the RP -------------------------------------------------------------------
    def source_fifo(self, ctx, sub, s):
        """RP side: pass each source's MCASTs on in source order (seqno); later ones wait
        for a gap, repeats are dropped. Acknowledges (RP_ADDR acked_seq: the last numbered)
        every source heard from. Returns (records, slots) to number now, in order.
        O(messages) Python: a few per RP and stream tick."""
        out, out_s, acks = [], [], {}
        for i in range(len(sub)):
            key = (int(s[i]), int(sub["origin"][i]))
            q = int(sub[Mcast.seqno][i])
            nxt = self.src_next.get(key, q)
            if q >= nxt:
                held = self.src_held.setdefault(key, {})
                held[q] = sub[i].copy()
                while nxt in held:
                    r = held.pop(nxt)
                    r["time"] = sub["time"][i]     # released now
                    out.append(r)
                    out_s.append(key[0])
                    nxt += 1
                if not held:
                    del self.src_held[key]
            else:
                ctx.count("scribe_publish_repeats", 1)
            self.src_next[key] = nxt
            acks[key] = (nxt - 1, int(sub["dst"][i]), int(sub["group"][i]), int(sub["time"][i]))
        if acks:
            self._send_acks(ctx, acks)
        if not out:
            return sub[:0], s[:0]
        return np.array(out, dtype=sub.dtype), np.array(out_s, np.int64)

    def _send_acks(self, ctx, acks: dict) -> None:
        """RP_ADDR (acked_seq: the last source seqno numbered) to each source heard from."""
        k = np.array([(src, *v) for (_, src), v in acks.items()], np.int64)
        far = k[:, 0] != k[:, 2]
        self.messenger.send(ctx, k[far, 2], k[far, 0], RP_ADDR, k[far, 4],
                            k[far, 3].astype(np.int32),
                            **RpAddr.fields(rp=k[far, 2], acked_seq=k[far, 1]))
        near = ~far   # the RP is the source: acknowledge in place
        self.acknowledge(self.messenger.local(ctx, k[near, 0]), k[near, 3], k[near, 1])

    def replicate_data(self, ctx, s, source, publish, seqno, srcseq, now) -> None:
        """The RP copies each numbered message to its replicas (REPLICA_DATA)."""
        tg = self.rendezvous.targets(ctx, s)
        if tg is None:
            return
        src, row, dst = tg
        self.messenger.send(ctx, src, dst, REPLICA_DATA, np.asarray(now)[row],
                            self.tree.slots["group"][s[row]],
                            **ReplicaData.fields(publish_time=np.asarray(publish)[row],
                                                 seqno=np.asarray(seqno)[row],
                                                 source_seq=np.asarray(srcseq)[row]),
                            origin=np.asarray(source)[row])

    # ---- a replica ----------------------------------------------------------------
    def on_replica_data(self, ctx, m) -> None:
        """A replica keeps the RP's numbered messages (own ring), its last seqno and each
        source's next seqno, apart from its own tree position."""
        t, sl = self.tree, self.tree.slots
        s = t.get_or_make(self.messenger.local(ctx, m["dst"]), m["group"])
        seqno = m[ReplicaData.seqno]
        self.rep_ring.put(s, seqno, m[ReplicaData.publish_time], m["origin"],
                          np.zeros(len(s), np.int64))
        np.maximum.at(sl["rep_seq"], s, seqno)
        # each (slot, source)'s highest source seqno first (numpy), then one dict update per
        # pair rather than per message
        key = s.astype(np.int64) * (1 << 32) + np.asarray(m["origin"], np.int64)
        o = np.argsort(key, kind="stable")
        key, q = key[o], np.asarray(m[ReplicaData.source_seq], np.int64)[o]
        starts = np.r_[0, np.flatnonzero(np.diff(key)) + 1] if len(key) else key
        if len(key):
            top = np.maximum.reduceat(q, starts)
            for k, qm in zip(key[starts].tolist(), top.tolist(), strict=True):
                pair = (k >> 32, k & 0xFFFFFFFF)
                self.rep_src[pair] = max(self.rep_src.get(pair, 0), qm + 1)

    def take_over_stream(self, ctx, st, nodes, now) -> None:
        """A replica becomes the RP: re-disseminate the replicated messages past its own
        position (members among its tree get them, its buffers fill for repairing children,
        numbering continues after them) and take over each source's position."""
        sl, b = self.tree.slots, self.rep_ring.size
        hi = sl["rep_seq"][st]
        lo = np.maximum(np.where(sl["synced"][st], sl["last_seq"][st] + 1, 0), hi - b + 1)
        row, q = seqno_ranges(lo, hi)
        if len(q):
            e = self.rep_ring.get(st[row], q)
            ok = e >= 0
            row, q, e = row[ok], q[ok], e[ok]
            rc = self.rep_ring.cols
            self.ordered.disseminate(ctx, st[row], np.asarray(nodes)[row],
                                     sl["group"][st[row]], rc["source"][e], rc["publish"][e],
                                     q, rc["hops"][e], np.asarray(now)[row])
        # numbering goes on after the last replicated message, whatever the own position
        sl["last_seq"][st] = np.maximum(sl["last_seq"][st], hi)
        sl["synced"][st] |= hi >= 0
        mine = set(st.tolist())
        for (si, src), q in self.rep_src.items():
            if si in mine:
                self.src_next[(si, src)] = max(self.src_next.get((si, src), 0), q)
