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


def count_repairs(ctx, counts) -> None:
    """The counters ``handler_kernels.on_row_reply`` and ``ask_rows`` added to
    (``counts``, int64[N_RUN_COUNTS]) to the shard's, then zeroed."""
    if counts[handler_kernels.N_ROW_REPLY_RUNS]:   # (counted when an entry came, even 0)
        ctx.count("pastry_row_repairs", int(counts[handler_kernels.N_ROW_REPAIRS]))
    if counts[handler_kernels.N_ROW_REQUESTS]:
        ctx.count("pastry_row_requests", int(counts[handler_kernels.N_ROW_REQUESTS]))
    counts[:] = 0


class TableRepair:
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
        live entries of the same row (other columns), then of the next rows, in order (one
        compiled call, ``handler_kernels.ask_rows``)."""
        li = np.ascontiguousarray(li, np.int64)
        if not len(li):
            return
        requests, = ctx.send_compiled(
            len(li), 0, handler_kernels.ask_rows, li, np.ascontiguousarray(row, np.int64),
            np.ascontiguousarray(col, np.int64), np.ascontiguousarray(attempt, np.int64),
            np.ascontiguousarray(t, np.int64), self.nodes.table.entries, self.nodes.global_ids,
            msg_types.ROW_REQ)
        if requests:
            ctx.count("pastry_row_requests", int(requests))

    def on_row_req(self, ctx, batch) -> None:
        """ROW_REQ: the asker is alive; answer with my entry of the slot (row, column) (one
        compiled call, ``handler_kernels.on_row_req``)."""
        m = msgs_of(batch)
        nodes = self.nodes
        ctx.send_compiled(len(m), 0, handler_kernels.on_row_req, m,
                          np.asarray(nodes.local(ctx, m["dst"]), np.int64), nodes.failed.ids,
                          nodes.table.entries, msg_types.ROW_REPLY)

    def on_row_reply(self, ctx, batch) -> None:
        """ROW_REPLY: offer the entry to the slot; still empty: ask the next helper (one
        compiled call, ``handler_kernels.on_row_reply``)."""
        m = msgs_of(batch)
        nodes = self.nodes
        counts = np.zeros(handler_kernels.N_RUN_COUNTS, np.int64)
        probes, = ctx.send_compiled(
            len(m), 0, handler_kernels.on_row_reply, m,
            np.asarray(nodes.local(ctx, m["dst"]), np.int64), nodes.table.entries,
            nodes.failed.ids, nodes.global_ids, nodes.ids_hi, nodes.ids_lo, nodes.table.b,
            *nodes.latency_tables(ctx), msg_types.ROW_REQ, counts)
        if probes:
            ctx.count("pastry_probes", int(probes))
        count_repairs(ctx, counts)
