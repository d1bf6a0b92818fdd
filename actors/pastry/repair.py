"""Failure handling on the routing path: per-hop acknowledgements of routed messages and
lazy routing-table repair (SPEC 2), as handlers of :class:`~.protocol.Pastry`.

The engine drops messages to dead nodes without telling the sender, so a node learns that
a routed hop was lost only by a missing acknowledgement:

- every routed hop X -> Y is acknowledged by Y (HOP_ACK, carrying the hop's identity:
  origin, key, type, hops); X keeps a copy of the hop in a per-shard pending array and an
  ACK_TIMER at ``sent + 2 * latency + slack``;
- at the deadline an unacknowledged hop means Y is presumed failed: Y leaves X's tables
  (and enters X's dead memory), the message is routed on from X with the repaired tables
  (no ``forward`` upcall again: the app already saw it at X), so a routed message still
  reaches the live node numerically closest to its key;
- a routing-table slot emptied by a presumed failure (a lost hop or a keep-alive timeout)
  is refilled lazily: X asks another node of the same row for its entry of that slot
  (ROW_REQ), then the nodes of the next rows (any of them shares the slot's prefix); a
  reply that cannot fill the slot moves on to the next helper.

Acknowledgements are on when keep-alives are (failures are modelled), or with
``hop_ack=True``; a stable overlay sends none.
"""

from __future__ import annotations

import numpy as np

from emulator.batch import take_rows

from . import types as T

MIX = np.uint64(0x9E3779B97F4A7C15)


def hop_hash(src, dst, origin, type_, hops, key_hi, key_lo) -> np.ndarray:
    """64-bit identity of a routed hop (the fields both ends see). Collisions would need
    two hops of one sender to one receiver with different keys to hash equal: ~2^-64."""
    h = np.zeros(len(np.atleast_1d(src)), np.uint64)
    with np.errstate(over="ignore"):
        for v in (src, dst, origin, type_, hops, key_hi, key_lo):
            h = (h ^ np.asarray(v).astype(np.int64).view(np.uint64)) * MIX
            h ^= h >> np.uint64(29)
    return h


def _rank_in_runs(sorted_keys) -> np.ndarray:
    """Position of each element within its run of equal (sorted) keys."""
    n = len(sorted_keys)
    if n == 0:
        return np.zeros(0, np.int64)
    start = np.r_[True, sorted_keys[1:] != sorted_keys[:-1]]
    idx = np.arange(n)
    return idx - np.maximum.accumulate(np.where(start, idx, 0))


