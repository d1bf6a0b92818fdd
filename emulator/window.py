"""The engine's part of a compiled cell loop: numba primitives a stack's loop is built from.

A stack whose handlers are compiled may run a shard's cells in one call of its own kernel
instead of one Python round per cell (``ShardEngine.advance``; docs/ARCHITECTURE.md,
"The compiled cell loop"). The kernel lives in the stack's module, where it calls its
handlers statically (numba caches it; a handler passed as a value would be compiled again
in every process), and is built from these primitives, which carry every engine rule:

- :func:`next_cell` / :func:`pop_cell`: the next busy cell, and its due messages in
  dispatch order (the queue's own compiled pop);
- :func:`plan_cell`: the cell's runs and local indices, whether the loop may take it all
  (only types it has a handler for, every destination alive, room for the most its
  handlers may send);
- :func:`end_pass`: the pass's sends stamped (``kernels.stamp_records``), their hops
  logged, each routed to the queue or to the outbox of its shard.

The loop hands back to the engine any cell it does not take, untouched, and returns when
the window ends; the engine then moves what the loop gathered (log rows, outbox rows, the
types sent for the first time, counters) to their Python homes, in order, and the stack
its own (``run_cells.gathered``), before it processes a handed-back cell in Python.
:func:`cell_taken` lets the engine send a cell of other traffic straight to Python. Rows,
their order, sequence numbers and logs are exactly those of the Python loop.

Everything the loop writes is preallocated by :class:`LoopBuffers` (a cell is handed back
when the bound of its sends would not fit, and the buffers grow), so no primitive grows an
array.
"""

from __future__ import annotations

import collections

import numba
import numpy as np

from . import kernels
from .queue import NEVER, EventQueue, next_pending, pop_slots, push_slots

# what a stack's loop returns first
WINDOW_DONE = 0      # every cell before the window's end is processed
CELL_HANDED_BACK = 1  # a popped pass the loop does not take: the engine processes it
PASS_PARTLY_DONE = 2  # a popped pass of which the handlers took runs 0..done-1
PASS_UNROUTED = 3    # sends the stamping refused (a bad source or destination)

# counters of a loop call (``LoopBuffers.counts``)
N_CELLS, N_EVENTS, NOW, DONE_UNTIL, LATE, N_LOG, N_OUT, N_OUT_PAY, N_NEW_TYPES, \
    CELL_END, ROOM_ROWS, ROOM_INTS, ROOM_EXTRA, N_COUNTS = range(14)

# the engine's arrays a loop works on: its queue, stamping state and send buffer (rebuilt
# at every call: the queue and the send buffer replace arrays when they grow)
EngineArrays = collections.namedtuple("EngineArrays", (
    "delta", "meta", "free", "heap_t", "heap_s", "poff", "plen", "pay", "head", "nxt",
    "rows", "local_index", "alive", "seq", "n_nodes", "sent_counts", "node_shard",
    "n_shards", "shard", "out", "pool", "log_messages", "log", "outbox", "outbox_shard",
    "outbox_pay", "new_types", "counts"))


class LoopBuffers:
    """What a loop call writes besides the engine's state: hop log rows, rows for other
    shards (with their shard and packed payload), the types sent for the first time, and
    its counters. Sized for at least ``rows`` records and ``ints`` payload ints; a loop
    hands back a pass whose bound would not fit, and :meth:`grow` makes room."""

    def __init__(self, dtype: np.dtype, rows: int = 4096, ints: int = 16384):
        self.dtype = dtype
        self.counts = np.zeros(N_COUNTS, np.int64)
        # (one place per type code: no call can overflow it)
        self.new_types = np.zeros(2 * kernels.TYPE_OFFSET, np.int64)
        self._allocate(rows, ints)

    def _allocate(self, rows: int, ints: int) -> None:
        self.log = np.zeros(rows, self.dtype)
        self.outbox = np.zeros(rows, self.dtype)
        self.outbox_shard = np.zeros(rows, np.int32)
        self.outbox_pay = np.zeros(ints, np.int32)

    def grow(self, rows: int, ints: int) -> None:
        """Room for at least ``rows`` records and ``ints`` payload ints (the buffers are
        empty: the engine took their rows)."""
        self._allocate(max(2 * rows, len(self.log)), max(2 * ints, len(self.outbox_pay)))


