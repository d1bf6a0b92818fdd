"""Scribe's part of a compiled cell loop (actors/stack_loop.py composes it with Pastry's).

:func:`take_runs` is what ``Scribe.receive_runs`` does with a pass's runs of its compiled
types, inside the loop: :func:`handler_kernels.on_runs` with the same room lent per run
type, the DATA runs' deliveries and counts gathered. A run short of room ends the loop's
pass there (the room factor grows), and the engine goes on in Python after
:meth:`ScribeLoopPart.gathered` did that.
"""

from __future__ import annotations

import numba
import numpy as np

from . import collapse_kernels
from .handler_kernels import DONE, MORE_ROOM, on_runs
from .types import CREATE

# what a loop call gathers for Scribe (``stats``): deliveries, whether a DATA run was
# taken and its counts, a run short of room (its type, the rows it needs, its messages)
N_DELIVERED, DATA_TAKEN, NO_STATE, HOP_LIMIT, SHORT_TYPE, SHORT_NEED, SHORT_COUNT, \
    N_STATS = range(8)


@numba.njit(cache=True)
def take_runs(m, li, bounds, first, last, out, pool, cursor, state, factors, tables,
              delivered, stats, tree_sizes, counts):
    """Runs ``first..last-1`` of a pass (live nodes) by :func:`handler_kernels.on_runs`
    (``state``: ``Scribe.runs_state``), lent ``int(factors[type] * messages)`` records
    per run as ``receive_runs`` lends them, from record ``cursor[0]`` of ``out`` on (the
    engine's ``eng.out`` and ``eng.pool``, the two arrays rather than ``eng``: each array
    passed costs a reference count; the cursor advanced). The deliveries of DATA and MCAST
    runs go to ``delivered`` and the DATA counts to ``stats``; a run short of room is
    noted in ``stats`` for :meth:`ScribeLoopPart.gathered`. Returns (the first run not
    taken, whether the pass ends there). The tree indexes' sizes ``tree_sizes`` and the
    collapse counts ``counts`` advance as ``on_runs`` advances them. O(the handlers' work)."""
    rows = 0
    for q in range(first, last):
        rows += np.int64(factors[m[bounds[q]]["type"]] * (bounds[q + 1] - bounds[q]))
    k0 = cursor[0]
    done, status, need, no_state, looping, deliveries, w, pos = on_runs(
        m, li, bounds, first, last, state, tree_sizes, counts, out[k0:k0 + rows], pool,
        cursor[1], tables[0], tables[1], tables[2])
    cursor[0] = k0 + w
    cursor[1] = pos
    if no_state >= 0:
        stats[DATA_TAKEN] = 1
        stats[NO_STATE] += no_state
        stats[HOP_LIMIT] += looping
    gather_deliveries(deliveries, delivered, stats)
    if status == MORE_ROOM:
        stats[SHORT_TYPE] = m[bounds[done]]["type"]
        stats[SHORT_NEED] = need
        stats[SHORT_COUNT] = bounds[done + 1] - bounds[done]
    return done, status != DONE


@numba.njit(cache=True)
def gather_deliveries(got, delivered, stats):
    """Delivery rows ``got`` to the loop's buffer (:meth:`ScribeLoopPart.gathered` logs
    them)."""
    n = stats[N_DELIVERED]
    for i in range(len(got)):
        delivered[n + i] = got[i]
    stats[N_DELIVERED] = n + len(got)


class ScribeLoopPart:
    """The Python side of :func:`take_runs` for a shard's :class:`Scribe`."""

    def __init__(self, scribe, dtype: np.dtype):
        self.scribe = scribe
        self.types = frozenset(int(t) for t in scribe.compiled_run_types
                               | scribe.routed_run_types | scribe.request_run_types)
        self.delivered = np.zeros(1024, dtype)
        self.stats = np.zeros(N_STATS, np.int64)
        # the tree's slot and entry index sizes, which a routed JOIN run advances
        self.tree_sizes = np.zeros(2, np.int64)
        self.counts = np.zeros(collapse_kernels.N_COUNTS, np.int64)

    def factors(self, rows_per: np.ndarray) -> None:
        """The records lent per message of each of its types (``Scribe._run_room``), in
        ``rows_per`` (read at each call: the factors grow when a run is short)."""
        room = self.scribe._run_room
        for t in self.types:
            rows_per[t] = room.factor.get(t, 1.0)

    def inputs(self, ctx, rows_per) -> tuple:
        """:func:`take_runs`'s arguments after the cursor."""
        self.stats[:] = 0
        self.stats[SHORT_TYPE] = -1
        self.counts[:] = 0
        t = self.scribe.tree
        self.tree_sizes[0] = t.slot_index.size
        self.tree_sizes[1] = t.entry_index.size
        return (self.scribe.runs_state(ctx), rows_per, ctx.latency_tables(), self.delivered,
                self.stats, self.tree_sizes, self.counts)

    def free_rows(self) -> int:
        return len(self.delivered) - int(self.stats[N_DELIVERED])

    def gathered(self, ctx, extra_rows: int) -> None:
        """What the call gathered, as ``receive_runs`` does it after its call: the DATA
        counts, the deliveries and the groups created, the room of a run that was short;
        the tree indexes' sizes that routed JOIN, CREATE, ADOPT and REPLICA runs reached,
        the collapse counts; room for ``extra_rows`` deliveries in half the buffer if the
        loop asked for it."""
        sc, st = self.scribe, self.stats
        sc.tree.inserted(self.tree_sizes[0], self.tree_sizes[1])
        sc.collapse.counted(ctx, self.counts)
        if st[DATA_TAKEN]:
            sc.multicast.data_counts(ctx, int(st[NO_STATE]), int(st[HOP_LIMIT]))
        n = int(st[N_DELIVERED])
        if n:
            rows = self.delivered[:n].copy()
            made = rows["type"] == CREATE    # (the groups created at their RP)
            if made.any():
                sc.groups.log_created(ctx, rows["group"][made], rows["dst"][made],
                                      rows["origin"][made])
                rows = rows[~made]
            if len(rows):
                sc.multicast.log_deliveries(ctx, rows)
        if st[SHORT_TYPE] >= 0:
            sc._run_room.asked(int(st[SHORT_TYPE]), int(st[SHORT_NEED]), int(st[SHORT_COUNT]))
        if 2 * extra_rows > len(self.delivered):   # (then half of it holds such a pass)
            self.delivered = np.zeros(2 * extra_rows, self.delivered.dtype)

