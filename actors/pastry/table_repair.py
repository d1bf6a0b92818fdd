"""Presumed failures and lazy routing-table repair (ROW_REQ, ROW_REPLY; SPEC 2).

A node presumes a node failed after a keep-alive timeout (leaf-set maintenance) or a lost
hop (hop acks): the failed node leaves all its tables and enters its failed memory. A
routing-table slot so emptied is refilled lazily: the node asks another node of the same
row for its entry of that slot (ROW_REQ), then the nodes of the next rows (any of them
shares the slot's prefix); a reply that cannot fill the slot moves on to the next helper.
"""

from __future__ import annotations

import numpy as np

from . import handler_kernels
from . import types as msg_types
from .messages import msgs_of


def count_repairs(ctx, counts) -> None:
    """The counters ``handler_kernels.on_row_reply``, ``ask_rows`` and
    ``presume_silent_leaves`` added to (``counts``, int64[N_RUN_COUNTS]) to the shard's,
    then zeroed."""
    if counts[handler_kernels.N_ROW_REPLY_RUNS]:   # (counted when an entry came, even 0)
        ctx.count("pastry_row_repairs", int(counts[handler_kernels.N_ROW_REPAIRS]))
    if counts[handler_kernels.N_ROW_REQUESTS]:
        ctx.count("pastry_row_requests", int(counts[handler_kernels.N_ROW_REQUESTS]))
    if counts[handler_kernels.N_PRESUMED_FAILED]:
        ctx.count("pastry_presumed_failed", int(counts[handler_kernels.N_PRESUMED_FAILED]))
    counts[:] = 0


class TableRepair:
    def __init__(self, nodes):
        """``nodes`` :class:`~.nodes.PastryNodes` (tables, failed memory, application)."""
        self.nodes = nodes
        # what the compiled presumptions count (``count_repairs`` hands them on)
        self.counts = np.zeros(handler_kernels.N_RUN_COUNTS, np.int64)

    def presume_failed(self, ctx, li, dead_ids, t) -> None:
        """Local nodes ``li`` presume ``dead_ids`` failed at times ``t``: tables are cleaned,
        emptied routing-table slots are refilled by ROW_REQ, ``new_leafs`` fires (one
        compiled call, ``handler_kernels.presume_failed``)."""
        li = np.ascontiguousarray(li, np.int64)
        if not len(li):
            return
        nodes = self.nodes
        table = nodes.table
        room = len(li) * table.rows * table.width    # (any slot holding a dead id asks)
        lost, = ctx.send_compiled(
            room, 0, handler_kernels.presume_failed, li,
            np.ascontiguousarray(dead_ids, np.int64), np.ascontiguousarray(t, np.int64),
            *self.presume_inputs(), room, msg_types.ROW_REQ, self.counts, zeroed=False)
        self.repaired(ctx, lost)

    def presume_inputs(self) -> tuple:
        """The state ``handler_kernels.presume_failed`` changes, in its argument order
        (rt, members, heard, failed, failed_next, nbr, nbr_known, global_ids, half)."""
        nodes = self.nodes
        _, known = nodes.nbrs.key_cache()
        return (nodes.table.entries, nodes.leaves.members, nodes.leaves.heard,
                nodes.failed.ids, nodes.failed.next_slot, nodes.nbrs.members, known,
                nodes.global_ids, nodes.leaves.half)

    def repaired(self, ctx, lost) -> None:
        """After presumed failures: their counters, ``new_leafs`` for the nodes ``lost``
        whose leaf set lost a member."""
        count_repairs(ctx, self.counts)
        if len(lost):
            self.nodes.app.new_leafs(ctx, lost)

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
