"""Pastry's compiled cell loop: whole stretches of a shard's cells in one call.

The engine's rules (which cell is next, the dispatch order, stamping, the hop log, routing
to the queue or an outbox) are emulator/window.py's primitives; between them this loop
calls :func:`handler_kernels.on_runs` statically, so numba compiles and caches the whole
loop as one function. It takes a pass only when every run of it is one of Pastry's
compiled types bound for a live node and the most its handlers may send fits the buffers;
any other pass goes back to the engine untouched (and a pass whose handler declines a run
goes back with the runs before it done), so the results are those of the Python loop,
to the last row. Sparse protocol traffic (a join every 100 ms: a few messages a cell over
millions of cells) then costs no Python per cell.
"""

from __future__ import annotations

import numba
import numpy as np

from emulator import window
from emulator.kernels import TYPE_OFFSET
from emulator.queue import NEVER

from .handler_kernels import on_runs
from .kernels import ROUTE_LOG_DTYPE
from .router import ROUTE_LOG_COLUMNS

# what a loop call gathers for Pastry besides the engine's (``stats``)
N_ROUTE_LOG, N_CHANGED, PROBES, JOINED, ROUTE_ROOM, N_STATS = range(6)


@numba.njit(cache=True)
def run_cells(end, eng, taken, rows_per, ints_per, route_log, changed_mask, changed, stats,
              runs_taken, acks_off, learn, joins, seed, draws, joined_room, tables):
    """Process the cells before ``end`` (emulator/window.py's contract): each pass of a
    cell handed to :func:`handler_kernels.on_runs` whole (``learn``: the state arrays of
    ``PastryNodes.learn_inputs``; ``joins``: ``JoinProtocol.run_inputs``; ``tables``: the
    latency tables of the sends), its route-log rows appended to ``route_log``, the nodes
    whose leaf set changed marked once in ``changed_mask`` and listed in ``changed``,
    probes and joins counted in ``stats``, the runs taken counted by type in
    ``runs_taken``. Returns (status, the pass handed back, its
    payload, whether it is in dispatch order, the run declined, sends written, payload
    cursor). O(the handlers' work + cells scanned)."""
    c = eng.counts
    d = eng.delta
    empty = np.empty(0, eng.rows.dtype)
    no_payload = np.empty(0, np.int32)
    cell = NEVER
    in_cell = False     # a further pass of ``cell`` is due (zero-delay self-messages)
    while True:
        if not in_cell:
            cell = window.next_cell(eng)
            if cell == NEVER or cell * d >= end:
                return window.WINDOW_DONE, empty, no_payload, True, 0, 0, 0
            c[window.NOW] = cell * d
            c[window.CELL_END] = cell * d + d
            c[window.N_CELLS] += 1
        m, payload, ordered = window.pop_cell(eng, cell)
        if not ordered:
            return window.CELL_HANDED_BACK, m, payload, False, 0, 0, 0
        ok, bounds, li, rows, ints = window.plan_cell(eng, m, taken, rows_per, ints_per)
        if ok and not window.has_room(eng, rows, ints):
            ok = False
        if ok and stats[N_ROUTE_LOG] + len(m) > len(route_log):
            stats[ROUTE_ROOM] = len(m)
            ok = False
        if not ok:
            return window.CELL_HANDED_BACK, m, payload, True, 0, 0, 0
        n_runs = len(bounds) - 1
        done, probes, nodes, log, joined, k, pos = on_runs(
            m, payload, li, bounds, 0, n_runs, acks_off, *learn, *joins, seed, draws,
            rows_per, joined_room, eng.out, eng.pool, 0, *tables)
        n = stats[N_ROUTE_LOG]
        for i in range(len(log)):
            route_log[n + i] = log[i]
        stats[N_ROUTE_LOG] = n + len(log)
        for r in range(done):
            runs_taken[m[bounds[r]]["type"]] += 1
        stats[PROBES] += probes
        stats[JOINED] += joined
        n = stats[N_CHANGED]
        for x in nodes:
            if not changed_mask[x]:
                changed_mask[x] = True
                changed[n] = x
                n += 1
        stats[N_CHANGED] = n
        if done < n_runs:
            return window.PASS_PARTLY_DONE, m, payload, True, done, k, pos
        routed, earliest = window.route_pass(eng, k, pos)
        if not routed:
            return window.PASS_UNROUTED, m, payload, True, done, k, pos
        in_cell = earliest < c[window.CELL_END]
        if not in_cell:
            c[window.DONE_UNTIL] = c[window.CELL_END]


class PastryCellLoop:
    """The Python side of :func:`run_cells` for a shard's :class:`Pastry`: its buffers,
    the inputs of each call, and what a call gathered moved to the shard's logs, counters
    and application. ``taken``: the types the loop hands to ``on_runs``; ``run_room``:
    ``handler_kernels.run_room``."""

    def __init__(self, pastry, taken, run_room: dict):
        self.pastry = pastry
        size = max(run_room) + 1
        self.rows_per = np.zeros(size, np.int64)
        self.ints_per = np.zeros(size, np.int64)
        for t, (per_row, per_id) in run_room.items():
            self.rows_per[t], self.ints_per[t] = per_row, per_id
        self.taken = np.zeros(2 * TYPE_OFFSET, np.bool_)
        for t in taken:
            self.taken[int(t) + TYPE_OFFSET] = True
        n = len(pastry.nodes.global_ids)
        self.route_log = np.zeros(1024, ROUTE_LOG_DTYPE)
        self.changed_mask = np.zeros(n, np.bool_)
        self.changed = np.zeros(n, np.int64)
        self.stats = np.zeros(N_STATS, np.int64)
        # runs the loop handed to on_runs, by type (what the shard's Python never saw)
        self.runs_taken = np.zeros(size, np.int64)

    def __call__(self, ctx, end: int, eng):
        p = self.pastry
        st = self.stats
        st[:] = 0
        res = run_cells(end, eng, self.taken, self.rows_per, self.ints_per, self.route_log,
                        self.changed_mask, self.changed, st, self.runs_taken,
                        not p.acks.enabled,
                        p.nodes.learn_inputs(ctx), p.join.run_inputs(), *ctx.rng_state(),
                        p._joined_room, ctx.latency_tables())
        n = int(st[N_ROUTE_LOG])
        if n:
            ctx.log_records("route", self.route_log[:n].copy(), ROUTE_LOG_COLUMNS)
        if st[PROBES]:
            ctx.count("pastry_probes", int(st[PROBES]))
        if st[JOINED]:
            ctx.count("pastry_joined", int(st[JOINED]))
        n = int(st[N_CHANGED])
        if n:
            nodes = np.sort(self.changed[:n])
            self.changed_mask[nodes] = False
            p.app.new_leafs(ctx, nodes)
        if st[ROUTE_ROOM]:
            self.route_log = np.zeros(max(2 * len(self.route_log), 2 * int(st[ROUTE_ROOM])),
                                      ROUTE_LOG_DTYPE)
        return res
