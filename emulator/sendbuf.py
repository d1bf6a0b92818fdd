"""SendBuffer: the sends of one pass over a cell, written in order into one growing record
array and one payload pool, and taken out as a single Batch.

A cell of sparse protocol traffic makes tens of small sends (a few rows each, some with
payload). Making each its own array and joining them at the end of the pass would cost a
zeroed allocation and a Batch per send, then a concatenation that checks, copies and
re-offsets every part: a large share of a protocol bootstrap's shard time
(benchmarks/bench_pastry.py --protocol measures it). Here a
send reserves zeroed rows at the end of the buffer and writes its fields in place, and its
payload is copied once into the pool; `take` copies the whole pass out in one piece.
Rows, their order and their payload segments are exactly those of the sends one by one.
"""

from __future__ import annotations

import numpy as np

from . import kernels
from .batch import NO_PAYLOAD, Batch, as_messages, records_of

_FIRST_ROWS = 256
_FIRST_PAYLOAD = 4096


class SendBuffer:
    def __init__(self, dtype: np.dtype):
        self.dtype = dtype
        self._rows = np.zeros(_FIRST_ROWS, dtype)
        self._bytes = self._rows.view(np.uint8)   # for zeroing reserved rows in one call
        self._raw = self._rows.view(np.dtype((np.void, dtype.itemsize)))
        self._pool = np.zeros(_FIRST_PAYLOAD, np.int32)
        self._n = 0          # rows written
        self._used = 0       # payload ints written

    def __len__(self) -> int:
        return self._n

    def reserve(self, n: int, zeroed: bool = True) -> np.ndarray:
        """n zeroed records at the end (a view: valid until the next reserve, append or
        take); ``zeroed`` False: as they are (a compiled handler that zeroes the rows it
        may write itself). Amortized O(n)."""
        end = self._n + n
        if end > len(self._rows):
            self._grow(end)
        if zeroed:
            size = self.dtype.itemsize
            self._bytes[self._n * size:end * size] = 0
        view = self._rows[self._n:end]
        self._n = end
        return view

    def unreserve(self, n: int) -> None:
        """Drop the last n rows (a send that failed half-way leaves nothing behind)."""
        self._n -= n

    def add_payload(self, rows: np.ndarray, payload) -> None:
        """`rows` (the last rows reserved) reference `payload` by pay_off/pay_len: copy
        the segments they reference to the pool and point them there. O(rows + copied)."""
        payload = np.asarray(payload)
        if not len(payload):
            return
        while True:
            pos = kernels.append_payload(rows["pay_off"], rows["pay_len"], payload,
                                         self._pool, self._used)
            if pos >= 0:
                self._used = int(pos)
                return
            if pos == -2:
                raise ValueError("a message's payload segment (pay_off, pay_len) lies "
                                 f"outside its payload of {len(payload)} ints")
            self._grow_pool(int(rows["pay_len"].sum()))

    def add_rows(self, rows: np.ndarray, ids: np.ndarray) -> None:
        """`rows` (the last rows reserved) carry row i of the int matrix `ids` each, its -1
        entries dropped: packed straight into the pool (what `add_payload` of
        ``batch.pack_rows(ids)`` stores, without the packed copy). O(ids.size)."""
        ids = np.asarray(ids)
        if ids.dtype.kind not in "iu":
            ids = ids.astype(np.int64)
        if not ids.flags.c_contiguous:
            ids = np.ascontiguousarray(ids)
        while True:
            pos = kernels.pack_rows_into(ids, rows["pay_off"], rows["pay_len"], self._pool,
                                         self._used)
            if pos >= 0:
                self._used = int(pos)
                return
            self._grow_pool(int((ids >= 0).sum()))

    def append(self, msgs: np.ndarray, payload=None) -> np.ndarray:
        """Copy records (converted to the buffer's record if they are another) and the
        payload they reference; returns the copied rows (a view, as `reserve`)."""
        msgs = as_messages(msgs, self.dtype)
        n = len(msgs)
        view = self.reserve(n)   # (zeroed for nothing: one memset, cheaper than a branch)
        raw = self._raw[self._n - n:self._n]
        raw[:] = msgs.view(raw.dtype) if msgs.flags.c_contiguous \
            else np.ascontiguousarray(msgs).view(raw.dtype)
        if payload is not None and len(payload):
            try:
                self.add_payload(view, payload)
            except BaseException:
                self.unreserve(n)
                raise
        return view

    def room(self, rows: int, ints: int, zeroed: bool = True):
        """For a compiled handler that writes its sends itself: ``rows`` zeroed records at
        the end (as `reserve`; ``zeroed`` False: not zeroed) and a pool with room for
        ``ints`` more payload ints. Returns
        (records, pool, cursor): the handler writes records 0..k-1 in sending order, their
        payload from ``cursor`` on (pay_off = pool position), then calls `commit`. The
        views are valid until the next reserve, append, room or take."""
        if self._used + ints > len(self._pool):
            self._grow_pool(ints)
        return self.reserve(rows, zeroed), self._pool, self._used

    def commit(self, rows_reserved: int, rows_written: int, cursor: int) -> None:
        """Keep the first ``rows_written`` of the last ``rows_reserved`` rows of `room`
        and the pool up to ``cursor``."""
        if not 0 <= rows_written <= rows_reserved or not self._used <= cursor <= len(self._pool):
            self.unreserve(rows_reserved)
            raise ValueError(f"a compiled send wrote {rows_written} of {rows_reserved} rows "
                             f"and moved the payload cursor {self._used} -> {cursor}")
        self._n -= rows_reserved - int(rows_written)
        self._used = int(cursor)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(records, pool), whole: for a compiled cell loop (emulator.window) that writes a
        pass's sends from their start into the empty buffer; valid until they grow."""
        return self._rows, self._pool

    def written(self, rows: int, cursor: int) -> None:
        """A compiled cell loop wrote ``rows`` records and the pool up to ``cursor`` into
        the empty buffer's :meth:`arrays`."""
        self._n, self._used = int(rows), int(cursor)

    def ensure(self, rows: int, ints: int) -> None:
        """Room for ``rows`` records and ``ints`` payload ints in the empty buffer."""
        if rows > len(self._rows):
            self._grow(rows)
        if ints > len(self._pool):
            self._grow_pool(ints)

    def pending(self) -> tuple[np.ndarray, np.ndarray]:
        """(rows, payload) written since the last take or clear: views of the buffer,
        valid until the next reserve, append, room, take or clear."""
        return self._rows[:self._n], self._pool[:self._used]

    def clear(self) -> None:
        """Empty the buffer (what `pending` showed is written over by the next sends)."""
        self._n = self._used = 0

    def take(self) -> Batch:
        """Everything written since the last take, as one new Batch; empties the buffer."""
        rows = records_of(self._raw[:self._n].copy(), self.dtype)
        payload = self._pool[:self._used].copy() if self._used else NO_PAYLOAD
        self._n = self._used = 0
        return Batch(rows, payload)

    def _grow_pool(self, need: int) -> None:
        pool = np.zeros(max(2 * len(self._pool), self._used + need), np.int32)
        pool[:self._used] = self._pool[:self._used]
        self._pool = pool

    def _grow(self, rows: int) -> None:
        old = self._n
        new = np.zeros(max(2 * len(self._rows), rows), self.dtype)
        raw = new.view(self._raw.dtype)
        raw[:old] = self._raw[:old]
        self._rows, self._raw, self._bytes = new, raw, new.view(np.uint8)


__all__ = ["SendBuffer"]
