"""Presumed failures and lazy routing-table repair (ROW_REQ, ROW_REPLY; SPEC 2).

A node presumes a node failed after a keep-alive timeout (leaf-set maintenance) or a lost
hop (hop acks): the failed node leaves all its tables and enters its failed memory. A
routing-table slot so emptied is refilled lazily: the node asks another node of the same
row for its entry of that slot (ROW_REQ), then the nodes of the next rows (any of them
shares the slot's prefix); a reply that cannot fill the slot moves on to the next helper.
"""

from __future__ import annotations

import numpy as np

from emulator.kernels import unique_first

from . import handler_kernels
from . import types as msg_types
from .messages import msgs_of
from .types import RowReply, RowReq


class TableRepair:
    ROW_ATTEMPTS = 8  # helpers asked per emptied slot before giving up (lazy: next use retries)

    def __init__(self, nodes):
        """``nodes`` :class:`~.nodes.PastryNodes` (tables, failed memory, application)."""
        self.nodes = nodes

    def presume_failed(self, ctx, li, dead_ids, t) -> None:
        """Local nodes ``li`` presume ``dead_ids`` failed at times ``t``: tables are cleaned,
        emptied routing-table slots are refilled by ROW_REQ, ``new_leafs`` fires."""
        li = np.asarray(li, np.int64)
        dead_ids = np.asarray(dead_ids, np.int64)
        t = np.asarray(t, np.int64)
        # one presumption per (node, dead id); already-known deaths are not repeated
        key = li * (1 << 32) + dead_ids
        _, first = unique_first(key)
        first.sort()
        li, dead_ids, t = li[first], dead_ids[first], t[first]
        known = self.nodes.failed.knows(li, dead_ids)
        li, dead_ids, t = li[~known], dead_ids[~known], t[~known]
        if not len(li):
            return
        in_leaf = self.nodes.leaves.contains(li, dead_ids)
        r, rr, cc = self.nodes.table.slots_holding(li, dead_ids)
        self.nodes.remember_failed(li, dead_ids)
        if len(r):
            self._ask_row(ctx, li[r], rr, cc, np.zeros(len(r), np.int64), t[r])
        if in_leaf.any():
            self.nodes.app.new_leafs(ctx, np.unique(li[in_leaf]))

    def _ask_row(self, ctx, li, row, col, attempt, t) -> None:
        """ROW_REQ for slot (row, col) of nodes ``li`` to their ``attempt``-th helper: the
        live entries of the same row (other columns), then of the next rows, in order."""
        table = self.nodes.table
        li = np.asarray(li, np.int64)
        row, col = np.asarray(row, np.int64), np.asarray(col, np.int64)
        attempt = np.asarray(attempt, np.int64)
        still = (table.entries[li, row, col] < 0) & (attempt < self.ROW_ATTEMPTS)
        li, row, col, attempt, t = li[still], row[still], col[still], attempt[still], \
            np.asarray(t, np.int64)[still]
        if not len(li):
            return
        flat = table.flat(li)                                      # [B, rows * width]
        slot = np.arange(flat.shape[1])[None, :]
        ok = (flat >= 0) & (slot >= (row * table.width)[:, None])
        rank = np.cumsum(ok, axis=1) - 1
        hit = ok & (rank == attempt[:, None])
        has = hit.any(axis=1)
        if not has.any():
            return
        helper = flat[has, np.argmax(hit[has], axis=1)]
        ctx.count("pastry_row_requests", int(has.sum()))
        ctx.send(self.nodes.global_ids[li[has]], helper, msg_types.ROW_REQ, t[has],
                 **RowReq.fields(row=row[has], column=col[has]), hops=attempt[has], mode=0)

    def on_row_req(self, ctx, batch) -> None:
        """ROW_REQ: the asker is alive; answer with my entry of the slot (row, column) (one
        compiled call, ``handler_kernels.on_row_req``)."""
        m = msgs_of(batch)
        nodes = self.nodes
        ctx.send_compiled(len(m), 0, handler_kernels.on_row_req, m,
                          np.asarray(nodes.local(ctx, m["dst"]), np.int64), nodes.failed.ids,
                          nodes.table.entries, msg_types.ROW_REPLY)

    def on_row_reply(self, ctx, batch) -> None:
        """ROW_REPLY: offer the entry to the slot; still empty: ask the next helper."""
        m = msgs_of(batch)
        li = self.nodes.local(ctx, m["dst"])
        self.nodes.heard_from(li, m["src"])
        entries = self.nodes.table.entries
        row, col = m[RowReply.row], m[RowReply.column]
        entry = m[RowReply.entry].astype(np.int64)
        got = entry >= 0
        if got.any():
            before = entries[li[got], row[got], col[got]].copy()
            self.nodes.insert_table(ctx, li[got], entry[got, None])
            after = entries[li[got], row[got], col[got]]
            ctx.count("pastry_row_repairs", int(((before < 0) & (after >= 0)).sum()))
        self._ask_row(ctx, li, row, col, m["hops"].astype(np.int64) + 1, m["time"])
