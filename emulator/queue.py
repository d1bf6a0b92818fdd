"""A shard's pending messages: records kept once in a pool, ordered by a calendar of cells
in front of a binary heap.

Every pending message occupies one slot of a pool of records (with its payload in a pool of
ints). A message due within the next ``ring_cells`` cells of the grid goes into that cell's
bucket of a ring (a linked list of slots: O(1) to add, O(1) per message to take out); one
due later (long timers), or earlier than the ring's first cell, goes into a binary min-heap
of (time, slot). ``pop_before`` takes the buckets of the cells due and sifts the due
messages out of the heap, gathers their rows and payload into one batch and frees the
slots. A message is copied twice in its life (into the pool, out of it) and each push or
pop is one compiled call plus O(1) per message in the ring and O(log H) in the heap of H.

Why this shape: a heap alone pays O(log P) cache-missing steps per message on its way
out (its sift-down walks the whole depth for every message), which the compiled ring
avoids for every message due within its horizon. Numpy structures cost more: time-sorted
runs merged as an LSM tree copy every message O(log P) times and pay several numpy calls
per run on every pop, and per-cell numpy buckets cut one send (whose delays spread over
~150 cells) into hundreds of tiny chunks. The heap is binary, over two arrays (time,
slot), which is cheaper per message than a 4-ary heap in one array. The queue's share of
a shard's time is measured by benchmarks/bench_pastry.py --protocol (a protocol
bootstrap) and benchmarks/bench_protocol.py (per-message cost by batch size).

A large batch handed over at once (a phase's stimuli: a million JOIN requests spread over a
second) waits outside the pools, as it came, and moves in as its messages come due, so
the pools hold what is due soon (``defer`` / ``release``).

The queue returns the set of messages due; their order is the engine's business (it sorts
a cell by its own total key), so neither the buckets' nor the heap's order reaches a
result.
"""

from __future__ import annotations

import numba
import numpy as np

from . import kernels
from .batch import (
    ENGINE_DTYPE,
    Batch,
    SparseBatch,
    as_messages,
    dispatch_order,
    records_of,
    take_rows,
)

NEVER = np.iinfo(np.int64).max

# meta[]: the pool's scalar state, kept in an array so the compiled calls update it in place
_HEAP, _FREE, _PAY_USED, _PAY_LIVE, _RING_N, _BASE = 0, 1, 2, 3, 4, 5
_FIRST_CAPACITY = 1024
# cells of the ring (a power of two): 16 s of virtual time at the usual 2 ms cell, longer than
# any network delay, so only long timers go to the heap
RING_CELLS = 8192
_FEW = 512   # pushes of up to this many records copy them in the compiled call
# a batch handed over with more records than this waits outside the pools until due (`defer`)
_DEFER_ABOVE = 4096


