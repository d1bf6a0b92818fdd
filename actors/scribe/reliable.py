"""Ordered, reliable delivery on Scribe's upcalls (SPEC 3), enabled by ``reliable``.

- the root numbers the messages of its group (seqno 0, 1, 2, ...);
- forwardHandler: every tree node keeps the last ``reliable_buffer`` messages of each
  group in a ring (keyed (slot, seqno mod B)), forwards each new message once and drops
  duplicates; members deliver strictly in seqno order, holding back messages that arrive
  ahead of a gap;
- faultHandler: a repair JOIN carries the node's last in-order seqno (field b) and the
  repair flag (field c = 1);
- joinHandler: the node that adds a repairing child retransmits its buffered messages
  newer than that seqno.
A fresh (non-repair) joiner starts at its parent's position (sent back in the JOIN_ACK)
or at the first message it sees. The buffer must outlive the longest tree repair:
B messages cover B x (multicast interval) of outage.
"""

from __future__ import annotations

import numpy as np

from .keyindex import KeyIndex
from .types import DATA, MCAST, REPLICA_DATA, RP_ADDR


class MessageRing:
    """Per-slot ring of recent messages: key slot * B + seqno % B. O(log n) per access."""

    def __init__(self, size: int):
        self.size = int(size)
        self.index = KeyIndex()
        self.cols = {"seq": np.full(0, -1, np.int64), "publish": np.zeros(0, np.int64),
                     "source": np.zeros(0, np.int64), "hops": np.zeros(0, np.int64)}

    def _keys(self, slots, seqno):
        return np.asarray(slots, np.int64) * self.size + np.asarray(seqno, np.int64) % self.size

    def put(self, slots, seqno, publish, source, hops):
        e, _ = self.index.insert(self._keys(slots, seqno))
        n = self.index.size
        if n > len(self.cols["seq"]):
            cap = max(n, 2 * len(self.cols["seq"]), 1024)
            for k, v in self.cols.items():
                grown = np.full(cap, -1 if k == "seq" else 0, v.dtype)
                grown[: len(v)] = v
                self.cols[k] = grown
        self.cols["seq"][e] = seqno
        self.cols["publish"][e] = publish
        self.cols["source"][e] = source
        self.cols["hops"][e] = hops

    def get(self, slots, seqno):
        """Entry of each (slot, seqno), -1 where not buffered (absent or overwritten)."""
        e = self.index.lookup(self._keys(slots, seqno))
        ok = e >= 0
        ok[ok] = self.cols["seq"][e[ok]] == np.asarray(seqno)[ok]
        return np.where(ok, e, -1)

    def state(self):
        return {"size": self.size, "index": self.index.state(),
                "cols": {k: v[: self.index.size].copy() for k, v in self.cols.items()}}

    @classmethod
    def from_state(cls, st):
        r = cls(st["size"])
        r.index = KeyIndex.from_state(st["index"])
        r.cols = {k: v.copy() for k, v in st["cols"].items()}
        return r


def _numbered(s, first):
    """first[i] + the rank of row i among the rows of its slot s[i] (in row order)."""
    o = np.argsort(s, kind="stable")
    so = s[o]
    starts = np.r_[0, np.flatnonzero(np.diff(so)) + 1] if len(so) else so
    rank = np.arange(len(so)) - np.repeat(starts, np.diff(np.r_[starts, len(so)]))
    seq = np.empty(len(s), np.int64)
    seq[o] = np.asarray(first, np.int64)[o] + rank
    return seq