def engine_arrays(engine, buffers: LoopBuffers) -> EngineArrays:
    """The arrays of ``engine`` (a ShardEngine between cells) a loop call works on."""
    q: EventQueue = engine.queue
    sends = engine.sends
    rows, pool = sends.arrays()
    return EngineArrays(
        q.delta, q._meta, q._free, q._heap_t, q._heap_s, q._poff, q._plen, q._pay, q._head,
        q._next, q._rows, engine.local_index, engine.alive, engine.seq, engine.n_nodes,
        engine._sent_counts, engine.node_shard, engine.n_shards, engine.shard_id, rows, pool,
        engine.log_messages, buffers.log, buffers.outbox, buffers.outbox_shard,
        buffers.outbox_pay, buffers.new_types, buffers.counts)


# The primitives below take the few engine arrays each reads, not ``eng``: a compiled call
# takes a reference to every array it is passed (an atomic count up, and down at its end),
# and ``eng`` holds 28 of them, which passed down at every level would be most of a pass's
# fixed cost. Only :func:`begin_pass` and :func:`end_pass`, the loop's calls, take ``eng``.

@numba.njit(cache=True)
def next_cell(meta, heap_t, head, nxt, rows, delta):
    """The cell of the earliest pending message, NEVER when none. O(cells scanned)."""
    return next_pending(meta, heap_t, head, nxt, rows, delta, np.bool_(False))


@numba.njit(cache=True)
def cell_taken(end, meta, heap_t, heap_s, head, nxt, rows, delta, local_index, alive, taken):
    """Whether a loop would take the next busy cell before ``end`` (its messages all of
    ``taken`` types, for live nodes), looked at without taking it out of the queue: the
    engine calls its loop only then, so a cell of other traffic costs no loop call (a
    few microseconds of arguments each). True also when no cell is due before ``end``.
    O(the cell's messages + the heap's entries due in it)."""
    cell = next_pending(meta, heap_t, head, nxt, rows, delta, np.bool_(False))
    if cell == NEVER or cell * delta >= end:
        return True
    t = (cell + 1) * delta
    ring = len(head)
    base = meta[5]
    if meta[4] > 0 and base <= cell < base + ring:
        s = head[cell & (ring - 1)]
        while s >= 0:
            if not _takes(rows[s], local_index, alive, taken):
                return False
            s = nxt[s]
    # the heap's entries due in the cell: a walk down from the root, pruned where due later
    size = meta[0]
    stack = np.empty(64, np.int64)
    top = 0
    if size > 0:
        stack[0] = 0
        top = 1
    while top > 0:
        top -= 1
        i = stack[top]
        if heap_t[i] >= t:
            continue
        if not _takes(rows[heap_s[i]], local_index, alive, taken):
            return False
        for c in (2 * i + 1, 2 * i + 2):
            if c < size:
                if top == len(stack):
                    stack = np.concatenate((stack, np.empty(len(stack), np.int64)))
                stack[top] = c
                top += 1
    return True


@numba.njit(cache=True)
def _takes(r, local_index, alive, taken):
    ty = np.int64(r["type"])
    return ty >= 0 and taken[ty + kernels.TYPE_OFFSET] and alive[local_index[r["dst"]]]


@numba.njit(cache=True)
def pop_cell(meta, free, heap_t, heap_s, poff, plen, pay, head, nxt, rows, delta, counts,
             cell):
    """Every message due before the end of ``cell``, taken out of the queue (its arrays,
    ``EngineArrays``' fields of those names): (records, their packed payload, whether
    they are in dispatch order). A pass of more than ``kernels.SORT_MAX`` rows is not
    sorted here (the engine sorts it). O(k log k)."""
    slots, payload, offsets = pop_slots((cell + 1) * delta, meta, free, heap_t, heap_s,
                                        poff, plen, pay, head, nxt, rows, delta, np.bool_(True))
    k = len(slots)
    m = np.empty(k, rows.dtype)
    for i in range(k):
        m[i] = rows[slots[i]]
        m[i]["pay_off"] = offsets[i]
    counts[N_EVENTS] += k
    return m, payload, k <= kernels.SORT_MAX