class RepairMixin:
    """Hop acknowledgements, presumed failures and ROW_REQ/ROW_REPLY (see module doc)."""

    ROW_ATTEMPTS = 8  # helpers asked per emptied slot before giving up (lazy: next use retries)

    def repair_setup(self, ctx, msg_dtype):
        p = self.params
        self.acks = bool(p["keepalive_us"] > 0 if p["hop_ack"] is None else p["hop_ack"])
        self.ack_slack = int(p["ack_slack_us"] or getattr(ctx, "delta_us", 0) or 1000)
        self.pend = np.zeros(0, msg_dtype)          # hops sent, awaiting HOP_ACK
        self.pend_dl = np.zeros(0, np.int64)        # their deadlines
        self.pend_h = np.zeros(0, np.uint64)        # their identities

    def repair_checkpoint(self) -> dict:
        return {"pend": self.pend.copy(), "pend_dl": self.pend_dl.copy(),
                "pend_h": self.pend_h.copy()}

    def repair_restore(self, d):
        self.pend, self.pend_dl = d["pend"].copy(), d["pend_dl"].copy()
        self.pend_h = d["pend_h"].copy()

    # ---- sending side ---------------------------------------------------------------
    def _expect_acks(self, ctx, out, lat):
        """Remember hops just sent (rows of ``out``: src = this node, dst = next hop)."""
        if not self.acks or not len(out):
            return
        dl = out["time"] + 2 * lat + self.ack_slack
        self.pend = np.concatenate([self.pend, out])
        self.pend_dl = np.concatenate([self.pend_dl, dl])
        self.pend_h = np.concatenate([self.pend_h, hop_hash(
            out["src"], out["dst"], out["origin"], out["type"], out["hops"], out["key_hi"],
            out["key_lo"])])
        ctx.timer(out["src"], dl, T.ACK_TIMER)

    def _ack_hops(self, ctx, m):
        """Acknowledge routed messages that arrived over a hop (src != dst)."""
        if not self.acks:
            return
        hop = m["src"] != m["dst"]
        if hop.any():
            a = take_rows(m, hop)
            ctx.send(a["dst"], a["src"], T.HOP_ACK, a["time"], origin=a["origin"],
                     key_hi=a["key_hi"], key_lo=a["key_lo"], b=a["type"].astype(np.int64),
                     c=a["hops"].astype(np.int64), mode=0)

    def _hop_ack(self, ctx, batch):
        m = self._msgs(batch)
        self._forget_dead(self._li(ctx, m["dst"]), m["src"])
        if not len(self.pend):
            return
        h = hop_hash(m["dst"], m["src"], m["origin"], m["b"], m["c"], m["key_hi"], m["key_lo"])
        # multiset matching: k acks with one identity clear k pending copies of it
        uh, cnt = np.unique(h, return_counts=True)
        o = np.argsort(self.pend_h, kind="stable")
        ph = self.pend_h[o]
        pos = np.searchsorted(uh, ph)
        posc = np.minimum(pos, len(uh) - 1)
        allowed = np.where(uh[posc] == ph, cnt[posc], 0)
        drop = np.zeros(len(ph), bool)
        drop[o] = _rank_in_runs(ph) < allowed
        keep = ~drop
        self._keep_pending(keep)

    def _keep_pending(self, keep):
        self.pend, self.pend_dl = take_rows(self.pend, keep), self.pend_dl[keep]
        self.pend_h = self.pend_h[keep]

    def _ack_timer(self, ctx, batch):
        m = self._msgs(batch)
        if not len(self.pend):
            return
        t_of = np.full(len(self.nodes), np.iinfo(np.int64).min, np.int64)
        np.maximum.at(t_of, self._li(ctx, m["dst"]), m["time"])
        pli = self._li(ctx, self.pend["src"])
        due = self.pend_dl <= t_of[pli]
        if not due.any():
            return
        lost, dl = take_rows(self.pend, due), self.pend_dl[due]
        self._keep_pending(~due)
        # per node in sending order (insertion order is per-node deterministic)
        o = np.lexsort((dl, lost["src"]))
        lost, dl = take_rows(lost, o), dl[o]
        ctx.count("pastry_hop_timeouts", len(lost))
        x = lost["src"].astype(np.int64)
        self._presume_dead(ctx, self._li(ctx, x), lost["dst"].astype(np.int64), dl)
        # route on from X, as if the message had waited there until the deadline
        again = lost.copy()
        lat = np.asarray(ctx.latency(x, lost["dst"]), np.int64)
        again["path_us"] = lost["path_us"] - lat + (dl - lost["time"])
        again["hops"] -= 1
        again["dst"] = again["src"]
        again["time"] = again["sent"] = dl
        self._route_step(ctx, again, None, upcall=False)

    # ---- presumed failures and lazy table repair ---------------------------------------
    def _presume_dead(self, ctx, li, dead_ids, t):
        """Local nodes ``li`` presume ``dead_ids`` failed at times ``t``: tables are cleaned,
        emptied routing-table slots are refilled by ROW_REQ, ``new_leafs`` fires."""
        li = np.asarray(li, np.int64)
        dead_ids = np.asarray(dead_ids, np.int64)
        t = np.asarray(t, np.int64)
        # one presumption per (node, dead id); already-known deaths are not repeated
        key = li * (1 << 32) + dead_ids
        _, first = np.unique(key, return_index=True)
        first.sort()
        li, dead_ids, t = li[first], dead_ids[first], t[first]
        known = (self.dead[li] == dead_ids[:, None]).any(axis=1)
        li, dead_ids, t = li[~known], dead_ids[~known], t[~known]
        if not len(li):
            return
        s = self.state
        in_leaf = (s.leaf[li] == dead_ids[:, None]).any(axis=1)
        r, rr, cc = np.nonzero(s.rt[li] == dead_ids[:, None, None])
        self._remember_dead(li, dead_ids)
        if len(r):
            self._ask_row(ctx, li[r], rr, cc, np.zeros(len(r), np.int64), t[r])
        if in_leaf.any() and self.app is not None:
            self.app.new_leafs(ctx, np.unique(li[in_leaf]))

    def _ask_row(self, ctx, li, row, col, attempt, t):
        """ROW_REQ for slot (row, col) of nodes ``li`` to their ``attempt``-th helper: the
        live entries of the same row (other columns), then of the next rows, in order."""
        s = self.state
        width = 1 << s.b
        li = np.asarray(li, np.int64)
        row, col = np.asarray(row, np.int64), np.asarray(col, np.int64)
        attempt = np.asarray(attempt, np.int64)
        still = (s.rt[li, row, col] < 0) & (attempt < self.ROW_ATTEMPTS)
        li, row, col, attempt, t = li[still], row[still], col[still], attempt[still], \
            np.asarray(t, np.int64)[still]
        if not len(li):
            return
        flat = s.rt[li].reshape(len(li), -1)                       # [B, rows * width]
        slot = np.arange(flat.shape[1])[None, :]
        ok = (flat >= 0) & (slot >= (row * width)[:, None])
        rank = np.cumsum(ok, axis=1) - 1
        hit = ok & (rank == attempt[:, None])
        has = hit.any(axis=1)
        if not has.any():
            return
        helper = flat[has, np.argmax(hit[has], axis=1)]
        ctx.count("pastry_row_requests", int(has.sum()))
        ctx.send(self.nodes[li[has]], helper, T.ROW_REQ, t[has], a=row[has], b=col[has],
                 hops=attempt[has], mode=0)

    def _row_req(self, ctx, batch):
        m = self._msgs(batch)
        li = self._li(ctx, m["dst"])
        self._forget_dead(li, m["src"])
        entry = self.state.rt[li, m["a"], m["b"]].astype(np.int64)
        # the asker's own id is no answer (it sits in its own slot only by prefix accident)
        entry[entry == m["src"]] = -1
        ctx.send(m["dst"], m["src"], T.ROW_REPLY, m["time"], a=m["a"], b=m["b"], c=entry,
                 hops=m["hops"], mode=0)

    def _row_reply(self, ctx, batch):
        m = self._msgs(batch)
        li = self._li(ctx, m["dst"])
        self._forget_dead(li, m["src"])
        entry = m["c"].astype(np.int64)
        got = entry >= 0
        if got.any():
            before = self.state.rt[li[got], m["a"][got], m["b"][got]].copy()
            self._insert_table(ctx, li[got], entry[got, None])
            after = self.state.rt[li[got], m["a"][got], m["b"][got]]
            ctx.count("pastry_row_repairs", int(((before < 0) & (after >= 0)).sum()))
        # still empty (no answer, or a dead-known one): ask the next helper
        self._ask_row(ctx, li, m["a"], m["b"], m["hops"].astype(np.int64) + 1, m["time"])