class ReliableMixin:
    def _number_at_root(self, s):
        """The root gives consecutive seqnos to the accepted messages of each slot."""
        return _numbered(s, np.maximum(self.tree.slots["last_seq"][s], -1) + 1)

    def _reliable_disseminate(self, ctx, s, nodes, group, source, publish, seqno, hops, now):
        t, sl, ring = self.tree, self.tree.slots, self.ring
        if not len(s):
            return
        # slots that never saw a message start just before the first one they get
        uns = ~sl["synced"][s]
        if uns.any():
            us, inv = np.unique(s[uns], return_inverse=True)
            first = np.full(len(us), np.iinfo(np.int64).max)
            np.minimum.at(first, inv, seqno[uns])
            sl["last_seq"][us] = first - 1
            sl["synced"][us] = True
        # new = neither delivered nor buffered, first copy within the batch
        o = np.lexsort((seqno, s))
        s, nodes, group, source = s[o], nodes[o], group[o], source[o]
        publish, seqno, hops, now = publish[o], seqno[o], hops[o], now[o]
        dup_in_batch = np.r_[False, (s[1:] == s[:-1]) & (seqno[1:] == seqno[:-1])]
        new = ~dup_in_batch & (seqno > sl["last_seq"][s]) & (ring.get(s, seqno) < 0)
        # issue 22: members log every copy the tree brings them (`arrival`, before hold-back
        # and duplicate removal): the raw tree stream, beside `delivery` (what is released)
        am = sl["member"][s]
        if am.any():
            ctx.log("arrival", group=group[am].astype(np.int32),
                    member=nodes[am].astype(np.int32), source=source[am].astype(np.int32),
                    publish_time=publish[am].astype(np.int64), time=now[am].astype(np.int64),
                    hops=hops[am].astype(np.int16), seqno=seqno[am].astype(np.int64),
                    variant=np.full(int(am.sum()), self.variant, dtype=object))
        ctx.count("scribe_duplicates", int((~new).sum()))
        s, nodes, group, source = s[new], nodes[new], group[new], source[new]
        publish, seqno, hops, now = publish[new], seqno[new], hops[new], now[new]
        if not len(s):  # issue 22: every copy was a duplicate (crashed on the empty batch)
            return
        ring.put(s, seqno, publish, source, hops)
        # forwardHandler: each new message goes on to every child once, in seqno order
        qi, e = t.children_of(s)
        if len(e):
            sl["last_sent"][s[qi]] = now[qi]
            self._send(ctx, nodes[qi], t.entries["child"][e], DATA, now[qi], group[qi],
                       origin=source[qi], a=publish[qi], b=seqno[qi], c=hops[qi] + 1)
        # in-order release: advance each slot over consecutive buffered seqnos
        touched, first = np.unique(s, return_index=True)
        last = np.r_[first[1:], len(s)] - 1
        t_now, t_node, t_group = now[last], nodes[first], group[first]
        while len(touched):
            nxt = sl["last_seq"][touched] + 1
            e = ring.get(touched, nxt)
            ok = e >= 0
            if not ok.any():
                break
            touched, nxt, e = touched[ok], nxt[ok], e[ok]
            t_now, t_node, t_group = t_now[ok], t_node[ok], t_group[ok]
            sl["last_seq"][touched] = nxt
            mem = sl["member"][touched]
            n = int(mem.sum())
            if n:
                ctx.log("delivery", group=t_group[mem].astype(np.int32),
                        member=t_node[mem].astype(np.int32),
                        source=ring.cols["source"][e[mem]].astype(np.int32),
                        publish_time=ring.cols["publish"][e[mem]],
                        time=t_now[mem].astype(np.int64),
                        hops=ring.cols["hops"][e[mem]].astype(np.int16),
                        seqno=nxt[mem], variant=np.full(n, self.variant, dtype=object))

    def _retransmit(self, ctx, s, child, after, now):
        """joinHandler: send a repairing child the buffered messages newer than `after`."""
        sl, ring, b = self.tree.slots, self.ring, self.ring.size
        hi = sl["last_seq"][s]
        lo = np.maximum(np.asarray(after, np.int64) + 1, hi - b + 1)
        cnt = np.maximum(hi - lo + 1, 0)
        tot = int(cnt.sum())
        if not tot:
            return
        row = np.repeat(np.arange(len(s)), cnt)
        q = np.repeat(lo - np.r_[0, np.cumsum(cnt)[:-1]], cnt) + np.arange(tot)
        e = ring.get(s[row], q)
        ok = e >= 0
        row, q, e = row[ok], q[ok], e[ok]
        ctx.count("scribe_retransmissions", len(q))
        me = np.asarray(ctx.nodes)[sl["node"][s[row]]]
        self._send(ctx, me, np.asarray(child)[row], DATA, np.asarray(now)[row],
                   sl["group"][s[row]], origin=ring.cols["source"][e],
                   a=ring.cols["publish"][e], b=q, c=ring.cols["hops"][e] + 1)

    # ---- issue 22: reliable publishing and RP fail-over ---------------------------------
    # The numbering above starts at the root; two holes were left before it:
    # - order: the root numbered MCASTs in arrival order, and a source's MCASTs reach the RP
    #   by different paths (routed, then direct once RP_ADDR arrives, routed again when the
    #   cache expires): a direct copy overtook a routed one and members got the stream out
    #   of publish order;
    # - loss: MCASTs sent to a failed RP vanish, and the replica that takes over numbered
    #   from its own position (nothing if it was off the tree), reusing seqnos members had
    #   already delivered.
    # Closed as follows (all only with ``reliable``):
    # - the source numbers its messages per group (slot column src_seq; MCAST field b) and
    #   keeps each until the RP acknowledges it (RP_ADDR, b = last source seqno numbered,
    #   cumulative); on its TICK it re-routes those unacknowledged for heartbeat_miss
    #   periods, then every period until acknowledged (and drops its RP cache);
    # - the RP numbers each source's messages in source order: later ones wait for a gap
    #   (src_held), repeats are dropped and acknowledged again;
    # - the RP copies every numbered message to its replicas (REPLICA_DATA); the replica
    #   that takes over first re-disseminates those past its own position, so numbering,
    #   buffers and per-source positions continue where the failed RP stopped.
    # Left open (docs/scribe.md): a source without tree state has no TICK and does not
    # retry; a second take-over in the same group only has the messages numbered since the
    # first; all k replicas failing with the RP loses the group.

    def _reliable_setup(self):
        self.src_next: dict = {}    # (slot, source) -> next source seqno to number (RP)
        self.src_held: dict = {}    # (slot, source) -> {source seqno: MCAST record} (RP)
        self.rep_src: dict = {}     # (slot, source) -> next source seqno (replica record)
        self.rep_ring = MessageRing(self.params["reliable_buffer"])
        self.pend = {k: np.zeros(0, np.int64)
                     for k in ("li", "group", "seq", "cred", "publish", "sent")}

    def _reliable_state(self) -> dict:
        return {"src_next": dict(self.src_next),
                "src_held": {k: dict(v) for k, v in self.src_held.items()},
                "rep_src": dict(self.rep_src), "rep_ring": self.rep_ring.state(),
                "pend": {k: v.copy() for k, v in self.pend.items()}}

    def _reliable_restore(self, st: dict | None):
        if st is None:
            self._reliable_setup()
            return
        self.src_next = dict(st["src_next"])
        self.src_held = {k: dict(v) for k, v in st["src_held"].items()}
        self.rep_src = dict(st["rep_src"])
        self.rep_ring = MessageRing.from_state(st["rep_ring"])
        self.pend = {k: v.copy() for k, v in st["pend"].items()}

    def _source_number(self, ctx, m, s):
        """Source side of MCAST_REQ: number each (source, group)'s messages 0, 1, ... and
        keep them until acknowledged. Returns the source seqnos (MCAST field b)."""
        sl = self.tree.slots
        seq = _numbered(s, sl["src_seq"][s])
        np.add.at(sl["src_seq"], s, 1)
        new = {"li": self._local(ctx, m["dst"]), "group": m["group"].astype(np.int64),
               "seq": seq, "cred": m["a"].astype(np.int64),
               "publish": m["time"].astype(np.int64), "sent": m["time"].astype(np.int64)}
        self.pend = {k: np.r_[self.pend[k], new[k]] for k in self.pend}
        return seq

    def _ack_pending(self, li, group, upto):
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

    def _retry_pending(self, ctx, nodes, now_n):
        """Source TICK: re-route the messages unacknowledged for heartbeat_miss periods, in
        source order, and drop the RP cache (the RP may have failed)."""
        p = self.pend
        if not len(p["li"]) or not len(nodes):
            return
        wait = self.params["heartbeat_miss"] * self.params["heartbeat_us"]
        i = np.clip(np.searchsorted(nodes, p["li"]), 0, len(nodes) - 1)
        due = (nodes[i] == p["li"]) & (now_n[i] - p["sent"] >= wait)
        if not due.any():
            return
        rows = np.flatnonzero(due)
        rows = rows[np.lexsort((p["seq"][rows], p["group"][rows], p["li"][rows]))]
        now = now_n[i[rows]]
        # once overdue, again every period until acknowledged (repeats are dropped at the RP)
        p["sent"][rows] = now - wait + self.params["heartbeat_us"]
        ctx.count("scribe_publish_retries", len(rows))
        me = np.asarray(ctx.nodes)[p["li"][rows]].astype(np.int64)
        s = self.tree.find(p["li"][rows], p["group"][rows])
        self.tree.slots["rp_cache"][s[s >= 0]] = -1
        self._route(ctx, me, MCAST, now, p["group"][rows], a=p["cred"][rows], b=p["seq"][rows],
                    c=p["publish"][rows], origin=me)

    def _source_fifo(self, ctx, sub, s):
        """RP side: pass each source's MCASTs on in source order (b); later ones wait for a
        gap, repeats are dropped. Acknowledges (RP_ADDR, b = last numbered) every source
        heard from. Returns (records, slots) to number now, in order. O(messages) Python:
        a few per RP and stream tick."""
        out, out_s, acks = [], [], {}
        for i in range(len(sub)):
            key = (int(s[i]), int(sub["origin"][i]))
            q = int(sub["b"][i])
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
            k = np.array([(src, *v) for (_, src), v in acks.items()], np.int64)
            far = k[:, 0] != k[:, 2]
            self._send(ctx, k[far, 2], k[far, 0], RP_ADDR, k[far, 4], k[far, 3].astype(np.int32),
                       a=k[far, 2], b=k[far, 1])
            near = ~far   # the RP is the source: acknowledge in place
            self._ack_pending(self._local(ctx, k[near, 0]), k[near, 3], k[near, 1])
        if not out:
            return sub[:0], s[:0]
        return np.array(out, dtype=sub.dtype), np.array(out_s, np.int64)

    def _replicate_data(self, ctx, s, source, publish, seqno, srcseq, now):
        """The RP copies each numbered message to its replicas (REPLICA_DATA)."""
        tg = self._replica_targets(ctx, s)
        if tg is None:
            return
        src, row, dst = tg
        self._send(ctx, src, dst, REPLICA_DATA, np.asarray(now)[row],
                   self.tree.slots["group"][s[row]],
                   a=np.asarray(publish)[row], b=np.asarray(seqno)[row],
                   c=np.asarray(srcseq)[row], origin=np.asarray(source)[row])

    def _replica_data(self, ctx, m):
        """A replica keeps the RP's numbered messages (own ring), its last seqno and each
        source's next seqno, apart from its own tree position."""
        t, sl = self.tree, self.tree.slots
        s = t.get_or_make(self._local(ctx, m["dst"]), m["group"])
        self.rep_ring.put(s, m["b"], m["a"], m["origin"], np.zeros(len(s), np.int64))
        np.maximum.at(sl["rep_seq"], s, m["b"])
        # each (slot, source)'s highest source seqno first (numpy), then one dict update per
        # pair rather than per message
        key = s.astype(np.int64) * (1 << 32) + np.asarray(m["origin"], np.int64)
        o = np.argsort(key, kind="stable")
        key, q = key[o], np.asarray(m["c"], np.int64)[o]
        starts = np.r_[0, np.flatnonzero(np.diff(key)) + 1] if len(key) else key
        if len(key):
            top = np.maximum.reduceat(q, starts)
            for k, qm in zip(key[starts].tolist(), top.tolist(), strict=True):
                pair = (k >> 32, k & 0xFFFFFFFF)
                self.rep_src[pair] = max(self.rep_src.get(pair, 0), qm + 1)

    def _take_over_stream(self, ctx, st, nodes, now):
        """A replica becomes the RP: re-disseminate the replicated messages past its own
        position (members among its tree get them, its buffers fill for repairing children,
        numbering continues after them) and take over each source's position."""
        sl, b = self.tree.slots, self.rep_ring.size
        hi = sl["rep_seq"][st]
        lo = np.maximum(np.where(sl["synced"][st], sl["last_seq"][st] + 1, 0), hi - b + 1)
        cnt = np.maximum(hi - lo + 1, 0)
        tot = int(cnt.sum())
        if tot:
            row = np.repeat(np.arange(len(st)), cnt)
            q = np.repeat(lo - np.r_[0, np.cumsum(cnt)[:-1]], cnt) + np.arange(tot)
            e = self.rep_ring.get(st[row], q)
            ok = e >= 0
            row, q, e = row[ok], q[ok], e[ok]
            rc = self.rep_ring.cols
            self._reliable_disseminate(ctx, st[row], np.asarray(nodes)[row], sl["group"][st[row]],
                                       rc["source"][e], rc["publish"][e], q, rc["hops"][e],
                                       np.asarray(now)[row])
        # numbering goes on after the last replicated message, whatever the own position
        sl["last_seq"][st] = np.maximum(sl["last_seq"][st], hi)
        sl["synced"][st] |= hi >= 0
        mine = set(st.tolist())
        for (si, src), q in self.rep_src.items():
            if si in mine:
                self.src_next[(si, src)] = max(self.src_next.get((si, src), 0), q)
