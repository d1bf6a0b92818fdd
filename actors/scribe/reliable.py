"""Ordered, reliable delivery on Scribe's upcalls (SPEC 3), enabled by ``reliable``: the
tree side (``OrderedDelivery``); the source and RP side is ``publishing.py``.

- the root numbers the messages of its group (seqno 0, 1, 2, ...);
- forwardHandler: every tree node keeps the last ``reliable_buffer`` messages of each
  group in a ring (keyed (slot, seqno mod B)), forwards each new message once and drops
  duplicates; members deliver strictly in seqno order, holding back messages that arrive
  ahead of a gap;
- faultHandler: a repair JOIN carries the node's last in-order seqno (JOIN last_seq) and
  the repair flag (JOIN repair = 1);
- joinHandler: the node that adds a repairing child retransmits its buffered messages
  newer than that seqno; a forwarder that never had some of them (it joined the tree
  after them) goes back to the child's position and fetches them from upstream.
A fresh (non-repair) joiner starts at its parent's position (sent back in the JOIN_ACK)
or at the first message it sees. The buffer must outlive the longest tree repair:
B messages cover B x (multicast interval) of outage.
"""

from __future__ import annotations

import numpy as np

from emulator.kernels import unique_first

from .keyindex import KeyIndex
from .tree import TreeState, disseminate_at_slots
from .types import DATA, JOIN, Data
from .wire import Messenger


class MessageRing:
    """Per-slot ring of recent messages: key slot * B + seqno % B. O(1) per access."""

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

    def forget(self, slots) -> None:
        """Drop every buffered message of these slots (O(len(slots) x B))."""
        slots = np.unique(np.asarray(slots, np.int64))
        if not len(slots) or not self.index.size:
            return
        keys = (slots[:, None] * self.size + np.arange(self.size, dtype=np.int64)).ravel()
        e = self.index.lookup(keys)
        self.cols["seq"][e[e >= 0]] = -1

    def state(self):
        return {"size": self.size, "index": self.index.state(),
                "cols": {k: v[: self.index.size] for k, v in self.cols.items()}}

    @classmethod
    def from_state(cls, st):
        r = cls(st["size"])
        r.index = KeyIndex.from_state(st["index"])
        r.cols = {k: v.copy() for k, v in st["cols"].items()}
        return r


def numbered(s, first):
    """first[i] + the rank of row i among the rows of its slot s[i] (in row order)."""
    o = np.argsort(s, kind="stable")
    so = s[o]
    starts = np.r_[0, np.flatnonzero(np.diff(so)) + 1] if len(so) else so
    rank = np.arange(len(so)) - np.repeat(starts, np.diff(np.r_[starts, len(so)]))
    seq = np.empty(len(s), np.int64)
    seq[o] = np.asarray(first, np.int64)[o] + rank
    return seq


