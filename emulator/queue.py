"""A shard's pending messages: records kept once in a pool, ordered by a binary heap.

Every pending message occupies one slot of a pool of records (with its payload in a pool of
ints); a binary min-heap of (time, slot) orders them. ``push`` writes the rows into free
slots and sifts their times in; ``pop_before`` sifts out every message due, gathers their
rows and payload into one batch and frees the slots. A message is copied twice in its life
(into the pool, out of it) and each push or pop costs one compiled call plus O(log P) per
message for P pending, whatever the batch size: sparse protocol traffic pushes and pops a
few dozen messages a cell, where per-call cost rules.

History, measured (BENCHMARKS.md, issue 13): a log-structured set of time-sorted runs (an
LSM tree of numpy batches) copied every message O(log P) times through its merges and paid
several numpy calls per run on every pop (12-17 % of a sparse protocol bootstrap); a
calendar of per-cell numpy buckets was 4x slower still (one send spreads over ~150 cells
of latency, so it made hundreds of tiny chunks per send); a 4-ary heap in one (time, slot)
array was 10-20 % slower per message than this binary heap in two arrays at 300,000
pending (a microbenchmark of push + pop cycles, 2026-11-26).

The queue returns the set of messages due; their order is the engine's business (it sorts
a cell by its own total key), so the heap's tie order never reaches a result.
"""

from __future__ import annotations

import numba
import numpy as np

from . import kernels
from .batch import ENGINE_DTYPE, Batch, as_messages, take_rows

NEVER = np.iinfo(np.int64).max

# meta[]: the pool's scalar state, kept in an array so the compiled calls update it in place
_HEAP, _FREE, _PAY_USED, _PAY_LIVE = 0, 1, 2, 3
_FIRST_CAPACITY = 1024
_FEW = 512   # pushes of up to this many records copy them in the compiled call


