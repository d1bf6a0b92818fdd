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
from .types import DATA


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


class ReliableMixin:
    def _number_at_root(self, s):
        """The root gives consecutive seqnos to the accepted messages of each slot."""
        sl = self.tree.slots
        o = np.argsort(s, kind="stable")
        so = s[o]
        starts = np.r_[0, np.flatnonzero(np.diff(so)) + 1] if len(so) else so
        rank = np.arange(len(so)) - np.repeat(starts, np.diff(np.r_[starts, len(so)]))
        seq = np.empty(len(s), np.int64)
        seq[o] = np.maximum(sl["last_seq"][so], -1) + 1 + rank
        return seq

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
        ctx.count("scribe_duplicates", int((~new).sum()))
        s, nodes, group, source = s[new], nodes[new], group[new], source[new]
        publish, seqno, hops, now = publish[new], seqno[new], hops[new], now[new]
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
