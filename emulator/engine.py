"""ShardEngine: one shard's clock, queue, dispatch loop and outboxes. No Ray, no protocol.

A shard advances in windows handed to it by the driver. Inside a window it takes the cells
of the global grid ``[kΔ, (k+1)Δ)`` one by one (skipping empty ones): all messages due in a
cell form one batch, sorted by ``(type, time, src, seq)`` and handed to the protocol stack
one type at a time. A message created while a cell is processed is due in a later cell
(every latency between distinct hosts is >= Δ), except self-messages with no delay, which
get a further pass of the same cell. Messages for other shards wait in outboxes until the
window ends; the lookahead guarantees none of them is due before then.

The engine reads only its own message fields (emulator.batch.ENGINE_FIELDS); the stack's
record (`message_dtype`) and the protocol columns the message log keeps
(`message_log_fields`) are given to it.
"""

from __future__ import annotations

import time as _time

import numpy as np

from . import kernels, window
from .batch import ENGINE_DTYPE, Batch, check_message_dtype, dispatch_order, take_rows
from .context import ShardContext
from .logs import LogBuffer
from .queue import NEVER, EventQueue
from .sendbuf import SendBuffer

# engine control types (0-9): dispatched before protocol types in a cell
FAIL = 1
RECOVER = 2
CONTROL_NAMES = {FAIL: "engine.fail", RECOVER: "engine.recover"}
# the engine's columns of the `message` log, one row per hop (time is the send time)
MESSAGE_LOG_COLUMNS = ("time", "arrival", "type", "src", "dst")


def check_log_fields(message_dtype, log_fields) -> tuple[str, ...]:
    """The protocol columns the message log keeps, checked against the record."""
    log_fields = tuple(log_fields)
    unknown = [f for f in log_fields if f not in message_dtype.names]
    if unknown:
        raise ValueError(f"message log fields {unknown} are not fields of the message record "
                         f"{message_dtype.names}")
    taken = [f for f in log_fields if f in MESSAGE_LOG_COLUMNS]
    if taken:
        raise ValueError(f"message log fields {taken} clash with the engine's log columns "
                         f"{MESSAGE_LOG_COLUMNS}")
    return log_fields


