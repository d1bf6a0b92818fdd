"""Pastry's part of a compiled cell loop, and the loop of Pastry alone.

The engine's rules (which cell is next, the dispatch order, stamping, the hop log, routing
to the queue or an outbox) are emulator/window.py's primitives; what Pastry does with a
pass's runs of its compiled types is :func:`handler_kernels.on_runs`, then
:func:`took_runs` (its route-log rows, probes, joins and changed leaf sets gathered), and
:func:`run_cells` is the loop of a stack of Pastry alone. A stack with an application
composes these with the application's own in a loop of its own module
(actors/stack_loop.py), so numba compiles and caches each loop as one function.
"""

from __future__ import annotations

import numba
import numpy as np

from emulator import window
from emulator.kernels import TYPE_OFFSET

from .handler_kernels import N_RUN_COUNTS, on_runs
from .kernels import ROUTE_LOG_DTYPE
from .router import ROUTE_LOG_COLUMNS
from .table_repair import count_repairs

# what a loop call gathers for Pastry besides the engine's (``stats``)
N_ROUTE_LOG, N_CHANGED, PROBES, JOINED, N_STATS = range(5)


@numba.njit(cache=True)
def took_runs(m, bounds, first, done, probes, nodes, log, joined, route_log, changed_mask,
              changed, stats, runs_taken):
    """What a loop gathers of runs ``first..done-1`` of a pass that
    :func:`handler_kernels.on_runs` took (its results ``probes``, ``nodes``, ``log``,
    ``joined``): the route-log rows to ``route_log``, the nodes whose leaf set changed
    marked once in ``changed_mask`` and listed in ``changed``, probes and joins counted in
    ``stats``, the runs taken by type in ``runs_taken``. (The loop calls ``on_runs``
    itself, with its own arrays: a call between them would take a reference to each of
    them again.) O(runs + log rows + nodes)."""
    n = stats[N_ROUTE_LOG]
    for i in range(len(log)):
        route_log[n + i] = log[i]
    stats[N_ROUTE_LOG] = n + len(log)
    for r in range(first, done):
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


@numba.njit(cache=True)
def run_cells(end, eng, taken, rows_per, ints_per, acks_off, learn, joins, acks, seed, draws,
              run_rows, joined_room, run_counts, tables, route_log, changed_mask, changed,
              stats, runs_taken):
    """The cells before ``end`` of a stack of Pastry alone (emulator/window.py's
    contract): each pass whose runs are all ``taken`` by :func:`handler_kernels.on_runs`
    (:func:`took_runs` after it). Returns
    (status, the pass handed back, its payload, whether it is in dispatch order, the run
    declined, sends written, payload cursor). O(the handlers' work + cells scanned)."""
    # taken apart once: a call takes a reference to every array it is passed
    # (emulator/window.py)
    (delta, meta, free, heap_t, heap_s, poff, plen, pay, head, nxt, rows, local_index, alive,
     seq, n_nodes, sent_counts, node_shard, n_shards, shard, out, pool, log_messages, log,
     outbox, outbox_shard, outbox_pay, new_types, lost_counts, c) = eng
    s_hr, s_rdist, s_lan = tables
    sizes = window.buffer_sizes(out, pool, log, outbox, outbox_pay)
    # typed values, not literals: a literal argument is a further compile of the callee
    cell = np.int64(0)
    first = np.int64(0)
    in_cell = np.bool_(False)   # a further pass of ``cell`` is due (zero-delay self-messages)
    while True:
        n_log = stats[N_ROUTE_LOG]
        status, cell, m, payload, ordered, bounds, li = window.begin_pass(
            end, cell, in_cell, taken, rows_per, ints_per, 1, len(route_log) - n_log,
            2 * n_log > len(route_log), meta, free, heap_t, heap_s, poff, plen, pay, head, nxt,
            rows, delta, local_index, alive, lost_counts, sizes, c)
        if status >= 0:
            return status, m, payload, ordered, 0, 0, 0
        n_runs = len(bounds) - 1
        done, probes, nodes, plog, joined, k, pos = on_runs(
            m, payload, li, bounds, first, n_runs, acks_off, learn, joins, acks, seed, draws,
            run_rows, joined_room, run_counts, out, pool, np.int64(0), s_hr, s_rdist, s_lan)
        took_runs(m, bounds, first, done, probes, nodes, plog, joined, route_log, changed_mask,
                  changed, stats, runs_taken)
        if done < n_runs:
            return window.PASS_PARTLY_DONE, m, payload, True, done, k, pos
        routed, in_cell = window.end_pass(
            k, pos, c, out, pool, local_index, seq, n_nodes, sent_counts,
            new_types, log_messages, log, n_shards, node_shard, shard, outbox, outbox_shard,
            outbox_pay, meta, free, heap_t, heap_s, poff, plen, pay, rows, head, nxt, delta)
        if not routed:
            return window.PASS_UNROUTED, m, payload, True, done, k, pos


