"""The engine's part of a compiled cell loop: numba primitives a stack's loop is built from.

A stack whose handlers are compiled may run a shard's cells in one call of its own kernel
instead of one Python round per cell (``ShardEngine.advance``; docs/ARCHITECTURE.md,
"The compiled cell loop"). The kernel lives in the stack's module, where it calls its
handlers statically (numba caches it; a handler passed as a value would be compiled again
in every process), and is built from these primitives, which carry every engine rule:

- :func:`begin_pass`: the next busy cell, its due messages in dispatch order (the
  queue's own compiled pop), their runs and local indices, and whether the loop may take
  them all (only types it has a handler for, room for the most its handlers may send);
  messages for dead nodes are lost there, as in the Python loop;
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
import inspect

import numba
import numpy as np

from . import kernels
from .queue import NEVER, EventQueue, next_pending, pop_slots, push_slots

# what a stack's loop returns first
WINDOW_DONE = 0      # every cell before the window's end is processed
CELL_HANDED_BACK = 1  # a popped pass the loop does not take: the engine processes it
PASS_PARTLY_DONE = 2  # a popped pass of which the handlers took runs 0..done-1
PASS_UNROUTED = 3    # sends the stamping refused (a bad source or destination)
BUFFERS_HALF_FULL = 4  # before a new cell: the engine takes the buffers' rows, calls again
PAYLOAD_POOL_LOW = 5   # before a new cell: the engine moves the queue's payload, calls again

# counters of a loop call (``LoopBuffers.counts``)
N_CELLS, N_EVENTS, NOW, DONE_UNTIL, LATE, N_LOG, N_OUT, N_OUT_PAY, N_NEW_TYPES, \
    CELL_END, ROOM_ROWS, ROOM_INTS, ROOM_EXTRA, N_COUNTS = range(14)

# the engine's arrays a loop works on: its queue, stamping state and send buffer (rebuilt
# at every call: the queue and the send buffer replace arrays when they grow)
EngineArrays = collections.namedtuple("EngineArrays", (
    "delta", "meta", "free", "heap_t", "heap_s", "poff", "plen", "pay", "head", "nxt",
    "rows", "local_index", "alive", "seq", "n_nodes", "sent_counts", "node_shard",
    "n_shards", "shard", "out", "pool", "log_messages", "log", "outbox", "outbox_shard",
    "outbox_pay", "new_types", "lost_counts", "counts"))


class LoopBuffers:
    """What a loop call writes besides the engine's state: hop log rows, rows for other
    shards (with their shard and packed payload), the types sent for the first time, and
    its counters. Sized for at least ``rows`` records and ``ints`` payload ints; a loop
    hands back a pass whose bound would not fit, and :meth:`grow` makes room."""

    def __init__(self, dtype: np.dtype, rows: int = 16384, ints: int = 65536):
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
        """Room for at least ``2 * rows`` records and ``2 * ints`` payload ints (the
        buffers are empty: the engine took their rows); none is replaced that has it."""
        if 2 * rows > len(self.log) or 2 * ints > len(self.outbox_pay):
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
        buffers.outbox_pay, buffers.new_types, engine._lost_counts, buffers.counts)


# A compiled call takes a reference to every array it is passed (an atomic count up at its
# start, and down at its end), and so does every read of an array out of a tuple: with
# sparse traffic those counts are most of a pass's fixed cost. So the loop takes ``eng``
# apart once per call, and the two calls of a pass, :func:`begin_pass` and
# :func:`end_pass`, take the arrays they use as plain arguments and do their steps in
# their own bodies rather than in further calls.

@numba.njit(cache=True)
def cell_taken(end, meta, heap_t, heap_s, head, nxt, rows, delta, taken):
    """Whether a loop would take the next busy cell before ``end`` (its messages all of
    ``taken`` types; those for dead nodes are lost in the loop), looked at without taking
    it out of the queue: the engine calls its loop only then, so a cell of other traffic
    costs no loop call (a few microseconds of arguments each). True also when no cell is
    due before ``end``. O(the cell's messages + the heap's entries due in it)."""
    cell = next_pending(meta, heap_t, head, nxt, rows, delta, np.bool_(False))
    if cell == NEVER or cell * delta >= end:
        return True
    t = (cell + 1) * delta
    ring = len(head)
    base = meta[5]
    if meta[4] > 0 and base <= cell < base + ring:
        s = head[cell & (ring - 1)]
        while s >= 0:
            if not _takes(rows[s], taken):
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
        if not _takes(rows[heap_s[i]], taken):
            return False
        for c in (2 * i + 1, 2 * i + 2):
            if c < size:
                if top == len(stack):
                    stack = np.concatenate((stack, np.empty(len(stack), np.int64)))
                stack[top] = c
                top += 1
    return True


@numba.njit(cache=True)
def _takes(r, taken):
    ty = np.int64(r["type"])
    return ty >= 0 and taken[ty + kernels.TYPE_OFFSET]


@numba.njit(cache=True)
def buffer_sizes(out, pool, log, outbox, outbox_pay):
    """The lengths :func:`begin_pass` checks room against (the send buffer ``out``,
    ``pool``, the loop's ``log``, ``outbox``, ``outbox_pay``: none grows within a loop
    call), as one tuple of ints, which costs no reference count. O(1)."""
    return len(out), len(pool), len(log), len(outbox), len(outbox_pay)


@numba.njit(cache=True)
def begin_pass(end, cell, in_cell, taken, rows_per, ints_per, extra_rows, extra_room,
               extra_half_full, meta, free, heap_t, heap_s, poff, plen, pay, head, nxt, rows,
               delta, local_index, alive, lost_counts, sizes, c):
    """A loop's next pass (the arrays: ``EngineArrays``' fields of those names, ``c`` its
    ``counts``): the next busy cell before ``end`` unless a further pass of ``cell`` is due
    (``in_cell``), and every message due before that cell's end taken out of the queue (the
    queue's compiled pop, in dispatch order; a pass of more than ``kernels.SORT_MAX`` rows is
    not sorted here: the engine sorts it). The loop's handlers may take the pass whole when
    every type has one (``taken[type + TYPE_OFFSET]``) -- the messages for dead nodes are then
    lost, counted by type in ``lost_counts`` (``ShardEngine._drop_lost``), and the pass is the
    others --, and the most they may send -- ``rows_per[type]`` records a message (a factor: a
    run of n lends ``int(rows_per[type] * n)``) and ``ints_per[type]`` payload ints -- fits the
    send buffer, the queue (``meta``, ``pay``) and the loop's buffers (their lengths: ``sizes``,
    :func:`buffer_sizes`; else the room asked is noted in ``c`` for the engine, which grows them
    before it processes the pass), and ``extra_rows`` rows a message of the stack's own buffers
    fit the ``extra_room`` free (else the rows asked are noted in ``c``: the stack's
    ``gathered`` makes its buffers twice that). A new cell is not begun while the loop's log
    or outbox or one of the stack's own buffers (``extra_half_full``) is more than half full,
    nor while the queue's payload pool is more than three-quarters used: the engine empties
    the buffers, or moves the pool's payload, and calls again (a pass that does not fit would
    be handed back whole, to the slower Python loop). Returns (status:
    WINDOW_DONE, BUFFERS_HALF_FULL, PAYLOAD_POOL_LOW, CELL_HANDED_BACK or -1 for a pass to take,
    the cell, the pass, its payload, whether it is in dispatch order, the start of every run of
    a type then len(pass), each row's local index). O(k log k) for a pass of k, + cells scanned."""
    d = delta
    n_out, n_pool, n_log, n_outbox, n_outbox_pay = sizes
    if not in_cell:
        cell = next_pending(meta, heap_t, head, nxt, rows, d, np.bool_(False))
        if cell == NEVER or cell * d >= end:
            return _no_pass(WINDOW_DONE, cell, rows)
        if extra_half_full or 2 * c[N_LOG] > n_log or 2 * c[N_OUT] > n_outbox \
                or 2 * c[N_OUT_PAY] > n_outbox_pay:
            return _no_pass(BUFFERS_HALF_FULL, cell, rows)
        if 4 * meta[2] > 3 * len(pay):
            # the queue's payload pool three-quarters used (it is moved only between calls,
            # and a pass that did not fit would go to the slower Python loop)
            return _no_pass(PAYLOAD_POOL_LOW, cell, rows)
        c[NOW] = cell * d
        c[CELL_END] = cell * d + d
        c[N_CELLS] += 1
    slots, payload, offsets = pop_slots((cell + 1) * d, meta, free, heap_t, heap_s, poff,
                                        plen, pay, head, nxt, rows, d, np.bool_(True))
    k = len(slots)
    m = np.empty(k, rows.dtype)
    for i in range(k):
        m[i] = rows[slots[i]]
        m[i]["pay_off"] = offsets[i]
    c[N_EVENTS] += k
    if k > kernels.SORT_MAX:
        return CELL_HANDED_BACK, cell, m, payload, False, np.zeros(1, np.int64), \
            np.empty(0, np.int64)
    bounds, li, all_alive = kernels.cell_runs(m["type"], m["dst"], local_index, alive)
    ok = True
    for r in range(len(bounds) - 1):
        t = np.int64(m[bounds[r]]["type"])
        if t < 0 or t >= len(rows_per) or not taken[t + kernels.TYPE_OFFSET]:
            ok = False
            break
    if ok and not all_alive:
        m, bounds, li = without_lost(m, li, alive, lost_counts)
    n_rows = 0
    n_ints = 0
    if ok:
        for r in range(len(bounds) - 1):
            t = np.int64(m[bounds[r]]["type"])
            n = bounds[r + 1] - bounds[r]
            n_rows += np.int64(rows_per[t] * n)
            n_ints += ints_per[t] * n
    if ok and (n_rows > n_out or n_ints > n_pool or n_rows > meta[1]
               or meta[2] + n_ints > len(pay) or c[N_LOG] + n_rows > n_log
               or c[N_OUT] + n_rows > n_outbox or c[N_OUT_PAY] + n_ints > n_outbox_pay):
        c[ROOM_ROWS] = n_rows
        c[ROOM_INTS] = n_ints
        ok = False
    if ok and extra_rows * k > extra_room:
        c[ROOM_EXTRA] = extra_rows * k
        ok = False
    return (-1 if ok else CELL_HANDED_BACK), cell, m, payload, True, bounds, li


@numba.njit(cache=True)
def _no_pass(status, cell, rows):
    """What :func:`begin_pass` returns when it stops before a pass (``status``): no rows,
    no payload, one run bound, no local indices. O(1)."""
    return status, cell, np.empty(0, rows.dtype), np.empty(0, np.int32), True, \
        np.zeros(1, np.int64), np.empty(0, np.int64)


@numba.njit(cache=True)
def without_lost(m, li, alive, lost_counts):
    """The rows of pass ``m`` for live nodes (``li`` their local indices) with their run
    bounds and local indices; each row for a dead node is lost, counted by type in
    ``lost_counts`` (at ``code + TYPE_OFFSET``). Rows keep their order and payload
    offsets (``ShardEngine._drop_lost`` uses it too). O(rows)."""
    n = 0
    for i in range(len(m)):
        n += alive[li[i]]
    kept = np.empty(n, m.dtype)
    kept_li = np.empty(n, np.int64)
    j = 0
    for i in range(len(m)):
        if alive[li[i]]:
            kept[j] = m[i]
            kept_li[j] = li[i]
            j += 1
        else:
            lost_counts[np.int64(m[i]["type"]) + kernels.TYPE_OFFSET] += 1
    return kept, kernels.run_bounds(kept["type"]), kept_li


@numba.njit(cache=True)
def end_pass(k, pos, c, out, pool, local_index, seq, n_nodes, sent_counts, new_types,
             log_messages, log, n_shards, node_shard, shard, outbox, outbox_shard, outbox_pay,
             meta, free, heap_t, heap_s, poff, plen, pay, rows, head, nxt, delta):
    """Route a taken pass's ``k`` sends (records ``out[:k]``, payload ``pool[:pos]``; the
    other arrays: ``EngineArrays``' fields of those names, ``c`` its ``counts``): stamp
    them, log their hops, push this shard's into the queue and the others' into the
    outbox (what ``ShardEngine._route`` does; :func:`begin_pass` made room). Returns
    (routed: False when the stamping refused them -- a bad source or destination, nothing
    stamped --, whether another pass of the cell is due: a send due in it). O(k +
    payload)."""
    if k == 0:
        c[DONE_UNTIL] = c[CELL_END]
        return True, False
    m = out[:k]
    late, bad_src, bad_dst, earliest, _, new_type = kernels.stamp_records(
        m, local_index, seq, n_nodes, c[NOW], sent_counts)
    if bad_src >= 0 or bad_dst >= 0:
        return False, False
    c[LATE] += late
    if new_type:
        _note_new_types(sent_counts, new_types, c, m)
    if log_messages:
        n = c[N_LOG]
        for i in range(k):
            if m[i]["src"] != m[i]["dst"]:
                log[n] = m[i]
                n += 1
        c[N_LOG] = n
    payload = pool[:pos]
    if n_shards == 1:
        push_slots(m, np.bool_(True), pos > 0, payload, meta, free, heap_t, heap_s, poff, plen,
                   pay, rows, head, nxt, delta)
    else:
        order, starts, shards = kernels.rows_by_shard(m["dst"], node_shard, n_shards)
        for s in shards:
            part = np.empty(starts[s + 1] - starts[s], m.dtype)
            for i in range(len(part)):
                part[i] = m[order[starts[s] + i]]
            if s == shard:
                push_slots(part, np.bool_(True), pos > 0, payload, meta, free, heap_t, heap_s,
                           poff, plen, pay, rows, head, nxt, delta)
                continue
            n = c[N_OUT]
            used = c[N_OUT_PAY]
            for i in range(len(part)):
                r = part[i]
                ln = r["pay_len"]
                o = r["pay_off"]
                for j in range(ln):
                    outbox_pay[used + j] = payload[o + j]
                outbox[n] = r
                outbox[n]["pay_off"] = used
                outbox_shard[n] = s
                used += ln
                n += 1
            c[N_OUT] = n
            c[N_OUT_PAY] = used
    if earliest < c[CELL_END]:
        return True, True
    c[DONE_UNTIL] = c[CELL_END]
    return True, False


def end_pass_types(eng: EngineArrays) -> tuple:
    """The argument types of a loop's :func:`end_pass` call over the arrays ``eng``, for
    compiling it ahead of a loop's first call (``end_pass.compile``): its parameters are
    ``eng``'s fields of their names (``c``: ``counts``) after the sends' and the payload's
    cursors (int64). O(1)."""
    names = list(inspect.signature(end_pass.py_func).parameters)[2:]
    return (numba.types.int64, numba.types.int64,
            *(numba.typeof(getattr(eng, "counts" if n == "c" else n)) for n in names))


def pass_types(eng: EngineArrays) -> tuple:
    """The types of a pass as :func:`begin_pass` returns it to a loop over ``eng``: its
    records, and (the same type) its runs' bounds and its rows' local indices. O(1)."""
    return (numba.types.Array(numba.from_dtype(eng.rows.dtype), 1, "C"),
            numba.types.Array(numba.types.int64, 1, "C"))


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