class OrderedDelivery:
    """Root numbering, per-slot message rings, in-order release and retransmission.

    ``variant_of()`` gives the label of the delivery rows (it changes on a collapse)."""

    def __init__(self, tree: TreeState, messenger: Messenger, buffer: int, variant_of,
                 ring: MessageRing | None = None):
        self.tree = tree
        self.messenger = messenger
        self.variant_of = variant_of
        self.ring = MessageRing(buffer) if ring is None else ring
        # a slot the tree forgets (it left the tree, its node crashed) forgets its messages
        # too: kept, they would make a re-joined slot take the copies its new parent re-sends
        # for its children (positions rewound to a repairing child's) as duplicates
        tree.on_reset.append(self.forget)

    def forget(self, slots) -> None:
        """The tree forgot these slots: their buffered messages go too (`self.ring` at the
        time of the call: a restored checkpoint replaces the ring)."""
        self.ring.forget(slots)

    def number_at_root(self, s):
        """The root gives consecutive seqnos to the accepted messages of each slot."""
        return numbered(s, np.maximum(self.tree.slots["last_seq"][s], -1) + 1)

    def disseminate(self, ctx, s, nodes, group, source, publish, seqno, hops, now):
        """Slots s get numbered messages: new ones are buffered and forwarded to every
        child once; members release them in seqno order (``delivery``)."""
        if not len(s):
            return
        self._sync_fresh_slots(s, seqno)
        # new = neither delivered nor buffered, first copy within the batch
        o = np.lexsort((seqno, s))
        s, nodes, group, source = s[o], nodes[o], group[o], source[o]
        publish, seqno, hops, now = publish[o], seqno[o], hops[o], now[o]
        sl, ring = self.tree.slots, self.ring
        dup_in_batch = np.r_[False, (s[1:] == s[:-1]) & (seqno[1:] == seqno[:-1])]
        new = ~dup_in_batch & (seqno > sl["last_seq"][s]) & (ring.get(s, seqno) < 0)
        self._log_arrivals(ctx, s, nodes, group, source, publish, seqno, hops, now)
        ctx.count("scribe_duplicates", int((~new).sum()))
        s, nodes, group, source = s[new], nodes[new], group[new], source[new]
        publish, seqno, hops, now = publish[new], seqno[new], hops[new], now[new]
        if not len(s):  # every copy was a duplicate: nothing to buffer or forward
            return
        ring.put(s, seqno, publish, source, hops)
        # forwardHandler: each new message goes on to every child once, in seqno order
        disseminate_at_slots(self.tree, self.messenger, ctx, s, nodes, group, source, publish,
                             seqno, hops, now)
        touched, first = unique_first(s)
        last = np.r_[first[1:], len(s)] - 1
        # rows are sorted by (slot, seqno): a slot's last row holds its newest seqno
        sl["top_seq"][touched] = np.maximum(sl["top_seq"][touched], seqno[last])
        self._release_in_order(ctx, touched, now[last], nodes[first], group[first])

    def _sync_fresh_slots(self, s, seqno) -> None:
        """Slots that never saw a message start just before the first one they get."""
        sl = self.tree.slots
        uns = ~sl["synced"][s]
        if uns.any():
            us, inv = np.unique(s[uns], return_inverse=True)
            first = np.full(len(us), np.iinfo(np.int64).max)
            np.minimum.at(first, inv, seqno[uns])
            sl["last_seq"][us] = first - 1
            sl["synced"][us] = True

    def _log_arrivals(self, ctx, s, nodes, group, source, publish, seqno, hops, now) -> None:
        """Members log every copy the tree brings them (`arrival`, before
        hold-back and duplicate removal): the raw tree stream, beside `delivery` (what is
        released)."""
        am = self.tree.slots["member"][s]
        if am.any():
            ctx.log_owned("arrival", group=group[am].astype(np.int32),
                          member=nodes[am].astype(np.int32), source=source[am].astype(np.int32),
                          publish_time=publish[am].astype(np.int64), time=now[am].astype(np.int64),
                          hops=hops[am].astype(np.int16), seqno=seqno[am].astype(np.int64),
                          variant=self.variant_of())

    def _release_in_order(self, ctx, touched, t_now, t_node, t_group) -> None:
        """Advance each touched slot over consecutive buffered seqnos; members log each
        message released (``delivery``). One round per consecutive seqno."""
        sl, ring = self.tree.slots, self.ring
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
                ctx.log_owned("delivery", group=t_group[mem].astype(np.int32),
                              member=t_node[mem].astype(np.int32),
                              source=ring.cols["source"][e[mem]].astype(np.int32),
                              publish_time=ring.cols["publish"][e[mem]],
                              time=t_now[mem].astype(np.int64),
                              hops=ring.cols["hops"][e[mem]].astype(np.int16),
                              seqno=nxt[mem], variant=self.variant_of())

    def retransmit(self, ctx, s, child, after, now):
        """joinHandler: send a repairing child the buffered messages newer than `after`:
        up to the newest one buffered, so those waiting here behind a gap go too (they were
        forwarded on arrival, before this child was one)."""
        sl, ring, b = self.tree.slots, self.ring, self.ring.size
        hi = np.maximum(sl["last_seq"][s], sl["top_seq"][s])
        lo = np.maximum(np.asarray(after, np.int64) + 1, hi - b + 1)
        row, q = seqno_ranges(lo, hi)
        if not len(q):
            return
        e = ring.get(s[row], q)
        ok = e >= 0
        # seqnos at or below the slot's own position that it does not hold: it started
        # after them (a forwarder made for a repairing child further ahead, a fresh
        # joiner), so the child's gap cannot be filled from here
        never = ~ok & (q <= sl["last_seq"][s[row]])
        if never.any():
            self._fetch(ctx, s[row[never]], q[never], np.asarray(now)[row[never]])
        row, q, e = row[ok], q[ok], e[ok]
        ctx.count("scribe_retransmissions", len(q))
        me = np.asarray(ctx.nodes)[sl["node"][s[row]]]
        self.messenger.send(ctx, me, np.asarray(child)[row], DATA, np.asarray(now)[row],
                            sl["group"][s[row]], origin=ring.cols["source"][e],
                            **Data.fields(publish_time=ring.cols["publish"][e], seqno=q,
                                          total_hops=ring.cols["hops"][e] + 1))

    def _fetch(self, ctx, s, q, now) -> None:
        """Slots s lack seqnos q (at or below their position): a forwarder (neither member
        nor root) goes back to just before the first one it lacks and re-joins by a repair
        JOIN from there, so that its parent re-sends them; as new copies they are then
        forwarded to its children, the repairing child among them (those it holds are
        dropped as duplicates). A member keeps its position: going back would release
        again what it delivered (its case stays open)."""
        sl = self.tree.slots
        o = np.lexsort((q, s))
        s, q, now = s[o], q[o], now[o]
        _, first = unique_first(s)
        s, q, now = s[first], q[first], now[first]
        fwd = sl["active"][s] & ~sl["member"][s] & ~sl["root"][s]
        s, q, now = s[fwd], q[fwd], now[fwd]
        if not len(s):
            return
        ctx.count("scribe_gap_fetches", len(s))
        sl["last_seq"][s] = q - 1
        me = np.asarray(ctx.nodes)[sl["node"][s]]
        self.messenger.route(ctx, me, JOIN, now, sl["group"][s],
                             **self.tree.repair_join(s, sl["join_cred"][s]),
                             origin=me)


def seqno_ranges(lo, hi) -> tuple[np.ndarray, np.ndarray]:
    """(row, seqno) for every seqno in [lo[row], hi[row]] (empty where hi < lo), by row
    then seqno."""
    cnt = np.maximum(hi - lo + 1, 0)
    tot = int(cnt.sum())
    row = np.repeat(np.arange(len(lo)), cnt)
    q = np.repeat(lo - np.r_[0, np.cumsum(cnt)[:-1]], cnt) + np.arange(tot)
    return row, q.astype(np.int64, copy=False)