class PastryLoopPart:
    """The Python side of a loop's Pastry part for a shard's :class:`Pastry`: its buffers,
    the inputs of a loop call, and what a call gathered moved to the shard's logs,
    counters and application. ``taken``: the types it takes; ``run_room``:
    (send rows, payload ids) per message of each type (``handlers.tables``)."""

    def __init__(self, pastry, taken, run_room: dict):
        self.pastry = pastry
        self.types = frozenset(int(t) for t in taken)
        size = max(run_room) + 1
        self.run_rows = np.zeros(size, np.int64)
        self.run_ints = np.zeros(size, np.int64)
        for t, (per_row, per_id) in run_room.items():
            self.run_rows[t], self.run_ints[t] = per_row, per_id
        n = len(pastry.nodes.global_ids)
        self.route_log = np.zeros(1024, ROUTE_LOG_DTYPE)
        self.changed_mask = np.zeros(n, np.bool_)
        self.changed = np.zeros(n, np.int64)
        self.stats = np.zeros(N_STATS, np.int64)
        self.run_counts = np.zeros(N_RUN_COUNTS, np.int64)   # (table_repair.count_repairs)
        # runs the loop handed to on_runs, by type (what the shard's Python never saw)
        self.runs_taken = np.zeros(size, np.int64)

    def inputs(self, ctx) -> tuple:
        """The loop's Pastry arguments (read at each call: a restore replaces the
        arrays)."""
        p = self.pastry
        self.stats[:] = 0
        return (not p.acks.enabled, p.nodes.learn_inputs(ctx), p.join.run_inputs(),
                p.acks.loop_inputs(), *ctx.rng_state(), self.run_rows, p._joined_room,
                self.run_counts, ctx.latency_tables(), self.route_log, self.changed_mask,
                self.changed, self.stats, self.runs_taken)

    def gathered(self, ctx, extra_rows: int) -> None:
        """What the call gathered, to the shard's logs, counters and the application's
        ``new_leafs`` (once for every node whose leaf set changed: the upcall carries no
        time and sends nothing, ``Pastry._own_runs``); room for ``extra_rows`` route-log
        rows in half the buffer if the loop asked for it."""
        st = self.stats
        n = int(st[N_ROUTE_LOG])
        if n:
            ctx.log_records("route", self.route_log[:n].copy(), ROUTE_LOG_COLUMNS)
        if st[PROBES]:
            ctx.count("pastry_probes", int(st[PROBES]))
        if st[JOINED]:
            ctx.count("pastry_joined", int(st[JOINED]))
        count_repairs(ctx, self.run_counts)
        n = int(st[N_CHANGED])
        if n:
            nodes = np.sort(self.changed[:n])
            self.changed_mask[nodes] = False
            self.pastry.app.new_leafs(ctx, nodes)
        if 2 * extra_rows > len(self.route_log):   # (then half of it holds such a pass)
            self.route_log = np.zeros(2 * extra_rows, ROUTE_LOG_DTYPE)


def taken_mask(types) -> np.ndarray:
    """bool per type code (at ``code + TYPE_OFFSET``): the types a loop takes."""
    mask = np.zeros(2 * TYPE_OFFSET, np.bool_)
    for t in types:
        mask[int(t) + TYPE_OFFSET] = True
    return mask


class PastryCellLoop:
    """``stack.run_cells`` of a stack of Pastry alone (its application, if any, has no
    compiled runs): :func:`run_cells` over :class:`PastryLoopPart`."""

    def __init__(self, part: PastryLoopPart):
        self.part = part
        self.taken = taken_mask(part.types)
        self.rows_per = part.run_rows.astype(np.float64)

    def __call__(self, ctx, end: int, eng):
        return run_cells(end, eng, self.taken, self.rows_per, self.part.run_ints,
                         *self.part.inputs(ctx))

    def gathered(self, ctx, extra_rows: int) -> None:
        self.part.gathered(ctx, extra_rows)

    @property
    def runs_taken(self) -> np.ndarray:
        return self.part.runs_taken