class EventQueue:
    def __init__(self, delta_us: int, message_dtype=ENGINE_DTYPE):
        self.delta = int(delta_us)
        self.dtype = message_dtype       # the record of every batch it holds (and returns)
        self._allocate(_FIRST_CAPACITY, _FIRST_CAPACITY)

    def _allocate(self, capacity: int, pay_capacity: int) -> None:
        self._rows = np.zeros(capacity, self.dtype)
        self._raw = self._rows.view(np.dtype((np.void, self.dtype.itemsize)))
        self._poff = np.zeros(capacity, np.int64)    # its payload in _pay
        self._plen = np.zeros(capacity, np.int64)
        self._free = np.arange(capacity - 1, -1, -1, dtype=np.int64)  # a stack of slots
        self._heap_t = np.zeros(capacity, np.int64)
        self._heap_s = np.zeros(capacity, np.int64)
        self._pay = np.zeros(pay_capacity, np.int32)
        self._meta = np.array([0, capacity, 0, 0], np.int64)

    def __len__(self) -> int:
        return int(self._meta[_HEAP])

    def push(self, batch: Batch) -> None:
        """Add messages in any order; O(n log P)."""
        n = len(batch)
        if not n:
            return
        m = as_messages(batch.msgs, self.dtype)
        has_pay = len(batch.payload) > 0
        need = int(m["pay_len"].sum()) if has_pay else 0
        self._make_room(n, need)
        # a few records are copied in the kernel (no numpy call); many by numpy, which
        # moves a whole record at once where the compiled copy goes field by field
        few = n <= _FEW
        slots = _push(m, few, has_pay, batch.payload, self._meta, self._free, self._heap_t,
                      self._heap_s, self._poff, self._plen, self._pay, self._rows)
        if not few:
            self._raw[slots] = m.view(self._raw.dtype) if m.flags.c_contiguous \
                else take_rows(m, slice(None)).view(self._raw.dtype)

    def _make_room(self, n: int, pay: int) -> None:
        """Free slots for n rows and room for `pay` payload ints (amortized O(1))."""
        meta = self._meta
        if meta[_FREE] < n:
            self._grow(len(self._rows) + max(n, len(self._rows) // 2))
        if meta[_PAY_USED] + pay > len(self._pay):
            # the pending messages' payload, moved to a new pool with at least as much room
            # again: each move is paid for by the half pool pushed since the last one
            live = int(meta[_PAY_LIVE])
            size = max(len(self._pay), 2 * (live + pay))
            self._pay = _repack_payload(self._meta, self._heap_s, self._poff, self._plen,
                                        self._pay, size)

    def _grow(self, capacity: int) -> None:
        old = len(self._rows)
        rows = np.zeros(capacity, self.dtype)
        raw = rows.view(self._raw.dtype)
        raw[:old] = self._raw          # whole records, not field by field
        self._rows, self._raw = rows, raw
        for name in ("_poff", "_plen", "_heap_t", "_heap_s"):
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
        """Earliest pending time (NEVER when empty); O(1)."""
        return int(self._heap_t[0]) if self._meta[_HEAP] else NEVER

    def next_cell(self) -> int:
        t = self.next_time()
        return NEVER if t == NEVER else t // self.delta

    def pop_cell(self, cell: int) -> Batch:
        """Remove and return every message due before the end of `cell`."""
        return self.pop_before((cell + 1) * self.delta)

    def pop_before(self, t: int) -> Batch:
        """Remove and return every message with time < t; O(k log P) for k popped."""
        if not self._meta[_HEAP] or self._heap_t[0] >= t:
            return Batch.empty(self.dtype)
        slots, payload, offsets = _pop(int(t), self._meta, self._free, self._heap_t,
                                       self._heap_s, self._poff, self._plen, self._pay)
        return self._batch(slots, payload, offsets)

    def _batch(self, slots, payload, offsets) -> Batch:
        msgs = self._raw[slots].view(self.dtype)
        msgs["pay_off"] = offsets     # where each row's payload is in the new batch's
        return Batch(msgs, payload) if len(payload) else Batch(msgs)

    def snapshot(self) -> Batch:
        """All pending messages as one batch (for checkpoints), by (time, src, seq); the
        queue is unchanged."""
        slots = np.sort(self._heap_s[:self._meta[_HEAP]])
        payload, offsets = _gather_payload(slots, self._poff, self._plen, self._pay)
        b = self._batch(slots, payload, offsets)
        m = b.msgs
        return b.take(np.lexsort((m["seq"], m["src"], m["time"])))

    def clear(self) -> None:
        """Drop every pending message; the pools keep their size."""
        capacity = len(self._rows)
        self._free = np.arange(capacity - 1, -1, -1, dtype=np.int64)
        self._meta[:] = (0, capacity, 0, 0)


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
def _push(m, copy_rows, with_pay, payload, meta, free, heap_t, heap_s, poff, plen, pay, rows):
    """Take free slots for the records ``m`` (the caller made room), copy them into the
    pool ``rows`` if ``copy_rows``, their payload into the payload pool, and sift their
    times into the heap; returns the slots in row order (none if ``copy_rows``)."""
    n = len(m)
    slots = np.empty(0 if copy_rows else n, np.int64)
    size, nfree, used = meta[0], meta[1], meta[2]
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
        heap_t[size] = m[i]["time"]
        heap_s[size] = s
        _sift_up(heap_t, heap_s, size)
        size += 1
    meta[0], meta[1], meta[2] = size, nfree, used
    return slots


@numba.njit(cache=True)
def _pop(t, meta, free, heap_t, heap_s, poff, plen, pay):
    """Remove every message due before t: (slots, their packed payload, each row's offset
    in it); the slots go back to the free stack."""
    size, nfree = meta[0], meta[1]
    k = 0
    while size > 0 and heap_t[0] < t:
        s = heap_s[0]
        size -= 1
        if size > 0:
            heap_t[0], heap_s[0] = heap_t[size], heap_s[size]
            _sift_down(heap_t, heap_s, size)
        free[nfree] = s      # the slot is reused only by a later push
        nfree += 1
        k += 1
    slots = free[nfree - k:nfree].copy()
    meta[0], meta[1] = size, nfree
    payload, offsets = _gather_payload(slots, poff, plen, pay)
    meta[3] -= len(payload)
    return slots, payload, offsets


@numba.njit(cache=True)
def _gather_payload(slots, poff, plen, pay):
    """The slots' payload packed in slot order and each one's offset in it."""
    offsets = poff[slots]          # copies: compact_payload rewrites them
    return kernels.compact_payload(offsets, plen[slots], pay), offsets


@numba.njit(cache=True)
def _repack_payload(meta, heap_s, poff, plen, pay, size):
    """A new payload pool of `size` ints holding the pending messages' payload at its
    front (O(pending + their payload)); sets the ints used."""
    slots = heap_s[:meta[0]]
    packed, offsets = _gather_payload(slots, poff, plen, pay)
    out = np.empty(max(size, len(packed)), np.int32)
    out[:len(packed)] = packed
    poff[slots] = offsets
    meta[2] = len(packed)
    return out