@numba.njit(cache=True)
def plan_cell(local_index, alive, m, taken, rows_per, ints_per):
    """Whether a loop's handlers may take the pass ``m`` (in dispatch order) whole: every
    type has one (``taken[type + TYPE_OFFSET]``) and every destination is alive. Returns
    (ok, start of every run of a type then len(m), each row's local index, the most the
    handlers may send: ``rows_per[type]`` records (a factor: a run of n lends
    ``int(rows_per[type] * n)``) and ``ints_per[type]`` payload ints a message).
    O(len(m))."""
    bounds, li, all_alive = kernels.cell_runs(m["type"], m["dst"], local_index, alive)
    rows = 0
    ints = 0
    if not all_alive:
        return False, bounds, li, rows, ints
    for r in range(len(bounds) - 1):
        t = np.int64(m[bounds[r]]["type"])
        if t < 0 or t >= len(rows_per) or not taken[t + kernels.TYPE_OFFSET]:
            return False, bounds, li, rows, ints
        n = bounds[r + 1] - bounds[r]
        rows += np.int64(rows_per[t] * n)
        ints += ints_per[t] * n
    return True, bounds, li, rows, ints


@numba.njit(cache=True)
def has_room(out, pool, meta, pay, log, outbox, outbox_pay, c, rows, ints):
    """Whether ``rows`` sends with ``ints`` payload ints fit the send buffer (``out``,
    ``pool``), the queue (``meta``, ``pay``) and the loop's buffers (``c``: the counts);
    if not, the room asked is noted for the engine (which grows them before it processes
    the pass). O(1)."""
    if rows > len(out) or ints > len(pool) or rows > meta[1] \
            or meta[2] + ints > len(pay) or c[N_LOG] + rows > len(log) \
            or c[N_OUT] + rows > len(outbox) or c[N_OUT_PAY] + ints > len(outbox_pay):
        c[ROOM_ROWS] = rows
        c[ROOM_INTS] = ints
        return False
    return True


@numba.njit(cache=True)
def begin_pass(eng, end, cell, in_cell, taken, rows_per, ints_per, extra_rows, extra_room):
    """A loop's next pass: the next busy cell before ``end`` unless a further pass of
    ``cell`` is due (``in_cell``), its messages popped (:func:`pop_cell`) and planned
    (:func:`plan_cell`, :func:`has_room`; ``extra_rows`` rows a message of the stack's own
    buffers, with ``extra_room`` of them free). Returns (status: WINDOW_DONE,
    CELL_HANDED_BACK or -1 for a pass to take, the cell, the pass, its payload, whether
    it is in dispatch order, its run bounds, local indices). O(len(pass) + cells
    scanned)."""
    c = eng.counts
    d = eng.delta
    if not in_cell:
        cell = next_cell(eng.meta, eng.heap_t, eng.head, eng.nxt, eng.rows, d)
        if cell == NEVER or cell * d >= end:
            return WINDOW_DONE, cell, np.empty(0, eng.rows.dtype), np.empty(0, np.int32), \
                True, np.zeros(1, np.int64), np.empty(0, np.int64)
        c[NOW] = cell * d
        c[CELL_END] = cell * d + d
        c[N_CELLS] += 1
    m, payload, ordered = pop_cell(eng.meta, eng.free, eng.heap_t, eng.heap_s, eng.poff,
                                   eng.plen, eng.pay, eng.head, eng.nxt, eng.rows, d, c, cell)
    if not ordered:
        return CELL_HANDED_BACK, cell, m, payload, False, np.zeros(1, np.int64), \
            np.empty(0, np.int64)
    ok, bounds, li, rows, ints = plan_cell(eng.local_index, eng.alive, m, taken, rows_per,
                                           ints_per)
    if ok and not has_room(eng.out, eng.pool, eng.meta, eng.pay, eng.log, eng.outbox,
                           eng.outbox_pay, c, rows, ints):
        ok = False
    if ok and extra_rows * len(m) > extra_room:
        c[ROOM_EXTRA] = extra_rows * len(m)
        ok = False
    return (-1 if ok else CELL_HANDED_BACK), cell, m, payload, True, bounds, li