class ShardEngine:
    def __init__(self, shard_id: int, node_shard: np.ndarray, latency, stack_factory,
                 seed: int, delta_us: int, shared: dict | None = None, resolve=None,
                 log_messages: bool = True, message_dtype=ENGINE_DTYPE,
                 message_log_fields=()):
        self.shard_id = int(shard_id)
        # read-only as the shared data (kernels.read_only): Ray may hand it either way
        node_shard = kernels.read_only(np.asarray(node_shard, np.int32))
        self.node_shard = node_shard
        self.n_nodes = len(node_shard)
        self.nodes = np.flatnonzero(node_shard == shard_id).astype(np.int32)
        self.local_index = np.full(self.n_nodes, -1, np.int32)
        self.local_index[self.nodes] = np.arange(len(self.nodes), dtype=np.int32)
        self.n_shards = int(node_shard.max()) + 1 if len(node_shard) else 1
        # (a latency model may keep a table of its own per shard: RouterLatency.for_shard)
        self.latency = latency.for_shard(self.n_shards) if hasattr(latency, "for_shard") \
            else latency
        self.seed = int(seed)
        # (ctx.rng_state hands compiled handlers this one, not a new numpy scalar per call)
        self.seed_u64 = np.uint64(self.seed & 0xFFFFFFFFFFFFFFFF)
        self.delta_us = int(delta_us)
        self._shared = dict(shared or {})
        self._resolve = resolve or (lambda x: x)
        self.log_messages = log_messages
        self.message_dtype = check_message_dtype(message_dtype)
        self.message_log_fields = check_log_fields(self.message_dtype, message_log_fields)
        # the `message` log's columns, cut from each sent record: (column, record field)
        self._log_columns = (("time", "sent"), ("arrival", "time"), ("type", "type"),
                             ("src", "src"), ("dst", "dst"),
                             *((f, f) for f in self.message_log_fields))

        n = len(self.nodes)
        self.alive = np.ones(n, bool)
        self.seq = np.zeros(n, np.int64)
        self.draws = np.zeros(n, np.int64)
        self.queue = EventQueue(self.delta_us, self.message_dtype)
        self.outbox: list[list[Batch]] = [[] for _ in range(self.n_shards)]
        self.logs = LogBuffer()
        self.counts: dict[str, int] = {}
        # messages sent per type: counted by the stamping kernel, listed in the order
        # each type was first sent (the `sent_by_type` dict's order)
        self._sent_counts = np.zeros(2 * kernels.TYPE_OFFSET, np.int64)
        self._sent_types: list[int] = []
        # messages lost (bound for a dead node) per type, at ``code + TYPE_OFFSET``: the
        # compiled loop counts them too
        self._lost_counts = np.zeros(2 * kernels.TYPE_OFFSET, np.int64)
        self.phase = "setup"
        self.now = 0
        self.busy_s = 0.0
        self.cpu_s = 0.0
        self.events = 0
        self.cells = 0
        self.python_events = 0     # of those, the ones the Python loop dispatched
        self._python_counts = np.zeros(2 * kernels.TYPE_OFFSET, np.int64)   # by type
        # passes the compiled loop handed back, by the type of the run that stopped it
        self._handed_back = np.zeros(2 * kernels.TYPE_OFFSET, np.int64)
        # the end of the last cell processed: a message due before it would be late. (Not
        # the window's end: cells past the last event were never looked at, so the driver
        # may still inject there, whatever the window cap.)
        self.done_until = 0
        self.sends = SendBuffer(self.message_dtype)   # sends of the current pass
        self._cell_end = 0                 # end of the cell being processed
        self._due_in_cell = False          # a send of this pass is due in that cell
        self.ctx = ShardContext(self)
        self.stack = stack_factory()
        self.stack.setup(self.ctx)
        # a stack may take a stretch of runs of these types in one call (handle_runs)
        self._run_types = frozenset(getattr(self.stack, "compiled_run_types", ()))
        # a stack may run whole stretches of cells in one compiled call (emulator/window.py)
        self._loop = getattr(self.stack, "run_cells", None)
        self._buffers = window.LoopBuffers(self.message_dtype) if self._loop else None
        # a stack may compile parts of its loop before any cell, for the arrays the loop
        # would be given (scenarios/warm.py: two processes compile a loop's parts at once)
        ahead = getattr(self.stack, "compile_ahead", None)
        if ahead is not None:
            ahead(self.ctx, window.engine_arrays(self, window.LoopBuffers(self.message_dtype)))
        self._python_cells = 0      # cells the Python loop takes before the compiled one again
        self._python_backoff = 0    # (_pace_loop)
        self._flush()

    # ---- shared data ----------------------------------------------------------------
    def shared(self, name: str):
        try:
            v = self._shared[name]
        except KeyError:
            raise KeyError(f"no shared data named {name!r}; have {sorted(self._shared)}") from None
        v = kernels.read_only(self._resolve(v))
        self._shared[name] = v
        return v

    # ---- sending --------------------------------------------------------------------
    def _flush(self) -> None:
        """Stamp, log and route every send of the pass (`ShardContext` writes them into
        `sends`) as one batch: a cell of sparse traffic makes a handful of small sends, and
        one stamp, one log chunk and one queue push per pass cost less than one each. The
        rows, their order and their sequence numbers are those of sending them one by
        one. The rows are stamped where they were written and copied out once, by the
        queue, the outboxes and the log."""
        if not len(self.sends):
            return
        m, payload = self.sends.pending()
        try:
            self._route(m, payload)
        finally:
            self.sends.clear()

    def _route(self, m: np.ndarray, payload: np.ndarray) -> None:
        """Stamp per-sender sequence numbers, log hops, route to the queue or an outbox.
        ``m``, ``payload``: the send buffer's rows and payload (views, copied here)."""
        late, bad_src, bad_dst, earliest, all_hops, new_type = kernels.stamp_records(
            m, self.local_index, self.seq, self.n_nodes, self.now, self._sent_counts)
        if bad_src >= 0:
            raise ValueError(f"shard {self.shard_id}: send from node {int(m['src'][bad_src])}, "
                             "not on this shard")
        if bad_dst >= 0:
            raise ValueError(f"shard {self.shard_id}: send to node {int(m['dst'][bad_dst])}, "
                             f"outside 0..{self.n_nodes - 1} (type {int(m['type'][0])})")
        if late:  # a handler asked for the past: it ran now rather than never
            self.counts["late_events"] = self.counts.get("late_events", 0) + int(late)
        if earliest < self._cell_end:   # due in the cell being processed: another pass
            self._due_in_cell = True
        if new_type:
            seen = set(self._sent_types)
            found = kernels.type_counts(np.ascontiguousarray(m["type"]))[0]  # (one layout)
            self._sent_types += [t for t in found.tolist() if t not in seen]
        if self.log_messages:   # (copies: the buffer's rows are written over next pass)
            if all_hops:
                self.logs.add_records("message", self.phase, take_rows(m, slice(None)),
                                      self._log_columns)
            else:
                hop = m["src"] != m["dst"]
                if hop.any():
                    self.logs.add_records("message", self.phase, take_rows(m, hop),
                                          self._log_columns)
        if self.n_shards == 1:
            self.queue.push_records(m, payload)
            return
        order, starts, shards = kernels.rows_by_shard(m["dst"], self.node_shard,
                                                      self.n_shards)
        me = self.shard_id
        if starts[me + 1] - starts[me] == len(m):
            self.queue.push_records(m, payload)
            return
        rows = take_rows(m, order)      # (a copy: the buffer is written over next pass)
        has_pay = len(payload) > 0
        for s in shards.tolist():
            part = rows[starts[s]:starts[s + 1]]
            if s == me:     # the payload is copied by offset: other rows' are skipped
                need = int(part["pay_len"].sum()) if has_pay else 0
                self.queue.push_records(part, payload if need else payload[:0], need)
            else:
                self._to_outbox(s, part, payload)

    def _to_outbox(self, shard: int, part: np.ndarray, payload: np.ndarray) -> None:
        """Rows ``part`` (a copy, theirs to rewrite) for ``shard``, with their own payload
        packed out of ``payload`` (as ``Batch.take`` packs it)."""
        if len(payload):
            packed = kernels.compact_payload(part["pay_off"], part["pay_len"], payload)
            self.outbox[shard].append(Batch(part, packed) if len(packed) else Batch(part))
        else:
            self.outbox[shard].append(Batch(part))

    def accept(self, batches) -> None:
        for b in batches:
            if b is not None and len(b):
                self.queue.defer(b)

    # ---- the window loop ------------------------------------------------------------
    def advance(self, end: int, phase: str, inbound) -> tuple[int, list[Batch], dict]:
        """Process every cell before `end` (a grid point); return (next time, outboxes, stats)."""
        t0 = _time.perf_counter()
        c0 = _time.thread_time()
        self._flush()
        self.phase = phase
        self.accept(inbound)
        self.queue.release(end)    # the compiled loop pops from the pools alone
        if self.queue.next_time() < self.done_until:
            # a window bound let this shard run past a message still on its way: results
            # would depend on the partition, so stop rather than process it late
            raise RuntimeError(f"shard {self.shard_id}: a message due at "
                               f"{self.queue.next_time()} us arrived after the shard had "
                               f"processed every cell before {self.done_until} us")
        d = self.delta_us
        events = 0
        python_before = self.python_events
        loop = self._loop
        while True:
            if loop is not None and not self._python_cells \
                    and self._loop_takes_next(loop, end):
                # the stack's compiled loop, up to a pass it hands back
                due, declined, popped, cells = self._run_loop(loop, end)
                events += popped
                if due is None:
                    break
                self._pace_loop(cells)
                events += self._cell(self.now // d, due, declined)
                continue
            cell = self.queue.next_cell()
            if cell == NEVER or cell * d >= end:
                break
            self.now = cell * d
            self._cell_end = self.now + d
            self.cells += 1
            self._python_cells -= self._python_cells > 0
            events += self._cell(cell)
        out = []
        out_min = NEVER
        for s in range(self.n_shards):
            b = Batch.concat(self.outbox[s], self.message_dtype)
            self.outbox[s] = []
            if len(b):
                out_min = min(out_min, int(b.msgs["time"].min()))
            out.append(b)
        self.events += events
        busy = _time.perf_counter() - t0
        # CPU of this thread: below `busy` when the shard's process waited for a core
        cpu = _time.thread_time() - c0
        self.busy_s += busy
        self.cpu_s += cpu
        return (min(self.queue.next_time(), out_min), out,
                {"events": events, "python_events": self.python_events - python_before,
                 "busy_s": busy, "cpu_s": cpu, "done_until": self.done_until})

    def _cell(self, cell: int, due: Batch | None = None, declined: int = -1) -> int:
        """Process ``cell`` pass after pass (a pass's zero-delay self-messages make
        another); ``due``: its current pass, already taken out of the queue, and the run
        of it the stack declined (a compiled loop handled the runs before it; -1: none).
        Returns the messages popped here."""
        events = 0
        while True:
            if due is None:
                due = self.queue.pop_cell(cell)
                events += len(due)
            self._due_in_cell = False
            self._dispatch(due, declined)
            self._flush()
            due, declined = None, -1
            if not self._due_in_cell:
                break
        self.done_until = self._cell_end
        self._cell_end = 0
        return events

    def _pace_loop(self, cells: int) -> None:
        """After a loop call that handed a pass back having begun ``cells`` cells: a call
        costs tens of microseconds of arguments, more than the Python loop spends on one
        cell of sparse application traffic, so after a call that handed back the first
        cell it began (it took none) the next cells go to the Python loop -- 1, 2, 4, ...
        up to 32 of them while that repeats; a call that took a cell starts over. (A call
        that took one is worth its cost: a dense cell the Python loop would take costs it
        hundreds of microseconds. Either loop gives the same results; this only picks the
        cheaper one.)"""
        if cells <= 1:
            self._python_backoff = min(2 * self._python_backoff or 1, 32)
            self._python_cells = self._python_backoff
        else:
            self._python_backoff = 0

    def _loop_takes_next(self, loop, end: int) -> bool:
        """Whether the stack's loop would take the next cell (``window.cell_taken``): a
        cell of other traffic goes to the Python loop without a loop call."""
        q = self.queue
        return window.cell_taken(end, q._meta, q._heap_t, q._heap_s, q._head, q._next,
                                 q._rows, q.delta, loop.taken)

    def _run_loop(self, loop, end: int) -> tuple[Batch | None, int, int, int]:
        """Run the stack's compiled cell loop (``stack.run_cells``; emulator/window.py)
        until the window's end or a pass it hands back, and move what it gathered to the
        engine's logs, outboxes and counters (and call it again where it stopped for
        that: its buffers half full, or the queue's payload pool low). Returns (the
        handed-back pass, the run the stack declined in it, -1 if none; or None, -1 at the
        window's end), the messages popped and the cells begun."""
        buffers = self._buffers
        c = buffers.counts
        popped = cells = 0
        while True:
            c[:] = 0
            c[window.NOW] = self.now
            c[window.DONE_UNTIL] = self.done_until
            status, m, payload, ordered, done, k, pos = loop(
                self.ctx, end, window.engine_arrays(self, buffers))
            self.cells += int(c[window.N_CELLS])
            popped += int(c[window.N_EVENTS])
            cells += int(c[window.N_CELLS])
            self.now = int(c[window.NOW])
            self.done_until = int(c[window.DONE_UNTIL])
            self._cell_end = int(c[window.CELL_END])
            self._take_loop_buffers(buffers)
            if status in (window.PASS_PARTLY_DONE, window.PASS_UNROUTED):
                # the sends of the runs the loop handled are in the send buffer: the
                # stack's own sends after them (gathered) come next, as in the Python loop
                self.sends.written(k, pos)
            loop.gathered(self.ctx, int(c[window.ROOM_EXTRA]))
            if status == window.PAYLOAD_POOL_LOW:
                self.queue.move_payload()
            elif status != window.BUFFERS_HALF_FULL:
                break
        if status == window.WINDOW_DONE:
            return None, -1, popped, cells
        due = Batch(m, payload) if len(payload) else Batch(m)
        self._count_handed_back(m, loop.taken, int(done)
                                if status == window.PASS_PARTLY_DONE else -1)
        if status == window.CELL_HANDED_BACK:
            if c[window.ROOM_ROWS] or c[window.ROOM_INTS]:   # room for the next such pass
                rows, ints = int(c[window.ROOM_ROWS]), int(c[window.ROOM_INTS])
                self.queue.make_room(2 * rows, 2 * ints)
                self.sends.ensure(rows, ints)
                buffers.grow(rows, ints)
            if not ordered:
                due = due.take(dispatch_order(m))
            return due, -1, popped, cells
        if status == window.PASS_UNROUTED:
            self._flush()   # raises the stamping's error
            raise RuntimeError(f"shard {self.shard_id}: the compiled loop refused sends "
                               "the engine's stamping takes")
        return due, int(done), popped, cells

    def _count_handed_back(self, m, taken, declined: int) -> None:
        """Note the type of the run that made the loop hand pass ``m`` back: the run it
        declined, else the first of a type it does not take, else (the pass needed more
        room than the loop's buffers had) its first run."""
        if not len(m):
            return
        types = m["type"].astype(np.int64) + kernels.TYPE_OFFSET
        if declined >= 0:
            starts = np.flatnonzero(np.r_[True, types[1:] != types[:-1]])
            cause = types[starts[min(declined, len(starts) - 1)]]
        else:
            other = np.flatnonzero(~taken[types])
            cause = types[other[0]] if len(other) else types[0]
        self._handed_back[cause] += 1

    @property
    def handed_back_by_type(self) -> dict[int, int]:
        """Passes the compiled loop handed back to the Python loop, per type code of the
        run that stopped it (declined, or not taken), in type order."""
        return _by_type(self._handed_back)

    @handed_back_by_type.setter
    def handed_back_by_type(self, counts: dict) -> None:
        _set_by_type(self._handed_back, counts)

    def _take_loop_buffers(self, buffers) -> None:
        """What a compiled loop call gathered, to the engine's logs, outboxes and
        counters, in the order it was sent."""
        c = buffers.counts
        late = int(c[window.LATE])
        if late:
            self.counts["late_events"] = self.counts.get("late_events", 0) + late
        n_new = int(c[window.N_NEW_TYPES])
        if n_new:
            self._sent_types += buffers.new_types[:n_new].tolist()
        n = int(c[window.N_LOG])
        if n:
            self.logs.add_records("message", self.phase, take_rows(buffers.log, slice(0, n)),
                                  self._log_columns)
        n = int(c[window.N_OUT])
        if n:
            rows = buffers.outbox[:n]
            shard = buffers.outbox_shard[:n]
            pay = buffers.outbox_pay[:int(c[window.N_OUT_PAY])]
            for s in np.unique(shard).tolist():
                self._to_outbox(s, take_rows(rows, shard == s), pay)

    def _dispatch(self, due: Batch, declined: int = -1) -> None:
        """Hand a cell's messages (in dispatch order: ``EventQueue.pop_cell``) to the
        stack, one run of a type at a time; a stretch of runs whose types the stack
        takes together (``compiled_run_types``), all bound for live nodes, in one
        ``handle_runs`` call. ``declined``: a run the stack declined after handling every
        run before it (a compiled loop did): dispatch starts there, with ``handle``."""
        m = due.msgs
        types = m["type"]
        payload = due.payload
        # one run per message type; the local index of every row's node; whether every
        # node the cell goes to is alive (only FAIL and RECOVER, the lowest types and so
        # the first runs, change that: the rest of the cell is checked again after them)
        bounds_arr, li_all, rest_alive = kernels.cell_runs(types, m["dst"], self.local_index,
                                                           self.alive)
        bounds = bounds_arr.tolist()
        n_runs = len(bounds) - 1
        together = self._run_types
        run_types = types[bounds_arr[:-1]].tolist() if together else None
        i = max(declined, 0)   # (declined: a run handle_runs stopped at goes to handle alone)
        # the Python loop's messages: of a declined pass, the loop took the runs before i
        python = types[bounds[min(i, n_runs)]:]
        self.python_events += len(python)
        np.add.at(self._python_counts, python.astype(np.int64) + kernels.TYPE_OFFSET, 1)
        settled = declined > 0   # past the FAIL and RECOVER runs, the rest checked for dead nodes
        while i < n_runs:
            s, e = bounds[i], bounds[i + 1]
            ty = run_types[i] if together else int(types[s])
            if not settled and ty > RECOVER:
                settled = True
                if rest_alive is None:
                    rest_alive = bool(self.alive[li_all[s:]].all())
                if not rest_alive:
                    # messages for dead nodes are lost; the rest of the cell without them
                    # (whose runs may then go together to handle_runs)
                    m, li_all, bounds_arr = self._drop_lost(m[s:], li_all[s:])
                    types = m["type"]
                    bounds = bounds_arr.tolist()
                    n_runs = len(bounds) - 1
                    run_types = types[bounds_arr[:-1]].tolist() if together else None
                    i, rest_alive = 0, True
                    continue
            i += 1
            if ty in together and i - 1 != declined:
                if rest_alive is None:
                    rest_alive = bool(self.alive[li_all[s:]].all())
                if rest_alive:
                    last = i
                    while last < n_runs and run_types[last] in together:
                        last += 1
                    done = self.stack.handle_runs(self.ctx, m, payload, li_all, bounds_arr,
                                                  run_types, i - 1, last)
                    if done >= i:
                        i = declined = done
                        continue
            li = li_all[s:e]
            sub = Batch.run(m[s:e], payload, li)
            if ty == RECOVER:
                dead = ~self.alive[li]
                li = np.unique(li[dead])
                self.alive[li] = True
                if len(li):
                    self.stack.on_recover(self.ctx, li)
                rest_alive = None
                continue
            if rest_alive is None:
                rest_alive = bool(self.alive[li_all[s:]].all())
            if not rest_alive:
                ok = self.alive[li]
                alive = np.count_nonzero(ok)
                if alive < len(ok):
                    lost = len(ok) - alive
                    self._lost_counts[ty + kernels.TYPE_OFFSET] += lost
                    sub = sub.take(ok)
                    li = li[ok]
                    sub.local = li
                    if not len(sub):
                        continue
            if ty == FAIL:
                li = np.unique(li)
                self.alive[li] = False
                self.stack.on_fail(self.ctx, li)
                rest_alive = None
                continue
            self.stack.handle(self.ctx, ty, sub)

    def _drop_lost(self, m: np.ndarray, li: np.ndarray) -> tuple:
        """Rows ``m`` (the rest of a cell, in dispatch order) without those for dead nodes,
        counted lost by type, and their (local indices, run bounds): the compiled loop's
        rule, ``window.without_lost``."""
        m, bounds, li = window.without_lost(m, np.ascontiguousarray(li, np.int64), self.alive,
                                            self._lost_counts)
        return m, li, bounds

    @property
    def sent_by_type(self) -> dict[int, int]:
        """Messages sent per type code, in the order each type was first sent."""
        return {t: int(self._sent_counts[t + kernels.TYPE_OFFSET]) for t in self._sent_types}

    @sent_by_type.setter
    def sent_by_type(self, counts: dict) -> None:
        self._sent_types = [int(t) for t in counts]
        _set_by_type(self._sent_counts, counts)

    @property
    def lost_by_type(self) -> dict[int, int]:
        """Messages lost (bound for a dead node) per type code, in type order."""
        return _by_type(self._lost_counts)

    @lost_by_type.setter
    def lost_by_type(self, counts: dict) -> None:
        _set_by_type(self._lost_counts, counts)

    @property
    def python_by_type(self) -> dict[int, int]:
        """Messages the Python loop dispatched, per type code, in type order:
        which handlers the compiled loop still hands back."""
        return _by_type(self._python_counts)

    @python_by_type.setter
    def python_by_type(self, counts: dict) -> None:
        _set_by_type(self._python_counts, counts)

    # ---- phase ends, logs, counters, checkpoints --------------------------------------
    def call(self, method: str, *args, phase: str | None = None):
        """stack.<method>(ctx, *args). `phase`: the phase its log rows belong to (a shard
        that had nothing to do in a phase was never told its name)."""
        if phase is not None:
            self.phase = phase
        fn = getattr(self.stack, method, None)
        if fn is None:
            raise AttributeError(f"stack {type(self.stack).__name__} has no method {method!r}")
        try:
            return fn(self.ctx, *args)
        finally:
            self._flush()

    def take_logs(self):
        self._flush()
        return self.logs.take()

    def counters(self) -> dict:
        self._flush()
        return {"shard": self.shard_id, "nodes": len(self.nodes), "events": self.events,
                "cells": self.cells, "python_events": self.python_events,
                "busy_s": self.busy_s, "cpu_s": self.cpu_s,
                "pending": len(self.queue),
                "sent_by_type": dict(self.sent_by_type), "lost_by_type": dict(self.lost_by_type),
                "python_by_type": self.python_by_type,
                "handed_back_by_type": self.handed_back_by_type,
                "counts": dict(self.counts), "alive": int(self.alive.sum())}

    def state(self) -> dict:
        """Everything needed to continue exactly from here (outboxes are empty between
        windows). The stack's part shares its live arrays (a checkpoint of a million nodes
        is not copied in memory to be written): serialise the state before the shard goes
        on; ``load_state`` takes copies."""
        self._flush()
        stack_state = self.stack.checkpoint() if hasattr(self.stack, "checkpoint") else self.stack
        return {"stack": stack_state, "queue": self.queue.snapshot(), "alive": self.alive.copy(),
                "seq": self.seq.copy(), "draws": self.draws.copy(), "now": self.now,
                "counts": dict(self.counts), "sent_by_type": dict(self.sent_by_type),
                "lost_by_type": dict(self.lost_by_type), "events": self.events,
                "cells": self.cells, "python_events": self.python_events,
                "python_by_type": self.python_by_type,
                "handed_back_by_type": self.handed_back_by_type, "phase": self.phase,
                "done_until": self.done_until}

    def load_state(self, st: dict) -> None:
        if st["queue"].msgs.dtype != self.message_dtype:
            raise ValueError(f"shard {self.shard_id}: the checkpoint's message record "
                             f"{st['queue'].msgs.dtype} is not this engine's "
                             f"{self.message_dtype}")
        if hasattr(self.stack, "restore"):
            self.stack.restore(st["stack"])
        else:
            self.stack = st["stack"]
        self.queue.clear()
        self.queue.defer(st["queue"])
        self.alive[:] = st["alive"]
        self.seq[:] = st["seq"]
        self.draws[:] = st["draws"]
        self.now, self.phase = st["now"], st["phase"]
        self.counts, self.events, self.cells = st["counts"], st["events"], st["cells"]
        self.done_until = st.get("done_until", 0)
        self.python_events = st.get("python_events", 0)
        self.python_by_type = st.get("python_by_type", {})
        self.handed_back_by_type = st.get("handed_back_by_type", {})
        self.sent_by_type, self.lost_by_type = st["sent_by_type"], st["lost_by_type"]


def _by_type(counts: np.ndarray) -> dict[int, int]:
    """{type code: count} of a per-type array (indexed by code + TYPE_OFFSET), the codes
    with a count, in type order."""
    return {int(t) - kernels.TYPE_OFFSET: int(counts[t]) for t in np.flatnonzero(counts)}


def _set_by_type(counts: np.ndarray, by_type: dict) -> None:
    """A per-type array set from {type code: count} (the others zero)."""
    counts[:] = 0
    for t, v in by_type.items():
        counts[int(t) + kernels.TYPE_OFFSET] = int(v)