class EventQueue:
    def __init__(self, delta_us: int, message_dtype=ENGINE_DTYPE, ring_cells: int = RING_CELLS):
        self.delta = int(delta_us)
        self.dtype = message_dtype       # the record of every batch it holds (and returns)
        if ring_cells < 1 or ring_cells & (ring_cells - 1):
            raise ValueError(f"ring_cells must be a power of two, got {ring_cells}")
        self._head = np.full(int(ring_cells), -1, np.int64)   # first slot of each cell's list
        self._allocate(_FIRST_CAPACITY, _FIRST_CAPACITY)
        # deferred batches, each [records, payload, time order or None, sorted times, rows
        # already moved in], and the earliest time still waiting
        self._deferred: list[list] = []
        self._deferred_next = NEVER

    def _allocate(self, capacity: int, pay_capacity: int) -> None:
        self._rows = np.zeros(capacity, self.dtype)
        self._raw = self._rows.view(np.dtype((np.void, self.dtype.itemsize)))
        self._poff = np.zeros(capacity, np.int64)    # its payload in _pay
        self._plen = np.zeros(capacity, np.int64)
        self._free = np.arange(capacity - 1, -1, -1, dtype=np.int64)  # a stack of slots
        self._heap_t = np.zeros(capacity, np.int64)
        self._heap_s = np.zeros(capacity, np.int64)
        self._next = np.full(capacity, -1, np.int64)  # the next slot of the same cell's list
        self._pay = np.zeros(pay_capacity, np.int32)
        self._head[:] = -1
        # heap size, free slots, payload ints used / live, messages in the ring, its first cell
        self._meta = np.array([0, capacity, 0, 0, 0, 0], np.int64)

    def __len__(self) -> int:
        return self._in_pools() + sum(len(d[3]) - d[4] for d in self._deferred)

    def _in_pools(self) -> int:
        return int(self._meta[_HEAP] + self._meta[_RING_N])

    def defer(self, batch: Batch) -> None:
        """Add messages in any order, as :meth:`push`; a large batch (stimuli for a whole
        phase) is kept as it is, not copied, and its messages move into the pools as they
        come due (:meth:`release`, and every pop), so the pools hold what is due soon
        rather than growing to every stimulus. O(n log n) unless in time order already."""
        if isinstance(batch, SparseBatch) and (len(batch) <= _DEFER_ABOVE
                                               or batch.dtype != self.dtype):
            batch = batch.whole()
        if len(batch) <= _DEFER_ABOVE:
            self.push(batch)
            return
        m = batch if isinstance(batch, SparseBatch) else as_messages(batch.msgs, self.dtype)
        t = m["time"]
        order = None if bool((t[1:] >= t[:-1]).all()) else np.argsort(t, kind="stable")
        times = np.ascontiguousarray(t if order is None else t[order])
        self._deferred.append([m, batch.payload, order, times, 0])
        self._deferred_next = min(self._deferred_next, int(times[0]))

    def release(self, t: int) -> None:
        """Move the deferred messages due before ``t`` into the pools; O(log n) per
        deferred batch, plus the messages moved."""
        if self._deferred_next >= t:
            return
        waiting, earliest = [], NEVER
        for d in self._deferred:
            m, payload, order, times, at = d
            j = int(np.searchsorted(times, t))
            if j > at:
                rows = take_rows(m, slice(at, j) if order is None else order[at:j])
                # as writable as the payload: the compiled push then has the signature of
                # a push of the batch itself (read-only both when from the object store)
                rows.flags.writeable = payload.flags.writeable
                self.push_records(rows, payload,
                                  int(rows["pay_len"].sum()) if len(payload) else 0)
                d[4] = j
            if j < len(times):
                waiting.append(d)
                earliest = min(earliest, int(times[j]))
        self._deferred, self._deferred_next = waiting, earliest

    def push(self, batch: Batch) -> None:
        """Add messages in any order; O(n) in the ring, O(log H) each into the heap."""
        if not len(batch):
            return
        m = as_messages(batch.msgs, self.dtype)
        payload = batch.payload
        self.push_records(m, payload, int(m["pay_len"].sum()) if len(payload) else 0)

    def push_records(self, m: np.ndarray, payload: np.ndarray, pay_need: int | None = None):
        """As :meth:`push`, for records of the queue's dtype and the payload they index,
        both copied (e.g. views of a send buffer); ``pay_need``: at least the payload ints
        they reference (None: the whole ``payload``, every id of which a send buffer's rows
        reference)."""
        n = len(m)
        if not n:
            return
        has_pay = len(payload) > 0
        self.make_room(n, (len(payload) if pay_need is None else pay_need) if has_pay else 0)
        # a few records are copied in the kernel (no numpy call); many by numpy, which
        # moves a whole record at once where the compiled copy goes field by field
        few = n <= _FEW
        # read-only views: batches from the object store arrive read-only, the others not,
        # and each kind would be a compile of its own (one a warm-up's small run may miss)
        slots = push_slots(kernels.read_only(m), few, has_pay, kernels.read_only(payload),
                           self._meta, self._free, self._heap_t, self._heap_s, self._poff,
                           self._plen, self._pay, self._rows, self._head, self._next,
                           self.delta)
        if not few:
            self._raw[slots] = m.view(self._raw.dtype) if m.flags.c_contiguous \
                else take_rows(m, slice(None)).view(self._raw.dtype)

    def make_room(self, n: int, pay: int) -> None:
        """Free slots for n rows and room for `pay` payload ints (amortized O(1))."""
        meta = self._meta
        if meta[_FREE] < n:
            self._grow(len(self._rows) + max(n, len(self._rows) // 2))
        if meta[_PAY_USED] + pay > len(self._pay):
            # the pending messages' payload, moved to a new pool with at least as much room
            # again, and at least two ints per pending message: a move walks every pending
            # slot (payload-free timers too: 10^5-10^6 of them in a protocol bootstrap,
            # against a few 10^4 payload ints in flight), so each move is paid for by the
            # pool pushed since the last one
            live = int(meta[_PAY_LIVE])
            size = max(len(self._pay), 2 * (live + pay), 2 * len(self))
            self._pay = _repack_payload(self._meta, self._pending(), self._poff, self._plen,
                                        self._pay, size)

    def move_payload(self) -> None:
        """Move the pending messages' payload to the front of a pool with room to spare
        (:meth:`make_room`'s move, whatever room is left): a compiled loop asks for it
        between its calls, before the pool is full (``window.PAYLOAD_POOL_LOW``)."""
        self.make_room(0, len(self._pay) - int(self._meta[_PAY_USED]) + 1)

    def _grow(self, capacity: int) -> None:
        old = len(self._rows)
        rows = np.zeros(capacity, self.dtype)
        raw = rows.view(self._raw.dtype)
        raw[:old] = self._raw          # whole records, not field by field
        self._rows, self._raw = rows, raw
        for name in ("_poff", "_plen", "_heap_t", "_heap_s", "_next"):
            a = getattr(self, name)
            b = np.zeros(capacity, a.dtype)
            b[:old] = a
            setattr(self, name, b)
        nfree = int(self._meta[_FREE])
        free = np.empty(capacity, np.int64)
        free[:capacity - old] = np.arange(capacity - 1, old - 1, -1)  # new slots under old
        free[capacity - old:capacity - old + nfree] = self._free[:nfree]
        self._free = free
        self._meta[_FREE] = capacity - old + nfree

    def next_time(self) -> int:
        """Earliest pending time (NEVER when empty); O(cells to the first busy one + its
        messages)."""
        return min(int(next_pending(self._meta, self._heap_t, self._head, self._next,
                                    self._rows, self.delta, True)), self._deferred_next)

    def next_cell(self) -> int:
        """Cell of the earliest pending message (NEVER when empty)."""
        cell = int(next_pending(self._meta, self._heap_t, self._head, self._next, self._rows,
                                self.delta, False))
        if self._deferred_next != NEVER:
            cell = min(cell, self._deferred_next // self.delta)
        return cell

    def pop_cell(self, cell: int) -> Batch:
        """Remove and return every message due before the end of `cell`, in the engine's
        dispatch order (type, time, src, seq; ``batch.dispatch_order``): sorted in the
        same compiled call that takes them out, so the cell's rows are gathered once."""
        return self.pop_before((cell + 1) * self.delta, ordered=True)

    def pop_before(self, t: int, ordered: bool = False) -> Batch:
        """Remove and return every message with time < t; O(k) for k popped from the ring
        (plus the ring cells before t), O(log H) each from the heap. ``ordered``: in
        dispatch order (O(k log k) more), else in no order of meaning."""
        self.release(t)
        slots, payload, offsets = pop_slots(int(t), self._meta, self._free, self._heap_t,
                                       self._heap_s, self._poff, self._plen, self._pay,
                                       self._head, self._next, self._rows, self.delta,
                                       ordered)
        if not len(slots):
            return Batch.empty(self.dtype)
        b = self._batch(slots, payload, offsets)
        if ordered and len(slots) > kernels.SORT_MAX:   # (lexsort wins there)
            b = b.take(dispatch_order(b.msgs))
        return b

    def _batch(self, slots, payload, offsets) -> Batch:
        msgs = records_of(self._raw[slots], self.dtype)
        msgs["pay_off"] = offsets     # where each row's payload is in the new batch's
        return Batch(msgs, payload) if len(payload) else Batch(msgs)

    def snapshot(self) -> Batch:
        """All pending messages as one batch (for checkpoints), by (time, src, seq); the
        queue is unchanged."""
        waiting = [Batch(m.records() if isinstance(m, SparseBatch) else m, payload).take(
                       np.arange(at, len(m)) if order is None else order[at:])
                   for m, payload, order, _, at in self._deferred]
        b = Batch.concat([self._pools_batch(), *waiting], self.dtype)
        m = b.msgs
        return b.take(np.lexsort((m["seq"], m["src"], m["time"])))

    def _pools_batch(self) -> Batch:
        """The messages in the pools, in slot order."""
        slots = np.sort(self._pending())
        payload, offsets = _gather_payload(slots, self._poff, self._plen, self._pay)
        return self._batch(slots, payload, offsets)

    def _pending(self) -> np.ndarray:
        """Every pending message's slot (heap first, then the ring's cells)."""
        return _pending_slots(self._meta, self._heap_s, self._head, self._next)

    def compact(self) -> None:
        """Shrink the pools to twice the pending messages (and payload) when a burst left
        them more than four times that: a phase that injects its stimuli at once (a join's
        requests) grows them for messages long gone. The pending messages move to the new
        pools; the ring keeps its first cell, so no message moves to the heap. O(P + ring).
        """
        live, pay_live = self._in_pools(), int(self._meta[_PAY_LIVE])
        capacity = max(_FIRST_CAPACITY, 2 * live)
        pay_capacity = max(_FIRST_CAPACITY, 2 * pay_live)
        if len(self._rows) <= 2 * capacity and len(self._pay) <= 2 * pay_capacity:
            return
        pending, base = self._pools_batch(), int(self._meta[_BASE])
        self._allocate(capacity, pay_capacity)
        self._meta[_BASE] = base
        self.push(pending)

    def clear(self) -> None:
        """Drop every pending message; the pools keep their size."""
        self._deferred, self._deferred_next = [], NEVER
        capacity = len(self._rows)
        self._free = np.arange(capacity - 1, -1, -1, dtype=np.int64)
        self._head[:] = -1
        self._meta[:] = (0, capacity, 0, 0, 0, 0)


@numba.njit(cache=True)
def _sift_up(heap_t, heap_s, i):
    t, s = heap_t[i], heap_s[i]
    while i > 0:
        p = (i - 1) >> 1
        if heap_t[p] <= t:
            break
        heap_t[i], heap_s[i] = heap_t[p], heap_s[p]
        i = p
    heap_t[i], heap_s[i] = t, s


@numba.njit(cache=True)
def _sift_down(heap_t, heap_s, size):
    """Restore the heap after its root was replaced."""
    t, s = heap_t[0], heap_s[0]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and heap_t[c + 1] < heap_t[c]:
            c += 1
        if heap_t[c] >= t:
            break
        heap_t[i], heap_s[i] = heap_t[c], heap_s[c]
        i = c
    heap_t[i], heap_s[i] = t, s


@numba.njit(cache=True)
def push_slots(m, copy_rows, with_pay, payload, meta, free, heap_t, heap_s, poff, plen, pay, rows,
          head, nxt, delta):
    """Take free slots for the records ``m`` (the caller made room), copy them into the
    pool ``rows`` if ``copy_rows``, their payload into the payload pool, and link each into
    its cell's list of the ring (due within the ring's cells) or sift it into the heap;
    returns the slots in row order (none if ``copy_rows``)."""
    n = len(m)
    # (none: an empty view, as an array of its own would be an allocation)
    slots = free[:0] if copy_rows else np.empty(n, np.int64)
    size, nfree, used = meta[0], meta[1], meta[2]
    ring = len(head)
    base = meta[5]
    for i in range(n):
        nfree -= 1
        s = free[nfree]
        if copy_rows:
            rows[s] = m[i]
        else:
            slots[i] = s
        if with_pay:
            k = m[i]["pay_len"]
            o = m[i]["pay_off"]
            for j in range(k):
                pay[used + j] = payload[o + j]
            poff[s] = used
            plen[s] = k
            used += k
            meta[3] += k
        else:
            poff[s] = 0
            plen[s] = 0
        t = m[i]["time"]
        c = t // delta
        if base <= c < base + ring:
            b = c & (ring - 1)
            nxt[s] = head[b]
            head[b] = s
            meta[4] += 1
        else:
            heap_t[size] = t
            heap_s[size] = s
            _sift_up(heap_t, heap_s, size)
            size += 1
    meta[0], meta[1], meta[2] = size, nfree, used
    return slots


@numba.njit(cache=True)
def pop_slots(t, meta, free, heap_t, heap_s, poff, plen, pay, head, nxt, rows, delta, ordered):
    """Remove every message due before t: (slots, their packed payload, each row's offset
    in it); the slots go back to the free stack. The ring's first cell moves up to t's.
    ``ordered``: the slots (and so the payload) in the dispatch order of their records,
    ties in the order they were taken out (what ``batch.dispatch_order`` of the unordered
    batch gives)."""
    size, nfree = meta[0], meta[1]
    k = 0
    ring = len(head)
    base = meta[5]
    tc = t // delta
    # whole cells of the ring before t's cell, while the ring has messages
    c = base
    while meta[4] > 0 and c < tc and c < base + ring:
        b = c & (ring - 1)
        s = head[b]
        while s >= 0:
            free[nfree] = s
            nfree += 1
            k += 1
            meta[4] -= 1
            s = nxt[s]
        head[b] = -1
        c += 1
    # t's own cell, when t is inside it: the messages before t leave, the others stay
    if meta[4] > 0 and t % delta and base <= tc < base + ring:
        b = tc & (ring - 1)
        s = head[b]
        keep = -1
        while s >= 0:
            after = nxt[s]
            if rows[s]["time"] < t:
                free[nfree] = s
                nfree += 1
                k += 1
                meta[4] -= 1
            else:
                nxt[s] = keep
                keep = s
            s = after
        head[b] = keep
    while size > 0 and heap_t[0] < t:
        s = heap_s[0]
        size -= 1
        if size > 0:
            heap_t[0], heap_s[0] = heap_t[size], heap_s[size]
            _sift_down(heap_t, heap_s, size)
        free[nfree] = s      # the slot is reused only by a later push
        nfree += 1
        k += 1
    if tc > base:   # (bounded: base + the ring's cells must not overflow)
        meta[5] = min(tc, np.iinfo(np.int64).max // 2)
    taken = free[nfree - k:nfree]     # (copied below: a later push reuses these places)
    meta[0], meta[1] = size, nfree
    if ordered and 1 < k <= kernels.SORT_MAX:
        keys = np.empty((4, k), np.int64)     # type, time, src, seq: one allocation
        for i in range(k):
            r = rows[taken[i]]
            keys[0, i], keys[1, i], keys[2, i], keys[3, i] = \
                r["type"], r["time"], r["src"], r["seq"]
        slots = taken[kernels.dispatch_sort(keys[0], keys[1], keys[2], keys[3])]
    else:
        slots = taken.copy()
    payload, offsets = _gather_payload(slots, poff, plen, pay)
    meta[3] -= len(payload)
    return slots, payload, offsets


@numba.njit(cache=True)
def next_pending(meta, heap_t, head, nxt, rows, delta, exact):
    """Earliest pending time (``exact``) or its cell; NEVER when empty. The ring's first
    busy cell is found by a scan from its first cell; its list is walked only for the
    exact time."""
    never = np.iinfo(np.int64).max
    best = heap_t[0] if meta[0] > 0 else never
    if not exact and best != never:
        best = best // delta
    if meta[4] > 0:
        ring = len(head)
        base = meta[5]
        for c in range(base, base + ring):
            if not exact and c >= best:
                break
            s = head[c & (ring - 1)]
            if s < 0:
                continue
            if not exact:
                best = c
                break
            while s >= 0:
                if rows[s]["time"] < best:
                    best = rows[s]["time"]
                s = nxt[s]
            break
    return best


@numba.njit(cache=True)
def _pending_slots(meta, heap_s, head, nxt):
    """Slots of every pending message: the heap's, then each ring cell's list."""
    out = np.empty(meta[0] + meta[4], np.int64)
    out[:meta[0]] = heap_s[:meta[0]]
    k = meta[0]
    if meta[4] > 0:
        for b in range(len(head)):
            s = head[b]
            while s >= 0:
                out[k] = s
                k += 1
                s = nxt[s]
    return out


@numba.njit(cache=True)
def _gather_payload(slots, poff, plen, pay):
    """The slots' payload packed in slot order and each one's offset in it."""
    taken = np.empty((2, len(slots)), np.int64)    # offsets, lengths: one allocation
    for i in range(len(slots)):
        taken[0, i] = poff[slots[i]]          # copies: compact_payload rewrites them
        taken[1, i] = plen[slots[i]]
    offsets = taken[0]
    return kernels.compact_payload(offsets, taken[1], pay), offsets


@numba.njit(cache=True)
def _repack_payload(meta, slots, poff, plen, pay, size):
    """A new payload pool of `size` ints holding the payload of the pending messages'
    ``slots`` at its front (O(pending + their payload)); sets the ints used."""
    packed, offsets = _gather_payload(slots, poff, plen, pay)
    out = np.empty(max(size, len(packed)), np.int32)
    out[:len(packed)] = packed
    poff[slots] = offsets
    meta[2] = len(packed)
    return out