@numba.njit(cache=True)
def end_pass(eng, k, pos):
    """Route a taken pass's ``k`` sends (records ``eng.out[:k]``, payload
    ``eng.pool[:pos]``): stamp them, log their hops, push this shard's into the queue and
    the others' into the outbox (what ``ShardEngine._route`` does; :func:`plan_cell` made
    room). Returns (routed: False when the stamping refused them -- a bad source or
    destination, nothing stamped --, whether another pass of the cell is due: a send due
    in it). O(k + payload)."""
    c = eng.counts
    if k > 0:
        routed, earliest = _route(eng, k, pos)
        if not routed:
            return False, False
        if earliest < c[CELL_END]:
            return True, True
    c[DONE_UNTIL] = c[CELL_END]
    return True, False


@numba.njit(cache=True)
def _route(eng, k, pos):
    """:func:`end_pass`'s routing of ``k`` > 0 sends: (whether the stamping took them, the
    earliest time sent)."""
    c = eng.counts
    m = eng.out[:k]
    late, bad_src, bad_dst, earliest, _, new_type = kernels.stamp_records(
        m, eng.local_index, eng.seq, eng.n_nodes, c[NOW], eng.sent_counts)
    if bad_src >= 0 or bad_dst >= 0:
        return False, NEVER
    c[LATE] += late
    if new_type:
        _note_new_types(eng.sent_counts, eng.new_types, c, m)
    if eng.log_messages:
        n = c[N_LOG]
        for i in range(k):
            if m[i]["src"] != m[i]["dst"]:
                eng.log[n] = m[i]
                n += 1
        c[N_LOG] = n
    payload = eng.pool[:pos]
    if eng.n_shards == 1:
        push_slots(m, np.bool_(True), pos > 0, payload, eng.meta, eng.free, eng.heap_t, eng.heap_s,
                   eng.poff, eng.plen, eng.pay, eng.rows, eng.head, eng.nxt, eng.delta)
        return True, earliest
    order, starts, shards = kernels.rows_by_shard(m["dst"], eng.node_shard, eng.n_shards)
    me = eng.shard
    for s in shards:
        part = np.empty(starts[s + 1] - starts[s], m.dtype)
        for i in range(len(part)):
            part[i] = m[order[starts[s] + i]]
        if s == me:
            push_slots(part, np.bool_(True), pos > 0, payload, eng.meta, eng.free, eng.heap_t,
                       eng.heap_s, eng.poff, eng.plen, eng.pay, eng.rows, eng.head, eng.nxt,
                       eng.delta)
            continue
        n = c[N_OUT]
        used = c[N_OUT_PAY]
        for i in range(len(part)):
            r = part[i]
            ln = r["pay_len"]
            o = r["pay_off"]
            for j in range(ln):
                eng.outbox_pay[used + j] = payload[o + j]
            eng.outbox[n] = r
            eng.outbox[n]["pay_off"] = used
            eng.outbox_shard[n] = s
            used += ln
            n += 1
        c[N_OUT] = n
        c[N_OUT_PAY] = used
    return True, earliest


@numba.njit(cache=True)
def _note_new_types(sent_counts, new_types, c, m):
    """The types of ``m`` counted for the first time by this stamping (their count is
    theirs alone), in ascending order: the order ``ShardEngine.sent_by_type`` lists them."""
    types = np.unique(m["type"])
    for t in types:
        x = np.int64(t)
        mine = 0
        for i in range(len(m)):
            if m[i]["type"] == t:
                mine += 1
        if sent_counts[x + kernels.TYPE_OFFSET] == mine:
            if c[N_NEW_TYPES] < len(new_types):
                new_types[c[N_NEW_TYPES]] = x
            c[N_NEW_TYPES] += 1
